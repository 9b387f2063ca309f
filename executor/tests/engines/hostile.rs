//! Hostile programs: each tries to forge an outcome or its kind, outgrow a limit, outlive
//! its deadline through code the runtime itself calls, reach the host, crash it, or keep
//! running after its outcome. Each gets its exact outcome, its engine goes, and the next
//! execution on the same executor runs as if nothing happened.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::support::{Recorder, config, json, located};
use codemode_executor::{Confinement, Execute, Executor, ProcessExecutor, Request, WorkerCommand};
use codemode_protocol::{ProviderDescriptor, ToolCall};

/// A deadline short enough for a corpus, long enough for a debug build.
const TIMEOUT: Duration = Duration::from_millis(300);
/// A bound on "on time" and "soon after", generous for a loaded 2-core machine.
const MARGIN: Duration = Duration::from_millis(700);
/// How long an engine may take to go once its outcome is in.
const GONE_WITHIN: Duration = Duration::from_secs(2);

/// Set to run every case in confined worker processes instead of in this process.
const CONFINED_VARIABLE: &str = "CODEMODE_TEST_HOSTILE_CONFINED";

/// An executor of the test's own, so its count of live engines is the test's alone; with
/// [`CONFINED_VARIABLE`], process isolation with its workers confined (`Required`).
fn fresh() -> Arc<dyn Execute> {
    let mut config = config().workers(1);
    if std::env::var_os(CONFINED_VARIABLE).is_some() {
        let args = ["stdio", "--engine", config.engine.name()].map(str::to_owned).to_vec();
        let command = WorkerCommand::new(codemode_binary(), args);
        config.confinement = Confinement::Required;
        return Arc::new(ProcessExecutor::new(config, command));
    }
    Arc::new(Executor::new(config))
}

/// The `codemode` binary (package `codemode-cli`) in this test's profile.
fn codemode_binary() -> std::path::PathBuf {
    codemode_devtools::codemode_binary(if cfg!(feature = "v8") { &["v8"] } else { &[] }).unwrap()
}

/// Every hostile case again, each in a confined worker: same outcomes, and no worker is
/// killed by its filter (a kill would be an outcome of its own, failing the case). The
/// retained-engine cases are in-process only (process isolation refuses retention). Two
/// at a time: each case starts worker processes, and a machine full of them starves the
/// timing cases.
#[cfg(target_os = "linux")]
#[test]
fn the_hostile_cases_hold_in_confined_workers() {
    if std::env::var_os(CONFINED_VARIABLE).is_some() {
        return; // this is the confined run
    }
    crate::support::run_again(
        CONFINED_VARIABLE,
        &[
            "hostile::",
            "--skip",
            "the_hostile_cases_hold_in_confined_workers",
            "--skip",
            "a_retained_engines_",
            "--test-threads",
            "2",
        ],
        "the hostile cases in confined workers",
    );
}

/// `store.x()` answers 1 at once, `store.slow()` 2 after 50 ms, `store.never()` never.
fn request(code: &str) -> Request {
    Request::new(code).provider(ProviderDescriptor::new("store", ["x", "slow", "never"])).dispatch(
        |call: ToolCall| async move {
            match call.tool.as_str() {
                "slow" => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    r#"{"result":2}"#.to_owned()
                }
                "never" => std::future::pending().await,
                _ => r#"{"result":1}"#.to_owned(),
            }
        },
    )
}

async fn engines_gone(executor: &dyn Execute, what: &str) {
    let since = Instant::now();
    while executor.live_engines().unwrap_or(0) > 0 {
        assert!(since.elapsed() < GONE_WITHIN, "{what}: the engine was still live {GONE_WITHIN:?} after");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

async fn next_works(executor: &dyn Execute, what: &str) {
    let next = executor
        .execute(Request::new(
            "async () => { console.log([1, 2].map((n) => n * 2)); return JSON.stringify({ a: [1] }) }",
        ))
        .await;
    assert_eq!(json(&next), r#"{"result":"{\"a\":[1]}","logs":["[2,4]"]}"#, "{what}: the next execution");
}

/// Run `request` on a fresh executor: its outcome, then its engine gone and the next run fine.
async fn hostile(request: Request) -> (String, Duration) {
    let executor = fresh();
    let what = request.to_wire().code;
    let started = Instant::now();
    let outcome = json(&executor.execute(request).await);
    let elapsed = started.elapsed();
    engines_gone(&executor, &what).await;
    next_works(&executor, &what).await;
    (outcome, elapsed)
}

/// `code` against the store: its exact outcome, on time. A case that ends at the deadline
/// runs with `TIMEOUT`; any other with 5 s, so that a loaded machine cannot turn it into a
/// timeout (CI failed so with two such cases while other builds shared its two cores).
async fn expect(code: &str, expected: &str) {
    expect_with(request(code).timeout(deadline_for(expected)), expected).await;
}

fn deadline_for(expected: &str) -> Duration {
    if expected.contains(r#""kind":"timeout""#) { TIMEOUT } else { Duration::from_secs(5) }
}

async fn expect_with(request: Request, expected: &str) {
    let wire = request.to_wire();
    let (code, limit) = (wire.code, Duration::from_millis(wire.timeout_ms.unwrap_or(30_000)));
    let (outcome, elapsed) = hostile(request).await;
    assert_eq!(outcome, expected, "{code}");
    assert!(elapsed < limit + MARGIN, "{code}: the outcome took {elapsed:?}");
}

/// `code` ends at the deadline, with the logs it wrote before.
async fn times_out(code: &str, logs: &str) {
    let expected =
        format!(r#"{{"error":"Execution timed out after 300 ms.","kind":"timeout","logs":{logs}}}"#);
    expect(code, &expected).await;
}

// ---------------------------------------------------------------------------------------
// Forging an outcome or its kind.

#[tokio::test]
async fn the_executors_texts_thrown_by_a_program_stay_thrown() {
    for text in [
        "Execution timed out after 300 ms.",
        "Execution ran out of memory: the limit is 67108864 bytes.",
        "Result is over the limit of 10 bytes. Return less, or return it in parts over several runs.",
        "Tool call payload is 112 bytes, over the limit of 64 bytes (provider, tool and arguments together). Send less per call.",
        "Too many tool calls in flight: the limit is 256. Await some before starting more.",
        "Execution was cancelled by the host.",
        "The executor failed internally while running this program (the engine panicked). This is a bug in codemode-executor; please report it with the program.",
    ] {
        let quoted = serde_json::to_string(text).unwrap();
        let expected = format!(r#"{{"error":{quoted},"kind":"thrown","logs":[]}}"#);
        expect(&format!("async () => {{ throw new Error({quoted}) }}"), &located(&expected, 1, 21)).await;
        expect(&format!("async () => {{ throw {quoted} }}"), &expected).await;
        expect(
            &format!("async () => {{ await Promise.reject(new Error({quoted})) }}"),
            &located(&expected, 1, 36),
        )
        .await;
    }
}

const REFUSED: &str = "Tool call payload is 110 bytes, over the limit of 64 bytes (provider, tool and arguments together). Send less per call.";

/// `handler` runs in the catch block of a call refused for its payload.
async fn after_a_refusal(handler: &str, expected: &str) {
    let code =
        format!("async () => {{ try {{ await store.x('x'.repeat(100)) }} catch (e) {{ {handler} }} }}");
    expect_with(request(&code).max_payload_bytes(64).timeout(deadline_for(expected)), expected).await;
}

#[tokio::test]
async fn a_refusal_is_a_payload_outcome_only_with_its_own_text() {
    // A refusal is placed at the call it refused (`x` of `store.x`).
    let payload = located(&format!(r#"{{"error":"{REFUSED}","kind":"payload","logs":[]}}"#), 1, 33);
    after_a_refusal("throw e", &payload).await;
    after_a_refusal("await null; throw e", &payload).await;
    after_a_refusal(
        "e.message = 'the program wrote this'; throw e",
        &located(r#"{"error":"the program wrote this","kind":"thrown","logs":[]}"#, 1, 33),
    )
    .await;
    // A getter that answers its own text on one read and the runtime's on the others: the
    // outcome takes one read, and says payload only if that read gave the runtime's text.
    // (Which read it is depends on what else the engine reads first.)
    for own in [0, 1, 2] {
        let code = format!(
            "async () => {{ try {{ await store.x('x'.repeat(100)) }} catch (e) {{ const text = e.message; let reads = 0; Object.defineProperty(e, 'message', {{ get() {{ return reads++ === {own} ? 'mine' : text }} }}); throw e }} }}"
        );
        let (outcome, _) = hostile(request(&code).max_payload_bytes(64).timeout(TIMEOUT)).await;
        let outcome: serde_json::Value = serde_json::from_str(&outcome).unwrap();
        match outcome["kind"].as_str() {
            Some("payload") => assert_eq!(outcome["error"], REFUSED, "{code}"),
            Some("thrown") => assert_eq!(outcome["error"], "mine", "{code}"),
            _ => panic!("{code}: {outcome}"),
        }
    }
    // Not Errors: no stack is read from them, so no place.
    let wrapped = format!(r#"{{"error":"Error: {REFUSED}","kind":"thrown","logs":[]}}"#);
    after_a_refusal("throw new Proxy(e, {})", &wrapped).await;
    after_a_refusal("throw Object.create(e)", &wrapped).await;
    after_a_refusal(
        "throw new Error(e.message)",
        &located(&format!(r#"{{"error":"{REFUSED}","kind":"thrown","logs":[]}}"#), 1, 72),
    )
    .await;
}

#[tokio::test]
async fn overriding_what_the_runtime_uses_forges_no_kind() {
    let sabotage = "
      WeakMap.prototype.get = () => 'Too many tool calls in flight: the limit is 1. Await some before starting more.';
      WeakMap.prototype.has = () => true;
      WeakSet.prototype.has = () => true;
      Error.isError = () => true;
      globalThis.String = () => 'forged';
      Reflect.apply = () => 'forged';
      Function.prototype.call = () => 'forged';
      Function.prototype.apply = () => 'forged';
      Object.defineProperty(Object.prototype, 'message', { get() { return 'forged' }, set() {}, configurable: true });
      Object.defineProperty(Object.prototype, 'kind', { get() { return 'payload' }, set() {}, configurable: true });
      Object.defineProperty(Object.prototype, 'error', { set() {}, configurable: true });
      Object.defineProperty(Object.prototype, 'result', { set() {}, configurable: true });
      Object.defineProperty(Object.prototype, '0', { set() {}, configurable: true });
      Object.defineProperty(Object.prototype, '1', { set() {}, configurable: true });
      Array.prototype[Symbol.iterator] = function* () { yield 'forged' };
      globalThis.Promise = function () { throw 'forged' };
      globalThis.JSON = { stringify: () => 'forged', parse: () => 'forged' };
    ";
    for (end, expected) in [
        ("throw 'plain'", r#"{"error":"plain","kind":"thrown","logs":[]}"#),
        ("throw Symbol.for('s')", r#"{"error":"Symbol(s)","kind":"thrown","logs":[]}"#),
        // An Error's own message is read, not the prototype's getter.
        (
            "throw new Error('own')",
            r#"{"error":"own","kind":"thrown","location":{"line":19,"column":12},"logs":[]}"#,
        ),
        ("return ['a', 1]", r#"{"result":["a",1],"logs":[]}"#),
        ("return { a: 1 }", r#"{"result":{"a":1},"logs":[]}"#),
        ("return await store.x()", r#"{"result":1,"logs":[]}"#),
    ] {
        expect(&format!("async () => {{ {sabotage} {end} }}"), expected).await;
    }
}

#[tokio::test]
async fn a_result_the_codec_cannot_write_is_thrown_never_internal() {
    // The program's own object that looks like a malformed binary tag.
    expect(
        "async () => ({ __executor_binary_v1__: 'Nope', data: 'x' })",
        r#"{"error":"Binary tag names \"Nope\", which is not a binary kind. Use ArrayBuffer or a typed array name such as Uint8Array.","kind":"thrown","logs":[]}"#,
    )
    .await;
    expect(
        "async () => [{ __executor_binary_v1__: 'Uint8Array', data: '!!' }]",
        r#"{"error":"Binary tag \"Uint8Array\" carries data that is not standard padded base64.","kind":"thrown","logs":[]}"#,
    )
    .await;
    // A kind name as long as the result bound: the error text is bounded too.
    // (Its JSON is 143 bytes, under the bound; the error text is 217, over it.)
    let text = codemode_protocol::texts::BINARY_TAG_UNKNOWN_KIND.fill(&[&"N".repeat(100)]);
    let cut = format!(
        "{} … [the error text was {} characters; the outcome keeps the first 160 bytes]",
        &text[..160],
        text.len()
    );
    expect_with(
        request("async () => ({ __executor_binary_v1__: 'N'.repeat(100), data: 'x' })")
            .max_result_bytes(160)
            .timeout(TIMEOUT),
        &serde_json::json!({ "error": cut, "kind": "thrown", "logs": [] }).to_string(),
    )
    .await;
    // A setter on Array.prototype breaks the codec's own arrays: the program broke its result.
    expect(
        "async () => { Object.defineProperty(Array.prototype, '0', { set() {}, configurable: true }); return new Uint8Array(2) }",
        r#"{"error":"trailing characters at line 1 column 3","kind":"thrown","logs":[]}"#,
    )
    .await;
    // A well-formed look-alike is a binary value, as the codec reads every text.
    expect(
        "async () => ({ __executor_binary_v1__: 'Uint8Array', data: 'AAA=' })",
        r#"{"result":{"__executor_binary_v1__":"Uint8Array","data":"AAA="},"logs":[]}"#,
    )
    .await;
}

#[tokio::test]
async fn call_sites_give_no_function_of_the_runtime() {
    // QuickJS's CallSite.getFunction handed out the prelude's `start` and `receive`: with
    // them a program swapped the writer of its result and answered its own calls.
    expect(
        "async () => {
           const fns = [];
           Error.prepareStackTrace = (error, sites) => { for (const site of sites) fns.push(site.getFunction()); return '' };
           new Error('at the start').stack;
           [0].map(() => new Error('under a builtin').stack);
           try { new Function('(') } catch {}
           await new Promise((resolve) => setTimeout(() => { new Error('in a timer').stack; resolve() }, 0));
           await store.slow().then(() => new Error('in an answer').stack);
           return [fns.length > 3, fns.every((f) => f === undefined)]
         }",
        r#"{"result":[true,true],"logs":[]}"#,
    )
    .await;
}

// ---------------------------------------------------------------------------------------
// Code the runtime itself calls: thrown values' messages and conversions, toJSON, getters
// and traps reached while writing the result or a log line. The deadline holds in each.

#[tokio::test]
async fn an_endless_message_getter_on_the_thrown_error() {
    times_out("async () => { const e = new Error('x'); Object.defineProperty(e, 'message', { get() { for (;;) {} } }); throw e }", "[]").await;
}

#[tokio::test]
async fn an_endless_to_string_on_a_thrown_object() {
    times_out("async () => { throw { toString() { for (;;) {} } } }", "[]").await;
}

#[tokio::test]
async fn an_endless_to_primitive_on_a_thrown_object() {
    times_out("async () => { throw { [Symbol.toPrimitive]() { for (;;) {} } } }", "[]").await;
}

#[tokio::test]
async fn an_endless_message_to_string_on_a_thrown_error() {
    times_out(
        "async () => { const e = new Error('x'); e.message = { toString() { for (;;) {} } }; throw e }",
        "[]",
    )
    .await;
}

#[tokio::test]
async fn an_endless_to_json_in_the_result() {
    times_out("async () => ({ a: { toJSON() { for (;;) {} } } })", "[]").await;
}

#[tokio::test]
async fn an_endless_getter_in_the_result() {
    times_out("async () => ({ get a() { for (;;) {} } })", "[]").await;
}

#[tokio::test]
async fn an_endless_proxy_trap_in_the_result() {
    times_out("async () => new Proxy({}, { ownKeys() { for (;;) {} } })", "[]").await;
}

#[tokio::test]
async fn an_endless_to_json_in_a_log_line() {
    times_out(
        "async () => { console.log('before'); console.log({ toJSON() { for (;;) {} } }) }",
        r#"["before"]"#,
    )
    .await;
}

#[tokio::test]
async fn an_endless_name_getter_of_a_logged_error() {
    times_out(
        "async () => { console.log('before'); const e = new Error('x'); Object.defineProperty(e, 'name', { get() { for (;;) {} } }); console.error(e) }",
        r#"["before"]"#,
    )
    .await;
}

#[tokio::test]
async fn an_endless_to_primitive_of_a_logged_object_json_refuses() {
    times_out(
        "async () => { console.log('before'); console.log({ big: 1n, [Symbol.toPrimitive]() { for (;;) {} } }) }",
        r#"["before"]"#,
    )
    .await;
}

#[tokio::test]
async fn an_endless_message_getter_on_a_floating_rejection() {
    times_out(
        "async () => { const e = new Error('x'); Object.defineProperty(e, 'message', { get() { for (;;) {} } }); Promise.reject(e); return 'returned' }",
        "[]",
    )
    .await;
}

#[tokio::test]
async fn an_endless_then_on_the_returned_thenable() {
    times_out("async () => ({ then() { for (;;) {} } })", "[]").await;
}

#[tokio::test]
async fn an_endless_sort_comparator_and_proxy_traps_in_builtins() {
    times_out("async () => [3, 2, 1].sort(() => { for (;;) {} })", "[]").await;
    times_out("async () => Array.prototype.includes.call(new Proxy({ length: 3 }, { get(t, k) { if (k !== 'length') for (;;) {} return 3 } }), 1)", "[]").await;
    times_out(
        "async () => Array.prototype.indexOf.call(new Proxy({ length: 3 }, { has() { for (;;) {} } }), 1)",
        "[]",
    )
    .await;
    times_out("async () => JSON.parse('[1, 2]', () => { for (;;) {} })", "[]").await;
    times_out("async () => 'aaa'.replace(/a/g, () => { for (;;) {} })", "[]").await;
}

#[tokio::test]
async fn conversions_that_throw_give_the_pinned_texts() {
    expect(
        "async () => { const e = new Error('x'); Object.defineProperty(e, 'message', { get() { throw new Error('no') } }); throw e }",
        r#"{"error":"","kind":"thrown","location":{"line":1,"column":25},"logs":[]}"#,
    )
    .await;
    expect(
        "async () => { throw { toString() { throw new Error('no') } } }",
        r#"{"error":"The program threw a value that cannot be converted to a string.","kind":"thrown","logs":[]}"#,
    )
    .await;
    // String() of a deep array recurses past the stack: no printable text, no crash.
    expect(
        "async () => { let v = []; for (let i = 0; i < 100000; i++) v = [v]; throw v }",
        r#"{"error":"The program threw a value that cannot be converted to a string.","kind":"thrown","logs":[]}"#,
    )
    .await;
    expect(
        "async () => { const e = new Error('x'); Object.defineProperty(e, 'name', { get() { throw 1 } }); Object.defineProperty(e, 'message', { get() { throw 2 } }); console.log(e, { toJSON() { throw 3 }, toString() { throw 4 } }, Object.create(null)); return 'logged' }",
        r#"{"result":"logged","logs":[":   {}"]}"#,
    )
    .await;
}

// ---------------------------------------------------------------------------------------
// Outgrowing a limit: logs, the result, error texts, calls in flight, timers, rejections.

#[tokio::test]
async fn a_million_empty_log_lines_stop_at_the_bound() {
    let code = "async () => { for (let i = 0; i < 1e6; i++) console.log(); return 'done' }";
    let mut logs = vec![String::new(); 1000];
    logs.push("[codemode] Log limit of 1000 bytes reached; later logs are dropped.".to_owned());
    let expected = serde_json::json!({ "result": "done", "logs": logs }).to_string();
    expect_with(request(code).max_log_bytes(1000).timeout(Duration::from_secs(10)), &expected).await;
}

#[tokio::test]
async fn a_log_line_past_the_bound_never_crosses() {
    // Half a gigabyte of characters in a string of a few kilobytes (a rope): only its length is read.
    expect(
        "async () => { let s = 'x'; for (let i = 0; i < 28; i++) s += s; console.log(s); console.log('after'); return s.length }",
        r#"{"result":268435456,"logs":["[codemode] Log limit of 1048576 bytes reached; later logs are dropped."]}"#,
    )
    .await;
    // Under the bound in characters, over it in bytes.
    expect_with(
        request("async () => { console.log('é'.repeat(600)); console.log('after') }")
            .max_log_bytes(1000)
            .timeout(TIMEOUT),
        r#"{"logs":["[codemode] Log limit of 1000 bytes reached; later logs are dropped."]}"#,
    )
    .await;
}

#[tokio::test]
async fn results_and_error_texts_past_the_bound() {
    expect_with(
        request("async () => 'x'.repeat(1000)").max_result_bytes(100).timeout(TIMEOUT),
        r#"{"error":"Result is over the limit of 100 bytes. Return less, or return it in parts over several runs.","kind":"resultTooLarge","logs":[]}"#,
    )
    .await;
    // A result whose JSON needs more than the memory holds: the budget ends it.
    expect_with(
        request("async () => { let s = 'x'; for (let i = 0; i < 26; i++) s += s; return s }")
            .timeout(Duration::from_secs(5)),
        r#"{"error":"Execution ran out of memory: the limit is 67108864 bytes.","kind":"memory","logs":[]}"#,
    )
    .await;
    // Cut on a character boundary, and the cut says so.
    expect_with(
        request("async () => { throw new Error('aé'.repeat(10)) }").max_result_bytes(14).timeout(TIMEOUT),
        r#"{"error":"aéaéaéaéa … [the error text was 20 characters; the outcome keeps the first 13 bytes]","kind":"thrown","location":{"line":1,"column":21},"logs":[]}"#,
    )
    .await;
    expect_with(
        request("async () => { throw new Error('x') }").max_result_bytes(0).timeout(TIMEOUT),
        r#"{"error":" … [the error text was 1 characters; the outcome keeps the first 0 bytes]","kind":"thrown","location":{"line":1,"column":21},"logs":[]}"#,
    )
    .await;
}

#[tokio::test]
async fn calls_past_the_bound_in_flight_never_reach_dispatch() {
    let recorder = Recorder::default();
    let executor = fresh();
    let code = "async () => { const calls = []; for (let i = 0; i < 5; i++) calls.push(store.never()); await Promise.all(calls) }";
    let outcome = executor
        .execute(
            Request::new(code)
                .provider(ProviderDescriptor::new("store", ["never"]))
                .dispatch({
                    let recorder = recorder.clone();
                    move |call: ToolCall| {
                        recorder.record(&call);
                        std::future::pending::<String>()
                    }
                })
                .max_calls_in_flight(4)
                .timeout(TIMEOUT),
        )
        .await;
    assert_eq!(
        json(&outcome),
        r#"{"error":"Too many tool calls in flight: the limit is 4. Await some before starting more.","kind":"payload","location":{"line":1,"column":78},"logs":[]}"#
    );
    assert_eq!(recorder.calls().len(), 4);
    engines_gone(&executor, code).await;
    next_works(&executor, code).await;
}

#[tokio::test]
async fn a_call_whose_text_cannot_be_copied_out_never_reaches_dispatch() {
    let recorder = Recorder::default();
    let executor = fresh();
    // 64 M characters in a rope of a few kilobytes: QuickJS's budget refuses the copy out;
    // V8 flattens it to copy it, past its 64 MiB heap in one step, which the end of the
    // turn reads as the memory outcome (the payload bound would refuse the call anyway).
    let code = "async () => { let s = 'x'; for (let i = 0; i < 26; i++) s += s; try { await __dispatch(s, 'x', '[]') } catch {} try { await __dispatch('store', 'x', s) } catch {} return 'after' }";
    let outcome = executor
        .execute(
            Request::new(code)
                .dispatch(recorder.dispatch(|_| r#"{"result":1}"#.to_owned()))
                .timeout(Duration::from_secs(5)),
        )
        .await;
    let expected =
        r#"{"error":"Execution ran out of memory: the limit is 67108864 bytes.","kind":"memory","logs":[]}"#;
    assert_eq!(json(&outcome), expected);
    assert_eq!(recorder.calls(), Vec::<(String, String, String)>::new());
    engines_gone(&executor, code).await;
    next_works(&executor, code).await;
}

#[tokio::test]
async fn floods_of_timers_rejections_and_calls_end_with_the_memory_text() {
    let memory =
        r#"{"error":"Execution ran out of memory: the limit is 2097152 bytes.","kind":"memory","logs":[]}"#;
    for code in [
        "async () => { for (;;) setTimeout(() => {}, 1e9) }",
        "async () => { for (;;) setInterval(() => {}, 1e9) }",
        "async () => { for (;;) Promise.reject(new Error('r')) }",
        "async () => { for (;;) { const p = Promise.reject(1); p.catch(() => {}) } }",
        "async () => { const s = 'x'.repeat(1 << 16); for (;;) store.never(s) }",
        "async () => { for (;;) queueMicrotask(() => {}) }",
    ] {
        expect_with(
            request(code)
                .memory_limit_bytes(2 << 20)
                .max_calls_in_flight(65536)
                .timeout(Duration::from_secs(10)),
            memory,
        )
        .await;
    }
}

#[tokio::test]
async fn floating_rejections_past_the_log_bound_run_no_more_program_code() {
    // Each rejection's message is a getter counting its reads: past the bound nothing is
    // written, so nothing is read.
    let code = "async () => {
      let reads = 0;
      for (let i = 0; i < 1000; i++) {
        const e = new Error();
        Object.defineProperty(e, 'message', { get() { reads++; return 'r' } });
        Promise.reject(e);
      }
      await new Promise((resolve) => setTimeout(resolve, 0));
      return reads
    }";
    // "[warn] Unhandled rejection: r" is 29 bytes and one for its end: three lines fit in 100.
    expect_with(
        request(code).max_log_bytes(100).timeout(Duration::from_secs(5)),
        r#"{"result":4,"logs":["[warn] Unhandled rejection: r","[warn] Unhandled rejection: r","[warn] Unhandled rejection: r","[codemode] Log limit of 100 bytes reached; later logs are dropped."]}"#,
    )
    .await;
}

#[tokio::test]
async fn no_payload_bound_at_all_refuses_every_call() {
    expect_with(
        request("async () => await store.x()").max_payload_bytes(0).timeout(TIMEOUT),
        r#"{"error":"Tool call payload is 8 bytes, over the limit of 0 bytes (provider, tool and arguments together). Send less per call.","kind":"payload","location":{"line":1,"column":25},"logs":[]}"#,
    )
    .await;
}

// ---------------------------------------------------------------------------------------
// Reaching the host: the globals, `__dispatch` and the byte functions misused.

#[tokio::test]
async fn the_only_host_functions_are_the_three_the_codec_reads() {
    expect(
        "async () => Object.getOwnPropertyNames(globalThis).filter((n) => n.startsWith('_') || /^op[A-Z]|^ops$|^receive$|^finish$|^describe$|^refusal/.test(n)).sort()",
        r#"{"result":["__base64ToBytes","__bytesToBase64","__dispatch"],"logs":[]}"#,
    )
    .await;
}

#[tokio::test]
async fn dispatch_misused_sends_three_strings_or_nothing() {
    let recorder = Recorder::default();
    let executor = fresh();
    let code = "async () => {
      const answers = [];
      answers.push(await __dispatch(undefined, { toString() { return 'tool' } }, 7));
      answers.push(await __dispatch(Symbol('p'), null, ['a', 1]));
      answers.push(await __dispatch.call({}, 'p', 't'));
      try { await __dispatch({ toString() { throw new Error('no string') } }, 't', '[]') } catch (e) { answers.push(e.message) }
      try { await __dispatch(Object.create(null), 't', '[]') } catch (e) { answers.push(e.constructor.name) }
      return answers
    }";
    let outcome = executor
        .execute(
            Request::new(code).dispatch(recorder.dispatch(|_| r#"{"result":1}"#.to_owned())).timeout(TIMEOUT),
        )
        .await;
    assert_eq!(
        json(&outcome),
        r#"{"result":["{\"result\":1}","{\"result\":1}","{\"result\":1}","no string","TypeError"],"logs":[]}"#
    );
    let triple = |p: &str, t: &str, a: &str| (p.to_owned(), t.to_owned(), a.to_owned());
    assert_eq!(
        recorder.calls(),
        vec![
            triple("undefined", "tool", "7"),
            triple("Symbol(p)", "null", "a,1"),
            triple("p", "t", "undefined")
        ]
    );
    engines_gone(&executor, code).await;
    next_works(&executor, code).await;
}

#[tokio::test]
async fn byte_functions_misused_read_no_memory_they_should_not() {
    expect(
        "async () => {
          const shrunk = new ArrayBuffer(8, { maxByteLength: 64 });
          const fixed = new Uint8Array(shrunk, 0, 8);
          const tracking = new Uint8Array(shrunk);
          shrunk.resize(0);
          const moved = new ArrayBuffer(8);
          const view = new Uint8Array(moved);
          moved.transfer();
          return [
            __bytesToBase64(fixed), __bytesToBase64(tracking), __bytesToBase64(view),
            __bytesToBase64(new DataView(new ArrayBuffer(4))), __bytesToBase64('text'), __bytesToBase64({ length: 4 }),
            __bytesToBase64(new Uint8Array([1, 2, 3]).subarray(1)), __bytesToBase64(new Int32Array([-1])),
            __base64ToBytes('@@'), __base64ToBytes(), __base64ToBytes('AQ==').byteLength,
            new TextDecoder().decode(fixed),
          ]
        }",
        r#"{"result":["","","","","","","AgM=","",null,null,1,""],"logs":[]}"#,
    )
    .await;
}

// ---------------------------------------------------------------------------------------
// Crashing the host: values and recursion deeper than any stack.

#[tokio::test]
async fn deep_values_end_as_outcomes_never_as_a_crash() {
    expect(
        "async () => { let v = []; for (let i = 0; i < 100000; i++) v = [v]; return v }",
        r#"{"error":"Maximum call stack size exceeded","kind":"thrown","logs":[]}"#,
    )
    .await;
    // Logged: whatever line the engine can write (QuickJS none, V8 all of it), then the next.
    let code = "async () => { let v = []; for (let i = 0; i < 100000; i++) v = [v]; console.log(v); console.log('after'); return 'logged' }";
    let executor = fresh();
    let outcome = executor.execute(request(code).timeout(Duration::from_secs(5))).await;
    assert_eq!(outcome.error_text(), None, "{code}");
    assert_eq!(outcome.logs().len(), 2, "{code}");
    assert_eq!(outcome.logs()[1], "after", "{code}");
    assert!(outcome.logs()[0].is_empty() || outcome.logs()[0].starts_with("[[[[[["), "{code}");
    engines_gone(&executor, code).await;
    next_works(&executor, code).await;
    // Each ends with the engine's stack bound, or (an engine that goes deeper) its value.
    for (code, value) in [
        (
            "let p = {}; for (let i = 0; i < 100000; i++) p = new Proxy(p, {}); return p.x === undefined",
            "true",
        ),
        (
            "let p = {}; for (let i = 0; i < 100000; i++) p = new Proxy(p, {}); return JSON.stringify(p)",
            r#""{}""#,
        ),
        ("function* g(n) { if (n > 0) yield* g(n - 1); else yield 1 } return [...g(100000)].length", "1"),
        ("return eval('('.repeat(100000) + '1' + ')'.repeat(100000))", "1"),
        ("return JSON.parse('['.repeat(100000) + ']'.repeat(100000)).length", "1"),
        (
            "let v = JSON.parse('{\"a\":'.repeat(100000) + '1' + '}'.repeat(100000)); let d = 0; for (; typeof v === 'object'; v = v.a) d++; return d",
            "100000",
        ),
    ] {
        let code = format!("async () => {{ try {{ {code} }} catch (e) {{ return e.message }} }}");
        let (outcome, _) = hostile(request(&code).timeout(Duration::from_secs(5))).await;
        let stack = r#"{"result":"Maximum call stack size exceeded","logs":[]}"#;
        let value = format!(r#"{{"result":{value},"logs":[]}}"#);
        assert!(outcome == stack || outcome == value, "{code}: {outcome}");
    }
    expect(
        "async () => { let v = {}; for (let i = 0; i < 100000; i++) v = { v }; return structuredClone(v) }",
        r#"{"error":"Maximum call stack size exceeded","kind":"thrown","logs":[]}"#,
    )
    .await;
    expect(
        "async () => { const f = () => f(); try { f() } catch (e) { return e.message } }",
        r#"{"result":"Maximum call stack size exceeded","logs":[]}"#,
    )
    .await;
    expect(
        "async () => { const e = new Error('outer'); let c = e; for (let i = 0; i < 10000; i++) { c.cause = new Error('inner'); c = c.cause } throw e }",
        r#"{"error":"outer","kind":"thrown","location":{"line":1,"column":25},"logs":[]}"#,
    )
    .await;
}

// ---------------------------------------------------------------------------------------
// Keeping running after the outcome.

#[tokio::test]
async fn work_left_behind_at_the_return_does_not_keep_the_engine() {
    expect(
        "async () => { setTimeout(() => { for (;;) {} }, 0); return 'returned' }",
        r#"{"result":"returned","logs":[]}"#,
    )
    .await;
    expect(
        "async () => { for (let i = 0; i < 1000; i++) setInterval(() => console.log('tick'), 0); store.never().then(() => { for (;;) {} }); return 'returned' }",
        r#"{"result":"returned","logs":[]}"#,
    )
    .await;
    expect(
        "async () => { store.slow().then(() => { for (;;) {} }); return 'returned' }",
        r#"{"result":"returned","logs":[]}"#,
    )
    .await;
    // Microtasks that never drain hold the run itself: the deadline ends it.
    times_out("async () => { const again = () => queueMicrotask(again); again(); return 'returned' }", "[]")
        .await;
}

/// A retained engine whose late callback never returns is stopped after its late budget.
async fn retained_late_callback_is_stopped(code: &str) {
    let executor = fresh();
    let (outcome, mut retained) = executor.execute_retained(request(code).timeout(TIMEOUT)).await.unwrap();
    assert_eq!(json(&outcome), r#"{"result":"returned","logs":[]}"#, "{code}");
    // The callback starts within about 100 ms; a second later the watchdog stops it.
    let since = Instant::now();
    while executor.live_engines().unwrap_or(0) > 0 {
        assert!(
            since.elapsed() < Duration::from_secs(1) + GONE_WITHIN,
            "{code}: a late callback kept the retained engine"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(retained.late_logs(), ["late"], "{code}");
    retained.release();
    next_works(&executor, code).await;
}

#[tokio::test]
async fn a_retained_engines_endless_timer_callback_is_stopped() {
    retained_late_callback_is_stopped(
        "async () => { setTimeout(() => { console.log('late'); for (;;) {} }, 50); setTimeout(() => console.log('later'), 1500); return 'returned' }",
    )
    .await;
}

#[tokio::test]
async fn a_retained_engines_endless_answer_callback_is_stopped() {
    retained_late_callback_is_stopped(
        "async () => { store.slow().then(() => { console.log('late'); for (;;) {} }); setTimeout(() => console.log('later'), 1500); return 'returned' }",
    )
    .await;
}

// ---------------------------------------------------------------------------------------
// Starving neighbours.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn noisy_neighbours_leave_a_quick_run_quick() {
    let executor = fresh();
    // Each with the time it has: the ones that end at the memory limit get room to reach
    // it while four neighbours share the two cores (a debug build of V8 in a confined
    // worker once took more than 2 s to fill 16 MiB with timers that way).
    let noisy = [
        ("async () => { for (;;) console.log('x'.repeat(1000)) }", "timeout", 2),
        ("async () => { for (;;) setTimeout(() => {}, 1e9) }", "memory", 20),
        (
            "async () => { const again = () => queueMicrotask(again); again(); await new Promise(() => {}) }",
            "timeout",
            2,
        ),
        ("async () => { const keep = []; for (;;) keep.push(new Array(1e5).fill(1)) }", "memory", 20),
        ("async () => { for (;;) {} }", "timeout", 2),
    ];
    let runs: Vec<_> = noisy
        .iter()
        .map(|&(code, _, seconds)| {
            let executor = executor.clone();
            let request = request(code).memory_limit_bytes(16 << 20).timeout(Duration::from_secs(seconds));
            tokio::spawn(async move { executor.execute(request).await })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let started = Instant::now();
    let quick = executor.execute(request("async () => await store.x() + 1")).await;
    assert_eq!(json(&quick), r#"{"result":2,"logs":[]}"#);
    assert!(started.elapsed() < Duration::from_millis(700), "the quick run took {:?}", started.elapsed());
    for (run, (code, kind, _)) in runs.into_iter().zip(noisy) {
        let outcome = run.await.unwrap();
        assert_eq!(outcome.kind().as_str(), kind, "{code}: {}", json(&outcome));
    }
    engines_gone(&executor, "the noisy neighbours").await;
    next_works(&executor, "the noisy neighbours").await;
}
