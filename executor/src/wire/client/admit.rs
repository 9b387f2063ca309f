//! What the host admits of the calls and fetches a peer (a worker process, a daemon)
//! sends for one execution: the peer may be hostile, so each is held to the bounds the
//! sandbox's own runtime holds the program to. Names are not checked: undeclared
//! providers and tools reach the dispatch by design (the guide's "Undeclared names reach
//! your dispatch"); the dispatch decides.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use codemode_protocol::{ToolCall, texts};

/// One execution's bounds on what its peer may ask of the host.
#[derive(Clone, Default)]
pub(crate) struct Admission {
    /// The request's bound on provider + tool + argsJson.
    max_payload_bytes: usize,
    /// The request's bound on calls and fetches awaiting an answer.
    max_calls_in_flight: usize,
    /// Calls and fetches of this execution awaiting an answer now.
    in_flight: Arc<AtomicUsize>,
}

/// A call or fetch counted in flight until this is dropped (its answer sent or given up).
pub(crate) struct InFlight(Arc<AtomicUsize>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Admission {
    pub(crate) fn new(max_payload_bytes: usize, max_calls_in_flight: usize) -> Admission {
        Admission { max_payload_bytes, max_calls_in_flight, in_flight: Arc::default() }
    }

    /// A tool call the peer sent: counted in flight, or the text of its refusal (the
    /// answer's error) when the program could not have made it.
    pub(crate) fn call(&self, call: &ToolCall) -> Result<InFlight, String> {
        let size = call.provider.len() + call.tool.len() + call.args_json.len();
        if size > self.max_payload_bytes {
            let (size, limit) = (size.to_string(), self.max_payload_bytes.to_string());
            return Err(texts::PAYLOAD_TOO_LARGE.fill(&[&size, &limit]));
        }
        self.count()
    }

    /// A fetch the peer sent: counted in flight, or the text of its refusal.
    pub(crate) fn fetch(&self) -> Result<InFlight, String> {
        self.count()
    }

    fn count(&self) -> Result<InFlight, String> {
        if self.in_flight.fetch_add(1, Ordering::SeqCst) >= self.max_calls_in_flight {
            self.in_flight.fetch_sub(1, Ordering::SeqCst);
            return Err(texts::TOO_MANY_CALLS_IN_FLIGHT.fill(&[&self.max_calls_in_flight.to_string()]));
        }
        Ok(InFlight(self.in_flight.clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(provider: &str, args: &str) -> ToolCall {
        ToolCall { provider: provider.into(), tool: "get".into(), args_json: args.into() }
    }

    #[test]
    fn a_call_is_held_to_the_payload_and_the_calls_in_flight_whatever_it_names() {
        let admission = Admission::new(16, 2);
        drop(admission.call(&call("secrets", "[]")).unwrap());
        assert_eq!(
            admission.call(&call("store", "[\"0123456789\"]")).err(),
            Some(texts::PAYLOAD_TOO_LARGE.fill(&["22", "16"]))
        );
        let first = admission.call(&call("store", "[1]")).unwrap();
        let _second = admission.fetch().unwrap();
        assert_eq!(
            admission.call(&call("store", "[3]")).err(),
            Some(texts::TOO_MANY_CALLS_IN_FLIGHT.fill(&["2"]))
        );
        drop(first);
        assert!(admission.call(&call("store", "[4]")).is_ok());
    }
}
