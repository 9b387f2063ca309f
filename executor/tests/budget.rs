//! One host-side budget per execution: what a program makes the host hold is bounded,
//! and the outcomes say exactly what happened. Resident memory is read from /proc, so
//! every scenario runs in one test, one after another.

mod support;

use std::time::Duration;

use codemode_executor::{Executor, Request};
use codemode_protocol::{OutcomeKind, ProviderDescriptor, ToolCall};
use serde_json::json;
use support::json;

const MEMORY_TEXT: &str =
    r#"{"error":"Execution ran out of memory: the limit is 67108864 bytes.","kind":"memory","logs":[]}"#;

fn resident_bytes() -> usize {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse::<usize>().ok())
        .map_or(0, |kb| kb * 1024)
}

fn executor() -> Executor {
    Executor::new(support::config().workers(2))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_a_program_makes_the_host_hold_is_bounded() {
    let executor = executor();
    let baseline = resident_bytes();
    let bombs = [
        "async () => { const keep = []; for (let i = 0; i < 30; i++) keep.push(__base64ToBytes('AAAA'.repeat(1e7))); return keep.length }",
        "async () => { const keep = []; for (let i = 0; i < 20; i++) keep.push(new TextEncoder().encode('x'.repeat(4e7))); return keep.length }",
        "async () => { for (let i = 0; i < 2e6; i++) setTimeout(() => {}, 1e9); return 'armed' }",
        "async () => { const keep = []; for (;;) keep.push({ a: Math.random() }) }",
        "async () => { let p = Promise.resolve(0); for (let i = 0; i < 1e7; i++) p = p.then((x) => x + 1); return await p }",
        "async () => { const m = new Map(); for (let i = 0; ; i++) m.set('k' + i, 'v' + i) }",
    ];
    for code in bombs {
        let outcome = executor.execute(Request::new(code).timeout(Duration::from_secs(20))).await;
        assert_eq!(json(&outcome), MEMORY_TEXT, "{code}");
        let grown = resident_bytes().saturating_sub(baseline);
        assert!(grown < 256 << 20, "{code}: resident memory grew by {} MiB", grown >> 20);
    }
    // Calls in flight hold their payloads: 256 calls of 4 MiB cannot all be held.
    let never = |_: ToolCall| std::future::pending::<String>();
    let outcome = executor
        .execute(
            Request::new(
                "async () => { const big = 'p'.repeat(4 << 20); const calls = []; for (let i = 0; i < 256; i++) calls.push(store.put(big)); await Promise.all(calls) }",
            )
            .provider(ProviderDescriptor::new("store", ["put"]))
            .dispatch(never)
            .timeout(Duration::from_secs(20)),
        )
        .await;
    assert_eq!(json(&outcome), MEMORY_TEXT);
    let grown = resident_bytes().saturating_sub(baseline);
    assert!(grown < 256 << 20, "calls in flight: resident memory grew by {} MiB", grown >> 20);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn out_of_memory_cannot_be_caught_as_a_value() {
    let executor = executor();
    let caught = "async () => { const keep = []; try { for (;;) keep.push(new Array(1e5).fill(1)) } catch (e) { keep.length = 0; return 'caught ' + e } }";
    assert_eq!(json(&executor.execute(Request::new(caught)).await), MEMORY_TEXT);
    let in_timer = "async () => { await new Promise((resolve) => setTimeout(() => { const keep = []; for (;;) keep.push(new Array(1e5).fill(1)) }, 1)); }";
    assert_eq!(
        json(&executor.execute(Request::new(in_timer).memory_limit_bytes(8 << 20)).await),
        r#"{"error":"Execution ran out of memory: the limit is 8388608 bytes.","kind":"memory","logs":[]}"#
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_and_error_texts_are_bounded() {
    let executor = executor();
    let outcome = executor
        .execute(
            Request::new("async () => { for (;;) console.log() }")
                .timeout(Duration::from_millis(500))
                .max_log_bytes(10_000),
        )
        .await;
    assert_eq!(outcome.kind(), OutcomeKind::Timeout);
    // Each line costs its bytes and one: ten thousand empty lines at most, then the marker.
    assert_eq!(outcome.logs().len(), 10_000 + 1);
    assert_eq!(
        outcome.logs().last().unwrap(),
        "[codemode] Log limit of 10000 bytes reached; later logs are dropped."
    );

    let outcome =
        executor.execute(Request::new("async () => { throw 'y'.repeat(6e7) }").max_result_bytes(1000)).await;
    assert_eq!(outcome.kind(), OutcomeKind::Thrown);
    assert_eq!(
        outcome.error_text().unwrap(),
        format!(
            "{} … [the error text was 60000000 characters; the outcome keeps the first 1000 bytes]",
            "y".repeat(1000)
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_out_of_range_are_refused_with_the_minimum_or_ceiling() {
    let executor = executor();
    for (bytes, text) in [
        (0, "The memoryLimitBytes of 0 is below the minimum of 1048576; ask for at least 1048576."),
        (
            150_000,
            "The memoryLimitBytes of 150000 is below the minimum of 1048576; ask for at least 1048576.",
        ),
        (
            8 << 30,
            "The memoryLimitBytes of 8589934592 is above this executor's ceiling of 4294967296; ask for at most 4294967296.",
        ),
    ] {
        let outcome = executor.execute(Request::new("async () => 'ok'").memory_limit_bytes(bytes)).await;
        assert_eq!(json(&outcome), json!({ "error": text, "kind": "invalid", "logs": [] }).to_string());
    }
    let mut config = support::config().workers(1);
    config.ceilings.timeout = Duration::from_secs(60);
    let outcome =
        Executor::new(config).execute(Request::new("async () => 1").timeout(Duration::from_secs(61))).await;
    assert_eq!(
        outcome.error_text(),
        Some("The timeoutMs of 61000 is above this executor's ceiling of 60000; ask for at most 60000.")
    );
    // The smallest workable limit runs a program.
    let outcome = executor.execute(Request::new("async () => 'ok'").memory_limit_bytes(1 << 20)).await;
    assert_eq!(json(&outcome), r#"{"result":"ok","logs":[]}"#);
}
