//! Wire types: exact JSON both ways.

use codemode_protocol::wire::{ClientMessage, Hello, ServerMessage};
use codemode_protocol::{Binary, ExecuteRequest, Outcome, ProviderDescriptor, ToolCall, Value};
use serde::{Deserialize, Serialize};

fn test_serialization<T>(value: &T, json: &str)
where
    T: Serialize + for<'de> Deserialize<'de> + PartialEq + std::fmt::Debug,
{
    assert_eq!(serde_json::to_string(value).unwrap(), json);
    assert_eq!(&serde_json::from_str::<T>(json).unwrap(), value);
}

#[test]
fn execute_request() {
    let mut request = ExecuteRequest::new("async () => await __dispatch('secrets', 'read', '[]')");
    request.providers = vec![ProviderDescriptor::new("store", ["listOrders"])];
    request.dispatch = true;
    test_serialization(
        &request,
        r#"{"code":"async () => await __dispatch('secrets', 'read', '[]')","providers":[{"name":"store","tools":["listOrders"]}],"dispatch":true}"#,
    );
    request.retain_handles = true;
    request.timeout_ms = Some(1000);
    request.memory_limit_bytes = Some(1 << 20);
    request.max_payload_bytes = Some(64);
    test_serialization(
        &request,
        r#"{"code":"async () => await __dispatch('secrets', 'read', '[]')","providers":[{"name":"store","tools":["listOrders"]}],"dispatch":true,"retainHandles":true,"timeoutMs":1000,"memoryLimitBytes":1048576,"maxPayloadBytes":64}"#,
    );
}

#[test]
fn outcomes() {
    test_serialization(&Outcome::result(Some("object".into()), vec![]), r#"{"result":"object","logs":[]}"#);
    test_serialization(&Outcome::result(Some(Value::Null), vec![]), r#"{"result":null,"logs":[]}"#);
    test_serialization(&Outcome::result(None, vec!["hi".into()]), r#"{"logs":["hi"]}"#);
    test_serialization(
        &Outcome::result(Some(Binary::uint8_array([1, 2, 3]).into()), vec![]),
        r#"{"result":{"__executor_binary_v1__":"Uint8Array","data":"AQID"},"logs":[]}"#,
    );
    test_serialization(
        &Outcome::error("boom", vec!["[warn] careful".into()]),
        r#"{"error":"boom","logs":["[warn] careful"]}"#,
    );
}

#[test]
fn messages() {
    test_serialization(
        &ClientMessage::Hello(Hello::current()),
        r#"{"type":"hello","protocol":"codemode","version":1}"#,
    );
    test_serialization(
        &ClientMessage::Answer { execution: 1, call: 2, answer: r#"{"result":1}"#.into() },
        r#"{"type":"answer","execution":1,"call":2,"answer":"{\"result\":1}"}"#,
    );
    test_serialization(&ClientMessage::Cancel { execution: 3 }, r#"{"type":"cancel","execution":3}"#);
    test_serialization(
        &ServerMessage::Call { execution: 1, call: 2, tool_call: ToolCall::new("store", "find", "[7]") },
        r#"{"type":"call","execution":1,"call":2,"provider":"store","tool":"find","argsJson":"[7]"}"#,
    );
    test_serialization(
        &ServerMessage::Outcome { execution: 1, outcome: Outcome::result(Some(42.into()), vec![]) },
        r#"{"type":"outcome","execution":1,"outcome":{"result":42,"logs":[]}}"#,
    );
}

#[test]
fn fetch_messages() {
    use codemode_protocol::Bytes;
    use codemode_protocol::wire::{FetchAnswer, FetchRequest};
    test_serialization(
        &ServerMessage::Fetch {
            execution: 1,
            call: 3,
            request: FetchRequest {
                method: "POST".into(),
                url: "https://api.example.com/".into(),
                headers: vec![("x-key".into(), "k".into())],
                body: Bytes::from([1, 2, 3]),
            },
        },
        r#"{"type":"fetch","execution":1,"call":3,"request":{"method":"POST","url":"https://api.example.com/","headers":[["x-key","k"]],"body":{"__executor_binary_v1__":"Uint8Array","data":"AQID"}}}"#,
    );
    test_serialization(
        &ClientMessage::FetchAnswer {
            execution: 1,
            call: 3,
            answer: FetchAnswer::Response { status: 200, headers: vec![], body: Bytes::default() },
        },
        r#"{"type":"fetchAnswer","execution":1,"call":3,"answer":{"status":200,"headers":[],"body":{"__executor_binary_v1__":"Uint8Array","data":""}}}"#,
    );
    test_serialization(
        &ClientMessage::FetchAnswer {
            execution: 1,
            call: 4,
            answer: FetchAnswer::Refused { error: "no".into() },
        },
        r#"{"type":"fetchAnswer","execution":1,"call":4,"answer":{"error":"no"}}"#,
    );
}
