//! Isolation between executions in one process: a spinning or stuck program neither
//! starves its neighbours nor takes the executor's capacity for good.

use std::time::{Duration, Instant};

use crate::support::json;
use codemode_executor::{Executor, Request};
use codemode_protocol::{OutcomeKind, ProviderDescriptor, ToolCall};

fn executor() -> Executor {
    Executor::new(crate::support::config().workers(2))
}

/// A dispatch answering every call after `delay`.
fn slow(delay: Duration) -> impl codemode_protocol::Dispatch {
    move |call: ToolCall| async move {
        tokio::time::sleep(delay).await;
        format!("{{\"result\":{}}}", call.args_json)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_waiting_executions_return_beside_two_spinning_ones() {
    let executor = executor();
    let spinners: Vec<_> = (0..2)
        .map(|_| {
            let executor = executor.clone();
            tokio::spawn(async move {
                executor
                    .execute(Request::new("async () => { for (;;) {} }").timeout(Duration::from_secs(6)))
                    .await
            })
        })
        .collect();
    // Let the spinners take both cores first.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let waiting: Vec<_> = (0..20)
        .map(|i| {
            let executor = executor.clone();
            tokio::spawn(async move {
                let started = Instant::now();
                let outcome = executor
                    .execute(
                        Request::new(format!("async () => await store.echo({i})"))
                            .provider(ProviderDescriptor::new("store", ["echo"]))
                            .dispatch(slow(Duration::from_millis(50)))
                            .timeout(Duration::from_secs(2)),
                    )
                    .await;
                (i, outcome, started.elapsed())
            })
        })
        .collect();
    let mut slowest = Duration::ZERO;
    for handle in waiting {
        let (i, outcome, elapsed) = handle.await.unwrap();
        assert_eq!(json(&outcome), format!(r#"{{"result":[{i}],"logs":[]}}"#));
        slowest = slowest.max(elapsed);
    }
    eprintln!("slowest waiting execution beside two spinners: {slowest:?} (dispatch takes 50 ms)");
    // The guarantee is a scheduling delay of tens of milliseconds; the bound leaves room for a loaded CI machine.
    assert!(slowest < Duration::from_millis(50 + 500), "{slowest:?}");
    for spinner in spinners {
        assert_eq!(spinner.await.unwrap().kind(), OutcomeKind::Timeout);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_reverse_runs_leave_the_executor_whole() {
    if crate::support::engine().name() == "v8" {
        // V8's reverse never looks for TerminateExecution (builtins_interrupt.rs, KNOWN_GAPS).
        eprintln!("eight_reverse_runs_leave_the_executor_whole: not run on v8");
        return;
    }
    let executor = executor();
    let code = "async () => Array.prototype.reverse.call({ length: 2 ** 53 - 1 })";
    for _ in 0..8 {
        let outcome = executor.execute(Request::new(code).timeout(Duration::from_millis(300))).await;
        assert_eq!(
            json(&outcome),
            r#"{"error":"Execution timed out after 300 ms.","kind":"timeout","logs":[]}"#
        );
    }
    let started = Instant::now();
    let outcome = executor.execute(Request::new("async () => 1")).await;
    assert_eq!(json(&outcome), r#"{"result":1,"logs":[]}"#);
    assert!(started.elapsed() < Duration::from_secs(1), "{:?}", started.elapsed());
    // Every engine stopped: nothing is live and no thread is left spinning.
    let deadline = Instant::now() + Duration::from_secs(5);
    while executor.live_engines() > 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(executor.live_engines(), 0);
    assert_eq!(executor.abandoned_engines(), 0, "every engine stopped within a second of its deadline");
    assert!(executor.execution_threads() <= 2 + 8, "{}", executor.execution_threads());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spinning_program_does_not_delay_a_timer_elsewhere() {
    let executor = executor();
    let spinner = {
        let executor = executor.clone();
        tokio::spawn(async move {
            executor
                .execute(Request::new("async () => { for (;;) {} }").timeout(Duration::from_secs(3)))
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    let started = Instant::now();
    let outcome = executor
        .execute(Request::new("async () => { await new Promise((r) => setTimeout(r, 100)); return 'woke' }"))
        .await;
    assert_eq!(json(&outcome), r#"{"result":"woke","logs":[]}"#);
    assert!(started.elapsed() < Duration::from_millis(100 + 500), "{:?}", started.elapsed());
    assert_eq!(spinner.await.unwrap().kind(), OutcomeKind::Timeout);
}

/// A thread waiting awake for an answer (the longest `answer_spin`) still runs the timers
/// due meanwhile, takes the answers that come, and ends at its deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thread_waiting_awake_for_answers_runs_its_timers_and_meets_its_deadline() {
    let executor = Executor::new(crate::support::config().answer_spin(Duration::from_millis(1)));
    let dispatch = |call: ToolCall| async move {
        match call.tool.as_str() {
            "never" => std::future::pending().await,
            // Later than the wait awake: the answer reaches a sleeping thread.
            "slow" => tokio::time::sleep(Duration::from_millis(5)).await,
            _ => tokio::task::yield_now().await,
        }
        format!("{{\"result\":{}}}", call.args_json)
    };
    let store = ProviderDescriptor::new("store", ["never", "slow", "soon"]);
    let ticks = "async () => {
        store.never();
        const ticks = [];
        await new Promise((resolve) => {
            const t = setInterval(() => { ticks.push(ticks.length); if (ticks.length === 5) { clearInterval(t); resolve(); } }, 0);
        });
        const answers = [];
        for (let i = 0; i < 3; i++) answers.push(await store.slow(i), await store.soon(i));
        return [ticks, answers];
    }";
    let outcome = executor
        .execute(
            Request::new(ticks).provider(store.clone()).dispatch(dispatch).timeout(Duration::from_secs(5)),
        )
        .await;
    assert_eq!(json(&outcome), r#"{"result":[[0,1,2,3,4],[[0],[0],[1],[1],[2],[2]]],"logs":[]}"#);
    let waiting = executor
        .execute(
            Request::new("async () => await store.never()")
                .provider(store)
                .dispatch(dispatch)
                .timeout(Duration::from_millis(300)),
        )
        .await;
    assert_eq!(json(&waiting), r#"{"error":"Execution timed out after 300 ms.","kind":"timeout","logs":[]}"#);
}

/// A burst's threads keep their engines renewed for the next burst, but only for a
/// second: then only the kept warm engines (one per worker) stay. V8 renews none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bursts_renewed_engines_are_freed_after_a_second_idle() {
    let executor = Executor::new(crate::support::config().workers(1));
    let runs: Vec<_> = (0..8)
        .map(|_| {
            let executor = executor.clone();
            tokio::spawn(async move { executor.execute(Request::new("async () => 1")).await })
        })
        .collect();
    for run in runs {
        assert_eq!(json(&run.await.unwrap()), r#"{"result":1,"logs":[]}"#);
    }
    let until = |want: fn(usize) -> bool, within: Duration| {
        let executor = executor.clone();
        async move {
            let deadline = Instant::now() + within;
            while !want(executor.warm_engines()) {
                assert!(Instant::now() < deadline, "warm engines: {}", executor.warm_engines());
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
    };
    if crate::support::engine() == codemode_executor::EngineKind::QuickJs {
        until(|warm| warm >= 2, Duration::from_millis(900)).await;
    }
    until(|warm| warm == 1, Duration::from_secs(10)).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(executor.warm_engines(), 1, "the kept one stays");
}
