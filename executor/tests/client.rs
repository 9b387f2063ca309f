//! The wire's one client session (`wire::client`), through both hosts that use it: a fake
//! daemon reached by `RemoteExecutor` and a fake worker process under `ProcessExecutor`.
//! A peer that sends what the host never allowed meets the same answer from each.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

use codemode_executor::{
    Confinement, Execute, ExecutorConfig, ProcessExecutor, RemoteExecutor, Request, WorkerCommand,
};
use codemode_protocol::wire::{ClientMessage, FetchAnswer, FetchRequest, ServerMessage};
use codemode_protocol::{Bytes, texts};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

const HELLO_3: &str = r#"{"type":"hello","protocol":"codemode","version":3}"#;

/// The `fetch` a hostile peer sends for execution 1, though the run has no outbound handler.
fn unasked_fetch() -> String {
    let request = FetchRequest {
        method: "GET".into(),
        url: "https://example.com/".into(),
        headers: vec![],
        body: Bytes::default(),
    };
    serde_json::to_string(&ServerMessage::Fetch { execution: 1, call: 1, request }).unwrap()
}

/// What every host answers it: the closed network's refusal, as the sandbox's own `fetch` says.
fn closed_network_answer() -> String {
    let answer = FetchAnswer::Refused { error: texts::NETWORK_CLOSED.to_owned() };
    serde_json::to_string(&ClientMessage::FetchAnswer { execution: 1, call: 1, answer }).unwrap()
}

/// A peer's script, as JavaScript for Node: answer the hello, send the fetch on the first
/// execute, and end that execution with the line the host answered, as its result.
fn peer_script() -> String {
    format!(
        r#"const rl = require('readline').createInterface({{ input: process.stdin }});
const send = (m) => process.stdout.write((typeof m === 'string' ? m : JSON.stringify(m)) + '\n');
rl.on('line', (line) => {{
  const m = JSON.parse(line);
  if (m.type === 'hello') send({hello});
  else if (m.type === 'execute') send({fetch});
  else if (m.type === 'fetchAnswer') send({{ type: 'outcome', execution: m.execution, outcome: {{ result: line, logs: [] }} }});
}});"#,
        hello = serde_json::to_string(HELLO_3).unwrap(),
        fetch = serde_json::to_string(&unasked_fetch()).unwrap(),
    )
}

fn socket_path() -> PathBuf {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    std::env::temp_dir().join(format!("codemode-client-{}-{n}.sock", std::process::id()))
}

/// A fake daemon on a Unix socket that behaves as [`peer_script`] does.
fn fake_daemon() -> String {
    let path = socket_path();
    let listener = tokio::net::UnixListener::bind(&path).unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let (read, mut write) = stream.into_split();
                let mut lines = BufReader::new(read).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    let reply =
                        match serde_json::from_str::<serde_json::Value>(&line).unwrap()["type"].as_str() {
                            Some("hello") => HELLO_3.to_owned(),
                            Some("execute") => unasked_fetch(),
                            Some("fetchAnswer") => {
                                let outcome = serde_json::json!({ "result": line, "logs": [] });
                                serde_json::json!({ "type": "outcome", "execution": 1, "outcome": outcome })
                                    .to_string()
                            }
                            _ => continue,
                        };
                    let _ = write.write_all(format!("{reply}\n").as_bytes()).await;
                }
            });
        }
    });
    format!("unix:{}", path.display())
}

async fn answered(executor: &dyn Execute) -> String {
    let outcome = executor.execute(Request::new("async () => 1")).await;
    outcome.to_json_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fetch_for_a_run_without_an_outbound_handler_is_refused_alike_by_a_daemon_and_a_worker() {
    let expected = serde_json::json!({ "result": closed_network_answer(), "logs": [] }).to_string();

    let remote = RemoteExecutor::connect(&fake_daemon(), None).await.unwrap();
    assert_eq!(answered(&remote).await, expected, "over a daemon");

    let node = WorkerCommand::new("node", ["-e".to_owned(), peer_script()]);
    let config = ExecutorConfig::default().workers(1).confinement(Confinement::Off);
    let isolated = ProcessExecutor::new(config, node);
    assert_eq!(answered(&isolated).await, expected, "from a worker process");
}

/// A daemon speaking version 3 knows no CPU or call budget: the client refuses the run
/// with the limit named, rather than send a field the daemon would refuse (or drop).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_budget_a_daemon_of_an_older_version_does_not_know_is_refused_before_it_is_sent() {
    let remote = RemoteExecutor::connect(&fake_daemon(), None).await.unwrap();
    let cpu = Request::new("async () => 1").cpu_time_limit(std::time::Duration::from_millis(300));
    assert_eq!(
        remote.execute(cpu).await.to_json_string(),
        r#"{"error":"The daemon speaks codemode version 3, and cpuTimeLimitMs needs version 5 or newer. Upgrade the daemon, or run without cpuTimeLimitMs.","kind":"invalid","logs":[]}"#
    );
    let calls = remote.execute(Request::new("async () => 1").max_calls(10)).await;
    assert_eq!(
        calls.error_text(),
        Some(
            "The daemon speaks codemode version 3, and maxCalls needs version 5 or newer. Upgrade the daemon, or run without maxCalls."
        )
    );
    // Without a budget the same daemon runs it (its fake answer is the fetch refusal).
    let expected = serde_json::json!({ "result": closed_network_answer(), "logs": [] }).to_string();
    assert_eq!(answered(&remote).await, expected);
}
