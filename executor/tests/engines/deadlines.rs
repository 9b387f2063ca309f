//! Deadlines and outcomes that hold whatever the program does.

use std::time::{Duration, Instant};

use crate::support::json;
use codemode_executor::{Executor, Request};
use codemode_protocol::{ProviderDescriptor, ToolCall};

const TIMEOUT: Duration = Duration::from_millis(1000);
/// A bound on a guarantee (timeout + 100 ms), with room for a loaded 2-core machine.
const MARGIN: Duration = Duration::from_millis(300);

fn store() -> ProviderDescriptor {
    ProviderDescriptor::new("store", ["x"])
}

async fn timed(executor: &Executor, code: &str) -> (String, Duration) {
    let request = Request::new(code)
        .provider(store())
        .dispatch(|_: ToolCall| async { r#"{"result":1}"#.to_owned() })
        .timeout(TIMEOUT);
    let started = Instant::now();
    let outcome = executor.execute(request).await;
    (json(&outcome), started.elapsed())
}

/// Each program gets the timeout outcome at the deadline, with its log, and its engine goes.
async fn ends_at_the_deadline(code: &str) {
    let executor = Executor::new(crate::support::config());
    let (outcome, elapsed) =
        timed(&executor, &format!("async () => {{ console.log('start'); {code} }}")).await;
    assert_eq!(
        outcome, r#"{"error":"Execution timed out after 1000 ms.","kind":"timeout","logs":["start"]}"#,
        "{code}"
    );
    assert!(elapsed < TIMEOUT + MARGIN, "{code}: the outcome took {elapsed:?}");
    // The outcome's time is the guarantee; how long one native call keeps its engine after
    // the deadline is measured (`cargo bench --bench overrun`), so this bound only says
    // that the engine does go, generously for a debug build on a loaded machine.
    if crate::support::engine().name() == "v8" && code.contains("JSON") {
        // V8's JSON builtins do not look for TerminateExecution (builtins_interrupt.rs, KNOWN_GAPS).
        return;
    }
    let reclaimed = Instant::now();
    while executor.live_engines() > 0 {
        assert!(reclaimed.elapsed() < Duration::from_secs(15), "{code}: the stuck engine was not reclaimed");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

macro_rules! deadline_tests {
    ($($name:ident: $code:expr,)*) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            ends_at_the_deadline($code).await;
        }
    )*};
}

deadline_tests! {
    an_endless_loop: "while (true) {}",
    a_loop_after_an_await: "await null; while (true) {}",
    a_loop_after_a_tool_call: "await store.x(); while (true) {}",
    a_self_rescheduling_microtask: "const again = () => queueMicrotask(again); again(); await new Promise(() => {})",
    a_loop_inside_a_promise_executor: "await new Promise(() => { for (;;) {} })",
    a_catastrophic_regex: "return /^(a+)+$/.test('a'.repeat(50) + 'b')",
    filling_one_array_forever: "const a = new Array(3e5); while (true) a.fill(1)",
    filling_new_arrays_forever: "while (true) new Array(3e5).fill(1)",
    sorting_200000_elements_forever: "const a = Array.from({ length: 200000 }, (_, i) => (i * 7919) % 200000); while (true) a.slice().sort()",
    repeating_a_string_forever: "while (true) 'ab'.repeat(1e6)",
    json_round_trips_forever: "const big = Array.from({ length: 50000 }, (_, i) => ({ i, s: 'x' + i })); while (true) JSON.parse(JSON.stringify(big))",
    an_endless_then_after_returning_a_promise: "Promise.prototype.then = function () { for (;;) {} }; return Promise.resolve(1)",
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_hosts_other_executions_are_not_delayed_by_busy_ones() {
    let executor = Executor::new(crate::support::config().workers(2));
    let busy: Vec<_> = (0..2)
        .map(|_| {
            let executor = executor.clone();
            tokio::spawn(async move {
                timed(&executor, "async () => { while (true) new Array(3e5).fill(1) }").await
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(50)).await;
    let started = Instant::now();
    let quick = executor.execute(Request::new("async () => 'quick'")).await;
    assert_eq!(json(&quick), r#"{"result":"quick","logs":[]}"#);
    // Both workers are busy: a replacement takes the job once a worker counts as stuck.
    assert!(started.elapsed() < Duration::from_millis(600), "the quick run waited {:?}", started.elapsed());
    for run in busy {
        let (outcome, _) = run.await.unwrap();
        assert_eq!(outcome, r#"{"error":"Execution timed out after 1000 ms.","kind":"timeout","logs":[]}"#);
    }
}

#[tokio::test]
async fn a_floating_rejection_does_not_fail_the_run() {
    let outcome =
        crate::support::run(Request::new("async () => { Promise.reject(new Error('x')); return 'ok' }"))
            .await;
    assert_eq!(json(&outcome), r#"{"result":"ok","logs":["[warn] Unhandled rejection: x"]}"#);
    let handled_later = crate::support::run(Request::new(
        "async () => { const p = Promise.reject(new Error('late')); p.catch(() => {}); return 'ok' }",
    ))
    .await;
    assert_eq!(json(&handled_later), r#"{"result":"ok","logs":[]}"#);
    let thrown = crate::support::run(Request::new("async () => { throw new Error('thrown') }")).await;
    assert_eq!(
        json(&thrown),
        r#"{"error":"thrown","kind":"thrown","location":{"line":1,"column":21},"logs":[]}"#,
        "the run's own rejection is the outcome, not a warning"
    );
}

#[tokio::test]
async fn the_outcome_cannot_be_forged() {
    let sabotage = "
      JSON.stringify = () => '{\"result\":\"forged\"}';
      JSON.parse = () => ({ result: 'forged' });
      Object.prototype.toJSON = function () { return 'forged' };
      Array.prototype.map = () => ['forged'];
      Array.prototype.join = () => 'forged';
      Array.prototype[Symbol.iterator] = function* () { yield 'forged' };
      Promise.prototype.then = function () { for (;;) {} };
      console.log = () => {};
    ";
    for (ret, expected) in [
        ("return 'ok'", r#"{"result":"ok","logs":["before"]}"#),
        // Returning a promise from an async function calls its `then`: the program's own
        // endless `then` runs, and the deadline ends it on time.
        (
            "return Promise.resolve(['a', 1])",
            r#"{"error":"Execution timed out after 1000 ms.","kind":"timeout","logs":["before"]}"#,
        ),
    ] {
        let code = format!("async () => {{ console.log('before'); {sabotage} {ret} }}");
        let started = Instant::now();
        let outcome = crate::support::run(Request::new(code).timeout(TIMEOUT)).await;
        assert!(started.elapsed() < TIMEOUT + MARGIN);
        // The codec captured JSON.stringify before the program ran; Object.prototype.toJSON is
        // the program's own data (JSON.stringify honours it), never the envelope around it.
        assert_eq!(json(&outcome), expected, "{ret}");
    }
    let next = crate::support::run(Request::new(
        "async () => { console.log([1, 2].map((n) => n * 2)); return JSON.stringify({ a: 1 }) }",
    ))
    .await;
    assert_eq!(json(&next), r#"{"result":"{\"a\":1}","logs":["[2,4]"]}"#, "the next execution is untouched");
    let texts = crate::support::run(
        Request::new("async () => { Error.prototype.toString = () => 'forged'; Object.defineProperty(Error.prototype, 'message', { get() { return 'forged' } }); try { await store.x() } catch (e) { return e.message } }")
            .provider(store()),
    )
    .await;
    assert_eq!(json(&texts), r#"{"result":"Tool \"x\" not found","logs":[]}"#);
}
