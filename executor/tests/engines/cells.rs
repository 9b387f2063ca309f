//! Cells on the suite's engine (in-process): a yielding run hands out every line once and
//! in order, a frontier wait answers when the program only waits on a call, and terminate
//! ends the run and its engine. The other isolation modes are in the CLI's `tests/cells.rs`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::support::config;
use codemode_executor::cells::{CellError, CellLimits, Cells, Until, Waited};
use codemode_executor::{Executor, Request};
use codemode_protocol::{OutcomeKind, ProviderDescriptor, ToolCall, texts};

/// Logs every 50 ms for a second, then returns.
const TWENTY_LINES: &str = "async () => { for (let i = 0; i < 20; i++) { console.log('line ' + i); await new Promise(r => setTimeout(r, 50)) } return 'done' }";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_yielding_run_hands_out_every_line_once_in_order() {
    let cells = Cells::new(Arc::new(Executor::new(config())), CellLimits::default());
    let cell = cells.start(Request::new(TWENTY_LINES));
    let Waited::Running { logs, .. } = cell.wait(Duration::from_millis(100)).await.unwrap() else {
        panic!("a second-long run is still running after 100 ms")
    };
    assert!(!logs.is_empty(), "the first lines come with the first answer");
    let mut heard = logs;
    let outcome = loop {
        match cell.wait(Duration::from_millis(100)).await.unwrap() {
            Waited::Running { logs, .. } => heard.extend(logs),
            Waited::Settled(outcome) => break outcome,
            other => panic!("{other:?}"),
        }
    };
    heard.extend(outcome.logs().iter().cloned());
    assert_eq!(heard, (0..20).map(|i| format!("line {i}")).collect::<Vec<_>>());
    assert_eq!(outcome.kind(), OutcomeKind::Returned);
    assert_eq!(cells.find(cell.id().as_str()).err(), Some(CellError::Unknown(cell.id().to_string())));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frontier_wait_answers_when_the_program_only_waits_and_terminate_ends_it() {
    let executor = Executor::new(config());
    let cells = Cells::new(Arc::new(executor.clone()), CellLimits::default());
    let request = Request::new("async () => { console.log('asking'); return await slow.answer() }")
        .provider(ProviderDescriptor::new("slow", ["answer"]))
        .dispatch(|_: ToolCall| async {
            tokio::time::sleep(Duration::from_secs(60)).await;
            r#"{"result":1}"#.to_owned()
        });
    let cell = cells.start(request);
    let asked = Instant::now();
    let waited = cell.wait_until(Duration::from_secs(30), Until::Frontier).await.unwrap();
    assert_eq!(waited, Waited::Running { logs: vec!["asking".to_owned()], calls_in_flight: 1, timers: 0 });
    assert!(
        asked.elapsed() < Duration::from_secs(10),
        "the frontier answered at once: {:?}",
        asked.elapsed()
    );
    let outcome = cell.terminate().await.unwrap();
    assert_eq!((outcome.kind(), outcome.error_text()), (OutcomeKind::Cancelled, Some(texts::CANCELLED)));
    let gone = Instant::now();
    while executor.live_engines() > 0 {
        assert!(gone.elapsed() < Duration::from_secs(10), "the terminated run's engine goes");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// A frontier reached before the wait began answers at once; a run that stays at the
/// frontier it was reported at is waited on until the yield, so waits do not spin.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frontier_is_reported_once() {
    let cells = Cells::new(Arc::new(Executor::new(config())), CellLimits::default());
    let request = Request::new("async () => await slow.answer()")
        .provider(ProviderDescriptor::new("slow", ["answer"]))
        .dispatch(|_: ToolCall| std::future::pending::<String>());
    let cell = cells.start(request);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let asked = Instant::now();
    let first = cell.wait_until(Duration::from_secs(30), Until::Frontier).await.unwrap();
    assert_eq!(first, Waited::Running { logs: vec![], calls_in_flight: 1, timers: 0 });
    assert!(asked.elapsed() < Duration::from_secs(10), "answered at once: {:?}", asked.elapsed());
    let again = Instant::now();
    let second = cell.wait_until(Duration::from_millis(200), Until::Frontier).await.unwrap();
    assert_eq!(second, Waited::Running { logs: vec![], calls_in_flight: 1, timers: 0 });
    assert!(again.elapsed() >= Duration::from_millis(200), "waited to the yield: {:?}", again.elapsed());
    cell.terminate().await.unwrap();
}
