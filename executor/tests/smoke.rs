//! A first run through the executor.
mod support;
use codemode_executor::Request;
use support::*;

#[tokio::test]
async fn returns_a_value() {
    assert_eq!(json(&run(Request::new("async () => 1")).await), r#"{"result":1,"logs":[]}"#);
    assert_eq!(json(&run(Request::new("async () => { console.log('a', 1, {b: 2}); throw new Error('boom') }")).await), r#"{"error":"boom","logs":["a 1 {\"b\":2}"]}"#);
}
