//! A daemon's drain and the version 2 messages: draining told, later executes refused
//! (an outcome for a version 1 client), admitted ones run to their outcomes, the drain
//! timeout ends the rest with its text, and an execute racing the drain gets exactly one
//! answer. Pings are answered; the hello's version is negotiated.

use std::path::PathBuf;
use std::time::Duration;

use codemode_executor::Executor;
use codemode_executor::daemon::{Address, Daemon, DaemonConfig, DaemonHealth};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

fn temp(name: &str) -> PathBuf {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    std::env::temp_dir().join(format!("codemode-drain-{}-{n}-{name}", std::process::id()))
}

/// A daemon in this process that drains when told, with `timeout`.
struct Draining {
    path: PathBuf,
    health: DaemonHealth,
    drain: Option<oneshot::Sender<()>>,
    served: JoinHandle<std::io::Result<()>>,
}

impl Draining {
    async fn start(timeout: Duration) -> Draining {
        let path = temp("sock");
        let daemon = Daemon::bind(DaemonConfig::new(Address::Unix(path.clone()))).await.unwrap();
        let health = daemon.health();
        let (drain, drained) = oneshot::channel::<()>();
        let served = tokio::spawn(daemon.serve_until(
            Executor::default(),
            async move {
                let _ = drained.await;
            },
            timeout,
        ));
        Draining { path, health, drain: Some(drain), served }
    }

    fn drain(&mut self) {
        let _ = self.drain.take().unwrap().send(());
    }
}

struct Raw {
    lines: tokio::io::Lines<BufReader<tokio::net::unix::OwnedReadHalf>>,
    write: tokio::net::unix::OwnedWriteHalf,
}

impl Raw {
    /// Connected, with the hello of `version` answered.
    async fn hello(path: &std::path::Path, version: u32) -> Raw {
        let stream = tokio::net::UnixStream::connect(path).await.unwrap();
        let (read, write) = stream.into_split();
        let mut raw = Raw { lines: BufReader::new(read).lines(), write };
        raw.send(&format!(r#"{{"type":"hello","protocol":"codemode","version":{version}}}"#)).await;
        assert_eq!(
            raw.next().await.unwrap(),
            format!(r#"{{"type":"hello","protocol":"codemode","version":{}}}"#, version.min(4))
        );
        raw
    }

    async fn send(&mut self, line: &str) {
        self.write.write_all(format!("{line}\n").as_bytes()).await.unwrap();
    }

    async fn next(&mut self) -> Option<String> {
        tokio::time::timeout(Duration::from_secs(5), self.lines.next_line()).await.unwrap().unwrap()
    }
}

/// An execute that waits on a call the test answers.
fn waiting(execution: u64) -> String {
    format!(
        r#"{{"type":"execute","execution":{execution},"request":{{"code":"async () => store.find(1)","providers":[{{"name":"store","tools":["find"]}}],"dispatch":true}}}}"#
    )
}

fn call(execution: u64) -> String {
    format!(
        r#"{{"type":"call","execution":{execution},"call":1,"provider":"store","tool":"find","argsJson":"[1]"}}"#
    )
}

const REFUSED: &str = r#"{"type":"refused","execution":2,"reason":"draining","message":"The daemon is draining and starts no new executions. This one did not start; run it on another daemon."}"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_tells_refuses_new_work_and_lets_admitted_runs_finish() {
    let mut daemon = Draining::start(Duration::from_secs(10)).await;
    let mut v2 = Raw::hello(&daemon.path, 2).await;
    let mut v1 = Raw::hello(&daemon.path, 1).await;
    v2.send(&waiting(1)).await;
    assert_eq!(v2.next().await.unwrap(), call(1));
    assert!(daemon.health.is_ready());
    daemon.drain();
    assert_eq!(v2.next().await.unwrap(), r#"{"type":"draining"}"#);
    assert!(!daemon.health.is_ready() && daemon.health.is_draining());
    // Refused, typed, on version 2; on version 1 an outcome, for it knows no refusal.
    v2.send(r#"{"type":"execute","execution":2,"request":{"code":"async () => 2"}}"#).await;
    assert_eq!(v2.next().await.unwrap(), REFUSED);
    v1.send(r#"{"type":"execute","execution":5,"request":{"code":"async () => 5"}}"#).await;
    assert_eq!(
        v1.next().await.unwrap(),
        r#"{"type":"outcome","execution":5,"outcome":{"error":"The daemon is draining and starts no new executions. This one did not start; run it on another daemon.","kind":"internal","logs":[]}}"#
    );
    // No new connection is accepted.
    assert!(tokio::net::UnixStream::connect(&daemon.path).await.is_err());
    // The admitted run finishes; then the connections close and the daemon returns.
    v2.send(r#"{"type":"answer","execution":1,"call":1,"answer":"{\"result\":\"found\"}"}"#).await;
    assert_eq!(
        v2.next().await.unwrap(),
        r#"{"type":"outcome","execution":1,"outcome":{"result":"found","logs":[]}}"#
    );
    assert_eq!(v2.next().await, None);
    assert_eq!(v1.next().await, None);
    let served = tokio::time::timeout(Duration::from_secs(5), daemon.served).await.unwrap().unwrap();
    assert!(served.is_ok(), "{served:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_still_runs_at_the_drain_timeout_ends_with_its_text() {
    let mut daemon = Draining::start(Duration::from_millis(300)).await;
    let mut v2 = Raw::hello(&daemon.path, 2).await;
    let mut v4 = Raw::hello(&daemon.path, 4).await;
    v2.send(&waiting(1)).await;
    assert_eq!(v2.next().await.unwrap(), call(1));
    v4.send(&waiting(1)).await;
    assert_eq!(v4.next().await.unwrap(), call(1));
    daemon.drain();
    assert_eq!(v2.next().await.unwrap(), r#"{"type":"draining"}"#);
    assert_eq!(v4.next().await.unwrap(), r#"{"type":"draining"}"#);
    // The run is lost with the daemon: kind `lost` from version 4, `internal` below it.
    let text = "The daemon shut down before the run ended: its drain timeout of 300 ms passed. The execution is lost; run it again.";
    assert_eq!(
        v2.next().await.unwrap(),
        format!(
            r#"{{"type":"outcome","execution":1,"outcome":{{"error":"{text}","kind":"internal","logs":[]}}}}"#
        )
    );
    assert_eq!(
        v4.next().await.unwrap(),
        format!(
            r#"{{"type":"outcome","execution":1,"outcome":{{"error":"{text}","kind":"lost","logs":[]}}}}"#
        )
    );
    assert_eq!(v2.next().await, None);
    assert_eq!(v4.next().await, None);
    let served = tokio::time::timeout(Duration::from_secs(5), daemon.served).await.unwrap().unwrap();
    assert!(served.is_ok(), "{served:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_execute_racing_the_drain_gets_its_outcome_or_a_refusal_never_neither() {
    for round in 0..60 {
        let mut daemon = Draining::start(Duration::from_secs(5)).await;
        let mut v2 = Raw::hello(&daemon.path, 2).await;
        // The execute and the drain leave together; which wins varies from round to round.
        v2.send(r#"{"type":"execute","execution":2,"request":{"code":"async () => 2"}}"#).await;
        daemon.drain();
        let mut answers = Vec::new();
        while let Some(line) = v2.next().await {
            answers.push(line);
        }
        answers.retain(|line| line != r#"{"type":"draining"}"#);
        let ran = r#"{"type":"outcome","execution":2,"outcome":{"result":2,"logs":[]}}"#;
        assert!(answers == [ran] || answers == [REFUSED], "round {round}: {answers:?}");
        let served = tokio::time::timeout(Duration::from_secs(5), daemon.served).await.unwrap().unwrap();
        assert!(served.is_ok(), "round {round}: {served:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pings_are_answered_and_a_newer_client_is_answered_with_the_newest_version() {
    let daemon = Draining::start(Duration::from_secs(1)).await;
    let mut newer = Raw::hello(&daemon.path, 4).await;
    newer.send(r#"{"type":"ping","id":41}"#).await;
    assert_eq!(newer.next().await.unwrap(), r#"{"type":"pong","id":41}"#);
    let stream = tokio::net::UnixStream::connect(&daemon.path).await.unwrap();
    let (read, mut write) = stream.into_split();
    write.write_all(b"{\"type\":\"hello\",\"protocol\":\"codemode\",\"version\":0}\n").await.unwrap();
    let mut lines = BufReader::new(read).lines();
    assert_eq!(
        lines.next_line().await.unwrap().unwrap(),
        r#"{"type":"error","kind":"hello","message":"this server speaks codemode versions 1 to 6; the client said codemode version 0"}"#
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_never_stops_sending_cannot_hold_off_the_drain_timeout() {
    let mut daemon = Draining::start(Duration::from_millis(300)).await;
    let mut v2 = Raw::hello(&daemon.path, 2).await;
    v2.send(&waiting(1)).await;
    assert_eq!(v2.next().await.unwrap(), call(1));
    daemon.drain();
    assert_eq!(v2.next().await.unwrap(), r#"{"type":"draining"}"#);
    // A ping every 5 ms, and the pongs read as they come.
    let Raw { mut lines, mut write } = v2;
    let pinging = tokio::spawn(async move {
        for id in 0.. {
            let ping = format!("{{\"type\":\"ping\",\"id\":{id}}}\n");
            if write.write_all(ping.as_bytes()).await.is_err() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    });
    let shut_down = loop {
        let line =
            tokio::time::timeout(Duration::from_secs(5), lines.next_line()).await.unwrap().unwrap().unwrap();
        if !line.starts_with(r#"{"type":"pong""#) {
            break line;
        }
    };
    assert_eq!(
        shut_down,
        r#"{"type":"outcome","execution":1,"outcome":{"error":"The daemon shut down before the run ended: its drain timeout of 300 ms passed. The execution is lost; run it again.","kind":"internal","logs":[]}}"#
    );
    let served = tokio::time::timeout(Duration::from_secs(5), daemon.served).await.unwrap().unwrap();
    assert!(served.is_ok(), "{served:?}");
    pinging.abort();
}

/// A run the client cancels ends `cancelled` from version 4, and `internal` for a client
/// below it, which knows no such kind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_run_says_so_from_version_4_and_is_internal_below_it() {
    let daemon = Draining::start(Duration::from_secs(10)).await;
    for (version, kind) in [(3, "internal"), (4, "cancelled")] {
        let mut raw = Raw::hello(&daemon.path, version).await;
        raw.send(&waiting(1)).await;
        assert_eq!(raw.next().await.unwrap(), call(1));
        raw.send(r#"{"type":"cancel","execution":1}"#).await;
        assert_eq!(
            raw.next().await.unwrap(),
            format!(
                r#"{{"type":"outcome","execution":1,"outcome":{{"error":"Execution was cancelled by the host.","kind":"{kind}","logs":[]}}}}"#
            ),
            "version {version}"
        );
    }
}
