//! Helpers shared by the executor's tests: a recording dispatch and outcome shorthands.

#![allow(dead_code, unreachable_pub)]

use std::sync::{Arc, Mutex};

use codemode_executor::{Executor, ExecutorConfig, Outcome, Request};
use codemode_protocol::ToolCall;

/// The outcome in the codec's JSON form.
pub fn json(outcome: &Outcome) -> String {
    outcome.to_json_string()
}

/// Run `request` on a shared executor.
pub async fn run(request: Request) -> Outcome {
    executor().execute(request).await
}

pub fn executor() -> Executor {
    static EXECUTOR: std::sync::OnceLock<Executor> = std::sync::OnceLock::new();
    EXECUTOR.get_or_init(|| Executor::new(ExecutorConfig::default())).clone()
}

/// Every call a dispatch saw, in arrival order.
#[derive(Clone, Default)]
pub struct Recorder {
    calls: Arc<Mutex<Vec<ToolCall>>>,
}

impl Recorder {
    pub fn record(&self, call: &ToolCall) {
        self.calls.lock().unwrap().push(call.clone());
    }

    pub fn calls(&self) -> Vec<(String, String, String)> {
        self.calls
            .lock()
            .unwrap()
            .iter()
            .map(|c| (c.provider.clone(), c.tool.clone(), c.args_json.clone()))
            .collect()
    }

    /// A dispatch that records each call and answers with `answer(call)`.
    pub fn dispatch(
        &self,
        answer: impl Fn(&ToolCall) -> String + Send + Sync + 'static,
    ) -> impl codemode_protocol::Dispatch {
        let recorder = self.clone();
        move |call: ToolCall| {
            recorder.record(&call);
            let text = answer(&call);
            async move { text }
        }
    }
}

pub fn triple(p: &str, t: &str, a: &str) -> (String, String, String) {
    (p.to_owned(), t.to_owned(), a.to_owned())
}
