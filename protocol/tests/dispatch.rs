//! Dispatch: closures as dispatches, and `create_envelope_dispatch` with its latch.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use codemode_protocol::{
    Bytes, Dispatch, Latch, ToolCall, ToolNotFoundError, create_envelope_dispatch,
    parse_dispatch_arguments_as,
};

fn answer(dispatch: &dyn Dispatch, tool: &str, args_json: &str) -> String {
    let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
    runtime.block_on(dispatch.dispatch(ToolCall::new("store", tool, args_json)))
}

#[test]
fn a_closure_is_a_dispatch() {
    let dispatch =
        |call: ToolCall| async move { format!(r#"{{"result":"{}.{}"}}"#, call.provider, call.tool) };
    assert_eq!(answer(&dispatch, "find", "[]"), r#"{"result":"store.find"}"#);
}

#[test]
fn the_envelope_dispatch_serializes_results_and_failures() {
    let latch = Latch::open();
    let dispatch = create_envelope_dispatch(latch, |call: ToolCall| async move {
        match call.tool.as_str() {
            "reverse" => {
                let (bytes,): (Bytes,) =
                    parse_dispatch_arguments_as(&call.args_json).map_err(|e| e.to_string())?;
                let mut reversed = bytes.into_vec();
                reversed.reverse();
                Ok(serde_json::to_value(Bytes::from(reversed)).unwrap())
            }
            "count" => Ok(serde_json::json!(3)),
            "fails" => Err("the database is down".to_owned()),
            other => Err(ToolNotFoundError::new(other).to_string()),
        }
    });
    assert_eq!(
        answer(&dispatch, "reverse", r#"[{"__executor_binary_v1__":"Uint8Array","data":"AQID"}]"#),
        r#"{"result":{"__executor_binary_v1__":"Uint8Array","data":"AwIB"}}"#
    );
    assert_eq!(answer(&dispatch, "count", "[]"), r#"{"result":3}"#);
    assert_eq!(answer(&dispatch, "fails", "[]"), r#"{"error":"the database is down"}"#);
    assert_eq!(answer(&dispatch, "nope", "[]"), r#"{"error":"Tool \"nope\" not found"}"#);
}

#[test]
fn a_closed_latch_answers_without_reaching_the_responder() {
    let latch = Latch::open();
    let reached = Arc::new(AtomicUsize::new(0));
    let counter = reached.clone();
    let dispatch = create_envelope_dispatch(latch.clone(), move |_call: ToolCall| {
        counter.fetch_add(1, Ordering::SeqCst);
        async { Ok::<_, ToolNotFoundError>("served") }
    });
    assert_eq!(answer(&dispatch, "x", "[]"), r#"{"result":"served"}"#);
    {
        let _guard = latch.close_on_drop();
        assert!(latch.is_open());
    }
    assert!(!latch.is_open());
    assert_eq!(answer(&dispatch, "x", "[]"), r#"{"error":"Execution has already completed."}"#);
    assert_eq!(reached.load(Ordering::SeqCst), 1, "the responder ran once, before the latch closed");
}

#[test]
fn tool_not_found_displays_the_pinned_sentence() {
    assert_eq!(ToolNotFoundError::new("nope").to_string(), "Tool \"nope\" not found");
}
