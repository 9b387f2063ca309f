//! A fleet without a cluster: three `codemode serve` daemons on Unix sockets, the
//! balancing client, 600 executions at concurrency 32, half of them making 1 to 3 tool
//! calls. One daemon gets SIGTERM a third of the way through, another SIGKILL at two
//! thirds. Nothing is lost that dispatched no call, nothing is lost on the drained daemon
//! (it exits 0), no call is dispatched twice, and the survivor's metrics add up.

use std::collections::HashSet;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use codemode_executor::daemon::RemoteOptions;
use codemode_executor::{Endpoints, ProviderDescriptor, RemoteExecutor, Request};
use codemode_protocol::{ToolCall, texts};

const EXECUTIONS: usize = 600;
const CONCURRENCY: usize = 32;

/// A `codemode serve` child: its socket, its admin address, killed however the test ends.
struct Served {
    child: Child,
    socket: PathBuf,
    admin: String,
}

impl Served {
    fn start(n: usize) -> Served {
        let socket = std::env::temp_dir().join(format!("codemode-fleet-{}-{n}.sock", std::process::id()));
        let _ = std::fs::remove_file(&socket);
        let mut child = Command::new(env!("CARGO_BIN_EXE_codemode"))
            .args(["serve", "--listen", &format!("unix:{}", socket.display())])
            .args(["--admin", "127.0.0.1:0", "--log-format", "json", "--drain-timeout-ms", "20000"])
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut log = BufReader::new(child.stderr.take().unwrap()).lines();
        let admin = loop {
            let line = log.next().expect("the daemon's log").unwrap();
            let event: serde_json::Value = serde_json::from_str(&line).unwrap();
            if event["message"] == "admin listening" {
                break event["address"].as_str().unwrap().to_owned();
            }
        };
        // The rest of the log is read so the daemon never blocks on a full pipe.
        std::thread::spawn(move || log.for_each(drop));
        let started = Instant::now();
        while std::os::unix::net::UnixStream::connect(&socket).is_err() {
            assert!(started.elapsed() < Duration::from_secs(10), "daemon {n} did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
        Served { child, socket, admin }
    }

    fn address(&self) -> String {
        format!("unix:{}", self.socket.display())
    }

    fn signal(&self, signal: libc::c_int) {
        // SAFETY: kill(2) on our own child's pid, which is live until we reap it.
        assert_eq!(unsafe { libc::kill(self.child.id() as libc::pid_t, signal) }, 0);
    }

    /// The body of `GET /metrics` on the admin port.
    fn metrics(&self) -> String {
        let mut stream = std::net::TcpStream::connect(&self.admin).unwrap();
        stream.write_all(b"GET /metrics HTTP/1.0\r\nHost: admin\r\n\r\n").unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).unwrap();
        response.split_once("\r\n\r\n").unwrap().1.to_owned()
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The sum of every sample of `name` in a Prometheus text body.
fn total(metrics: &str, name: &str) -> f64 {
    metrics
        .lines()
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with(['{', ' ']))
        .map(|l| l.rsplit(' ').next().unwrap().parse::<f64>().unwrap())
        .sum()
}

/// Execution `id`: even ones make 1 to 3 calls (each logged, answered after 5 ms) and
/// return their sum; odd ones return their id at once.
fn request(id: usize, log: &Arc<Mutex<Vec<(usize, usize)>>>) -> (Request, String) {
    if id % 2 == 1 {
        return (Request::new(format!("async () => {id}")), id.to_string());
    }
    let calls = 1 + id % 3;
    let code = format!(
        "async () => {{ let sum = 0; for (let k = 0; k < {calls}; k++) sum += await store.find({id}, k); return sum }}"
    );
    let log = log.clone();
    let request = Request::new(code).provider(ProviderDescriptor::new("store", ["find"])).dispatch(
        move |call: ToolCall| {
            let (id, k): (usize, usize) = serde_json::from_str(&call.args_json).unwrap();
            log.lock().unwrap().push((id, k));
            async move {
                tokio::time::sleep(Duration::from_millis(5)).await;
                format!(r#"{{"result":{}}}"#, k + 1)
            }
        },
    );
    (request, (calls * (calls + 1) / 2).to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_loses_nothing_it_may_not_and_runs_no_call_twice() {
    let daemons = [Served::start(0), Served::start(1), Served::start(2)];
    let addresses: Vec<String> = daemons.iter().map(Served::address).collect();
    let options = RemoteOptions::default().keepalive(Some(Duration::from_secs(2)));
    let remote = RemoteExecutor::connect_fleet(Endpoints::Static(addresses.clone()), options).await.unwrap();
    let log = Arc::new(Mutex::new(Vec::new()));
    let done = Arc::new(AtomicUsize::new(0));
    let permits = Arc::new(tokio::sync::Semaphore::new(CONCURRENCY));
    let mut runs = Vec::new();
    for id in 0..EXECUTIONS {
        let (remote, done, permits) = (remote.clone(), done.clone(), permits.clone());
        let (request, expected) = request(id, &log);
        runs.push(tokio::spawn(async move {
            let _permit = permits.acquire_owned().await.unwrap();
            let outcome = remote.execute(request).await.to_json_string();
            done.fetch_add(1, Ordering::AcqRel);
            (id, outcome, expected)
        }));
    }
    let started = Instant::now();
    while done.load(Ordering::Acquire) < EXECUTIONS / 3 {
        assert!(started.elapsed() < Duration::from_secs(60), "stalled");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    daemons[0].signal(libc::SIGTERM);
    while done.load(Ordering::Acquire) < 2 * EXECUTIONS / 3 {
        assert!(started.elapsed() < Duration::from_secs(60), "stalled");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let killed_in_flight = remote.endpoints()[1].in_flight;
    daemons[1].signal(libc::SIGKILL);
    let mut lost = Vec::new();
    for run in runs {
        let (id, outcome, expected) = run.await.unwrap();
        if outcome != format!(r#"{{"result":{expected},"logs":[]}}"#) {
            let lost_text =
                format!(r#"{{"error":"{}","kind":"lost","logs":[]}}"#, texts::DAEMON_CONNECTION_LOST);
            assert_eq!(outcome, lost_text, "execution {id}");
            lost.push(id);
        }
    }
    let log = log.lock().unwrap().clone();
    // Lost only what had a call reach this host, and only on the killed daemon.
    for id in &lost {
        assert!(log.contains(&(*id, 0)), "execution {id} was lost before any call: it should have moved");
    }
    assert!(
        lost.len() <= killed_in_flight,
        "{} lost, {killed_in_flight} were on the killed daemon",
        lost.len()
    );
    // No call dispatched twice: no execution ran twice past a call.
    let unique: HashSet<&(usize, usize)> = log.iter().collect();
    assert_eq!(unique.len(), log.len(), "a call was dispatched twice");
    // The drained daemon finished what it admitted and exited 0 within its drain timeout.
    let mut drained = daemons.into_iter();
    let mut first = drained.next().unwrap();
    let exited = Instant::now();
    let status = loop {
        if let Some(status) = first.child.try_wait().unwrap() {
            break status;
        }
        assert!(exited.elapsed() < Duration::from_secs(20), "the drained daemon did not exit");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(0));
    // The survivor's metrics: every execute sent there counted once, none left in flight.
    let survivor = drained.nth(1).unwrap();
    let metrics = survivor.metrics();
    let sent = remote.endpoints()[2].sent as f64;
    assert_eq!(total(&metrics, "codemode_executions_total"), sent, "{metrics}");
    assert_eq!(total(&metrics, "codemode_executions_in_flight"), 0.0, "{metrics}");
    println!("lost {} (all after a call, on the killed daemon); the survivor ran {sent}", lost.len());
}
