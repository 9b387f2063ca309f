//! The daemon arrangement: a daemon on a Unix socket or TCP (token, TLS), a remote client
//! with the same execute API, and the faults each a test.
#[path = "../../tests/support/mod.rs"]
mod support;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use codemode_executor::daemon::{
    Address, BindError, Daemon, DaemonConfig, DaemonLimits, RemoteOptions, TlsFiles,
};
use codemode_executor::{ConnectError, Executor, ExecutorConfig, RemoteExecutor, Request};
use codemode_protocol::wire::ProtocolErrorKind;
use codemode_protocol::{OutcomeKind, ProviderDescriptor, ToolCall};
use support::{Recorder, json, triple};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

fn temp(name: &str) -> PathBuf {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    std::env::temp_dir().join(format!("codemode-daemon-{}-{n}-{name}", std::process::id()))
}

fn config(listen: Address) -> DaemonConfig {
    DaemonConfig::new(listen).max_frame_bytes(1 << 20)
}

/// A daemon serving `executor` in this process; its address.
async fn start(config: DaemonConfig, executor: Executor) -> String {
    start_with(config, DaemonLimits::default(), executor).await
}

/// A daemon with `limits` serving `executor` in this process; its address.
async fn start_with(config: DaemonConfig, limits: DaemonLimits, executor: Executor) -> String {
    let daemon = Daemon::bind_with(config, limits).await.unwrap();
    let address = daemon.address().to_string();
    tokio::spawn(daemon.serve(executor));
    address
}

/// A `codemode serve` child process on the Unix socket `path`, its stderr collected.
struct ChildDaemon {
    child: tokio::process::Child,
    log: Arc<Mutex<String>>,
}

impl ChildDaemon {
    /// Its resident memory, from `/proc/<pid>/status`.
    fn rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id().unwrap())).unwrap();
        let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
        line.split_whitespace().nth(1).unwrap().parse().unwrap()
    }
}

async fn spawn_daemon(path: &Path, flags: &[&str]) -> ChildDaemon {
    spawn_daemon_limited(None, path, flags).await
}

/// As [`spawn_daemon`], with its limit on open files lowered to `fd_limit` by the shell
/// that then becomes the daemon.
async fn spawn_daemon_limited(fd_limit: Option<u32>, path: &Path, flags: &[&str]) -> ChildDaemon {
    let program = env!("CARGO_BIN_EXE_codemode");
    let mut command = match fd_limit {
        None => tokio::process::Command::new(program),
        Some(limit) => {
            let mut shell = tokio::process::Command::new("sh");
            shell.arg("-c").arg(format!("ulimit -n {limit} && exec \"$0\" \"$@\"")).arg(program);
            shell
        }
    };
    let mut child = command
        .args(["serve", "--listen", &format!("unix:{}", path.display())])
        .args(flags)
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let log = Arc::new(Mutex::new(String::new()));
    let mut stderr = BufReader::new(child.stderr.take().unwrap()).lines();
    let collected = log.clone();
    tokio::spawn(async move {
        while let Ok(Some(line)) = stderr.next_line().await {
            let mut log = collected.lock().unwrap();
            log.push_str(&line);
            log.push('\n');
        }
    });
    // A socket left by an earlier daemon refuses until this one's is renamed into place.
    let ready = Instant::now();
    while tokio::net::UnixStream::connect(path).await.is_err() {
        assert!(ready.elapsed() < Duration::from_secs(10), "the daemon did not start");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    ChildDaemon { child, log }
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
    assert!(matches!(refused, BindError::TokenRequired), "{refused:?}");
    assert_eq!(refused.to_string(), "a TCP daemon requires a token: give --token-file");
    let exposed =
        Daemon::bind(config(Address::Tcp("0.0.0.0:0".into())).token(Some("t".into()))).await.err().unwrap();
    assert!(matches!(exposed, BindError::PlainTcpNotLoopback { .. }), "{exposed:?}");
    let exposed = exposed.to_string();
    assert!(
        exposed.starts_with("plain TCP is accepted only on a loopback address, and 0.0.0.0:"),
        "{exposed}"
    );
    assert!(exposed.ends_with("is not one: give --tls-cert and --tls-key"), "{exposed}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_or_missing_token_is_refused_before_any_execute() {
    let address =
        start(config(Address::Tcp("127.0.0.1:0".into())).token(Some("s3cret".into())), Executor::default())
            .await;
    let wrong = RemoteExecutor::connect(&address, Some("guess")).await.err().unwrap();
    assert!(
        matches!(&wrong, ConnectError::Refused { kind: ProtocolErrorKind::Unauthorized, .. }),
        "{wrong:?}"
    );
    assert_eq!(
        wrong.to_string(),
        "the daemon refused the connection: the hello's token is not this daemon's token"
    );
    assert_eq!(
        RemoteExecutor::connect(&address, None).await.err().unwrap().to_string(),
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
        config(Address::Tcp("0.0.0.0:0".into()))
            .token(Some("t0ken".into()))
            .tls(Some(TlsFiles::new(cert.clone(), key))),
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
    assert!(matches!(refused, ConnectError::Unreachable(_)), "{refused:?}");
    assert!(refused.to_string().starts_with("TLS with 127.0.0.1:"), "{refused}");
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

    /// Whether the daemon closed the connection: the end of the stream, or a reset where
    /// it closed with bytes of ours unread.
    async fn is_closed(&mut self) -> bool {
        match tokio::time::timeout(Duration::from_secs(5), self.lines.next_line()).await.unwrap() {
            Ok(None) => true,
            Ok(Some(_)) => false,
            Err(e) => e.kind() == std::io::ErrorKind::ConnectionReset,
        }
    }
}

const HELLO: &str = r#"{"type":"hello","protocol":"codemode","version":1}"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_that_disconnects_mid_call_leaves_no_engine_behind() {
    let executor = Executor::new(ExecutorConfig::default().workers(1));
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

/// Frames that arrive together while executions wait awake for their answers (the
/// longest spin, so the waiting thread likely reads them itself: `wire::lend`) are each
/// handled once and in order, whoever reads them: answers out of order, for another
/// execution, one twice, with a ping between them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frames_arriving_while_executions_wait_awake_are_each_handled_once() {
    let executor = Executor::new(ExecutorConfig::default().answer_spin(Duration::from_millis(1)));
    let path = temp("sock");
    start(config(Address::Unix(path.clone())), executor).await;
    let mut raw = Raw::connect(&path).await;
    raw.send(r#"{"type":"hello","protocol":"codemode","version":2}"#).await;
    assert_eq!(raw.next().await.unwrap(), r#"{"type":"hello","protocol":"codemode","version":2}"#);
    const STORE: &str = r#""providers":[{"name":"store","tools":["find"]}],"dispatch":true"#;
    for round in 0..20 {
        let (one, two) = (2 * round + 1, 2 * round + 2);
        raw.send(&format!(
            r#"{{"type":"execute","execution":{one},"request":{{"code":"async () => Promise.all([store.find(1), store.find(2)])",{STORE}}}}}"#
        ))
        .await;
        raw.send(&format!(r#"{{"type":"execute","execution":{two},"request":{{"code":"async () => store.find(3)",{STORE}}}}}"#))
            .await;
        let mut calls = vec![raw.next().await.unwrap(), raw.next().await.unwrap(), raw.next().await.unwrap()];
        calls.sort();
        let mut expected = vec![
            format!(
                r#"{{"type":"call","execution":{one},"call":1,"provider":"store","tool":"find","argsJson":"[1]"}}"#
            ),
            format!(
                r#"{{"type":"call","execution":{one},"call":2,"provider":"store","tool":"find","argsJson":"[2]"}}"#
            ),
            format!(
                r#"{{"type":"call","execution":{two},"call":1,"provider":"store","tool":"find","argsJson":"[3]"}}"#
            ),
        ];
        expected.sort();
        assert_eq!(calls, expected);
        let answer = |execution: u64, call: u64, value: &str| {
            format!(
                r#"{{"type":"answer","execution":{execution},"call":{call},"answer":"{{\"result\":\"{value}\"}}"}}"#
            )
        };
        let together = [
            answer(one, 2, "b"),
            format!(r#"{{"type":"ping","id":{round}}}"#),
            answer(two, 1, "c"),
            answer(one, 2, "again"),
            answer(one, 1, "a"),
        ]
        .join("\n");
        raw.send(&together).await;
        let mut heard = vec![raw.next().await.unwrap(), raw.next().await.unwrap(), raw.next().await.unwrap()];
        heard.sort();
        let mut expected = vec![
            format!(r#"{{"type":"pong","id":{round}}}"#),
            format!(r#"{{"type":"outcome","execution":{one},"outcome":{{"result":["a","b"],"logs":[]}}}}"#),
            format!(r#"{{"type":"outcome","execution":{two},"outcome":{{"result":"c","logs":[]}}}}"#),
        ];
        expected.sort();
        assert_eq!(heard, expected, "round {round}");
    }
    // Nothing more came: the next frame is the pong of a last ping.
    raw.send(r#"{"type":"ping","id":1000}"#).await;
    assert_eq!(raw.next().await.unwrap(), r#"{"type":"pong","id":1000}"#);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_and_oversized_frames_close_only_their_connection() {
    let path = temp("sock");
    start(config(Address::Unix(path.clone())).max_frame_bytes(1024), Executor::default()).await;
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
    start(config(Address::Unix(path.clone())).max_executions(1), Executor::default()).await;
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
    let mut daemon = spawn_daemon(&path, &[]).await.child;
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
        assert_eq!(outcome.kind(), codemode_protocol::OutcomeKind::Lost);
        assert_eq!(
            outcome.error_text(),
            Some(
                "The connection to the daemon closed before the run ended. The execution is lost; run it again."
            )
        );
    }
    assert!(killed.elapsed() < Duration::from_secs(1), "took {:?}", killed.elapsed());
    // The next execute connects again: while the daemon is down it did not run.
    let after = remote.execute(Request::new("async () => 1")).await;
    assert_eq!(
        json(&after),
        format!(
            r#"{{"error":"The daemon cannot be reached (cannot connect to {}: Connection refused (os error 111)). The execution did not run; run it again.","kind":"lost","logs":[]}}"#,
            path.display()
        )
    );
    // A new daemon at the same address: the same RemoteExecutor is served by it.
    let _daemon = spawn_daemon(&path, &[]).await;
    assert_eq!(
        json(&remote.execute(Request::new("async () => 'back'")).await),
        r#"{"result":"back","logs":[]}"#
    );
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
    let executor = Executor::new(ExecutorConfig::default().workers(1));
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
    let executor = Executor::new(ExecutorConfig::default().workers(1));
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

// ---- Bounds: nothing a client does stops the daemon or grows it without limit ----

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn out_of_file_descriptors_the_daemon_backs_off_and_serves_again() {
    let path = temp("sock");
    let mut daemon = spawn_daemon_limited(Some(64), &path, &[]).await;
    // More connections than the daemon has descriptors: its accepts fail with EMFILE.
    let mut held = Vec::new();
    for _ in 0..100 {
        held.push(tokio::net::UnixStream::connect(&path).await.unwrap());
    }
    let waited = Instant::now();
    let failed = " WARN accept failed error=Too many open files (os error 24) retry_ms=";
    while !daemon.log.lock().unwrap().contains(failed) {
        assert!(
            waited.elapsed() < Duration::from_secs(5),
            "no failed accept: {}",
            daemon.log.lock().unwrap()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(daemon.child.try_wait().unwrap().is_none(), "the daemon exited: {}", daemon.log.lock().unwrap());
    // The held connections close, their descriptors come back, and a good client is served.
    drop(held);
    let remote = RemoteExecutor::connect(&format!("unix:{}", path.display()), None).await.unwrap();
    assert_eq!(
        json(&remote.execute(Request::new("async () => 'served'")).await),
        r#"{"result":"served","logs":[]}"#
    );
    assert!(daemon.child.try_wait().unwrap().is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_its_maximum_of_connections_a_connection_is_refused_at_once() {
    let path = temp("sock");
    let limits = DaemonLimits::default().max_connections(2);
    let address = start_with(config(Address::Unix(path.clone())), limits, Executor::default()).await;
    let mut first = Raw::connect(&path).await;
    first.send(HELLO).await;
    assert_eq!(first.next().await.unwrap(), HELLO);
    let mut second = Raw::connect(&path).await;
    second.send(HELLO).await;
    assert_eq!(second.next().await.unwrap(), HELLO);
    let mut third = Raw::connect(&path).await;
    assert_eq!(
        third.next().await.unwrap(),
        r#"{"type":"error","kind":"tooManyConnections","message":"The daemon is serving its maximum of 2 connections. Close one, or try again later."}"#
    );
    assert_eq!(third.next().await, None, "closed at once");
    let full = RemoteExecutor::connect(&address, None).await.err().unwrap();
    assert!(
        matches!(&full, ConnectError::Refused { kind: ProtocolErrorKind::TooManyConnections, .. }),
        "{full:?}"
    );
    assert_eq!(
        full.to_string(),
        "the daemon refused the connection: The daemon is serving its maximum of 2 connections. Close one, or try again later."
    );
    // One leaves: its place is free once the daemon has seen it go.
    drop(first);
    let left = Instant::now();
    let remote = loop {
        match RemoteExecutor::connect(&address, None).await {
            Ok(remote) => break remote,
            Err(problem) => assert!(left.elapsed() < Duration::from_secs(2), "{problem}"),
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(json(&remote.execute(Request::new("async () => 'in'")).await), r#"{"result":"in","logs":[]}"#);
    second.send(r#"{"type":"execute","execution":1,"request":{"code":"async () => 'still'"}}"#).await;
    assert_eq!(
        second.next().await.unwrap(),
        r#"{"type":"outcome","execution":1,"outcome":{"result":"still","logs":[]}}"#
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn before_its_hello_a_connection_may_send_only_a_small_hello_and_soon() {
    let path = temp("sock");
    let limits = DaemonLimits::default().hello_timeout(Duration::from_millis(300));
    start_with(config(Address::Unix(path.clone())), limits, Executor::default()).await;
    let late = r#"{"type":"error","kind":"hello","message":"No hello arrived within 300 ms of connecting. Send the hello first, at once."}"#;

    // Silent: closed at the deadline.
    let mut silent = Raw::connect(&path).await;
    let opened = Instant::now();
    assert_eq!(silent.next().await.unwrap(), late);
    assert_eq!(silent.next().await, None);
    let took = opened.elapsed();
    assert!(took >= Duration::from_millis(290) && took < Duration::from_secs(2), "closed after {took:?}");

    // A byte every 50 ms: the deadline is for the whole hello, not for each read.
    let mut trickling = Raw::connect(&path).await;
    let opened = Instant::now();
    for byte in HELLO.bytes() {
        if trickling.write.write_all(&[byte]).await.is_err() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(trickling.next().await.unwrap(), late);
    assert!(trickling.is_closed().await);
    assert!(opened.elapsed() < Duration::from_secs(2), "closed after {:?}", opened.elapsed());

    // A mebibyte with no newline: refused after the first 4 KiB, never held whole.
    let mut streaming = Raw::connect(&path).await;
    let _ = streaming.write.write_all(&vec![b'x'; 1 << 20]).await;
    assert_eq!(
        streaming.next().await.unwrap(),
        r#"{"type":"error","kind":"frameTooLarge","message":"The hello is longer than the maximum of 4096 bytes a connection may send before it is authenticated."}"#
    );
    assert!(streaming.is_closed().await);

    // A hello that is in time and small is served.
    let mut good = Raw::connect(&path).await;
    good.send(HELLO).await;
    assert_eq!(good.next().await.unwrap(), HELLO);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_handshake_counts_against_the_hellos_deadline() {
    let certified = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
    let (cert, key) = (temp("cert.pem"), temp("key.pem"));
    std::fs::write(&cert, certified.cert.pem()).unwrap();
    std::fs::write(&key, certified.signing_key.serialize_pem()).unwrap();
    let config = config(Address::Tcp("127.0.0.1:0".into()))
        .token(Some("t0ken".into()))
        .tls(Some(TlsFiles::new(cert.clone(), key)));
    let limits = DaemonLimits::default().hello_timeout(Duration::from_millis(300));
    let address = start_with(config, limits, Executor::default()).await;
    let mut silent = tokio::net::TcpStream::connect(address.strip_prefix("tcp:").unwrap()).await.unwrap();
    let opened = Instant::now();
    let mut byte = [0u8; 1];
    let read =
        tokio::time::timeout(Duration::from_secs(5), tokio::io::AsyncReadExt::read(&mut silent, &mut byte));
    assert!(matches!(read.await.unwrap(), Ok(0) | Err(_)), "closed without a handshake");
    let took = opened.elapsed();
    assert!(took >= Duration::from_millis(290) && took < Duration::from_secs(2), "closed after {took:?}");
    let remote = RemoteExecutor::connect_tls(&address, Some("t0ken"), &cert, "localhost").await.unwrap();
    assert_eq!(
        json(&remote.execute(Request::new("async () => 'tls'")).await),
        r#"{"result":"tls","logs":[]}"#
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_connection_is_closed_and_one_with_a_live_execution_is_not() {
    let path = temp("sock");
    let limits = DaemonLimits::default().idle_timeout(Duration::from_millis(300));
    let address = start_with(config(Address::Unix(path.clone())), limits, Executor::default()).await;
    let idle = r#"{"type":"error","kind":"idle","message":"The connection was idle for 300 ms (no message either way and no execution live), so the daemon closed it. Connect again to run more."}"#;

    let mut raw = Raw::connect(&path).await;
    raw.send(HELLO).await;
    raw.next().await;
    raw.send(r#"{"type":"execute","execution":1,"request":{"code":"async () => { await new Promise(r => setTimeout(r, 700)); return 'slow' }"}}"#).await;
    assert_eq!(
        raw.next().await.unwrap(),
        r#"{"type":"outcome","execution":1,"outcome":{"result":"slow","logs":[]}}"#,
        "a run longer than the idle time keeps its connection"
    );
    let quiet = Instant::now();
    assert_eq!(raw.next().await.unwrap(), idle);
    assert_eq!(raw.next().await, None);
    assert!(quiet.elapsed() >= Duration::from_millis(250), "closed after {:?}", quiet.elapsed());

    // Bytes trickling in that never make a message are no message.
    let mut trickling = Raw::connect(&path).await;
    trickling.send(HELLO).await;
    trickling.next().await;
    for byte in r#"{"type":"execute","execution":1,"request":{"code":"1"}}"#.bytes() {
        if trickling.write.write_all(&[byte]).await.is_err() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(trickling.next().await.unwrap(), idle);

    // A remote client whose connection the daemon closed as idle connects again.
    let remote = RemoteExecutor::connect(&address, None).await.unwrap();
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(
        json(&remote.execute(Request::new("async () => 'again'")).await),
        r#"{"result":"again","logs":[]}"#
    );
}

/// About a mebibyte of logs.
const LOGS_A_MEBIBYTE: &str =
    "async () => { for (let i = 0; i < 1000; i++) console.log('x'.repeat(1000)); return 1 }";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_does_not_read_slows_only_itself_and_its_memory_goes_with_it() {
    let path = temp("sock");
    let daemon = spawn_daemon(&path, &["--max-executions", "8"]).await;
    let address = format!("unix:{}", path.display());
    // Warm: as many runs at once as the client that does not read can have, read.
    let remote = RemoteExecutor::connect(&address, None).await.unwrap();
    let warm: Vec<_> = (0..8)
        .map(|_| {
            let remote = remote.clone();
            tokio::spawn(async move { remote.execute(Request::new(LOGS_A_MEBIBYTE)).await })
        })
        .collect();
    for run in warm {
        assert_eq!(run.await.unwrap().kind(), OutcomeKind::Returned);
    }
    let before = daemon.rss_kib();

    // An execute every millisecond, each 4 KB long so the socket's buffers hold few,
    // reading nothing, until the daemon stops reading them.
    let mut silent = Raw::connect(&path).await;
    silent.send(HELLO).await;
    let mut sent = 0;
    let padding = " ".repeat(4000);
    let sending = Instant::now();
    loop {
        assert!(
            sending.elapsed() < Duration::from_secs(10),
            "the daemon kept reading a client that reads nothing ({sent} executes)"
        );
        let line = format!(
            "{{\"type\":\"execute\",\"execution\":{},\"request\":{{\"code\":\"{LOGS_A_MEBIBYTE}{padding}\"}}}}\n",
            sent + 1
        );
        match tokio::time::timeout(Duration::from_millis(500), silent.write.write_all(line.as_bytes())).await
        {
            Ok(written) => written.unwrap(),
            Err(_) => break,
        }
        sent += 1;
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let started = || daemon.log.lock().unwrap().matches("execution started connection=3 ").count();
    let paused = started();
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(started(), paused, "the daemon started more of its executions after it stopped reading");
    let stalled = daemon.rss_kib();
    assert!(
        stalled < before + 64 * 1024,
        "the daemon grew from {before} KiB to {stalled} KiB for a client that reads nothing ({sent} executes sent, {paused} started)"
    );
    // Others are served meanwhile.
    assert_eq!(
        json(&remote.execute(Request::new("async () => 'meanwhile'")).await),
        r#"{"result":"meanwhile","logs":[]}"#
    );
    // It leaves: what the daemon held for it goes.
    drop(silent);
    let left = Instant::now();
    while !daemon.log.lock().unwrap().contains(r#"INFO connection{id=3 peer="unix"}: connection closed"#) {
        assert!(left.elapsed() < Duration::from_secs(3), "the daemon did not see the client go");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The daemon gives freed memory back within a second of a connection's close.
    while daemon.rss_kib() > before + 4 * 1024 {
        assert!(
            left.elapsed() < Duration::from_secs(3),
            "the daemon kept {} KiB over {before} KiB after the client left",
            daemon.rss_kib() - before
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        json(&remote.execute(Request::new("async () => 'after'")).await),
        r#"{"result":"after","logs":[]}"#
    );
}

const OUTCOME_TOO_LARGE_1MIB: &str = "The outcome (result, error text and logs together) is over the limit of 1048576 bytes for one message on the connection. Return less and log less, or split the work over several runs; the first logs that fit are kept.";

/// A run that waits on its call for a while, and how it ends.
fn slow_run(remote: &RemoteExecutor) -> tokio::task::JoinHandle<codemode_executor::Outcome> {
    let remote = remote.clone();
    tokio::spawn(async move {
        let dispatch = |_: ToolCall| async {
            tokio::time::sleep(Duration::from_millis(500)).await;
            r#"{"result":"found"}"#.to_owned()
        };
        let code = "async () => { console.log('normal'); return await store.find('ada') }";
        remote.execute(Request::new(code).provider(store()).dispatch(dispatch)).await
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outcome_over_the_frame_bound_arrives_as_result_too_large_and_others_go_on() {
    // A daemon of 1 MiB frames.
    let address = start(config(Address::Unix(temp("sock"))), Executor::default()).await;
    let remote = RemoteExecutor::connect(&address, None).await.unwrap();
    let normal = slow_run(&remote);
    let large =
        remote.execute(Request::new("async () => { console.log('before'); return 'x'.repeat(2e6) }")).await;
    assert_eq!(
        json(&large),
        format!(r#"{{"error":"{OUTCOME_TOO_LARGE_1MIB}","kind":"resultTooLarge","logs":["before"]}}"#)
    );
    // The issue's program, its logs past the bound beside a long thrown text: the first
    // logs that fit are kept.
    let logged = remote
        .execute(
            Request::new(
                "async () => { for (let i = 0; i < 2e4; i++) console.log('z'.repeat(60)); throw 'y'.repeat(6e6) }",
            )
            .max_log_bytes(4 << 20),
        )
        .await;
    assert_eq!(logged.kind(), OutcomeKind::ResultTooLarge);
    assert_eq!(logged.error_text(), Some(OUTCOME_TOO_LARGE_1MIB));
    let kept = logged.logs().len();
    assert!(kept > 1000 && kept < 20_000, "{kept} logs kept");
    assert!(logged.logs().iter().all(|line| *line == "z".repeat(60)));
    let frame = format!(r#"{{"type":"outcome","execution":3,"outcome":{}}}"#, json(&logged));
    assert!(frame.len() <= 1 << 20 && frame.len() + 63 > 1 << 20, "a frame of {} bytes", frame.len());
    assert_eq!(json(&normal.await.unwrap()), r#"{"result":"found","logs":["normal"]}"#);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_skips_a_frame_over_its_bound_and_fails_only_that_execution() {
    // The daemon writes frames of up to 4 MiB; this client reads up to 1 MiB.
    let address =
        start(config(Address::Unix(temp("sock"))).max_frame_bytes(4 << 20), Executor::default()).await;
    let options = RemoteOptions::default().max_frame_bytes(1 << 20);
    let remote = RemoteExecutor::connect_with(&address, options).await.unwrap();
    let normal = slow_run(&remote);
    let large =
        remote.execute(Request::new("async () => { console.log('before'); return 'x'.repeat(2e6) }")).await;
    assert_eq!(
        json(&large),
        format!(r#"{{"error":"{OUTCOME_TOO_LARGE_1MIB}","kind":"resultTooLarge","logs":[]}}"#)
    );
    assert_eq!(json(&normal.await.unwrap()), r#"{"result":"found","logs":["normal"]}"#);
    assert_eq!(
        json(&remote.execute(Request::new("async () => 'next'")).await),
        r#"{"result":"next","logs":[]}"#
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_answers_and_requests_past_the_frame_bound_are_refused_not_sent() {
    let address = start(config(Address::Unix(temp("sock"))), Executor::default()).await;
    let options = RemoteOptions::default().max_frame_bytes(1 << 20);
    let remote = RemoteExecutor::connect_with(&address, options).await.unwrap();
    let recorder = Recorder::default();
    let call = remote
        .execute(
            Request::new(
                "async () => { try { await store.find('x'.repeat(2e6)) } catch (e) { return e.message } }",
            )
            .provider(store())
            .dispatch(recorder.dispatch(|_| "{}".to_owned())),
        )
        .await;
    assert_eq!(
        json(&call),
        r#"{"result":"This call is over the limit of 1048576 bytes for one message on the connection, so it was not sent to the host. Send less per call.","logs":[]}"#
    );
    assert_eq!(recorder.calls(), vec![]);
    let answer = remote
        .execute(
            Request::new("async () => { try { await store.find('ada') } catch (e) { return e.message } }")
                .provider(store())
                .dispatch(|_: ToolCall| async { format!(r#"{{"result":"{}"}}"#, "x".repeat(2_000_000)) }),
        )
        .await;
    assert_eq!(
        json(&answer),
        r#"{"result":"The host's answer to this call is over the limit of 1048576 bytes for one message on the connection, so it was not delivered. Ask for less per call.","logs":[]}"#
    );
    let request = remote.execute(Request::new(format!("async () => '{}'", "x".repeat(2_000_000)))).await;
    assert_eq!(
        json(&request),
        r#"{"error":"The request is over the limit of 1048576 bytes for one message on the connection, so it was not sent. Send shorter code.","kind":"invalid","logs":[]}"#
    );
    assert_eq!(
        json(&remote.execute(Request::new("async () => 'fine'")).await),
        r#"{"result":"fine","logs":[]}"#
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_connection_fails_its_pending_executions_and_the_next_execute_connects_again() {
    // The client's bound (64 MiB) is over the daemon's (1 MiB): an answer of 2 MB breaks
    // the daemon's rule, and the daemon closes the connection.
    let address = start(config(Address::Unix(temp("sock"))), Executor::default()).await;
    let remote = RemoteExecutor::connect(&address, None).await.unwrap();
    let waiting = {
        let remote = remote.clone();
        tokio::spawn(async move {
            remote
                .execute(Request::new(
                    "async () => { await new Promise(r => setTimeout(r, 3000)); return 1 }",
                ))
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    let broken = remote
        .execute(
            Request::new("async () => store.find('ada')")
                .provider(store())
                .dispatch(|_: ToolCall| async { format!(r#"{{"result":"{}"}}"#, "x".repeat(2_000_000)) }),
        )
        .await;
    let lost = r#"{"error":"The connection to the daemon closed before the run ended. The execution is lost; run it again.","kind":"lost","logs":[]}"#;
    assert_eq!(json(&broken), lost);
    assert_eq!(json(&waiting.await.unwrap()), lost);
    assert_eq!(
        json(&remote.execute(Request::new("async () => 'reconnected'")).await),
        r#"{"result":"reconnected","logs":[]}"#
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outcome_waiting_on_a_client_that_reads_nothing_is_dropped_for_a_short_one() {
    let path = temp("sock");
    let limits = DaemonLimits::default().max_queued_bytes(64 << 10).send_timeout(Duration::from_millis(300));
    let config = config(Address::Unix(path.clone())).max_frame_bytes(4 << 20);
    start_with(config, limits, Executor::default()).await;
    let mut raw = Raw::connect(&path).await;
    raw.send(HELLO).await;
    raw.next().await;
    // Two outcomes of a mebibyte, read by nobody: the first fills the socket and the
    // queue, the second waits for room past the send timeout.
    for execution in [1, 2] {
        raw.send(&format!(
            r#"{{"type":"execute","execution":{execution},"request":{{"code":"{LOGS_A_MEBIBYTE}"}}}}"#
        ))
        .await;
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let mut lines = [raw.next().await.unwrap(), raw.next().await.unwrap()];
    lines.sort_by_key(|line| line.len());
    let [short, long] = lines;
    let dropped = if short.contains(r#""execution":1,"#) { 1 } else { 2 };
    assert_eq!(
        short,
        format!(
            r#"{{"type":"outcome","execution":{dropped},"outcome":{{"error":"The client read nothing for 300 ms while this run's outcome waited to be sent, so the daemon dropped the outcome. Keep reading the connection while runs are live.","kind":"internal","logs":[]}}}}"#
        )
    );
    assert!(
        long.starts_with(&format!(
            r#"{{"type":"outcome","execution":{},"outcome":{{"result":1,"logs":["xxx"#,
            3 - dropped
        )),
        "{}",
        &long[..100]
    );
    assert!(long.len() > 1_000_000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn executions_are_bounded_across_all_connections_and_a_place_frees_when_one_ends() {
    let path = temp("sock");
    let limits = DaemonLimits::default().max_live_executions(2);
    start_with(config(Address::Unix(path.clone())), limits, Executor::default()).await;
    const WAITS: &str = r#""request":{"code":"async () => store.find(1)","providers":[{"name":"store","tools":["find"]}],"dispatch":true}}"#;
    // Two connections, each with an execution waiting on a call: the daemon is full.
    let mut holders = Vec::new();
    for _ in 0..2 {
        let mut raw = Raw::connect(&path).await;
        raw.send(HELLO).await;
        raw.next().await;
        raw.send(&format!(r#"{{"type":"execute","execution":1,{WAITS}"#)).await;
        assert_eq!(
            raw.next().await.unwrap(),
            r#"{"type":"call","execution":1,"call":1,"provider":"store","tool":"find","argsJson":"[1]"}"#
        );
        holders.push(raw);
    }
    let mut third = Raw::connect(&path).await;
    third.send(HELLO).await;
    third.next().await;
    third.send(r#"{"type":"execute","execution":7,"request":{"code":"async () => 'third'"}}"#).await;
    assert_eq!(
        third.next().await.unwrap(),
        r#"{"type":"outcome","execution":7,"outcome":{"error":"The daemon is running its maximum of 2 executions across all connections. This one did not start; try again when one ends, or on another daemon.","kind":"invalid","logs":[]}}"#
    );
    // One ends: its place is the third connection's.
    holders[0].send(r#"{"type":"answer","execution":1,"call":1,"answer":"{\"result\":\"found\"}"}"#).await;
    assert_eq!(
        holders[0].next().await.unwrap(),
        r#"{"type":"outcome","execution":1,"outcome":{"result":"found","logs":[]}}"#
    );
    third.send(r#"{"type":"execute","execution":8,"request":{"code":"async () => 'third'"}}"#).await;
    assert_eq!(
        third.next().await.unwrap(),
        r#"{"type":"outcome","execution":8,"outcome":{"result":"third","logs":[]}}"#
    );
    // A connection that leaves gives its executions' places back.
    holders.truncate(0);
    let left = Instant::now();
    loop {
        third.send(r#"{"type":"execute","execution":9,"request":{"code":"async () => 'again'"}}"#).await;
        third.send(&format!(r#"{{"type":"execute","execution":10,{WAITS}"#)).await;
        let mut lines = [third.next().await.unwrap(), third.next().await.unwrap()];
        lines.sort();
        if lines[0].starts_with(r#"{"type":"call","execution":10,"#) {
            assert_eq!(
                lines[1],
                r#"{"type":"outcome","execution":9,"outcome":{"result":"again","logs":[]}}"#
            );
            break;
        }
        assert!(left.elapsed() < Duration::from_secs(2), "the places were not given back: {lines:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_socket_that_cannot_be_bound_is_named_as_given() {
    let path = PathBuf::from("/nonexistent-codemode-dir/d.sock");
    let refused = Daemon::bind(DaemonConfig::new(Address::Unix(path))).await.err().unwrap();
    assert!(matches!(refused, BindError::Listen { .. }), "{refused:?}");
    assert_eq!(
        refused.to_string(),
        "cannot listen on /nonexistent-codemode-dir/d.sock: No such file or directory (os error 2)"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemon_that_reads_no_answers_stops_being_read_and_the_host_stays_bounded() {
    // A fake daemon: it answers the hello, then floods calls and never reads again.
    let path = temp("sock");
    let listener = tokio::net::UnixListener::bind(&path).unwrap();
    let flood = tokio::spawn(async move {
        let (stream, _) = listener.accept().await.unwrap();
        let (read, mut write) = stream.into_split();
        let mut lines = BufReader::new(read).lines();
        lines.next_line().await.unwrap();
        write.write_all(format!("{HELLO}\n").as_bytes()).await.unwrap();
        lines.next_line().await.unwrap();
        let mut calls = String::new();
        for call in 1..=2000 {
            calls.push_str(&format!(
                "{{\"type\":\"call\",\"execution\":1,\"call\":{call},\"provider\":\"store\",\"tool\":\"find\",\"argsJson\":\"[]\"}}\n"
            ));
        }
        write.write_all(calls.as_bytes()).await.unwrap();
        (lines, write)
    });
    let remote = RemoteExecutor::connect(&format!("unix:{}", path.display()), None).await.unwrap();
    let dispatched = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = dispatched.clone();
    let dispatch = move |_: ToolCall| {
        counted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        async { format!(r#"{{"result":"{}"}}"#, "a".repeat(64 << 10)) }
    };
    let run = tokio::spawn(async move {
        remote.execute(Request::new("async () => store.find()").provider(store()).dispatch(dispatch)).await
    });
    let _held = flood.await.unwrap();
    // Until the count stops growing: 4 MiB of 64 KiB answers wait, a few more sit in the
    // socket, and then nothing more is read.
    let mut answered = 0;
    let started = Instant::now();
    loop {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let now = dispatched.load(std::sync::atomic::Ordering::Relaxed);
        if now == answered && now > 0 || started.elapsed() > Duration::from_secs(10) {
            break;
        }
        answered = now;
    }
    assert!((64..200).contains(&answered), "{answered} of 2000 calls dispatched");
    run.abort();
    let _ = std::fs::remove_file(&path);
}
