//! Process isolation: each execution in a `codemode stdio` worker process, killed on overrun.
mod support;

use std::time::{Duration, Instant};

use codemode_executor::{Executor, ExecutorConfig, Isolation, Request, WorkerCommand};
use codemode_protocol::{ProviderDescriptor, ToolCall};
use support::{Recorder, json, triple};

fn isolated() -> Executor {
    let command =
        WorkerCommand { program: env!("CARGO_BIN_EXE_codemode").into(), args: vec!["stdio".into()] };
    Executor::new(ExecutorConfig { workers: 1, isolation: Isolation::Process(command), ..Default::default() })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_cross_the_process_boundary_and_the_dispatch_stays_here() {
    let executor = isolated();
    let recorder = Recorder::default();
    let outcome = executor
        .execute(
            Request::new("async () => { console.log('in the worker'); const v = await store; return [typeof v, await store.find('ada', 7)] }")
                .provider(ProviderDescriptor::new("store", ["find"]))
                .dispatch(recorder.dispatch(|call| {
                    serde_json::json!({ "result": format!("{}.{} {}", call.provider, call.tool, call.args_json) }).to_string()
                })),
        )
        .await;
    assert_eq!(json(&outcome), r#"{"result":["object","store.find [\"ada\",7]"],"logs":["in the worker"]}"#);
    assert_eq!(recorder.calls(), vec![triple("store", "find", r#"["ada",7]"#)]);
    let refusal = executor
        .execute(Request::new("async () => 1").provider(ProviderDescriptor::new("class", ["x"])))
        .await;
    assert!(refusal.error_text().is_some_and(|t| t.starts_with("Provider name \"class\" is on the list")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_overrun_kills_the_worker_and_the_next_execution_gets_a_fresh_one() {
    let executor = isolated();
    let started = Instant::now();
    let outcome = executor
        .execute(
            Request::new("async () => { console.log('busy'); while (true) new Array(3e5).fill(1) }")
                .timeout(Duration::from_millis(500)),
        )
        .await;
    assert_eq!(json(&outcome), r#"{"error":"Execution timed out after 500 ms.","logs":["busy"]}"#);
    assert!(started.elapsed() < Duration::from_millis(500 + 400), "took {:?}", started.elapsed());
    let next = executor
        .execute(
            Request::new("async () => (await store.x()).ok")
                .provider(ProviderDescriptor::new("store", ["x"]))
                .dispatch(|_: ToolCall| async { r#"{"result":{"ok":"fresh"}}"#.to_owned() }),
        )
        .await;
    assert_eq!(json(&next), r#"{"result":"fresh","logs":[]}"#);
}

#[tokio::test]
async fn retention_is_refused_with_a_clear_text() {
    let (outcome, _) = isolated().execute_retained(Request::new("async () => 1")).await;
    assert_eq!(outcome.error_text(), Some(codemode_executor::RETAIN_NEEDS_IN_PROCESS));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fetch_from_a_worker_process_reaches_the_hosts_outbound_handler() {
    let outcome = isolated()
        .execute(Request::new("async () => (await fetch('https://api.example.com/')).status").outbound(
            |_: codemode_executor::OutboundRequest| async {
                Ok(codemode_executor::OutboundResponse { status: 204, headers: vec![], body: vec![] })
            },
        ))
        .await;
    assert_eq!(json(&outcome), r#"{"result":204,"logs":[]}"#);
}
