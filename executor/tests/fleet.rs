//! The remote client over a fleet: it balances over daemons, goes elsewhere when a daemon
//! refuses or fails before a call reached the host, never runs twice one that dispatched
//! a call, finds a silent daemon by its keepalive, speaks version 1 to an older daemon,
//! and follows a DNS name. A watched run hears its log lines live (version 3), and the
//! daemon sends them only to a client that asked, dropping what a slow one cannot take.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use codemode_executor::daemon::{Address, Daemon, DaemonConfig, DaemonLimits, RemoteOptions};
use codemode_executor::{ConnectError, Endpoints, Executor, ProviderDescriptor, RemoteExecutor, Request};
use codemode_protocol::ToolCall;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::oneshot;

fn temp(name: &str) -> PathBuf {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    std::env::temp_dir().join(format!("codemode-fleet-{}-{n}-{name}", std::process::id()))
}

/// A daemon in this process; its address, and a sender that starts its drain.
async fn daemon() -> (String, oneshot::Sender<()>) {
    let path = temp("sock");
    let daemon = Daemon::bind(DaemonConfig::new(Address::Unix(path))).await.unwrap();
    let address = daemon.address().to_string();
    let (drain, drained) = oneshot::channel::<()>();
    let until = async move {
        let _ = drained.await;
    };
    tokio::spawn(daemon.serve_until(Executor::default(), until, Duration::from_secs(5)));
    (address, drain)
}

/// A fake daemon on a Unix socket: `behave` gets each connection's lines and writer.
fn fake<F, Fut>(behave: F) -> String
where
    F: Fn(
            tokio::io::Lines<BufReader<tokio::net::unix::OwnedReadHalf>>,
            tokio::net::unix::OwnedWriteHalf,
        ) -> Fut
        + Send
        + Sync
        + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let path = temp("fake");
    let listener = tokio::net::UnixListener::bind(&path).unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let (read, write) = stream.into_split();
            tokio::spawn(behave(BufReader::new(read).lines(), write));
        }
    });
    format!("unix:{}", path.display())
}

async fn write_line(write: &mut tokio::net::unix::OwnedWriteHalf, line: &str) {
    let _ = write.write_all(format!("{line}\n").as_bytes()).await;
}

const HELLO_2: &str = r#"{"type":"hello","protocol":"codemode","version":2}"#;

fn store() -> ProviderDescriptor {
    ProviderDescriptor::new("store", ["find"])
}

/// A request whose one call is logged in `log` and answered after `delay`.
fn finding(log: &Arc<Mutex<Vec<String>>>, delay: Duration) -> Request {
    let log = log.clone();
    Request::new("async () => await store.find('x')").provider(store()).dispatch(move |call: ToolCall| {
        log.lock().unwrap().push(call.args_json);
        async move {
            tokio::time::sleep(delay).await;
            r#"{"result":"found"}"#.to_owned()
        }
    })
}

fn fleet_options() -> RemoteOptions {
    RemoteOptions::default().keepalive(Some(Duration::from_millis(400)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn work_spreads_over_the_fleet_by_executions_in_flight() {
    let (a, _drain_a) = daemon().await;
    let (b, _drain_b) = daemon().await;
    let (c, _drain_c) = daemon().await;
    let remote =
        RemoteExecutor::connect_fleet(Endpoints::Static(vec![a, b, c]), fleet_options()).await.unwrap();
    let log = Arc::new(Mutex::new(Vec::new()));
    let runs: Vec<_> = (0..30)
        .map(|_| {
            let (remote, request) = (remote.clone(), finding(&log, Duration::from_millis(300)));
            tokio::spawn(async move { remote.execute(request).await.to_json_string() })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(150)).await;
    let spread: Vec<usize> = remote.endpoints().iter().map(|e| e.in_flight).collect();
    assert_eq!(spread.iter().sum::<usize>(), 30);
    // Two choices keep every daemon within a few of the mean of 10.
    assert!(spread.iter().all(|n| (5..=15).contains(n)), "{spread:?}");
    for run in runs {
        assert_eq!(run.await.unwrap(), r#"{"result":"found","logs":[]}"#);
    }
    assert_eq!(log.lock().unwrap().len(), 30, "each ran once");
    assert!(remote.endpoints().iter().all(|e| e.in_flight == 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_draining_daemon_gets_no_new_work_and_a_refused_execute_runs_elsewhere() {
    let (a, drain_a) = daemon().await;
    let (b, _drain_b) = daemon().await;
    let remote =
        RemoteExecutor::connect_fleet(Endpoints::Static(vec![a.clone(), b]), fleet_options()).await.unwrap();
    let log = Arc::new(Mutex::new(Vec::new()));
    // One execution holds daemon `a` open while it drains.
    let held = {
        let remote = remote.clone();
        let request = finding(&log, Duration::from_millis(600));
        tokio::spawn(async move { remote.execute(request).await.to_json_string() })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    drain_a.send(()).unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    for _ in 0..20 {
        assert_eq!(
            remote.execute(Request::new("async () => 7")).await.to_json_string(),
            r#"{"result":7,"logs":[]}"#
        );
    }
    assert_eq!(held.await.unwrap(), r#"{"result":"found","logs":[]}"#);
    let on_a = remote.endpoints().into_iter().find(|e| e.address == a).unwrap();
    assert!(on_a.draining || !on_a.connected, "{on_a:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_before_any_call_runs_elsewhere_and_lost_after_a_call_never_runs_twice() {
    // Takes the execute, then closes without a word.
    let drops = fake(|mut lines, mut write| async move {
        lines.next_line().await.ok();
        write_line(&mut write, HELLO_2).await;
        lines.next_line().await.ok();
    });
    let (good, _drain) = daemon().await;
    let remote =
        RemoteExecutor::connect_fleet(Endpoints::Static(vec![drops, good]), fleet_options()).await.unwrap();
    let log = Arc::new(Mutex::new(Vec::new()));
    for _ in 0..10 {
        let outcome = remote.execute(finding(&log, Duration::ZERO)).await;
        assert_eq!(outcome.to_json_string(), r#"{"result":"found","logs":[]}"#);
    }
    assert_eq!(log.lock().unwrap().len(), 10, "one dispatch per execute");

    // Sends a call, then closes: the call reached the host, so the run is lost, not moved.
    let calls_then_drops = fake(|mut lines, mut write| async move {
        lines.next_line().await.ok();
        write_line(&mut write, HELLO_2).await;
        if let Ok(Some(execute)) = lines.next_line().await {
            let execution: serde_json::Value = serde_json::from_str(&execute).unwrap();
            let id = &execution["execution"];
            let call = format!(
                r#"{{"type":"call","execution":{id},"call":1,"provider":"store","tool":"find","argsJson":"[\"x\"]"}}"#
            );
            write_line(&mut write, &call).await;
            lines.next_line().await.ok();
        }
    });
    let (good, _drain) = daemon().await;
    let remote =
        RemoteExecutor::connect_fleet(Endpoints::Static(vec![calls_then_drops.clone()]), fleet_options())
            .await
            .unwrap();
    let log = Arc::new(Mutex::new(Vec::new()));
    assert_eq!(
        remote.execute(finding(&log, Duration::ZERO)).await.to_json_string(),
        r#"{"error":"The connection to the daemon closed before the run ended. The execution is lost; run it again.","kind":"lost","logs":[]}"#
    );
    assert_eq!(log.lock().unwrap().len(), 1);
    drop(good);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemon_gone_silent_is_found_by_the_keepalive() {
    // Answers the hello, then reads everything and writes nothing, never closing.
    let silent = fake(|mut lines, mut write| async move {
        lines.next_line().await.ok();
        write_line(&mut write, HELLO_2).await;
        while let Ok(Some(_)) = lines.next_line().await {}
        std::future::pending::<()>().await;
    });
    let remote =
        RemoteExecutor::connect_fleet(Endpoints::Static(vec![silent]), fleet_options()).await.unwrap();
    let started = std::time::Instant::now();
    let outcome = remote.execute(Request::new("async () => 1")).await;
    assert_eq!(
        outcome.to_json_string(),
        r#"{"error":"The connection to the daemon closed before the run ended. The execution is lost; run it again.","kind":"lost","logs":[]}"#
    );
    // A keepalive of 400 ms, checked every 200 ms: found within 600 ms, not the run's 30 s.
    assert!(started.elapsed() < Duration::from_secs(2), "{:?}", started.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_1_daemon_is_spoken_to_in_version_1() {
    // As a daemon of version 1 did: any other version is refused.
    let old = fake(|mut lines, mut write| async move {
        let Ok(Some(hello)) = lines.next_line().await else { return };
        if !hello.contains(r#""version":1"#) {
            let refusal = r#"{"type":"error","kind":"hello","message":"this server speaks codemode version 1; the client said codemode version 2"}"#;
            write_line(&mut write, refusal).await;
            return;
        }
        write_line(&mut write, r#"{"type":"hello","protocol":"codemode","version":1}"#).await;
        while let Ok(Some(line)) = lines.next_line().await {
            assert!(!line.contains(r#""type":"ping""#), "a version 1 daemon gets no ping: {line}");
            let message: serde_json::Value = serde_json::from_str(&line).unwrap();
            if message["type"] == "execute" {
                let id = &message["execution"];
                let outcome = format!(
                    r#"{{"type":"outcome","execution":{id},"outcome":{{"result":"old","logs":[]}}}}"#
                );
                write_line(&mut write, &outcome).await;
            }
        }
    });
    let remote = RemoteExecutor::connect_with(&old, fleet_options()).await.unwrap();
    for _ in 0..3 {
        assert_eq!(
            remote.execute(Request::new("async () => 1")).await.to_json_string(),
            r#"{"result":"old","logs":[]}"#
        );
    }
    // Long enough for pings, had any been sent.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        remote.execute(Request::new("async () => 1")).await.to_json_string(),
        r#"{"result":"old","logs":[]}"#
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dns_name_gives_the_fleet_and_unreachable_addresses_are_passed_over() {
    let daemon = Daemon::bind(
        DaemonConfig::new(Address::Tcp("127.0.0.1:0".to_owned())).token(Some("fleet".to_owned())),
    )
    .await
    .unwrap();
    let Address::Tcp(bound) = daemon.address().clone() else { unreachable!() };
    let port: u16 = bound.rsplit(':').next().unwrap().parse().unwrap();
    tokio::spawn(daemon.serve(Executor::default()));
    let options = fleet_options().token(Some("fleet".to_owned()));
    let dns = Endpoints::Dns { name: "localhost".to_owned(), port, every: Duration::from_millis(200) };
    let remote = RemoteExecutor::connect_fleet(dns, options).await.unwrap();
    let addresses: Vec<String> = remote.endpoints().into_iter().map(|e| e.address).collect();
    assert!(addresses.contains(&format!("tcp:127.0.0.1:{port}")), "{addresses:?}");
    for _ in 0..10 {
        assert_eq!(
            remote.execute(Request::new("async () => 2")).await.to_json_string(),
            r#"{"result":2,"logs":[]}"#
        );
    }
    let missing = RemoteExecutor::connect_fleet(
        Endpoints::Dns { name: "no-such-host.invalid".to_owned(), port, every: Duration::from_secs(1) },
        fleet_options(),
    )
    .await
    .err()
    .unwrap();
    assert!(
        matches!(&missing, ConnectError::Resolve { name, .. } if name == "no-such-host.invalid"),
        "{missing:?}"
    );
    assert!(missing.to_string().starts_with("cannot resolve no-such-host.invalid: "), "{missing}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemon_sending_calls_without_end_is_held_to_the_calls_in_flight() {
    // A hostile daemon sends 100 calls for one execution at once and never waits.
    let answers = Arc::new(Mutex::new(Vec::new()));
    let heard = answers.clone();
    let flood = fake(move |mut lines, mut write| {
        let heard = heard.clone();
        async move {
            lines.next_line().await.ok();
            write_line(&mut write, HELLO_2).await;
            let Ok(Some(execute)) = lines.next_line().await else { return };
            let execute: serde_json::Value = serde_json::from_str(&execute).unwrap();
            let id = execute["execution"].clone();
            for call in 1..=100 {
                let line = format!(
                    r#"{{"type":"call","execution":{id},"call":{call},"provider":"store","tool":"find","argsJson":"[{call}]"}}"#
                );
                write_line(&mut write, &line).await;
            }
            for _ in 0..96 {
                let Ok(Some(answer)) = lines.next_line().await else { return };
                heard.lock().unwrap().push(answer);
            }
            write_line(
                &mut write,
                &format!(r#"{{"type":"outcome","execution":{id},"outcome":{{"result":"done","logs":[]}}}}"#),
            )
            .await;
            lines.next_line().await.ok();
        }
    });
    let remote =
        RemoteExecutor::connect_fleet(Endpoints::Static(vec![flood]), fleet_options()).await.unwrap();
    let dispatched = Arc::new(AtomicUsize::new(0));
    let counted = dispatched.clone();
    let request = Request::new("async () => 1").provider(store()).max_calls_in_flight(4).dispatch(
        move |_: ToolCall| {
            counted.fetch_add(1, Ordering::SeqCst);
            // Never answers while the flood is refused.
            std::future::pending::<String>()
        },
    );
    let outcome = tokio::time::timeout(Duration::from_secs(10), remote.execute(request)).await.unwrap();
    assert_eq!(answers.lock().unwrap().len(), 96, "{:?}", answers.lock().unwrap().last());
    assert_eq!(outcome.to_json_string(), r#"{"result":"done","logs":[]}"#);
    assert_eq!(dispatched.load(Ordering::SeqCst), 4, "only the calls the bound admits reach the dispatch");
    let answers = answers.lock().unwrap();
    assert_eq!(answers.len(), 96);
    let refused =
        r#"{"error":"Too many tool calls in flight: the limit is 4. Await some before starting more."}"#;
    for (n, answer) in (5..=100).zip(answers.iter()) {
        let answer: serde_json::Value = serde_json::from_str(answer).unwrap();
        assert_eq!(
            (&answer["type"], &answer["call"], &answer["answer"]),
            (&"answer".into(), &n.into(), &refused.into())
        );
    }
}

/// Every event as a line.
fn line(event: &codemode_executor::Event) -> String {
    use codemode_executor::Event;
    match event {
        Event::CallStarted { call, provider, tool, arguments } => {
            format!("start {call} {provider}.{tool} {arguments}")
        }
        Event::CallEnded { call, error, .. } => format!("end {call} {}", error.as_deref().unwrap_or("ok")),
        Event::Log { level, line } => format!("log {level:?} {line}"),
        Event::Waiting { calls, timers } => format!("waiting calls={calls} timers={timers}"),
        other => format!("{other:?}"),
    }
}

/// Until `heard` has `wanted` (or two seconds passed): events reach the callback in the
/// task awaiting `execute`, a moment after this host read them.
async fn heard_by_then(heard: &Mutex<Vec<String>>, wanted: &str) -> bool {
    for _ in 0..200 {
        if heard.lock().unwrap().iter().any(|line| line == wanted) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    false
}

/// Watching a run on a daemon (version 3): its log lines and waits as the daemon sends
/// them, in order with its calls, and the outcome's logs not told twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watched_run_on_a_daemon_hears_its_logs_as_they_happen() {
    use codemode_executor::Event;
    let (address, _drain) = daemon().await;
    let remote =
        RemoteExecutor::connect_fleet(Endpoints::Static(vec![address]), fleet_options()).await.unwrap();
    let events = Arc::new(Mutex::new(Vec::new()));
    let (sink, heard) = (events.clone(), events.clone());
    // What the host had heard when each call reached it.
    let before_calls = Arc::new(Mutex::new(Vec::new()));
    let checks = before_calls.clone();
    let request = Request::new(
        "async () => { console.log('a'); const x = await store.find('x'); console.warn('b'); \
         return await store.find('y').catch((e) => e.message) }",
    )
    .provider(store())
    .dispatch(move |call: ToolCall| {
        let (heard, checks) = (heard.clone(), checks.clone());
        async move {
            if call.args_json == r#"["x"]"# {
                let heard = heard_by_then(&heard, "log Log a").await;
                checks.lock().unwrap().push(heard);
                r#"{"result":1}"#.to_owned()
            } else {
                let heard = heard_by_then(&heard, "log Warn [warn] b").await;
                checks.lock().unwrap().push(heard);
                r#"{"error":"no y"}"#.to_owned()
            }
        }
    })
    .on_event(move |event: &Event| sink.lock().unwrap().push(line(event)));
    let outcome = remote.execute(request).await;
    assert_eq!(outcome.to_json_string(), r#"{"result":"no y","logs":["a","[warn] b"]}"#);
    // Each line was heard before the call after it was answered, so before the outcome.
    assert_eq!(*before_calls.lock().unwrap(), [true, true]);
    let events = events.lock().unwrap();
    let (waits, rest): (Vec<_>, Vec<_>) = events.iter().partition(|line| line.starts_with("waiting"));
    assert_eq!(
        rest,
        [
            "log Log a",
            r#"start 1 store.find ["x"]"#,
            "end 1 ok",
            "log Warn [warn] b",
            r#"start 2 store.find ["y"]"#,
            "end 2 no y",
        ],
        "{events:?}"
    );
    // The run waited on each call.
    assert!(!waits.is_empty() && waits.iter().all(|line| *line == "waiting calls=1 timers=0"), "{events:?}");
}

/// A daemon of version 2 has no log message: its log lines reach the watcher with the
/// outcome, and the execute does not ask for events (it would refuse the field).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_2_daemon_tells_the_logs_with_the_outcome() {
    let old = fake(|mut lines, mut write| async move {
        let Ok(Some(_hello)) = lines.next_line().await else { return };
        write_line(&mut write, HELLO_2).await;
        while let Ok(Some(line)) = lines.next_line().await {
            let message: serde_json::Value = serde_json::from_str(&line).unwrap();
            if message["type"] == "execute" {
                assert!(message["request"].get("events").is_none(), "{line}");
                let id = &message["execution"];
                let outcome = format!(
                    r#"{{"type":"outcome","execution":{id},"outcome":{{"result":1,"logs":["a","[warn] b"]}}}}"#
                );
                write_line(&mut write, &outcome).await;
            }
        }
    });
    let remote = RemoteExecutor::connect_with(&old, fleet_options()).await.unwrap();
    let events = Arc::new(Mutex::new(Vec::new()));
    let sink = events.clone();
    let request = Request::new("async () => 1")
        .on_event(move |event: &codemode_executor::Event| sink.lock().unwrap().push(line(event)));
    assert_eq!(remote.execute(request).await.to_json_string(), r#"{"result":1,"logs":["a","[warn] b"]}"#);
    assert_eq!(*events.lock().unwrap(), ["log Log a", "log Warn [warn] b"]);
}

/// A raw client on the daemon's socket: its hello answered, then what it sends.
async fn raw_client(
    address: &str,
    version: u32,
) -> (tokio::io::Lines<BufReader<tokio::net::unix::OwnedReadHalf>>, tokio::net::unix::OwnedWriteHalf) {
    let path = address.strip_prefix("unix:").unwrap();
    let (read, mut write) = tokio::net::UnixStream::connect(path).await.unwrap().into_split();
    let mut lines = BufReader::new(read).lines();
    write_line(&mut write, &format!(r#"{{"type":"hello","protocol":"codemode","version":{version}}}"#)).await;
    let hello = lines.next_line().await.unwrap().unwrap();
    assert_eq!(hello, format!(r#"{{"type":"hello","protocol":"codemode","version":{version}}}"#));
    (lines, write)
}

/// Every message of one execution until its outcome, as the client reads them.
async fn until_outcome(
    lines: &mut tokio::io::Lines<BufReader<tokio::net::unix::OwnedReadHalf>>,
) -> Vec<String> {
    let mut seen = Vec::new();
    while let Ok(Some(line)) = lines.next_line().await {
        let outcome = line.starts_with(r#"{"type":"outcome""#);
        seen.push(line);
        if outcome {
            break;
        }
    }
    seen
}

/// Log and waiting messages go only to a client of version 3 that asked for them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_a_version_3_client_that_asks_gets_log_and_waiting_messages() {
    let (address, _drain) = daemon().await;
    let code = r#"async () => { console.log('a'); await new Promise((r) => setTimeout(r, 20)); return 1 }"#;
    for (version, events, told) in [(2, true, false), (3, false, false), (3, true, true)] {
        let (mut lines, mut write) = raw_client(&address, version).await;
        let request = serde_json::json!({ "code": code, "events": events });
        let execute = serde_json::json!({ "type": "execute", "execution": 1, "request": request });
        write_line(&mut write, &execute.to_string()).await;
        let seen = until_outcome(&mut lines).await;
        let outcome = r#"{"type":"outcome","execution":1,"outcome":{"result":1,"logs":["a"]}}"#;
        let expected = if told {
            vec![
                r#"{"type":"log","execution":1,"level":"log","line":"a"}"#,
                r#"{"type":"waiting","execution":1,"calls":0,"timers":1}"#,
                outcome,
            ]
        } else {
            vec![outcome]
        };
        assert_eq!(seen, expected, "version {version}, events {events}");
    }
}

/// A program logging without end, over a daemon whose client reads slowly: the daemon
/// drops log messages rather than hold them (at most half its queue's bound), the run
/// ends at its timeout, and the outcome still keeps every line within the log limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_logs_to_a_slow_client_is_dropped_not_held() {
    let limits = DaemonLimits::default().max_queued_bytes(64 << 10);
    let daemon = Daemon::bind_with(DaemonConfig::new(Address::Unix(temp("flood"))), limits).await.unwrap();
    let address = daemon.address().to_string();
    tokio::spawn(daemon.serve(Executor::default()));
    let (mut lines, mut write) = raw_client(&address, 3).await;
    let request = serde_json::json!({
        "code": "async () => { for (;;) console.log('x'.repeat(1000)) }",
        "events": true,
        "timeoutMs": 500,
        "maxLogBytes": 4 << 20,
    });
    let execute = serde_json::json!({ "type": "execute", "execution": 1, "request": request });
    write_line(&mut write, &execute.to_string()).await;
    // The client reads nothing while the program floods.
    tokio::time::sleep(Duration::from_millis(700)).await;
    let seen = until_outcome(&mut lines).await;
    let logs = seen.iter().filter(|line| line.starts_with(r#"{"type":"log""#)).count();
    let last: serde_json::Value = serde_json::from_str(seen.last().unwrap()).unwrap();
    let outcome = &last["outcome"];
    assert_eq!(outcome["kind"], "timeout", "{outcome}");
    let kept = outcome["logs"].as_array().unwrap().len();
    // Every kept line cost 1001 bytes of the 4 MiB; the marker line is the last.
    assert!(kept > 4000, "{kept}");
    assert!(logs <= kept, "{logs} log messages, {kept} lines kept");
    // The daemon held at most half of its 64 KiB queue of them (and the socket's buffers).
    assert!(logs < kept / 2, "{logs} log messages of {kept} lines: none dropped");
}
