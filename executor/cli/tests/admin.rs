//! `codemode serve --admin` and the drain on signals: probes and metrics on the admin port,
//! SIGTERM turning readiness off at once while an admitted run still returns and the
//! process exits 0, a second signal exiting at once with 128 plus its number, and the drain
//! timeout ending a stuck run with its text. Loopback and Unix sockets only.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use codemode_executor::metrics;
use codemode_protocol::texts;

/// A `codemode serve` child with its JSON log lines, killed and reaped however the test ends.
struct Served {
    child: Child,
    lines: mpsc::Receiver<serde_json::Value>,
    socket: PathBuf,
    admin: SocketAddr,
    dir: PathBuf,
}

fn temp_dir(name: &str) -> PathBuf {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("codemode-admin-{}-{n}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

impl Served {
    /// Served on a Unix socket with the admin port on 127.0.0.1:0, plus `args`.
    fn start(name: &str, args: &[&str]) -> Served {
        let dir = temp_dir(name);
        let socket = dir.join("d.sock");
        let listen = format!("unix:{}", socket.display());
        let mut command = Command::new(env!("CARGO_BIN_EXE_codemode"));
        command
            .args(["serve", "--listen", &listen, "--admin", "127.0.0.1:0", "--log-format", "json"])
            .args(args);
        Served::spawn(command, socket, dir)
    }

    fn spawn(mut command: Command, socket: PathBuf, dir: PathBuf) -> Served {
        let mut child = command.stderr(Stdio::piped()).spawn().unwrap();
        let stderr = BufReader::new(child.stderr.take().unwrap());
        let (sender, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in stderr.lines().map_while(Result::ok) {
                let parsed = serde_json::from_str(&line).unwrap_or(serde_json::Value::String(line));
                if sender.send(parsed).is_err() {
                    break;
                }
            }
        });
        let mut served = Served { child, lines, socket, admin: SocketAddr::from(([0, 0, 0, 0], 0)), dir };
        // The daemon's "listening" line stays first; the admin port's follows it.
        let first = served.line();
        assert_eq!(first["message"], "listening", "{first}");
        let second = served.line();
        assert_eq!(second["message"], "admin listening", "{second}");
        served.admin = second["address"].as_str().unwrap().parse().unwrap();
        assert!(served.admin.ip().is_loopback() && served.admin.port() != 0, "{second}");
        served
    }

    fn line(&self) -> serde_json::Value {
        self.lines.recv_timeout(Duration::from_secs(10)).expect("a log line within 10 s")
    }

    /// The next log line with `message`, skipping others.
    fn logged(&self, message: &str) -> serde_json::Value {
        loop {
            let line = self.line();
            if line["message"] == message {
                return line;
            }
        }
    }

    fn signal(&self, signal: i32) {
        // SAFETY: kill(2) on our own child's pid, with a valid signal number.
        let sent = unsafe { libc::kill(self.child.id() as libc::pid_t, signal) };
        assert_eq!(sent, 0, "kill: {}", std::io::Error::last_os_error());
    }

    /// The exit status, which must come within `bound`.
    fn exits_within(&mut self, bound: Duration) -> ExitStatus {
        let started = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(started.elapsed() < bound, "still running {bound:?} later");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn get(&self, path: &str) -> Response {
        request(self.admin, "GET", path)
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[derive(Debug, PartialEq, Eq)]
struct Response {
    status: u16,
    content_type: String,
    body: String,
}

/// One HTTP/1.1 request on its own connection, read to the end.
fn request(address: SocketAddr, method: &str, path: &str) -> Response {
    let mut stream = TcpStream::connect_timeout(&address, Duration::from_secs(5)).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    write!(stream, "{method} {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n").unwrap();
    let mut raw = String::new();
    stream.read_to_string(&mut raw).unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap();
    let mut lines = head.lines();
    let status = lines.next().unwrap().split(' ').nth(1).unwrap().parse().unwrap();
    let header = |name: &str| {
        lines
            .clone()
            .find_map(|l| l.split_once(": ").filter(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v))
            .unwrap_or_default()
            .to_owned()
    };
    assert_eq!(header("transfer-encoding"), "", "a body of known length");
    assert_eq!(header("content-length"), body.len().to_string());
    Response { status, content_type: header("content-type"), body: body.to_owned() }
}

fn text(status: u16, body: &str) -> Response {
    Response { status, content_type: "text/plain; charset=utf-8".to_owned(), body: body.to_owned() }
}

/// A wire client speaking version 2 over the daemon's socket.
struct Raw {
    reader: BufReader<UnixStream>,
    writer: UnixStream,
}

impl Raw {
    fn hello(path: &Path) -> Raw {
        let writer = UnixStream::connect(path).unwrap();
        writer.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut raw = Raw { reader: BufReader::new(writer.try_clone().unwrap()), writer };
        raw.send(r#"{"type":"hello","protocol":"codemode","version":2}"#);
        assert_eq!(raw.next().unwrap(), r#"{"type":"hello","protocol":"codemode","version":2}"#);
        raw
    }

    fn send(&mut self, line: &str) {
        self.writer.write_all(format!("{line}\n").as_bytes()).unwrap();
    }

    /// The next frame, or `None` once the daemon closed the connection.
    fn next(&mut self) -> Option<String> {
        let mut line = String::new();
        match self.reader.read_line(&mut line).unwrap() {
            0 => None,
            _ => Some(line.trim_end().to_owned()),
        }
    }

    /// An execute whose run waits on one call the test answers; returns once the call came.
    fn run_waiting_on_a_call(&mut self) {
        self.send(
            r#"{"type":"execute","execution":1,"request":{"code":"async () => store.find(1)","providers":[{"name":"store","tools":["find"]}],"dispatch":true}}"#,
        );
        assert_eq!(
            self.next().unwrap(),
            r#"{"type":"call","execution":1,"call":1,"provider":"store","tool":"find","argsJson":"[1]"}"#
        );
    }

    fn answer_the_call(&mut self) {
        self.send(r#"{"type":"answer","execution":1,"call":1,"answer":"{\"result\":\"found\"}"}"#);
    }
}

const FOUND: &str = r#"{"type":"outcome","execution":1,"outcome":{"result":"found","logs":[]}}"#;
const DRAINING: &str = r#"{"type":"draining"}"#;

/// Each metric with the type its `# TYPE` line must say.
fn metric_types() -> [(&'static str, &'static str); 10] {
    [
        (metrics::EXECUTIONS_TOTAL, "counter"),
        (metrics::EXECUTION_DURATION_SECONDS, "histogram"),
        (metrics::CALL_DURATION_SECONDS, "histogram"),
        (metrics::EXECUTIONS_IN_FLIGHT, "gauge"),
        (metrics::ENGINES_LIVE, "gauge"),
        (metrics::CONNECTIONS_OPEN, "gauge"),
        (metrics::DRAINING, "gauge"),
        (metrics::BUILD_INFO, "gauge"),
        (metrics::STUCK_ENGINES, "gauge"),
        (metrics::CELLS_REAPED_TOTAL, "counter"),
    ]
}

/// Scrape until a line of the exposition is `line` (the library records an outcome's
/// metrics just after sending it).
fn scraped(served: &Served, line: &str) -> String {
    let started = Instant::now();
    loop {
        let body = served.get("/metrics").body;
        if body.lines().any(|l| l == line) {
            return body;
        }
        assert!(started.elapsed() < Duration::from_secs(5), "no line {line:?} in:\n{body}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn the_admin_port_answers_probes_and_metrics_and_nothing_else() {
    let mut served = Served::start("probes", &[]);
    assert_eq!(served.get("/livez"), text(200, "ok"));
    assert_eq!(served.get("/readyz"), text(200, "ok"));
    assert_eq!(served.get("/"), text(404, "not found"));
    assert_eq!(served.get("/execute"), text(404, "not found"));
    let posted = request(served.admin, "POST", "/readyz");
    assert_eq!((posted.status, posted.body.as_str()), (405, ""));

    let scrape = served.get("/metrics");
    assert_eq!(
        (scrape.status, scrape.content_type.as_str()),
        (200, "text/plain; version=0.0.4; charset=utf-8")
    );
    // Every metric is there from the start, described, with its type.
    let types = metric_types();
    assert_eq!(types.map(|(name, _)| name), metrics::ALL);
    for (name, kind) in types {
        assert!(
            scrape.body.lines().any(|l| l == format!("# TYPE {name} {kind}")),
            "{name}:\n{}",
            scrape.body
        );
        assert!(scrape.body.lines().any(|l| l.starts_with(&format!("# HELP {name} "))), "{name}");
    }
    let typed: Vec<&str> = scrape.body.lines().filter(|l| l.starts_with("# TYPE ")).collect();
    assert_eq!(typed.len(), 10, "{typed:?}");
    for line in typed.iter().filter(|l| l.ends_with(" counter")) {
        assert!(line.trim_end_matches(" counter").ends_with("_total"), "{line}");
    }
    for line in [
        r#"codemode_executions_total{outcome="returned"} 0"#,
        r#"codemode_executions_total{outcome="shutdown"} 0"#,
        "codemode_executions_in_flight 0",
        "codemode_connections_open 0",
        "codemode_draining 0",
        "codemode_stuck_engines 0",
        r#"codemode_cells_reaped_total{reason="expired"} 0"#,
        r#"codemode_build_info{version="0.1.0",engine="quickjs"} 1"#,
        r#"codemode_execution_duration_seconds_bucket{engine="quickjs",le="300"} 0"#,
        r#"codemode_call_duration_seconds_bucket{le="0.0001"} 0"#,
        "codemode_call_duration_seconds_count 0",
    ] {
        assert!(scrape.body.lines().any(|l| l == line), "no {line:?} in:\n{}", scrape.body);
    }

    // A run with one call: counted, timed, its call timed.
    let mut raw = Raw::hello(&served.socket);
    assert_eq!(
        served.get("/metrics").body.lines().find(|l| l.starts_with("codemode_connections_open ")),
        Some("codemode_connections_open 1")
    );
    raw.run_waiting_on_a_call();
    scraped(&served, "codemode_executions_in_flight 1");
    raw.answer_the_call();
    assert_eq!(raw.next().unwrap(), FOUND);
    let body = scraped(&served, r#"codemode_executions_total{outcome="returned"} 1"#);
    for line in [
        "codemode_executions_in_flight 0",
        r#"codemode_execution_duration_seconds_count{engine="quickjs"} 1"#,
        r#"codemode_execution_duration_seconds_bucket{engine="quickjs",le="+Inf"} 1"#,
        "codemode_call_duration_seconds_count 1",
        r#"codemode_call_duration_seconds_bucket{le="30"} 1"#,
        r#"codemode_executions_total{outcome="thrown"} 0"#,
    ] {
        assert!(body.lines().any(|l| l == line), "no {line:?} in:\n{body}");
    }

    // An idle connection does not hold the drain.
    served.signal(libc::SIGTERM);
    assert_eq!(raw.next().unwrap(), DRAINING);
    assert_eq!(raw.next(), None);
    assert_eq!(served.exits_within(Duration::from_secs(5)).code(), Some(0));
}

#[test]
fn sigterm_turns_readiness_off_at_once_lets_the_admitted_run_return_and_exits_0() {
    let mut served = Served::start("drain", &["--drain-timeout-ms", "10000"]);
    let mut raw = Raw::hello(&served.socket);
    raw.run_waiting_on_a_call();
    served.signal(libc::SIGTERM);
    let signalled = Instant::now();
    assert_eq!(raw.next().unwrap(), DRAINING);
    assert_eq!(served.get("/readyz"), text(503, "draining"));
    assert!(signalled.elapsed() < Duration::from_secs(1), "{:?}", signalled.elapsed());
    assert_eq!(served.get("/livez"), text(200, "ok"), "draining is still live");
    assert!(served.get("/metrics").body.lines().any(|l| l == "codemode_draining 1"));
    assert_eq!(served.logged("signal received")["signal"], "SIGTERM");
    let draining = served.logged("draining");
    assert_eq!((draining["live"].as_u64(), draining["timeout_ms"].as_u64()), (Some(1), Some(10_000)));
    // The run admitted before the signal still gets its answer and returns its value.
    raw.answer_the_call();
    assert_eq!(raw.next().unwrap(), FOUND);
    assert_eq!(raw.next(), None);
    served.logged("drained");
    let status = served.exits_within(Duration::from_secs(5));
    assert_eq!(status.code(), Some(0), "{status:?}");
    assert!(signalled.elapsed() < Duration::from_secs(10), "exited within the drain");
}

#[test]
fn a_second_signal_exits_at_once_with_128_plus_its_number() {
    for (signal, code, name) in [(libc::SIGTERM, 143, "SIGTERM"), (libc::SIGINT, 130, "SIGINT")] {
        let mut served = Served::start("twice", &[]);
        let mut raw = Raw::hello(&served.socket);
        raw.run_waiting_on_a_call();
        served.signal(signal);
        assert_eq!(raw.next().unwrap(), DRAINING);
        assert_eq!(served.logged("signal received")["signal"], name);
        // The run still waits, and the drain timeout is 905 s: only the signal ends it.
        served.signal(signal);
        let status = served.exits_within(Duration::from_secs(2));
        assert_eq!((status.code(), name), (Some(code), name), "{status:?}");
        let second = served.logged("second signal; exiting at once");
        assert_eq!((second["signal"].as_str(), second["code"].as_i64()), (Some(name), Some(code.into())));
    }
}

#[test]
fn the_drain_timeout_ends_a_stuck_run_with_its_text_and_exits_0() {
    // Set in the config file this time: admin and drain_timeout_ms.
    let dir = temp_dir("timeout");
    let socket = dir.join("d.sock");
    let file = dir.join("serve.toml");
    std::fs::write(
        &file,
        format!(
            "listen = \"unix:{}\"\nlog_format = \"json\"\nadmin = \"127.0.0.1:0\"\ndrain_timeout_ms = 300\n",
            socket.display()
        ),
    )
    .unwrap();
    let mut command = Command::new(env!("CARGO_BIN_EXE_codemode"));
    command.args(["serve", "--config", &file.display().to_string()]);
    let mut served = Served::spawn(command, socket, dir);
    let mut raw = Raw::hello(&served.socket);
    raw.run_waiting_on_a_call();
    served.signal(libc::SIGTERM);
    let signalled = Instant::now();
    assert_eq!(raw.next().unwrap(), DRAINING);
    let shut_down = texts::DAEMON_SHUT_DOWN.fill(&["300"]);
    assert_eq!(
        raw.next().unwrap(),
        format!(
            r#"{{"type":"outcome","execution":1,"outcome":{{"error":"{shut_down}","kind":"internal","logs":[]}}}}"#
        )
    );
    let waited = signalled.elapsed();
    assert!(waited >= Duration::from_millis(300) && waited < Duration::from_secs(3), "{waited:?}");
    assert_eq!(raw.next(), None);
    let status = served.exits_within(Duration::from_secs(5));
    assert_eq!(status.code(), Some(0), "{status:?}");
}
