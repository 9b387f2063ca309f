//! Limits: each has a default, a per-request override, a pinned text, and holds.

use std::time::{Duration, Instant};

use crate::support::*;
use codemode_executor::{Executor, Limits, Request};
use codemode_protocol::{ProviderDescriptor, ToolCall};
use serde_json::json;

/// A bound on a guarantee, not a speed measurement: generous for a loaded 2-core machine.
const MARGIN: Duration = Duration::from_millis(400);

/// Each timed run gets an executor of its own, so other tests' busy programs do not
/// queue ahead of it on a shared worker.
async fn timed(request: Request) -> (String, Duration) {
    let executor = Executor::new(crate::support::config().workers(1));
    let started = Instant::now();
    let outcome = executor.execute(request).await;
    (json(&outcome), started.elapsed())
}

#[test]
fn every_limit_has_a_default() {
    let limits = Limits::default();
    assert_eq!(limits.timeout, Duration::from_secs(30));
    assert_eq!(limits.memory_limit_bytes, 64 << 20);
    assert_eq!(limits.stack_limit_bytes, 1 << 20);
    assert_eq!(limits.max_payload_bytes, 8 << 20);
    assert_eq!(limits.max_result_bytes, 8 << 20);
    assert_eq!(limits.max_log_bytes, 1 << 20);
    assert_eq!(limits.max_calls_in_flight, 256);
}

#[tokio::test]
async fn the_timeout_ends_busy_programs_and_keeps_their_logs() {
    let programs = [
        "async () => { console.log('started'); while (true) {} }",
        "async () => { console.log('started'); await null; while (true) {} }",
        "async () => { console.log('started'); await new Promise((r) => setTimeout(r, 1)); for (;;) {} }",
        "async () => { console.log('started'); return /^(a+)+$/.test('a'.repeat(40) + 'b') }",
    ];
    for code in programs {
        let (outcome, elapsed) = timed(Request::new(code).timeout(Duration::from_millis(300))).await;
        assert_eq!(
            outcome, r#"{"error":"Execution timed out after 300 ms.","kind":"timeout","logs":["started"]}"#,
            "{code}"
        );
        assert!(elapsed < Duration::from_millis(300) + MARGIN, "{code} took {elapsed:?}");
    }
}

#[tokio::test]
async fn the_timeout_holds_while_the_program_awaits_a_slow_dispatch() {
    let (outcome, elapsed) = timed(
        Request::new("async () => { console.log('calling'); return await store.slow() }")
            .provider(ProviderDescriptor::new("store", ["slow"]))
            .dispatch(|_: ToolCall| async {
                tokio::time::sleep(Duration::from_secs(5)).await;
                "{}".to_owned()
            })
            .timeout(Duration::from_millis(200)),
    )
    .await;
    assert_eq!(
        outcome,
        r#"{"error":"Execution timed out after 200 ms.","kind":"timeout","logs":["calling"]}"#
    );
    assert!(elapsed < Duration::from_millis(200) + MARGIN, "took {elapsed:?}");
}

#[tokio::test]
async fn memory_bombs_end_with_the_memory_text_and_the_next_run_is_unaffected() {
    let bombs = [
        "async () => { const keep = []; while (true) keep.push(new Array(100000).fill(1)) }",
        "async () => { const keep = []; while (true) keep.push(new ArrayBuffer(1 << 20)) }",
        "async () => new ArrayBuffer(1 << 30)",
    ];
    for code in bombs {
        let outcome = run(Request::new(code).memory_limit_bytes(16 << 20)).await;
        assert_eq!(
            json(&outcome),
            r#"{"error":"Execution ran out of memory: the limit is 16777216 bytes.","kind":"memory","logs":[]}"#,
            "{code}"
        );
        assert_eq!(json(&run(Request::new("async () => 'fine'")).await), r#"{"result":"fine","logs":[]}"#);
    }
    // An object's properties grown past the limit: QuickJS once ran its collector while
    // the object's shape was off its list, and the process died (at 4 MiB, not at 16).
    for mib in [4, 16] {
        let code = "async () => { const o = {}; for (let i = 0; ; i++) o['k' + i] = i }";
        assert_eq!(
            json(&run(Request::new(code).memory_limit_bytes(mib << 20)).await),
            format!(
                r#"{{"error":"Execution ran out of memory: the limit is {} bytes.","kind":"memory","logs":[]}}"#,
                mib << 20
            ),
        );
    }
    // A string past the engine's longest is the language's own RangeError, which a program
    // may catch: it is the program's error, not the budget's.
    let doubling =
        run(Request::new("async () => { let s = 'x'; while (true) s += s }").memory_limit_bytes(16 << 20))
            .await;
    let text = if crate::support::engine() == codemode_executor::EngineKind::V8 {
        "Invalid string length"
    } else {
        "string too long"
    };
    assert_eq!(
        json(&doubling),
        serde_json::json!({ "error": text, "kind": "thrown", "location": { "line": 1, "column": 41 }, "logs": [] })
            .to_string()
    );
}

/// `request` with the provider `store`, whose tool `x` answers `answer` at once.
fn answered(request: Request, answer: String) -> Request {
    let answer: std::sync::Arc<str> = answer.into();
    request.provider(ProviderDescriptor::new("store", ["x"])).dispatch(move |_call: ToolCall| {
        let answer = answer.clone();
        async move { answer.to_string() }
    })
}

/// A tool's answer larger than the memory limit ends the run with the memory text,
/// whichever path parses it (natively: an object with no tag; the codec's: one with an
/// escape), and the next run is unaffected.
#[tokio::test]
async fn an_answer_past_the_memory_limit_ends_with_the_memory_text() {
    let numbers = format!(r#"{{"result":[{}0]}}"#, "0,".repeat(8 << 20));
    let text = format!(r#"{{"result":"{}"}}"#, "x".repeat(32 << 20));
    let escaped = format!(r#"{{"result":"\u0041{}"}}"#, "x".repeat(32 << 20));
    for answer in [numbers, text, escaped] {
        let outcome = run(answered(
            Request::new("async () => { const v = await store.x(); return v.length }")
                .memory_limit_bytes(16 << 20),
            answer,
        ))
        .await;
        assert_eq!(
            json(&outcome),
            r#"{"error":"Execution ran out of memory: the limit is 16777216 bytes.","kind":"memory","logs":[]}"#
        );
        assert_eq!(json(&run(Request::new("async () => 'fine'")).await), r#"{"result":"fine","logs":[]}"#);
    }
}

/// The deadline passing while a large answer is parsed ends the run with the timeout
/// text (the program would spin after it anyway), and the next run is unaffected.
#[tokio::test]
async fn a_deadline_during_an_answers_parse_ends_with_the_timeout_text() {
    let answer = format!(r#"{{"result":[{}0]}}"#, "12345,".repeat(4 << 20));
    let request = Request::new("async () => { await store.x(); while (true) {} }")
        .memory_limit_bytes(1 << 30)
        .timeout(Duration::from_millis(20));
    let outcome = run(answered(request, answer)).await;
    assert_eq!(json(&outcome), r#"{"error":"Execution timed out after 20 ms.","kind":"timeout","logs":[]}"#);
    assert_eq!(json(&run(Request::new("async () => 'fine'")).await), r#"{"result":"fine","logs":[]}"#);
}

/// Cyclic garbage is still collected in a program that parses JSON again and again, with
/// parses that fail among them: QuickJS holds its collections while a text is parsed (the
/// parse makes no garbage) and takes them up again after, failed or not. 400 cycles of
/// 100 KB each are 40 MB, more than twice the limit, unless they are collected.
#[tokio::test]
async fn cyclic_garbage_is_collected_between_json_parses() {
    let code = r#"async () => {
        for (let i = 0; i < 400; i++) {
            const cycle = { text: 'x'.repeat(100000) + i };
            cycle.self = cycle;
            JSON.parse('[{"a":1},{"a":2}]');
            try { JSON.parse('[{"a":1},'); } catch {}
        }
        return 'collected';
    }"#;
    assert_eq!(under_16_mib(code).await, r#"{"result":"collected","logs":[]}"#);
}

/// A parse whose own growth crosses the collection threshold collects once it ends, so
/// cycles made between parses of large texts are freed too: 400 cycles of 100 KB against
/// a 16 MiB limit, each followed by a parse of 5,000 objects.
#[tokio::test]
async fn cyclic_garbage_is_collected_between_large_json_parses() {
    let code = r#"async () => {
        const text = JSON.stringify(Array.from({ length: 5000 }, (_, i) => ({ a: i, b: i })));
        for (let i = 0; i < 400; i++) {
            const cycle = { text: 'x'.repeat(100000) + i };
            cycle.self = cycle;
            JSON.parse(text);
        }
        return 'collected';
    }"#;
    assert_eq!(under_16_mib(code).await, r#"{"result":"collected","logs":[]}"#);
}

/// A syntax error inside a parse builds its stack with the program's own
/// `Error.prepareStackTrace` (QuickJS calls it inside the parse, V8 when `stack` is
/// read), and the cycles that makes are collected while it runs.
#[tokio::test]
async fn cyclic_garbage_made_while_a_parse_fails_is_collected() {
    let code = r#"async () => {
        let made = 0;
        Error.prepareStackTrace = () => {
            for (let i = 0; i < 400; i++) {
                const cycle = { text: 'x'.repeat(100000) + i };
                cycle.self = cycle;
                made++;
            }
            return '';
        };
        try { JSON.parse('{'); } catch (error) { error.stack; }
        return made;
    }"#;
    assert_eq!(under_16_mib(code).await, r#"{"result":400,"logs":[]}"#);
}

/// The outcome of `code` run under a 16 MiB limit: what the collector tests above assert,
/// since 400 uncollected cycles of 100 KB would end with the memory text instead.
async fn under_16_mib(code: &str) -> String {
    json(&run(Request::new(code).memory_limit_bytes(16 << 20)).await)
}

/// QuickJS (quickjs-ng, as rquickjs bundles it) throws what V8 throws here.
/// A valid program of about `bytes` bytes: one array literal of ones, and its length.
fn large_program(bytes: usize) -> String {
    let count = (bytes - 64) / 2;
    format!("async () => {{ const a = [{}]; return a.length }}", vec!["1"; count].join(","))
}

#[tokio::test]
async fn a_program_too_large_to_compile_within_its_memory_says_so() {
    // About 1 MiB of code fits the default 64 MiB; under 8 MiB compiling it runs out.
    let program = large_program(1000 << 10);
    let started = Instant::now();
    let fits = run(Request::new(program.clone())).await;
    assert_eq!(json(&fits), r#"{"result":511968,"logs":[]}"#);
    let outcome = run(Request::new(program).memory_limit_bytes(8 << 20)).await;
    assert_eq!(
        json(&outcome),
        r#"{"error":"The program is too large to compile within its memory limit of 8388608 bytes. Send a shorter program, or raise memoryLimitBytes.","kind":"memory","logs":[]}"#
    );
    // 12 MB of valid code is past the longest code taken: refused before any engine, at once.
    let outcome = run(Request::new(large_program(12_000_000))).await;
    assert_eq!(
        json(&outcome),
        r#"{"error":"SyntaxError in code at line 1, column 1: the code is 11999980 bytes, over the limit of 1048576 bytes for one program; send a shorter program","kind":"syntax","logs":[]}"#
    );
    assert!(started.elapsed() < Duration::from_secs(20), "{:?}", started.elapsed());
}

#[tokio::test]
async fn deep_recursion_is_a_catchable_error_inside_the_program() {
    let outcome = run(Request::new(
        "async () => { const f = (n) => f(n + 1) + 1; try { f(0) } catch (e) { return [e.name, e.message] } }",
    ))
    .await;
    assert_eq!(json(&outcome), r#"{"result":["RangeError","Maximum call stack size exceeded"],"logs":[]}"#);
}

#[tokio::test]
async fn the_payload_bound_rejects_at_the_call_site_and_never_delivers() {
    let recorder = Recorder::default();
    let outcome = run(Request::new(
        "async () => {
          await store.ok('x'.repeat(10));
          try { await store.big('x'.repeat(100)) } catch (e) { return e.message }
        }",
    )
    .provider(ProviderDescriptor::new("store", ["ok", "big"]))
    .dispatch(recorder.dispatch(|_| "{}".to_owned()))
    .max_payload_bytes(64))
    .await;
    // store + big + ["xxx…"] = 5 + 3 + 104 bytes.
    assert_eq!(
        json(&outcome),
        r#"{"result":"Tool call payload is 112 bytes, over the limit of 64 bytes (provider, tool and arguments together). Send less per call.","logs":[]}"#
    );
    assert_eq!(recorder.calls(), vec![triple("store", "ok", r#"["xxxxxxxxxx"]"#)]);
}

fn limited(limits: Limits) -> Executor {
    Executor::new(crate::support::config().workers(1).limits(limits))
}

#[tokio::test]
async fn the_result_bound_ends_the_run_with_the_result_text() {
    let executor = limited(Limits::default().max_result_bytes(1024));
    let outcome = executor.execute(Request::new("async () => 'x'.repeat(2000)")).await;
    assert_eq!(
        json(&outcome),
        r#"{"error":"Result is over the limit of 1024 bytes. Return less, or return it in parts over several runs.","kind":"resultTooLarge","logs":[]}"#
    );
    let fits = executor.execute(Request::new("async () => 'x'.repeat(1000)")).await;
    assert_eq!(fits.error_text(), None);
}

#[tokio::test]
async fn log_volume_stops_with_a_marker_line() {
    let executor = limited(Limits::default().max_log_bytes(20));
    let outcome = executor
        .execute(Request::new(
            "async () => { for (let i = 0; i < 100; i++) console.log('line ' + i); return 'done' }",
        ))
        .await;
    assert_eq!(
        json(&outcome),
        json!({ "result": "done", "logs": ["line 0", "line 1", "[codemode] Log limit of 20 bytes reached; later logs are dropped."] })
            .to_string()
    );
}

#[tokio::test]
async fn calls_in_flight_are_bounded_per_execution() {
    let executor = limited(Limits::default().max_calls_in_flight(3));
    let reached = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = reached.clone();
    let slow = move |_: ToolCall| {
        counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        async {
            tokio::time::sleep(Duration::from_millis(50)).await;
            "{}".to_owned()
        }
    };
    let outcome = executor
        .execute(
            Request::new(
                "async () => {
                  const settled = await Promise.allSettled([1, 2, 3, 4, 5].map((n) => store.slow(n)));
                  return settled.map((s) => s.status === 'fulfilled' ? 'ok' : s.reason.message);
                }",
            )
            .provider(ProviderDescriptor::new("store", ["slow"]))
            .dispatch(slow),
        )
        .await;
    let refused = "Too many tool calls in flight: the limit is 3. Await some before starting more.";
    assert_eq!(
        json(&outcome),
        json!({ "result": ["ok", "ok", "ok", refused, refused], "logs": [] }).to_string()
    );
    assert_eq!(reached.load(std::sync::atomic::Ordering::SeqCst), 3, "refused calls never reached dispatch");
}

#[tokio::test]
async fn every_bound_has_a_per_request_override() {
    let result = run(Request::new("async () => 'x'.repeat(200)").max_result_bytes(100)).await;
    assert_eq!(
        result.error_text(),
        Some("Result is over the limit of 100 bytes. Return less, or return it in parts over several runs.")
    );
    let logs =
        run(Request::new("async () => { console.log('a'.repeat(30)); console.log('b') }").max_log_bytes(10))
            .await;
    assert_eq!(
        json(&logs),
        r#"{"logs":["[codemode] Log limit of 10 bytes reached; later logs are dropped."]}"#
    );
    let calls = run(Request::new(
        "async () => { try { await Promise.all([store.a(), store.b()]) } catch (e) { return e.message } }",
    )
    .provider(ProviderDescriptor::new("store", ["a", "b"]))
    .dispatch(|_: ToolCall| async {
        tokio::time::sleep(Duration::from_millis(20)).await;
        "{}".to_owned()
    })
    .max_calls_in_flight(1))
    .await;
    assert_eq!(
        json(&calls),
        r#"{"result":"Too many tool calls in flight: the limit is 1. Await some before starting more.","logs":[]}"#
    );
    // 48 KiB holds a few hundred frames on QuickJS; V8 raises it to the 64 KiB it needs
    // to start, about a thousand frames. Neither reaches 5,000.
    let shallow = run(Request::new("async () => { const f = (n) => n === 0 ? 0 : 1 + f(n - 1); try { return f(5000) } catch (e) { return e.name } }")
        .stack_limit_bytes(48 * 1024))
    .await;
    assert_eq!(json(&shallow), r#"{"result":"RangeError","logs":[]}"#);
    let deep = run(Request::new("async () => { const f = (n) => n === 0 ? 0 : 1 + f(n - 1); try { return f(200) } catch (e) { return e.name } }")).await;
    assert_eq!(json(&deep), r#"{"result":200,"logs":[]}"#);
}

/// `EngineKind::V8` exists in every build; without the `v8` feature an executor on it is
/// made (no panic) and refuses each execution, before it runs, with the pinned text.
#[cfg(not(feature = "v8"))]
#[tokio::test]
async fn an_executor_on_v8_without_the_feature_refuses_each_execution() {
    use codemode_executor::EngineKind;
    use codemode_protocol::OutcomeKind;
    use codemode_protocol::texts::V8_NOT_BUILT;

    assert!(!EngineKind::V8.is_built_in());
    let executor = Executor::new(crate::support::config().engine(EngineKind::V8).workers(1));
    let recorder = Recorder::default();
    let outcome = executor
        .execute(
            Request::new("async () => { console.log('ran'); return await store.find(1) }")
                .provider(ProviderDescriptor::new("store", ["find"]))
                .dispatch(recorder.dispatch(|_| r#"{"result":1}"#.to_owned())),
        )
        .await;
    assert_eq!(outcome.kind(), OutcomeKind::Invalid);
    assert_eq!(json(&outcome), json!({ "error": V8_NOT_BUILT, "kind": "invalid", "logs": [] }).to_string());
    assert_eq!(
        V8_NOT_BUILT,
        "The V8 engine is not built into this executor. Build codemode-executor with the cargo feature `v8`, or choose EngineKind::QuickJs."
    );
    assert!(recorder.calls().is_empty(), "the program never ran");
    let (retained, _handle) = executor.execute_retained(Request::new("async () => 1")).await;
    assert_eq!(json(&retained), json!({ "error": V8_NOT_BUILT, "kind": "invalid", "logs": [] }).to_string());
}
