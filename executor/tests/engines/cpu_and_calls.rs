//! The CPU time budget (waiting not counted) and the call budget, on the suite's engine.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::support::{config, json};
use codemode_executor::{Executor, Request};
use codemode_protocol::{ProviderDescriptor, ToolCall};

/// A bound on a guarantee, with room for a loaded 2-core machine running other tests.
const MARGIN: Duration = Duration::from_millis(700);

/// Spins for `ms` of wall time: on an idle core, as much CPU time.
const BURN: &str = "const burn = ms => { const t = Date.now(); while (Date.now() - t < ms) {} };";

/// Held by each test that measures CPU time, so that they do not share the cores.
static CORES: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn store() -> ProviderDescriptor {
    ProviderDescriptor::new("store", ["slow", "x"])
}

/// A dispatch answering `store.slow` after 2 s and anything else at once, counting calls.
fn dispatch(seen: Arc<AtomicUsize>) -> impl codemode_protocol::Dispatch {
    move |call: ToolCall| {
        seen.fetch_add(1, Ordering::SeqCst);
        async move {
            if call.tool == "slow" {
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
            r#"{"result":"answered"}"#.to_owned()
        }
    }
}

fn request(code: &str, cpu_ms: u64) -> Request {
    Request::new(code)
        .provider(store())
        .dispatch(dispatch(Arc::default()))
        .cpu_time_limit(Duration::from_millis(cpu_ms))
        .timeout(Duration::from_secs(10))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_two_second_call_under_a_300_ms_cpu_budget_returns() {
    let _cores = CORES.lock().await;
    let outcome = Executor::new(config()).execute(request("async () => await store.slow()", 300)).await;
    assert_eq!(json(&outcome), r#"{"result":"answered","logs":[]}"#);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endless_loop_spends_its_cpu_budget_and_its_engine_goes() {
    let _cores = CORES.lock().await;
    let executor = Executor::new(config());
    let started = Instant::now();
    let outcome = executor.execute(request("async () => { console.log('spin'); for (;;) {} }", 300)).await;
    let elapsed = started.elapsed();
    assert_eq!(
        json(&outcome),
        r#"{"error":"Execution used its CPU time limit of 300 ms.","kind":"cpuTime","logs":["spin"]}"#
    );
    assert!(elapsed < Duration::from_millis(300) + MARGIN, "the outcome took {elapsed:?}");
    let reclaimed = Instant::now();
    while executor.live_engines() > 0 {
        assert!(reclaimed.elapsed() < Duration::from_secs(10), "the engine was not reclaimed");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn microtasks_and_timers_that_never_rest_spend_it_too() {
    let _cores = CORES.lock().await;
    let executor = Executor::new(config());
    for code in [
        "async () => { for (;;) await null }",
        "async () => { for (;;) await new Promise(r => setTimeout(r, 0)) }",
        "async () => { for (;;) { await store.x(); for (let i = 0; i < 1e5; i++) {} } }",
    ] {
        let outcome = executor.execute(request(code, 200)).await;
        assert_eq!(outcome.error_text(), Some("Execution used its CPU time limit of 200 ms."), "{code}");
    }
}

/// Two bursts of 200 ms of wall time around a 1 s wait: at most 400 ms of CPU time
/// whatever share of a core the run gets.
const BURSTS: &str = "async () => { BURN console.log('one'); burn(200); await new Promise(r => setTimeout(r, 1000)); console.log('two'); burn(200); return 'done' }";

/// Bursts of at most 100 ms each, between waits, add up: the budget of 300 ms is spent
/// over three or more of them, whatever share of a core the run gets (each burst is
/// 100 ms of wall time, so at most 100 ms of CPU). The bench `cpu_budget` measures the
/// two 200 ms bursts of the issue on an idle machine.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bursts_between_waits_add_up_to_the_budget() {
    let _cores = CORES.lock().await;
    let code = format!(
        "async () => {{ {BURN} for (let i = 1; i <= 40; i++) {{ console.log('burst ' + i); burn(100); await new Promise(r => setTimeout(r, 100)) }} return 'done' }}"
    );
    let outcome = Executor::new(config()).execute(request(&code, 300)).await;
    assert_eq!(outcome.kind(), codemode_protocol::OutcomeKind::CpuTime, "{}", json(&outcome));
    assert_eq!(outcome.error_text(), Some("Execution used its CPU time limit of 300 ms."));
    let logs = outcome.logs();
    assert!(logs.len() >= 3, "the budget was spent within one burst: {logs:?}");
    let expected: Vec<String> = (1..=logs.len()).map(|i| format!("burst {i}")).collect();
    assert_eq!(logs, expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_bursts_around_a_wait_return_under_500_ms() {
    let _cores = CORES.lock().await;
    let code = BURSTS.replace("BURN", BURN);
    let outcome = Executor::new(config()).execute(request(&code, 500)).await;
    assert_eq!(json(&outcome), r#"{"result":"done","logs":["one","two"]}"#);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn neighbours_spinning_on_both_cores_are_not_charged_to_a_run() {
    let _cores = CORES.lock().await;
    let executor = Executor::new(config().workers(3));
    let spinners: Vec<_> = (0..2)
        .map(|_| {
            let executor = executor.clone();
            tokio::spawn(async move {
                let spin = Request::new("async () => { for (;;) {} }").timeout(Duration::from_secs(4));
                executor.execute(spin).await.kind()
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(100)).await;
    // At most 500 ms of CPU whatever the share it gets: bursts of 200 ms of wall time.
    let code = BURSTS.replace("BURN", BURN);
    let outcome = executor.execute(request(&code, 500)).await;
    assert_eq!(json(&outcome), r#"{"result":"done","logs":["one","two"]}"#);
    for spinner in spinners {
        assert_eq!(spinner.await.unwrap(), codemode_protocol::OutcomeKind::Timeout);
    }
}

/// Eleven calls under `maxCalls: 10`: the host sees ten, and the run ends `callLimit`
/// however the program tries to go on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_call_over_the_budget_never_reaches_dispatch_and_cannot_be_caught() {
    let limit_text = "Execution reached its limit of 10 calls (tool calls and fetches together); the call over it was not sent.";
    for code in [
        "async () => { for (let i = 0; i < 11; i++) await store.x(i); return 'escaped' }",
        "async () => { for (let i = 0; i < 11; i++) { try { await store.x(i) } catch {} } return 'escaped' }",
        "async () => { await Promise.allSettled(Array.from({ length: 11 }, (_, i) => store.x(i))); return 'escaped' }",
        "async () => { for (let i = 0; i < 10; i++) await store.x(i); try { await store.x(10) } catch (e) { for (;;) {} } }",
        "async () => { for (let i = 0; i < 10; i++) store.x(i); await fetch('https://example.com/').catch(() => 1); return 'escaped' }",
        "async () => { for (let i = 0; i < 11; i++) await fetch('https://example.com/').catch(() => 1); return 'escaped' }",
    ] {
        let seen = Arc::new(AtomicUsize::new(0));
        let fetched = seen.clone();
        let request = Request::new(code)
            .provider(store())
            .dispatch(dispatch(seen.clone()))
            .outbound(move |_: codemode_executor::OutboundRequest| {
                fetched.fetch_add(1, Ordering::SeqCst);
                async { Err::<codemode_executor::OutboundResponse, _>("offline".to_owned()) }
            })
            .max_calls(10)
            .timeout(Duration::from_secs(5));
        let outcome = Executor::new(config()).execute(request).await;
        assert_eq!(
            json(&outcome),
            format!(r#"{{"error":"{limit_text}","kind":"callLimit","logs":[]}}"#),
            "{code}"
        );
        assert_eq!(seen.load(Ordering::SeqCst), 10, "{code}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_calls_under_a_budget_of_ten_return() {
    let seen = Arc::new(AtomicUsize::new(0));
    let code = "async () => { let n = 0; for (let i = 0; i < 10; i++) if (await store.x(i)) n++; return n }";
    let request = Request::new(code).provider(store()).dispatch(dispatch(seen.clone())).max_calls(10);
    let outcome = Executor::new(config()).execute(request).await;
    assert_eq!(json(&outcome), r#"{"result":10,"logs":[]}"#);
    assert_eq!(seen.load(Ordering::SeqCst), 10);
}

/// The largest budgets a request can write are budgets like any other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_largest_budgets_are_no_budget_at_all() {
    let wire = codemode_protocol::ExecuteRequest {
        cpu_time_limit_ms: Some(u64::MAX),
        max_calls: Some(u64::MAX),
        dispatch: true,
        ..codemode_protocol::ExecuteRequest::new("async () => { await store.x(); return 'ran' }")
    };
    let request = Request::from_wire(wire, None).provider(store()).dispatch(dispatch(Arc::default()));
    let outcome = Executor::new(config()).execute(request).await;
    assert_eq!(json(&outcome), r#"{"result":"ran","logs":[]}"#);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn budgets_out_of_range_are_refused_by_name() {
    let executor = Executor::new(config());
    let outcome = executor.execute(Request::new("async () => 1").cpu_time_limit(Duration::ZERO)).await;
    assert_eq!(
        json(&outcome),
        r#"{"error":"The cpuTimeLimitMs of 0 is below the minimum of 1; ask for at least 1.","kind":"invalid","logs":[]}"#
    );
    let capped = Executor::new(
        config().ceilings(
            codemode_executor::Limits::default_ceilings()
                .cpu_time_limit(Some(Duration::from_secs(1)))
                .max_calls(Some(5)),
        ),
    );
    let outcome = capped.execute(Request::new("async () => 1").cpu_time_limit(Duration::from_secs(2))).await;
    assert_eq!(
        json(&outcome),
        r#"{"error":"The cpuTimeLimitMs of 2000 is above this executor's ceiling of 1000; ask for at most 1000.","kind":"invalid","logs":[]}"#
    );
    let outcome = capped.execute(Request::new("async () => 1").max_calls(6)).await;
    assert_eq!(
        json(&outcome),
        r#"{"error":"The maxCalls of 6 is above this executor's ceiling of 5; ask for at most 5.","kind":"invalid","logs":[]}"#
    );
}
