//! What holds on every transport (in-process, process isolation, a daemon): calls reach
//! the host in program order, and no execution is lost.
#[path = "../../tests/support/mod.rs"]
mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use codemode_executor::daemon::{Address, Daemon, DaemonConfig};
use codemode_executor::{
    Execute, Executor, ExecutorConfig, ProcessExecutor, Provider, RemoteExecutor, Request, Toolbox,
    WorkerCommand,
};
use codemode_protocol::{ProviderDescriptor, ToolCall};
use support::json;

/// One executor per transport, all on this process's dispatch.
async fn transports(tag: &str) -> (Vec<(&'static str, Box<dyn Execute>)>, std::path::PathBuf) {
    let path = std::env::temp_dir().join(format!("codemode-transports-{}-{tag}.sock", std::process::id()));
    let daemon = Daemon::bind(DaemonConfig::new(Address::Unix(path.clone()))).await.unwrap();
    let address = daemon.address().to_string();
    tokio::spawn(daemon.serve(Executor::default()));
    let command = WorkerCommand::new(env!("CARGO_BIN_EXE_codemode"), ["stdio"]);
    let isolated = ProcessExecutor::new(ExecutorConfig::default().workers(2), command);
    let executors: Vec<(&'static str, Box<dyn Execute>)> = vec![
        ("in-process", Box::new(Executor::default())),
        ("process isolation", Box::new(isolated)),
        ("daemon", Box::new(RemoteExecutor::connect(&address, None).await.unwrap())),
    ];
    (executors, path)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_calls_reach_the_host_in_program_order_on_every_transport() {
    let (executors, socket) = transports("order").await;
    let code = "async () => (await Promise.all([store.x('a'), store.y('b'), store.x('c'), store.y('d'), store.x('e'), store.y('f'), store.x('g'), store.y('h')])).join('')";
    for (name, executor) in &executors {
        for round in 0..40 {
            let seen = Arc::new(Mutex::new(Vec::new()));
            let record = seen.clone();
            let outcome = executor
                .execute(Request::new(code).provider(ProviderDescriptor::new("store", ["x", "y"])).dispatch(
                    move |call: ToolCall| {
                        let record = record.clone();
                        async move {
                            // Recorded at the first poll: the moment the host takes the call.
                            record.lock().unwrap().push(call.args_json.clone());
                            // Answers come back in another order than the calls went out.
                            let letter = call.args_json.as_bytes()[2];
                            tokio::time::sleep(Duration::from_micros(u64::from(b'h' - letter) * 50)).await;
                            format!(r#"{{"result":{}}}"#, &call.args_json[1..call.args_json.len() - 1])
                        }
                    },
                ))
                .await;
            assert_eq!(json(&outcome), r#"{"result":"abcdefgh","logs":[]}"#, "{name}, round {round}");
            let order: Vec<String> = seen.lock().unwrap().clone();
            assert_eq!(
                order,
                ["a", "b", "c", "d", "e", "f", "g", "h"].map(|l| format!(r#"["{l}"]"#)),
                "{name}, round {round}"
            );
        }
    }
    let _ = std::fs::remove_file(socket);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_execution_is_lost_on_any_transport() {
    let (executors, socket) = transports("lost").await;
    let argument = "x".repeat(30_000);
    let calls = format!(
        "async () => (await Promise.all(Array.from({{ length: 40 }}, (_, i) => store.echo(i, '{argument}')))).reduce((a, b) => a + b, 0)"
    );
    for (name, executor) in &executors {
        for run in 0..300 {
            let outcome = executor.execute(Request::new("async () => 1")).await;
            assert_eq!(json(&outcome), r#"{"result":1,"logs":[]}"#, "{name}, sequential run {run}");
        }
        for run in 0..20 {
            let outcome = executor
                .execute(
                    Request::new(calls.as_str())
                        .provider(ProviderDescriptor::new("store", ["echo"]))
                        .dispatch(|call: ToolCall| async move {
                            let index: String =
                                call.args_json[1..].chars().take_while(char::is_ascii_digit).collect();
                            format!(r#"{{"result":{index}}}"#)
                        }),
                )
                .await;
            assert_eq!(json(&outcome), r#"{"result":780,"logs":[]}"#, "{name}, run {run} of 40 calls");
        }
    }
    let _ = std::fs::remove_file(socket);
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct FindUser {
    id: String,
    limit: Option<u32>,
}

#[derive(serde::Serialize, schemars::JsonSchema)]
struct User {
    id: String,
    orders: Vec<u32>,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_transport_serves_a_toolbox_from_this_process() {
    let toolbox = Toolbox::new([Provider::new("store")
        .tool("findUser", "Find a user by id.", |FindUser { id, limit }: FindUser, _| async move {
            Ok::<_, String>(User { id, orders: (1..=limit.unwrap_or(0)).collect() })
        })
        .sync_tool("add", "Add two numbers.", |(a, b): (f64, f64), _| Ok::<_, String>(a + b))])
    .unwrap();
    let (executors, socket) = transports("toolbox").await;
    let code = "async () => [await store.add(1, 2), await store.findUser('ada', 1)]";
    for (name, executor) in &executors {
        assert_eq!(
            json(&executor.execute(Request::new(code).toolbox(&toolbox)).await),
            r#"{"result":[3,{"id":"ada","orders":[1]}],"logs":[]}"#,
            "{name}"
        );
    }
    let _ = std::fs::remove_file(socket);
}

/// Many large calls at once (24 of 1 MiB), each answered with as much: far past the 4 MiB
/// either side keeps for a peer that does not read, so both sides' queues fill at once.
/// The host reads on (holding its calls back until the peer reads), so neither side
/// stalls the other: the run ends with its result, not at its timeout, on every transport
/// (over the daemon it ran into its timeout before).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_answers_to_many_calls_at_once_never_stall_a_transport() {
    let (executors, socket) = transports("large").await;
    let code = "async () => (await Promise.all(Array.from({ length: 24 }, () => store.echo('x'.repeat(1 << 20))))).reduce((n, s) => n + s.length, 0)";
    for (name, executor) in &executors {
        let request = Request::new(code)
            .timeout(Duration::from_secs(20))
            .memory_limit_bytes(256 << 20)
            .provider(ProviderDescriptor::new("store", ["echo"]))
            .dispatch(|call: ToolCall| async move {
                // The argument back as the result: `["xxx…"]` gives `"xxx…"`.
                let argument = &call.args_json[1..call.args_json.len() - 1];
                format!(r#"{{"result":{argument}}}"#)
            });
        let started = std::time::Instant::now();
        let outcome = executor.execute(request).await;
        assert_eq!(json(&outcome), format!(r#"{{"result":{},"logs":[]}}"#, 24 << 20), "{name}");
        assert!(started.elapsed() < Duration::from_secs(10), "{name}: took {:?}", started.elapsed());
    }
    let _ = std::fs::remove_file(socket);
}
