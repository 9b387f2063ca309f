//! Cells, runs a caller resumes: the same yielding run in-process, under process isolation
//! and through a daemon gives its logs once and in order; frontier waits, terminate,
//! unknown ids, and the bounds (time to live, the cap, a thousand abandoned cells).
#[path = "../../tests/support/mod.rs"]
mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use codemode_executor::cells::{CellError, CellLimits, Cells, Until, Waited};
use codemode_executor::daemon::{Address, Daemon, DaemonConfig, DaemonLimits};
use codemode_executor::{
    Execute, Executor, ExecutorConfig, ProcessExecutor, RemoteExecutor, Request, WorkerCommand,
};
use codemode_protocol::{Outcome, OutcomeKind, ProviderDescriptor, ToolCall, texts};

/// Logs every 50 ms for a second, then returns.
const TWENTY_LINES: &str = "async () => { for (let i = 0; i < 20; i++) { console.log('line ' + i); await new Promise(r => setTimeout(r, 50)) } return 'done' }";

/// Waits on a timer far beyond any test.
const SLEEPS: &str = "async () => { console.log('sleeping'); await new Promise(r => setTimeout(r, 600000)) }";

fn in_process() -> Arc<dyn Execute> {
    Arc::new(Executor::new(ExecutorConfig::default().workers(1)))
}

fn isolated() -> Arc<dyn Execute> {
    let command = WorkerCommand::new(env!("CARGO_BIN_EXE_codemode"), ["stdio"]);
    Arc::new(ProcessExecutor::new(ExecutorConfig::default().workers(1), command))
}

/// A daemon in this process on a Unix socket, and a client of it.
async fn through_a_daemon() -> Arc<dyn Execute> {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let path = std::env::temp_dir().join(format!("codemode-cells-{}-{n}.sock", std::process::id()));
    let daemon =
        Daemon::bind_with(DaemonConfig::new(Address::Unix(path)), DaemonLimits::default()).await.unwrap();
    let address = daemon.address().to_string();
    tokio::spawn(daemon.serve(Executor::default()));
    Arc::new(RemoteExecutor::connect(&address, None).await.unwrap())
}

fn lines(range: std::ops::Range<usize>) -> Vec<String> {
    range.map(|i| format!("line {i}")).collect()
}

/// Waits of 100 ms on [`TWENTY_LINES`]: running answers with the lines so far, then the
/// outcome with the rest; every line exactly once, in order.
async fn a_yielding_run_hands_out_every_line_once(executor: Arc<dyn Execute>, first_has_lines: bool) {
    let cells = Cells::new(executor, CellLimits::default());
    let cell = cells.start(Request::new(TWENTY_LINES));
    let mut heard = Vec::new();
    let first = cell.wait(Duration::from_millis(100)).await.unwrap();
    let Waited::Running { logs, .. } = first else { panic!("the first answer is running: {first:?}") };
    assert!(!first_has_lines || !logs.is_empty(), "the first lines come with the first answer");
    heard.extend(logs);
    assert_eq!(heard, lines(0..heard.len()));
    let mut answers = 1;
    let outcome = loop {
        answers += 1;
        match cell.wait(Duration::from_millis(100)).await.unwrap() {
            Waited::Running { logs, .. } => heard.extend(logs),
            Waited::Settled(outcome) => break outcome,
            other => panic!("{other:?}"),
        }
        assert!(answers < 1000, "the run ends");
    };
    assert!(answers > 2, "a second-long run yields more than once: {answers}");
    heard.extend(outcome.logs().iter().cloned());
    assert_eq!(heard, lines(0..20));
    assert_eq!(outcome.kind(), OutcomeKind::Returned);
    assert_eq!(serde_json::to_value(&outcome).unwrap()["result"], "done");
    // The outcome was handed out: the cell is gone.
    assert_eq!(cell.wait(Duration::from_millis(1)).await, Err(CellError::Unknown(cell.id().to_string())));
    assert_eq!(cells.live(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_process_a_yielding_run_hands_out_every_line_once_in_order() {
    a_yielding_run_hands_out_every_line_once(in_process(), true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_process_isolation_a_yielding_run_hands_out_every_line_once_in_order() {
    a_yielding_run_hands_out_every_line_once(isolated(), false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn through_a_daemon_a_yielding_run_hands_out_every_line_once_in_order() {
    a_yielding_run_hands_out_every_line_once(through_a_daemon().await, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_that_never_yielded_answers_exactly_what_execute_returns() {
    let executor = in_process();
    let code = "async () => { console.log('a'); console.warn('b'); throw new Error('boom') }";
    let direct = executor.execute(Request::new(code)).await;
    let cells = Cells::new(executor, CellLimits::default());
    let waited = cells.start(Request::new(code)).wait(Duration::from_secs(20)).await.unwrap();
    assert_eq!(waited, Waited::Settled(direct));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frontier_wait_answers_as_soon_as_the_program_only_waits_on_a_call() {
    let slow = |_call: ToolCall| async {
        tokio::time::sleep(Duration::from_secs(3)).await;
        r#"{"result":"slow answer"}"#.to_owned()
    };
    let request = Request::new("async () => { console.log('asking'); const v = await store.slow(); console.log('got ' + v); return v }")
        .provider(ProviderDescriptor::new("store", ["slow"]))
        .dispatch(slow);
    let cells = Cells::new(in_process(), CellLimits::default());
    let cell = cells.start(request);
    let started = Instant::now();
    let frontier = cell.wait_until(Duration::from_secs(60), Until::Frontier).await.unwrap();
    assert!(started.elapsed() < Duration::from_millis(2500), "{:?}", started.elapsed());
    assert_eq!(frontier, Waited::Running { logs: vec!["asking".to_owned()], calls_in_flight: 1, timers: 0 });
    let Waited::Settled(settled) = cell.wait_until(Duration::from_secs(60), Until::Frontier).await.unwrap()
    else {
        panic!("the run ends once the call answers")
    };
    assert_eq!(settled.to_json_string(), r#"{"result":"slow answer","logs":["got slow answer"]}"#);
}

/// Polls `live_engines` until it is `want`, for at most ten seconds.
async fn engines_go_down_to(executor: &dyn Execute, want: usize) {
    let started = Instant::now();
    while executor.live_engines() != Some(want) {
        assert!(started.elapsed() < Duration::from_secs(10), "live engines: {:?}", executor.live_engines());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terminate_ends_the_engine_and_answers_the_cancelled_outcome_with_the_lines_not_handed_out() {
    let executor = in_process();
    let cells = Cells::new(executor.clone(), CellLimits::default());
    let cell = cells.start(Request::new(
        "async () => { console.log('one'); await new Promise(r => setTimeout(r, 300)); console.log('two'); await new Promise(r => setTimeout(r, 600000)) }",
    ));
    let first = cell.wait_until(Duration::from_secs(20), Until::Frontier).await.unwrap();
    assert_eq!(first, Waited::Running { logs: vec!["one".to_owned()], calls_in_flight: 0, timers: 1 });
    let second = cell.wait_until(Duration::from_secs(20), Until::Frontier).await.unwrap();
    assert!(matches!(second, Waited::Running { .. }), "{second:?}");
    assert_eq!(executor.live_engines(), Some(1));
    // Terminated through another handle, found by id.
    let found = cells.find(cell.id().as_str()).unwrap();
    let outcome = found.terminate().await.unwrap();
    let Waited::Running { logs, .. } = second else { unreachable!() };
    let rest: Vec<String> = ["one", "two"].iter().skip(1 + logs.len()).map(|s| s.to_string()).collect();
    assert_eq!(outcome, Outcome::failure(OutcomeKind::Cancelled, texts::CANCELLED, rest));
    engines_go_down_to(&*executor, 0).await;
    assert_eq!(cells.live(), 0);
    let unknown = cells.find(cell.id().as_str()).unwrap_err();
    assert_eq!(unknown.to_string(), texts::CELL_UNKNOWN.fill(&[cell.id().as_str()]));
    assert_eq!(cell.terminate().await, Err(unknown.clone()));
    assert_eq!(cell.wait(Duration::from_secs(1)).await, Err(unknown));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_id_is_refused_with_the_pinned_text() {
    let cells = Cells::new(in_process(), CellLimits::default());
    let error = cells.find("0123456789abcdef").unwrap_err();
    assert_eq!(
        error.to_string(),
        "No running cell has the id \"0123456789abcdef\": its outcome was already handed out, it was ended \
         (terminated, or not waited on in time), or it never existed. Start a new execution."
    );
    // A cell of one owner is unknown to another, and to no owner.
    let cell = cells.start_owned(Some("session one".to_owned()), Request::new(SLEEPS));
    assert!(cells.find_owned(Some("session one"), cell.id().as_str()).is_ok());
    for other in [Some("session two"), None] {
        let refused = cells.find_owned(other, cell.id().as_str()).unwrap_err();
        assert_eq!(refused, CellError::Unknown(cell.id().to_string()));
    }
    cell.terminate().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cell_nobody_waits_on_for_its_time_to_live_is_ended() {
    let executor = in_process();
    let ttl = Duration::from_millis(300);
    let cells = Cells::new(executor.clone(), CellLimits::default().time_to_live(ttl));
    let cell = cells.start(Request::new(SLEEPS));
    let started = Instant::now();
    while cells.live() > 0 {
        assert!(started.elapsed() < Duration::from_secs(10), "reaped within its time to live and a margin");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(started.elapsed() >= ttl, "{:?}", started.elapsed());
    engines_go_down_to(&*executor, 0).await;
    // Its handle hears how it ended, once.
    let expired = texts::CELL_EXPIRED.fill(&["300"]);
    assert_eq!(
        cell.wait(Duration::from_secs(1)).await.unwrap(),
        Waited::Settled(Outcome::failure(OutcomeKind::Cancelled, expired, vec!["sleeping".to_owned()]))
    );
    assert!(cell.wait(Duration::from_secs(1)).await.is_err());
    assert!(cells.find(cell.id().as_str()).is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_cap_the_cell_waited_on_least_recently_is_ended() {
    let executor = in_process();
    let cells = Cells::new(executor.clone(), CellLimits::default().max_live(2));
    let a = cells.start(Request::new(SLEEPS));
    let b = cells.start(Request::new(SLEEPS));
    // `a` is waited on after `b` was started: `b` is now the one waited on least recently.
    a.wait(Duration::from_millis(10)).await.unwrap();
    let c = cells.start(Request::new(SLEEPS));
    assert_eq!(cells.live(), 2);
    let evicted = texts::CELL_EVICTED.fill(&["2"]);
    let Waited::Settled(outcome) = b.wait(Duration::from_secs(10)).await.unwrap() else {
        panic!("b was ended")
    };
    assert_eq!((outcome.kind(), outcome.error_text()), (OutcomeKind::Cancelled, Some(evicted.as_str())));
    assert!(cells.find(b.id().as_str()).is_err());
    for kept in [&a, &c] {
        assert!(matches!(kept.wait(Duration::from_millis(10)).await.unwrap(), Waited::Running { .. }));
    }
    engines_go_down_to(&*executor, 2).await;
    for kept in [a, c] {
        kept.terminate().await.unwrap();
    }
    engines_go_down_to(&*executor, 0).await;
}

/// A thousand cells, each waited on until its program waits, then abandoned: the cap and the time to live end them all, the
/// engines go, and the next execution runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_abandoned_cells_leave_nothing_behind() {
    let executor = in_process();
    let limits = CellLimits::default().time_to_live(Duration::from_millis(500)).max_live(16);
    let cells = Cells::new(executor.clone(), limits);
    let started = Instant::now();
    for n in 0..1000 {
        let code = if n % 2 == 0 { SLEEPS } else { "async () => await never.answers()" };
        let never = |_call: ToolCall| std::future::pending::<String>();
        let cell = cells.start(
            Request::new(code).provider(ProviderDescriptor::new("never", ["answers"])).dispatch(never),
        );
        assert!(cells.live() <= 16);
        // Each run reaches its engine and waits there before it is abandoned.
        let waited = cell.wait_until(Duration::from_secs(20), Until::Frontier).await.unwrap();
        assert!(matches!(waited, Waited::Running { .. }), "{waited:?}");
    }
    eprintln!("1000 cells started in {:?}", started.elapsed());
    let abandoned = Instant::now();
    while cells.live() > 0 {
        assert!(abandoned.elapsed() < Duration::from_secs(60), "reaped: {} left", cells.live());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    engines_go_down_to(&*executor, 0).await;
    eprintln!("all reaped and their engines gone after {:?}", started.elapsed());
    let direct = executor.execute(Request::new("async () => 6 * 7")).await;
    assert_eq!(direct.to_json_string(), r#"{"result":42,"logs":[]}"#);
    let waited = cells.start(Request::new("async () => 6 * 7")).wait(Duration::from_secs(20)).await.unwrap();
    assert_eq!(waited, Waited::Settled(direct));
}
