//! Exact outcomes at the edges: lone surrogates, deep values, late-handled rejections,
//! and a program's own text that only looks like one of the executor's.

use std::time::{Duration, Instant};

use crate::support::{json, run};
use codemode_executor::Request;
use codemode_protocol::OutcomeKind;

#[tokio::test]
async fn lone_surrogates_become_replacement_characters() {
    assert_eq!(
        json(&run(Request::new(r"async () => 'a\uD800b'")).await),
        "{\"result\":\"a\u{FFFD}b\",\"logs\":[]}"
    );
    assert_eq!(
        json(&run(Request::new(r"async () => { console.log('abc\uD800def', 'ok') }")).await),
        "{\"logs\":[\"abc\u{FFFD}def ok\"]}"
    );
    assert_eq!(
        json(&run(Request::new(r"async () => { throw new Error('bad \uD800 thing') }")).await),
        "{\"error\":\"bad \u{FFFD} thing\",\"kind\":\"thrown\",\"location\":{\"line\":1,\"column\":21},\"logs\":[]}"
    );
    assert_eq!(
        json(&run(Request::new(r"async () => Array.from(new TextEncoder().encode('a\uD800b'))")).await),
        r#"{"result":[97,239,191,189,98],"logs":[]}"#
    );
}

#[tokio::test]
async fn deep_values_come_back_as_values() {
    let outcome =
        run(Request::new("async () => { let v = []; for (let i = 0; i < 200; i++) v = [v]; return v }"))
            .await;
    let expected = format!("{{\"result\":{}{},\"logs\":[]}}", "[".repeat(201), "]".repeat(201));
    assert_eq!(json(&outcome), expected);
    let outcome = run(Request::new(
        "async () => { let v = {}; for (let i = 0; i < 1000; i++) v = { v }; let depth = 0; for (let o = v; o.v; o = o.v) depth++; return [depth, JSON.stringify(v).length] }",
    ))
    .await;
    assert_eq!(json(&outcome), r#"{"result":[1000,6002],"logs":[]}"#);
}

#[tokio::test]
async fn rejections_handled_late_cost_linear_time() {
    let started = Instant::now();
    let outcome = run(Request::new(
        "async () => { const ps = []; for (let i = 0; i < 30000; i++) ps.push(Promise.reject(i)); await null; const all = await Promise.allSettled(ps); return all.length }",
    )
    .timeout(Duration::from_secs(20)))
    .await;
    assert_eq!(json(&outcome), r#"{"result":30000,"logs":[]}"#);
    // Quadratic bookkeeping took 6 s here; linear takes a small fraction of that even in a debug build.
    assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
}

#[tokio::test]
async fn a_program_cannot_pass_for_a_timeout() {
    let forged = run(Request::new("async () => { throw 'Execution timed out after 30000 ms.' }")).await;
    assert_eq!(json(&forged), r#"{"error":"Execution timed out after 30000 ms.","kind":"thrown","logs":[]}"#);
    let real = run(Request::new("async () => { for (;;) {} }").timeout(Duration::from_millis(200))).await;
    assert_eq!(json(&real), r#"{"error":"Execution timed out after 200 ms.","kind":"timeout","logs":[]}"#);
    let forged_memory = run(Request::new(
        "async () => { throw new Error('Execution ran out of memory: the limit is 1 bytes.') }",
    ))
    .await;
    assert_eq!(forged_memory.kind(), OutcomeKind::Thrown);
}

#[tokio::test]
async fn an_uncaught_refusal_is_a_payload_outcome() {
    let outcome = run(Request::new("async () => { await store.put('x'.repeat(100)) }")
        .provider(codemode_protocol::ProviderDescriptor::new("store", ["put"]))
        .dispatch(|_: codemode_protocol::ToolCall| async { "{\"result\":1}".to_owned() })
        .max_payload_bytes(64))
    .await;
    assert_eq!(
        json(&outcome),
        r#"{"error":"Tool call payload is 112 bytes, over the limit of 64 bytes (provider, tool and arguments together). Send less per call.","kind":"payload","location":{"line":1,"column":27},"logs":[]}"#,
        "the refusal is placed at the call"
    );
}

#[tokio::test]
async fn a_call_past_the_payload_bound_is_refused_before_it_is_copied() {
    let started = Instant::now();
    let outcome = run(Request::new(
        "async () => { try { await __dispatch('a', 'b', 'x'.repeat(2 ** 24)) } catch (e) { return e.message } }",
    ))
    .await;
    assert_eq!(
        json(&outcome),
        r#"{"result":"Tool call payload is 16777218 bytes, over the limit of 8388608 bytes (provider, tool and arguments together). Send less per call.","logs":[]}"#
    );
    assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
}
