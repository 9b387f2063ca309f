//! A host written against the protocol crate alone: a dispatch with its latch,
//! answering the calls a program would make, printed as they cross.

use codemode_protocol::{
    Bytes, Dispatch, Latch, ProviderDescriptor, ToolCall, ToolNotFoundError, create_envelope_dispatch,
    entry_source, parse_dispatch_arguments_as,
};
use serde_json::json;

fn main() {
    let latch = Latch::open();
    let dispatch = create_envelope_dispatch(latch.clone(), |call: ToolCall| async move {
        if call.provider != "store" {
            return Err(ToolNotFoundError::new(call.tool).to_string());
        }
        match call.tool.as_str() {
            "listUsers" => Ok(json!([{ "id": "ada" }, { "id": "grace" }])),
            "findUser" => {
                let (id,): (String,) =
                    parse_dispatch_arguments_as(&call.args_json).map_err(|e| e.to_string())?;
                Ok(json!({ "id": id, "avatar": Bytes::from([1, 2, 3]) }))
            }
            other => Err(ToolNotFoundError::new(other).to_string()),
        }
    });
    let providers = [ProviderDescriptor::new("store", ["listUsers", "findUser"])];
    let source = entry_source("async () => store.findUser('ada')", &providers).expect("a valid program");
    println!("entry source: {} bytes of strict script for any engine", source.len());

    let runtime = tokio::runtime::Builder::new_current_thread().build().expect("a runtime");
    let calls = [
        ToolCall::new("store", "listUsers", "[]"),
        ToolCall::new("store", "findUser", r#"["ada"]"#),
        ToolCall::new("store", "dropTables", "[]"),
        ToolCall::new("secrets", "read", "[]"),
    ];
    for call in calls {
        let line = format!("{}.{}({})", call.provider, call.tool, call.args_json);
        println!("{line:<28} -> {}", runtime.block_on(dispatch.dispatch(call)));
    }
    latch.close();
    let late = runtime.block_on(dispatch.dispatch(ToolCall::new("store", "listUsers", "[]")));
    println!("{:<28} -> {late}", "after the latch closed");
}
