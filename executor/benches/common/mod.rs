//! Workloads the benches share: calls in a loop and a megabyte of bytes both ways.

#![allow(dead_code)]

use codemode_executor::Request;
use codemode_protocol::{Bytes, ProviderDescriptor, ToolCall, parse_dispatch_arguments_as, result_envelope};

/// `n` sequential tool calls in one run, each answered at once.
pub(crate) fn calls(n: usize) -> Request {
    let code = format!(
        "async () => {{ let sum = 0; for (let i = 0; i < {n}; i++) sum += await store.one(i); return sum }}"
    );
    Request::new(code)
        .provider(ProviderDescriptor::new("store", ["one"]))
        .dispatch(|_: ToolCall| async { r#"{"result":1}"#.to_owned() })
}

/// A 1 MiB `Uint8Array` sent to dispatch and echoed back.
pub(crate) fn echo_bytes() -> Request {
    Request::new(
        "async () => { const sent = new Uint8Array(1 << 20).fill(7); const back = await store.echo(sent); return back.length }",
    )
    .provider(ProviderDescriptor::new("store", ["echo"]))
    .dispatch(|call: ToolCall| async move {
        let (bytes,): (Bytes,) = parse_dispatch_arguments_as(&call.args_json).unwrap_or_default();
        result_envelope(&bytes).unwrap_or_default()
    })
}
