//! The daemon arrangement: a daemon on a Unix socket or TCP (token, TLS), a remote client
//! with the same execute API, and the faults each a test.
mod support;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use codemode_executor::daemon::{Address, Daemon, DaemonConfig, TlsFiles};
use codemode_executor::{Executor, ExecutorConfig, RemoteExecutor, Request};
use codemode_protocol::{ProviderDescriptor, ToolCall};
use support::{Recorder, json, triple};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

fn temp(name: &str) -> PathBuf {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    std::env::temp_dir().join(format!("codemode-daemon-{}-{n}-{name}", std::process::id()))
}

fn config(listen: Address) -> DaemonConfig {
    DaemonConfig { max_frame_bytes: 1 << 20, ..DaemonConfig::new(listen) }
}

/// A daemon serving `executor` in this process; its address.
async fn start(config: DaemonConfig, executor: Executor) -> String {
    let daemon = Daemon::bind(config).await.unwrap();
    let address = daemon.address().to_string();
    tokio::spawn(daemon.serve(executor));
    address
}

fn store() -> ProviderDescriptor {
    ProviderDescriptor::new("store", ["find"])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_a_unix_socket_calls_come_back_to_the_hosts_dispatch() {
    let path = temp("sock");
    let address = start(config(Address::Unix(path.clone())), Executor::default()).await;
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600, "owner-only socket");
    let remote = RemoteExecutor::connect(&address, None).await.unwrap();
    let recorder = Recorder::default();
    let outcome = remote
        .execute(
            Request::new("async () => { console.log('remote'); const v = await store; return [typeof v, (await store.find('ada')).id] }")
                .provider(store())
                .dispatch(recorder.dispatch(|_| r#"{"result":{"id":"ada"}}"#.to_owned())),
        )
        .await;
    assert_eq!(json(&outcome), r#"{"result":["object","ada"],"logs":["remote"]}"#);
    assert_eq!(recorder.calls(), vec![triple("store", "find", r#"["ada"]"#)]);
}

#[tokio::test]
async fn tcp_requires_a_token_and_plain_tcp_stays_on_loopback() {
    let refused = Daemon::bind(config(Address::Tcp("127.0.0.1:0".into()))).await.err().unwrap();
    assert_eq!(refused, "a TCP daemon requires a token: give --token-file");
    let exposed =
        Daemon::bind(DaemonConfig { token: Some("t".into()), ..config(Address::Tcp("0.0.0.0:0".into())) })
            .await
            .err()
            .unwrap();
    assert!(
        exposed.starts_with("plain TCP is accepted only on a loopback address, and 0.0.0.0:"),
        "{exposed}"
    );
    assert!(exposed.ends_with("is not one: give --tls-cert and --tls-key"), "{exposed}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_or_missing_token_is_refused_before_any_execute() {
    let address = start(
        DaemonConfig { token: Some("s3cret".into()), ..config(Address::Tcp("127.0.0.1:0".into())) },
        Executor::default(),
    )
    .await;
    assert_eq!(
        RemoteExecutor::connect(&address, Some("guess")).await.err().unwrap(),
        "the daemon refused the connection: the hello's token is not this daemon's token"
    );
    assert_eq!(
        RemoteExecutor::connect(&address, None).await.err().unwrap(),
        "the daemon refused the connection: this daemon requires a token and the hello carried none; pass the token the daemon was started with"
    );
    let remote = RemoteExecutor::connect(&address, Some("s3cret")).await.unwrap();
    assert_eq!(json(&remote.execute(Request::new("async () => 'in'")).await), r#"{"result":"in","logs":[]}"#);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_with_a_token_verified_against_a_given_ca() {
    let certified = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
    let (cert, key) = (temp("cert.pem"), temp("key.pem"));
    std::fs::write(&cert, certified.cert.pem()).unwrap();
    std::fs::write(&key, certified.signing_key.serialize_pem()).unwrap();
    let address = start(
        DaemonConfig {
            token: Some("t0ken".into()),
            tls: Some(TlsFiles { cert: cert.clone(), key }),
            ..config(Address::Tcp("0.0.0.0:0".into()))
        },
        Executor::default(),
    )
    .await;
    let port = address.rsplit(':').next().unwrap();
    let address = format!("tcp:127.0.0.1:{port}");
    let remote = RemoteExecutor::connect_tls(&address, Some("t0ken"), &cert, "localhost").await.unwrap();
    assert_eq!(
        json(&remote.execute(Request::new("async () => 'secure'")).await),
        r#"{"result":"secure","logs":[]}"#
    );
    let other = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
    let wrong_ca = temp("other.pem");
    std::fs::write(&wrong_ca, other.cert.pem()).unwrap();
    let refused =
        RemoteExecutor::connect_tls(&address, Some("t0ken"), &wrong_ca, "localhost").await.err().unwrap();
    assert!(refused.starts_with("TLS with 127.0.0.1:"), "{refused}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_concurrent_executions_over_one_connection_and_a_slow_one_delays_none() {
    let address = start(config(Address::Unix(temp("sock"))), Executor::default()).await;
    let remote = RemoteExecutor::connect(&address, None).await.unwrap();
    let slow = {
        let remote = remote.clone();
        tokio::spawn(async move {
            remote
                .execute(Request::new("async () => store.find('slow')").provider(store()).dispatch(
                    |_: ToolCall| async {
                        tokio::time::sleep(Duration::from_secs(3)).await;
                        r#"{"result":"slow"}"#.to_owned()
                    },
                ))
                .await
        })
    };
    let started = Instant::now();
    let runs: Vec<_> = (0..200)
        .map(|n| {
            let remote = remote.clone();
            tokio::spawn(async move {
                let dispatch = move |call: ToolCall| async move { format!(r#"{{"result":{}}}"#, call.args_json) };
                let code = format!("async () => {{ const a = await store.find({n}); const b = await store.find({n} + 1); return a[0] + b[0] }}");
                let outcome = remote.execute(Request::new(code).provider(store()).dispatch(dispatch)).await;
                assert_eq!(json(&outcome), format!(r#"{{"result":{},"logs":[]}}"#, 2 * n + 1));
            })
        })
        .collect();
    for run in runs {
        run.await.unwrap();
    }
    assert!(started.elapsed() < Duration::from_secs(2), "the 200 runs took {:?}", started.elapsed());
    assert!(!slow.is_finished(), "the slow one is still waiting on its dispatch");
    assert_eq!(json(&slow.await.unwrap()), r#"{"result":"slow","logs":[]}"#);
}

/// A raw connection speaking the protocol by hand.
struct Raw {
    lines: tokio::io::Lines<BufReader<tokio::net::unix::OwnedReadHalf>>,
    write: tokio::net::unix::OwnedWriteHalf,
}

impl Raw {
    async fn connect(path: &std::path::Path) -> Raw {
        let stream = tokio::net::UnixStream::connect(path).await.unwrap();
        let (read, write) = stream.into_split();
        Raw { lines: BufReader::new(read).lines(), write }
    }

    async fn send(&mut self, line: &str) {
        self.write.write_all(format!("{line}\n").as_bytes()).await.unwrap();
    }

    async fn next(&mut self) -> Option<String> {
        tokio::time::timeout(Duration::from_secs(5), self.lines.next_line()).await.unwrap().unwrap()
    }
}

const HELLO: &str = r#"{"type":"hello","protocol":"codemode","version":1}"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_that_disconnects_mid_call_leaves_no_engine_behind() {
    let executor = Executor::new(ExecutorConfig { workers: 1, ..Default::default() });
    let path = temp("sock");
    start(config(Address::Unix(path.clone())), executor.clone()).await;
    let mut raw = Raw::connect(&path).await;
    raw.send(HELLO).await;
    assert_eq!(raw.next().await.unwrap(), r#"{"type":"hello","protocol":"codemode","version":1}"#);
    raw.send(r#"{"type":"execute","execution":1,"request":{"code":"async () => store.find(1)","providers":[{"name":"store","tools":["find"]}],"dispatch":true}}"#).await;
    assert_eq!(
        raw.next().await.unwrap(),
        r#"{"type":"call","execution":1,"call":1,"provider":"store","tool":"find","argsJson":"[1]"}"#
    );
    assert_eq!(executor.live_engines(), 1);
    drop(raw);
    let gone = Instant::now();
    while executor.live_engines() > 0 {
        assert!(gone.elapsed() < Duration::from_secs(2), "the engine outlived its connection");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_and_oversized_frames_close_only_their_connection() {
    let path = temp("sock");
    start(DaemonConfig { max_frame_bytes: 1024, ..config(Address::Unix(path.clone())) }, Executor::default())
        .await;
    let mut bad = Raw::connect(&path).await;
    bad.send(HELLO).await;
    bad.next().await;
    bad.send("{not json").await;
    let error = bad.next().await.unwrap();
    assert!(error.starts_with(r#"{"type":"error","kind":"malformedFrame","message":"a frame is not a message of this protocol: "#), "{error}");
    assert_eq!(bad.next().await, None, "the connection is closed after the error frame");

    let mut big = Raw::connect(&path).await;
    big.send(HELLO).await;
    big.next().await;
    big.send(&format!(r#"{{"type":"execute","execution":1,"request":{{"code":"{}"}}}}"#, "x".repeat(2000)))
        .await;
    assert_eq!(
        big.next().await.unwrap(),
        r#"{"type":"error","kind":"frameTooLarge","message":"a frame is longer than the maximum of 1024 bytes"}"#
    );

    let mut good = Raw::connect(&path).await;
    good.send(HELLO).await;
    good.next().await;
    // An answer for an execution or call that does not exist has no effect.
    good.send(r#"{"type":"answer","execution":99,"call":1,"answer":"{}"}"#).await;
    good.send(r#"{"type":"execute","execution":1,"request":{"code":"async () => 'still here'"}}"#).await;
    assert_eq!(
        good.next().await.unwrap(),
        r#"{"type":"outcome","execution":1,"outcome":{"result":"still here","logs":[]}}"#
    );
}

/// The kinds this layer gives: an execute beyond the bound is `invalid`, a cancelled one
/// `internal`; the executor's kinds pass through (a thrown timeout text stays `thrown`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outcomes_cross_with_their_kind() {
    let path = temp("sock");
    start(DaemonConfig { max_executions: 1, ..config(Address::Unix(path.clone())) }, Executor::default())
        .await;
    let mut raw = Raw::connect(&path).await;
    raw.send(HELLO).await;
    raw.next().await;
    raw.send(r#"{"type":"execute","execution":1,"request":{"code":"async () => { await new Promise(() => {}) }"}}"#)
        .await;
    raw.send(r#"{"type":"execute","execution":2,"request":{"code":"async () => 1"}}"#).await;
    assert_eq!(
        raw.next().await.unwrap(),
        r#"{"type":"outcome","execution":2,"outcome":{"error":"The daemon is running its maximum of 1 executions on this connection. Wait for one to end, or open another connection.","kind":"invalid","logs":[]}}"#
    );
    raw.send(r#"{"type":"cancel","execution":1}"#).await;
    assert_eq!(
        raw.next().await.unwrap(),
        r#"{"type":"outcome","execution":1,"outcome":{"error":"Execution was cancelled by the host.","kind":"internal","logs":[]}}"#
    );
    raw.send(r#"{"type":"execute","execution":3,"request":{"code":"async () => { throw 'Execution timed out after 30000 ms.' }"}}"#)
        .await;
    assert_eq!(
        raw.next().await.unwrap(),
        r#"{"type":"outcome","execution":3,"outcome":{"error":"Execution timed out after 30000 ms.","kind":"thrown","logs":[]}}"#
    );
    raw.send(r#"{"type":"execute","execution":4,"request":{"code":"async () => { await new Promise(() => {}) }","timeoutMs":100}}"#)
        .await;
    assert_eq!(
        raw.next().await.unwrap(),
        r#"{"type":"outcome","execution":4,"outcome":{"error":"Execution timed out after 100 ms.","kind":"timeout","logs":[]}}"#
    );
}

/// A result nested far past serde_json's recursion limit crosses the daemon both ways.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deep_result_crosses_the_daemon() {
    let address = start(config(Address::Unix(temp("sock"))), Executor::default()).await;
    let remote = RemoteExecutor::connect(&address, None).await.unwrap();
    let code = "async () => { let v = 1; for (let i = 0; i < 1000; i++) v = [v]; return v }";
    let outcome = remote.execute(Request::new(code)).await;
    let deep = format!("{}1{}", "[".repeat(1000), "]".repeat(1000));
    assert_eq!(json(&outcome), format!(r#"{{"result":{deep},"logs":[]}}"#));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn when_the_daemon_dies_every_pending_execute_resolves_with_a_clear_error() {
    let path = temp("sock");
    let mut daemon = tokio::process::Command::new(env!("CARGO_BIN_EXE_codemode"))
        .args(["serve", "--listen", &format!("unix:{}", path.display())])
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let ready = Instant::now();
    while !path.exists() {
        assert!(ready.elapsed() < Duration::from_secs(10), "the daemon did not start");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let remote = RemoteExecutor::connect(&format!("unix:{}", path.display()), None).await.unwrap();
    let pending: Vec<_> = (0..3)
        .map(|_| {
            let remote = remote.clone();
            tokio::spawn(async move { remote.execute(Request::new("async () => { while (true) {} }")).await })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(200)).await;
    daemon.kill().await.unwrap();
    let killed = Instant::now();
    for run in pending {
        let outcome = run.await.unwrap();
        assert_eq!(outcome.kind(), codemode_protocol::OutcomeKind::Internal);
        assert_eq!(
            outcome.error_text(),
            Some(
                "The connection to the daemon closed before the run ended. The execution is lost; run it again."
            )
        );
    }
    assert!(killed.elapsed() < Duration::from_secs(1), "took {:?}", killed.elapsed());
    let after = remote.execute(Request::new("async () => 1")).await;
    assert_eq!(after.error_text(), Some(codemode_protocol::texts::DAEMON_CONNECTION_LOST));
    assert_eq!(after.kind(), codemode_protocol::OutcomeKind::Internal);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fetch_travels_back_to_the_hosts_outbound_handler() {
    let address = start(config(Address::Unix(temp("sock"))), Executor::default()).await;
    let remote = RemoteExecutor::connect(&address, None).await.unwrap();
    let outbound = |request: codemode_executor::OutboundRequest| async move {
        if request.url == "https://api.example.com/price" {
            Ok(codemode_executor::OutboundResponse {
                status: 200,
                headers: vec![],
                body: br#"{"price":42}"#.to_vec(),
            })
        } else {
            Err(format!("{} is not allowed", request.url))
        }
    };
    let outcome = remote
        .execute(
            Request::new(
                "async () => { const price = (await (await fetch('https://api.example.com/price')).json()).price; try { await fetch('https://x.example/') } catch (e) { return [price, e.message] } }",
            )
            .outbound(outbound),
        )
        .await;
    assert_eq!(json(&outcome), r#"{"result":[42,"https://x.example/ is not allowed"],"logs":[]}"#);
    let closed = remote
        .execute(Request::new(
            "async () => { try { await fetch('https://x.example/') } catch (e) { return e.message } }",
        ))
        .await;
    assert_eq!(
        json(&closed),
        r#"{"result":"Network access is closed for this execution: fetch is refused. Reach data through the declared providers.","logs":[]}"#
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_a_remote_execute_cancels_it_on_the_daemon() {
    let executor = Executor::new(ExecutorConfig { workers: 1, ..Default::default() });
    let address = start(config(Address::Unix(temp("sock"))), executor.clone()).await;
    let remote = RemoteExecutor::connect(&address, None).await.unwrap();
    let busy =
        remote.execute(Request::new("async () => { while (true) {} }").timeout(Duration::from_secs(60)));
    assert!(tokio::time::timeout(Duration::from_millis(300), busy).await.is_err());
    let dropped = Instant::now();
    while executor.live_engines() > 0 {
        assert!(dropped.elapsed() < Duration::from_secs(2), "the daemon kept the cancelled engine");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        json(&remote.execute(Request::new("async () => 'next'")).await),
        r#"{"result":"next","logs":[]}"#
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemon_retains_an_engine_until_the_host_releases_it() {
    let executor = Executor::new(ExecutorConfig { workers: 1, ..Default::default() });
    let address = start(config(Address::Unix(temp("sock"))), executor.clone()).await;
    let remote = RemoteExecutor::connect(&address, None).await.unwrap();
    let recorder = Recorder::default();
    let (outcome, retained) = remote
        .execute_retained(
            Request::new(
                "async () => { setInterval(() => store.find('late').catch(() => {}), 10); return 'kept' }",
            )
            .provider(store())
            .dispatch(recorder.dispatch(|_| "{}".to_owned())),
        )
        .await;
    assert_eq!(json(&outcome), r#"{"result":"kept","logs":[]}"#);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(executor.live_engines(), 1, "the daemon keeps the engine");
    assert_eq!(recorder.calls(), vec![], "its late calls never reach the host");
    retained.release();
    let released = Instant::now();
    while executor.live_engines() > 0 {
        assert!(released.elapsed() < Duration::from_secs(2), "release did not reach the daemon");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
