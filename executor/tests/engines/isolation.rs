//! Isolation and concurrency: fresh engines, a pool that never blocks on the host, prompt drops.

use std::time::{Duration, Instant};

use crate::support::*;
use codemode_executor::{Executor, Request};
use codemode_protocol::{ProviderDescriptor, ToolCall, parse_dispatch_arguments};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_concurrent_executions_of_ten_calls_each_get_their_own_outcomes() {
    let executor = Executor::new(crate::support::config());
    let dispatch = |call: ToolCall| async move {
        let args = parse_dispatch_arguments(&call.args_json).unwrap();
        let (run, step) = (args[0].to_json(), args[1].to_json());
        tokio::task::yield_now().await;
        format!(r#"{{"result":"{run}:{step}"}}"#)
    };
    let runs = (0..1000).map(|run| {
        let executor = executor.clone();
        async move {
            let code = format!(
                "async () => {{ const got = []; for (let step = 0; step < 10; step++) got.push(await store.step({run}, step)); return got.join(',') }}"
            );
            let outcome = executor
                .execute(Request::new(code).provider(ProviderDescriptor::new("store", ["step"])).dispatch(dispatch))
                .await;
            let expected: Vec<String> = (0..10).map(|step| format!("{run}:{step}")).collect();
            assert_eq!(json(&outcome), format!(r#"{{"result":"{}","logs":[]}}"#, expected.join(",")));
        }
    });
    let handles: Vec<_> = runs.map(tokio::spawn).collect();
    for handle in handles {
        handle.await.unwrap();
    }
    assert_eq!(executor.live_engines(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_dispatch_never_blocks_another_execution() {
    let executor = Executor::new(crate::support::config().workers(1));
    let slow = executor.clone();
    let slow = tokio::spawn(async move {
        slow.execute(
            Request::new("async () => store.slow()")
                .provider(ProviderDescriptor::new("store", ["slow"]))
                .dispatch(|_: ToolCall| async {
                    tokio::time::sleep(Duration::from_secs(2)).await;
                    r#"{"result":"slow"}"#.to_owned()
                }),
        )
        .await
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    let started = Instant::now();
    let quick = executor.execute(Request::new("async () => 'quick'")).await;
    assert_eq!(json(&quick), r#"{"result":"quick","logs":[]}"#);
    assert!(started.elapsed() < Duration::from_secs(1), "the quick run waited {:?}", started.elapsed());
    assert!(!slow.is_finished(), "the slow run is still awaiting its dispatch");
    assert_eq!(json(&slow.await.unwrap()), r#"{"result":"slow","logs":[]}"#);
}

#[tokio::test]
async fn dropping_an_execute_future_ends_its_engine_promptly() {
    let executor = Executor::new(crate::support::config().workers(1));
    let busy =
        executor.execute(Request::new("async () => { while (true) {} }").timeout(Duration::from_secs(60)));
    assert!(tokio::time::timeout(Duration::from_millis(100), busy).await.is_err());
    let dropped = Instant::now();
    while executor.live_engines() > 0 {
        // Promptly: milliseconds when the machine is quiet; the bound is for a loaded CI run.
        assert!(dropped.elapsed() < Duration::from_secs(3), "the engine outlived its dropped execute");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(
        json(&executor.execute(Request::new("async () => 'next'")).await),
        r#"{"result":"next","logs":[]}"#
    );
}

/// One thread runs every execution here, its engine renewed between them where the engine
/// can be: whatever one program did to its globals, prototypes, providers and built-ins,
/// and however it ended (a result, a throw, timers and promises left pending, a call
/// answered late, memory or time run out), the next finds the engine as new, with a
/// Math.random sequence of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_one_execution_does_reaches_the_next_on_its_thread() {
    let executor = Executor::new(crate::support::config().workers(1));
    let dispatch = |call: ToolCall| async move {
        if call.tool == "late" {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        r#"{"result":"answered"}"#.to_owned()
    };
    let look = "[typeof Object.prototype.polluted, typeof globalThis.left, [1, 2].map((x) => x * 2),
        JSON.stringify({ a: 1 }), typeof store.hidden, Object.isFrozen(Object.prototype),
        typeof console.log, Promise.prototype.then.name, typeof store.late, typeof globalThis.g1,
        Error.stackTraceLimit, typeof new TextEncoder().polluted, Math.random()]";
    let pollute =
        "Object.prototype.polluted = 1; globalThis.left = 'x'; Array.prototype.map = () => 'hijacked';
        JSON.stringify = () => 'forged'; store.hidden = 1; delete store.late; console.log = null;
        Promise.prototype.then = function () { return 'hijacked'; }; TextEncoder.prototype.polluted = 1;
        for (let i = 0; i < 30000; i++) globalThis['g' + i] = i; Error.stackTraceLimit = 0;
        Object.freeze(Object.prototype);";
    let endings = [
        "return seen;",
        "throw new Error('thrown');",
        "setTimeout(() => {}, 60000); new Promise(() => {}); return seen;",
        "await store.call(); return seen;",
        "await store.late(); return seen;",
        "while (true) {}",
        "globalThis.hog = []; while (true) hog.push('y'.repeat(1 << 16));",
    ];
    let mut randoms = std::collections::BTreeSet::new();
    for round in 0..14 {
        let ending = endings[round % endings.len()];
        let code = format!("async () => {{ const seen = {look}; {pollute} {ending} }}");
        let request = Request::new(code)
            .provider(ProviderDescriptor::new("store", ["call", "late"]))
            .dispatch(dispatch)
            // The spinning round ends at its deadline; every other round ends by itself (the
            // hog at its memory limit), so a loaded machine gets room before a deadline.
            .timeout(Duration::from_millis(if ending == "while (true) {}" { 500 } else { 10_000 }))
            .memory_limit_bytes(16 << 20);
        let outcome = executor.execute(request).await;
        let text = json(&outcome);
        match round % endings.len() {
            0 | 2 | 3 | 4 => {
                let value: serde_json::Value = serde_json::from_str(&text).unwrap();
                let seen = value["result"].as_array().unwrap_or_else(|| panic!("round {round}: {text}"));
                assert_eq!(
                    serde_json::Value::Array(seen[..12].to_vec()).to_string(),
                    r#"["undefined","undefined",[2,4],"{\"a\":1}","function",false,"function","then","function","undefined",10,"undefined"]"#,
                    "round {round}"
                );
                randoms.insert(seen[12].to_string());
            }
            1 => assert!(text.starts_with(r#"{"error":"thrown","kind":"thrown","#), "round {round}: {text}"),
            5 => assert_eq!(
                text,
                r#"{"error":"Execution timed out after 500 ms.","kind":"timeout","logs":[]}"#
            ),
            _ => assert!(text.contains(r#""kind":"memory""#), "round {round}: {text}"),
        }
    }
    assert_eq!(randoms.len(), 8, "each execution draws its own random numbers: {randoms:?}");
}

#[test]
fn execute_outside_a_tokio_runtime_is_an_error_outcome_not_a_panic() {
    let executor = Executor::new(crate::support::config().workers(1));
    let outcome = futures_lite_block_on(executor.execute(Request::new("async () => 1")));
    assert_eq!(outcome.error_text(), Some(codemode_executor::NO_TOKIO_RUNTIME));
}

/// Drive a future without any runtime (the case under test).
fn futures_lite_block_on<F: std::future::Future>(future: F) -> F::Output {
    use std::task::{Context, Poll, Waker};
    let mut future = std::pin::pin!(future);
    let mut cx = Context::from_waker(Waker::noop());
    loop {
        if let Poll::Ready(output) = future.as_mut().poll(&mut cx) {
            return output;
        }
        std::thread::yield_now();
    }
}
