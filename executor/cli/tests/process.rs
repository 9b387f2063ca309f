//! Process isolation: each execution in a `codemode stdio` worker process, killed on overrun.
#[path = "../../tests/support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use codemode_executor::{
    Confinement, Execute, ExecutorConfig, ProcessExecutor, Request, RetainRefused, WorkerCommand,
};
use codemode_protocol::{OutcomeKind, ProviderDescriptor, ToolCall};
use support::{Recorder, json, triple};

/// The tests here run one at a time, so the worker processes one test sees are its own.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Process isolation at the default confinement (`Required` on Linux).
fn isolated() -> ProcessExecutor {
    isolated_at(Confinement::default())
}

fn isolated_at(confinement: Confinement) -> ProcessExecutor {
    let command = WorkerCommand::new(env!("CARGO_BIN_EXE_codemode"), ["stdio"]);
    ProcessExecutor::new(ExecutorConfig::default().workers(1).confinement(confinement), command)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_cross_the_process_boundary_and_the_dispatch_stays_here() {
    let _one = ONE_AT_A_TIME.lock().await;
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
    assert_eq!(refusal.kind(), OutcomeKind::Invalid);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_overrun_kills_the_worker_and_the_next_execution_gets_a_fresh_one() {
    let _one = ONE_AT_A_TIME.lock().await;
    let executor = isolated();
    let started = Instant::now();
    let outcome = executor
        .execute(
            Request::new("async () => { console.log('busy'); while (true) new Array(3e5).fill(1) }")
                .timeout(Duration::from_millis(500)),
        )
        .await;
    assert_eq!(
        json(&outcome),
        r#"{"error":"Execution timed out after 500 ms.","kind":"timeout","logs":["busy"]}"#
    );
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

/// The worker processes this test process has started, by pid (Linux: each thread's children).
fn worker_pids() -> std::collections::BTreeSet<String> {
    let mut pids = std::collections::BTreeSet::new();
    for task in std::fs::read_dir("/proc/self/task").unwrap() {
        let children = std::fs::read_to_string(task.unwrap().path().join("children")).unwrap_or_default();
        pids.extend(children.split_whitespace().map(str::to_owned));
    }
    pids.retain(|pid| {
        let command = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        command.split(|&b| b == 0).nth(1) == Some(&b"stdio"[..])
    });
    pids
}

/// The worker is killed by the outcome's kind, never its text: a program that throws the
/// timeout's text ends `thrown` and, unconfined, its worker serves the next execution.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thrown_timeout_text_keeps_its_worker() {
    let _one = ONE_AT_A_TIME.lock().await;
    let executor = isolated_at(Confinement::Off);
    let first = executor.execute(Request::new("async () => 'first'")).await;
    assert_eq!(json(&first), r#"{"result":"first","logs":[]}"#);
    let before = worker_pids();
    assert!(!before.is_empty());
    let outcome = executor
        .execute(
            Request::new("async () => { throw 'Execution timed out after 500 ms.' }")
                .timeout(Duration::from_millis(500)),
        )
        .await;
    assert_eq!(json(&outcome), r#"{"error":"Execution timed out after 500 ms.","kind":"thrown","logs":[]}"#);
    assert_eq!(outcome.kind(), OutcomeKind::Thrown);
    let next = executor.execute(Request::new("async () => 'same worker'")).await;
    assert_eq!(json(&next), r#"{"result":"same worker","logs":[]}"#);
    let kept = worker_pids();
    assert!(kept.is_subset(&before), "the worker was replaced: {before:?} then {kept:?}");

    // A real timeout does replace it.
    let timed_out = executor
        .execute(Request::new("async () => { while (true) {} }").timeout(Duration::from_millis(200)))
        .await;
    assert_eq!(timed_out.kind(), OutcomeKind::Timeout);
    let after = executor.execute(Request::new("async () => 'fresh worker'")).await;
    assert_eq!(json(&after), r#"{"result":"fresh worker","logs":[]}"#);
    let replaced = worker_pids();
    assert!(!replaced.is_subset(&before), "no fresh worker: {before:?} then {replaced:?}");
}

/// A worker whose run was stopped is killed at once, never waited for, and its
/// replacement starts as the run ends: the next run finds a worker ready and starts none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_runs_worker_is_killed_at_once_and_the_next_run_finds_one_ready() {
    let _one = ONE_AT_A_TIME.lock().await;
    let executor = isolated_at(Confinement::Off);
    let first = executor.execute(Request::new("async () => 'first'")).await;
    assert_eq!(json(&first), r#"{"result":"first","logs":[]}"#);
    let before = worker_pids();
    assert_eq!(before.len(), 1, "{before:?}");
    let outcome = executor
        .execute(Request::new("async () => { for (;;) {} }").timeout(Duration::from_millis(200)))
        .await;
    assert_eq!(json(&outcome), r#"{"error":"Execution timed out after 200 ms.","kind":"timeout","logs":[]}"#);
    let stopped = Instant::now();
    // Killed at once (a killed worker's /proc entry has no command line: it is not listed).
    while worker_pids().contains(before.first().unwrap()) {
        assert!(stopped.elapsed() < Duration::from_millis(500), "the stopped run's worker still runs");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    eprintln!("stopped run's worker gone {:?} after its outcome", stopped.elapsed());
    // Its replacement is ready before the next run asks.
    let ready = loop {
        let pids = worker_pids();
        if !pids.is_empty() {
            break pids;
        }
        assert!(stopped.elapsed() < Duration::from_secs(5), "no worker made ready after the kill");
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    assert_eq!(ready.len(), 1, "{ready:?}");
    assert!(ready.is_disjoint(&before), "{before:?} then {ready:?}");
    // Started by itself: once it has said hello it waits for the next run.
    while executor.ready_workers() == 0 {
        assert!(stopped.elapsed() < Duration::from_secs(5), "the replacement never said hello");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let next = executor.execute(Request::new("async () => 'next'")).await;
    assert_eq!(json(&next), r#"{"result":"next","logs":[]}"#);
    assert_eq!(worker_pids(), ready, "the next run started a worker of its own");
}

#[tokio::test]
async fn retention_is_refused_with_a_clear_text() {
    let _one = ONE_AT_A_TIME.lock().await;
    let refused = isolated().execute_retained(Request::new("async () => 1")).await.err();
    assert_eq!(refused, Some(RetainRefused::NeedsInProcess));
    assert_eq!(refused.unwrap().to_string(), codemode_executor::RETAIN_NEEDS_IN_PROCESS);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fetch_from_a_worker_process_reaches_the_hosts_outbound_handler() {
    let _one = ONE_AT_A_TIME.lock().await;
    let outcome = isolated()
        .execute(Request::new("async () => (await fetch('https://api.example.com/')).status").outbound(
            |_: codemode_executor::OutboundRequest| async {
                Ok(codemode_executor::OutboundResponse { status: 204, headers: vec![], body: vec![] })
            },
        ))
        .await;
    assert_eq!(json(&outcome), r#"{"result":204,"logs":[]}"#);
}

/// Confined, a worker serves one execution: each run gets a fresh, already locked worker
/// while the next one waits ready.
#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_confined_worker_serves_one_execution() {
    let _one = ONE_AT_A_TIME.lock().await;
    let executor = isolated_at(Confinement::Required);
    // One worker is made ready ahead of demand, and it is locked once it has started.
    let ready = || async {
        let locked = |pids: &std::collections::BTreeSet<String>| {
            pids.len() == 1
                && codemode_executor::confine::check_worker(pids.first().unwrap().parse().unwrap()).is_ok()
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while !locked(&worker_pids()) && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let pids = worker_pids();
        assert!(locked(&pids), "no single locked worker ready: {pids:?}");
        pids.first().unwrap().clone()
    };
    let first = executor.execute(Request::new("async () => 'start'")).await;
    assert_eq!(json(&first), r#"{"result":"start","logs":[]}"#);
    for n in 0..3 {
        let worker = ready().await;
        let outcome = executor.execute(Request::new(format!("async () => {n}"))).await;
        assert_eq!(json(&outcome), format!(r#"{{"result":{n},"logs":[]}}"#));
        // The worker that ran it (the only one ready) is gone after its run.
        let deadline = Instant::now() + Duration::from_secs(5);
        while worker_pids().contains(&worker) {
            assert!(Instant::now() < deadline, "worker {worker} served run {n} and was kept");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    ready().await;
}

/// Confined, a run that leaves another worker ready starts its replacement when it ends,
/// not beside it (the start would share the CPUs with the run); then the pool is full again.
#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_confined_run_with_another_worker_ready_is_replaced_when_it_ends() {
    use std::collections::BTreeSet;
    use std::sync::{Arc, Mutex};
    let _one = ONE_AT_A_TIME.lock().await;
    let command = WorkerCommand::new(env!("CARGO_BIN_EXE_codemode"), ["stdio"]);
    let config = ExecutorConfig::default().workers(2).confinement(Confinement::Required);
    let executor = ProcessExecutor::new(config, command);
    // Two locked workers ready, no other, and at most `kept` of `before` among them.
    let full = |before: BTreeSet<String>, kept: usize| async move {
        let locked = |pids: &BTreeSet<String>| {
            pids.len() == 2
                && pids.intersection(&before).count() <= kept
                && pids
                    .iter()
                    .all(|pid| codemode_executor::confine::check_worker(pid.parse().unwrap()).is_ok())
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while !locked(&worker_pids()) && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let pids = worker_pids();
        assert!(locked(&pids), "not two locked workers ready ({kept} of {before:?} kept): {pids:?}");
        pids
    };
    let first = executor.execute(Request::new("async () => 'start'")).await;
    assert_eq!(json(&first), r#"{"result":"start","logs":[]}"#);
    let ready = full(BTreeSet::new(), 0).await;
    // A worker is locked before its hello is answered and it joins the ready ones.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let seen: Arc<Mutex<Option<BTreeSet<String>>>> = Arc::default();
    let during = seen.clone();
    let outcome = executor
        .execute(
            Request::new("async () => await store.look()")
                .provider(ProviderDescriptor::new("store", ["look"]))
                .dispatch(move |_: ToolCall| {
                    *during.lock().unwrap() = Some(worker_pids());
                    async { r#"{"result":1}"#.to_owned() }
                }),
        )
        .await;
    assert_eq!(json(&outcome), r#"{"result":1,"logs":[]}"#);
    // During the run: the one running it and the one ready, no replacement starting.
    assert_eq!(seen.lock().unwrap().take(), Some(ready.clone()));
    // After it: the one that ran is gone and its replacement is ready.
    full(ready, 1).await;
}

/// Watching a run in a worker process (wire version 3): its log lines reach the host as
/// the worker writes them, in order with its calls, and the outcome's are not told twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watched_run_in_a_worker_hears_its_logs_as_they_happen() {
    use codemode_executor::Event;
    use std::sync::{Arc, Mutex};
    let _one = ONE_AT_A_TIME.lock().await;
    // Unconfined: no worker is started ahead of demand to outlive the test.
    let executor = isolated_at(Confinement::Off);
    let events = Arc::new(Mutex::new(Vec::new()));
    let (sink, heard) = (events.clone(), events.clone());
    // Whether the line before the call had reached the host's callback when the call did.
    let log_first = Arc::new(Mutex::new(None));
    let check = log_first.clone();
    let request = Request::new(
        "async () => { console.log('a'); const x = await store.find(1); console.log('b'); return x }",
    )
    .provider(ProviderDescriptor::new("store", ["find"]))
    .dispatch(move |_call: ToolCall| {
        let (heard, check) = (heard.clone(), check.clone());
        async move {
            let mut seen = false;
            for _ in 0..200 {
                if heard.lock().unwrap().iter().any(|line: &String| line == "log a") {
                    seen = true;
                    break;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            *check.lock().unwrap() = Some(seen);
            r#"{"result":7}"#.to_owned()
        }
    })
    .on_event(move |event: &Event| {
        let line = match event {
            Event::CallStarted { call, provider, tool, arguments } => {
                format!("start {call} {provider}.{tool} {arguments}")
            }
            Event::CallEnded { call, error, .. } => {
                format!("end {call} {}", error.as_deref().unwrap_or("ok"))
            }
            Event::Log { line, .. } => format!("log {line}"),
            Event::Waiting { .. } => return,
            other => format!("{other:?}"),
        };
        sink.lock().unwrap().push(line);
    });
    let outcome = executor.execute(request).await;
    assert_eq!(json(&outcome), r#"{"result":7,"logs":["a","b"]}"#);
    assert_eq!(*log_first.lock().unwrap(), Some(true), "the log line was heard before the call's answer");
    assert_eq!(*events.lock().unwrap(), ["log a", "start 1 store.find [1]", "end 1 ok", "log b"]);
}

/// The engine is named once, in the executor's config: a worker command that names
/// another is refused before any worker starts, and one that names none runs on the
/// executor's engine (the executor passes it in `CODEMODE_ENGINE`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_engine_is_named_once_and_a_worker_command_naming_another_is_refused() {
    let _one = ONE_AT_A_TIME.lock().await;
    let program = env!("CARGO_BIN_EXE_codemode");
    let before = worker_pids();
    let config = ExecutorConfig::default().workers(1).confinement(Confinement::Off);
    for args in [&["stdio", "--engine", "v8"][..], &["stdio", "--engine=v8"]] {
        let mismatched =
            ProcessExecutor::new(config.clone(), WorkerCommand::new(program, args.iter().copied()));
        let outcome = mismatched.execute(Request::new("async () => 1")).await;
        assert_eq!(outcome.kind(), OutcomeKind::Invalid, "{args:?}");
        assert_eq!(
            outcome.error_text(),
            Some(codemode_protocol::texts::WORKER_ENGINE_MISMATCH.fill(&["v8", "quickjs"]).as_str()),
            "{args:?}"
        );
    }
    assert!(worker_pids().is_subset(&before), "no worker was started for a refused run");
    let named_once = ProcessExecutor::new(config, WorkerCommand::new(program, ["stdio"]));
    let outcome = named_once.execute(Request::new("async () => 6 * 7")).await;
    assert_eq!(json(&outcome), r#"{"result":42,"logs":[]}"#);
}

/// `codemode stdio` takes its host's engine, and refuses a `--engine` that disagrees
/// with it, before its hello, saying both.
#[test]
fn a_worker_whose_engine_disagrees_with_its_hosts_refuses_to_start() {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_codemode"))
        .args(["stdio", "--engine", "quickjs"])
        .env("CODEMODE_ENGINE", "v8")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(!output.status.success());
    assert_eq!(output.stdout, b"", "no hello");
    let expected = if cfg!(feature = "v8") {
        format!("codemode: {}\n", codemode_protocol::texts::WORKER_ENGINE_MISMATCH.fill(&["quickjs", "v8"]))
    } else {
        "codemode: CODEMODE_ENGINE: this build has no V8 engine: build with `--features v8`; built in: quickjs\n".to_owned()
    };
    assert_eq!(String::from_utf8_lossy(&output.stderr), expected);
}

/// Kill every worker process of this test process, and wait until each has exited: gone,
/// or a zombie whose every thread has ended (a zombie leader with threads still exiting is
/// not yet one its parent can reap).
fn kill_workers() {
    let pids = worker_pids();
    for pid in &pids {
        let _ = std::process::Command::new("kill").args(["-9", pid]).status();
    }
    let since = Instant::now();
    for pid in &pids {
        loop {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            // The state follows the command's closing parenthesis.
            let state = stat.rsplit_once(") ").and_then(|(_, rest)| rest.chars().next());
            let threads = std::fs::read_dir(format!("/proc/{pid}/task")).map_or(0, Iterator::count);
            if matches!(state, None | Some('Z' | 'X')) && threads <= 1 {
                break;
            }
            assert!(since.elapsed() < Duration::from_secs(10), "worker {pid} did not die");
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

/// A worker process that dies mid-run ends the run with kind `lost` (not `internal`, which
/// is a bug's): a host retries by kind, never by text. A ready worker killed while it
/// waited is not handed the next run: it runs on a live one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_that_dies_mid_run_ends_it_lost() {
    let _one = ONE_AT_A_TIME.lock().await;
    let executor = isolated();
    let outcome = executor
        .execute(
            Request::new("async () => await store.x()")
                .provider(ProviderDescriptor::new("store", ["x"]))
                .dispatch(|_: ToolCall| async {
                    // The worker waits for this answer: it dies instead (and the one kept ready).
                    kill_workers();
                    tokio::time::sleep(Duration::from_secs(2)).await;
                    r#"{"result":"too late"}"#.to_owned()
                }),
        )
        .await;
    assert_eq!(outcome.kind(), OutcomeKind::Lost);
    assert_eq!(
        json(&outcome),
        format!(r#"{{"error":"{}","kind":"lost","logs":[]}}"#, codemode_protocol::texts::WORKER_PROCESS_DIED)
    );
    let next = executor.execute(Request::new("async () => 'fresh'")).await;
    assert_eq!(json(&next), r#"{"result":"fresh","logs":[]}"#);
    let waited = Instant::now();
    while worker_pids().is_empty() {
        assert!(waited.elapsed() < Duration::from_secs(10), "no worker kept ready");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    kill_workers();
    let after = executor.execute(Request::new("async () => 'alive'")).await;
    assert_eq!(json(&after), r#"{"result":"alive","logs":[]}"#);
}
