//! Helpers shared by the executor's tests and the CLI's (which include this file by path):
//! a recording dispatch and outcome shorthands.

#![allow(dead_code, unreachable_pub)]

use std::sync::{Arc, Mutex};

use codemode_executor::{EngineKind, Executor, ExecutorConfig, Outcome, Request};
use codemode_protocol::ToolCall;

/// The outcome in the codec's JSON form.
pub fn json(outcome: &Outcome) -> String {
    outcome.to_json_string()
}

/// `outcome` (an error outcome's JSON, as the tests write it) placed at `line`, `column`
/// of the program.
pub fn located(outcome: &str, line: u32, column: u32) -> String {
    outcome.replacen(r#","logs":"#, &format!(r#","location":{{"line":{line},"column":{column}}},"logs":"#), 1)
}

/// Run `request` on a shared executor.
pub async fn run(request: Request) -> Outcome {
    executor().execute(request).await
}

/// The environment variable naming the engine the suite runs on (`quickjs`, `v8`).
pub const ENGINE_VARIABLE: &str = "CODEMODE_TEST_ENGINE";

/// The engine these tests run on: QuickJS unless `CODEMODE_TEST_ENGINE` names another.
pub fn engine() -> EngineKind {
    match std::env::var(ENGINE_VARIABLE) {
        Ok(name) => name.parse().unwrap_or_else(|e| panic!("{ENGINE_VARIABLE}: {e}")),
        Err(_) => EngineKind::QuickJs,
    }
}

/// The default config on the suite's engine.
pub fn config() -> ExecutorConfig {
    ExecutorConfig::default().engine(engine())
}

pub fn executor() -> Executor {
    static EXECUTOR: std::sync::OnceLock<Executor> = std::sync::OnceLock::new();
    EXECUTOR.get_or_init(|| Executor::new(config())).clone()
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

/// The largest resident memory any child process of this one running `program` (the
/// workers; other tests start copies of this binary) reaches while `watching` holds,
/// sampled every 2 ms from /proc.
#[cfg(target_os = "linux")]
pub fn watch_children(
    watching: std::sync::Arc<std::sync::atomic::AtomicBool>,
    program: std::path::PathBuf,
) -> std::thread::JoinHandle<u64> {
    use std::sync::atomic::Ordering;
    let me = std::process::id().to_string();
    std::thread::spawn(move || {
        let mut peak = 0;
        while watching.load(Ordering::Acquire) {
            for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
                let status = std::fs::read_to_string(entry.path().join("status")).unwrap_or_default();
                let field = |name: &str| {
                    status
                        .lines()
                        .find_map(|l| l.strip_prefix(name))
                        .map(|v| v.trim().trim_end_matches(" kB").to_owned())
                };
                let runs_program =
                    std::fs::read_link(entry.path().join("exe")).is_ok_and(|exe| exe == program);
                if runs_program && field("PPid:").as_deref() == Some(me.as_str()) {
                    peak = peak.max(field("VmRSS:").and_then(|v| v.parse::<u64>().ok()).unwrap_or(0) << 10);
                }
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        peak
    })
}

/// Run this test binary again with `variable` set and `args`, and its stdout once it has
/// passed: a part of a suite re-run in another setting (confined workers, another engine).
pub fn run_again(variable: &str, args: &[&str], what: &str) -> String {
    let me = std::env::current_exe().expect("the suite knows its own binary");
    let output =
        std::process::Command::new(me).env(variable, "1").args(args).output().expect("the suite runs again");
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(output.status.success(), "{what} failed:\n{text}");
    assert!(text.contains("test result: ok."), "{text}");
    text
}
