//! What one tool call costs on each transport, beside the floor of that transport: a
//! minimal two-process ping-pong of a JSON line of the same size, blocking, measured in
//! the same run. Prints medians and ratios. `cargo bench --bench transport`.
//!
//! A second floor has the shape of a call's path: the answer is read by a thread of its
//! own and handed over a channel to the thread that wrote the question, as the daemon's
//! reader hands an answer to the execution's thread. The first floor is what the bytes
//! cost; the second is what the arrangement of threads costs, before any of this crate's
//! code runs.
//!
//! A call's cost is (a run of 200 sequential calls − a run of none) / 200, so the run's
//! own cost cancels out. The daemon and process isolation are measured as configured by
//! default, and again with `answer_spin` zero (the execution's thread sleeps at once
//! while it waits for an answer), beside each other.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use codemode_executor::{DEFAULT_ANSWER_SPIN, Executor, ExecutorConfig, ProcessExecutor, WorkerCommand};

const CALLS: usize = 200;
const SAMPLES: usize = 25;

/// A `call` frame as the daemon writes it, and an `answer` as the host writes it.
const CALL_LINE: &str = r#"{"type":"call","execution":1,"call":17,"toolCall":{"provider":"store","tool":"one","argsJson":"[17]"}}"#;
const ANSWER_LINE: &str = r#"{"type":"answer","execution":1,"call":17,"answer":"{\"result\":1}"}"#;

fn main() {
    // Re-executed as the far side of a floor measurement.
    match std::env::var("CODEMODE_BENCH_ECHO").as_deref() {
        Ok("pipe") => return echo(std::io::stdin().lock(), std::io::stdout().lock()),
        Ok(path) if !path.is_empty() => {
            let stream = UnixStream::connect(path).expect("the bench's socket");
            return echo(BufReader::new(stream.try_clone().expect("a second handle")), stream);
        }
        _ => {}
    }
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    // `cargo bench --bench transport -- daemon` measures only that row (and its floor).
    let only: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with("--")).collect();
    let wanted = |row: &str| only.is_empty() || only.iter().any(|o| o == row);
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    println!("one tool call, median of {SAMPLES} samples of {CALLS} calls:");

    if wanted("local") {
        let in_process = Executor::new(ExecutorConfig::default().workers(1));
        let local = per_call(|n| {
            let started = Instant::now();
            rt.block_on(in_process.execute(common::calls(n)));
            started.elapsed()
        });
        println!("  in-process                      {:>8.1} µs", micros(local));
    }
    if wanted("daemon") {
        let socket = per_round_trip(|n| socket_ping_pong(n, false));
        let relayed = per_round_trip(|n| socket_ping_pong(n, true));
        let over_socket = over_daemon(&rt, DEFAULT_ANSWER_SPIN);
        let asleep = over_daemon(&rt, Duration::ZERO);
        println!(
            "  over a Unix-socket daemon       {:>8.1} µs   floor {:>6.1} µs (socket ping-pong)   ratio {:.2}",
            micros(over_socket),
            micros(socket),
            ratio(over_socket, socket)
        );
        println!(
            "                                              {:>6.1} µs (with a hand-off)      ratio {:.2}",
            micros(relayed),
            ratio(over_socket, relayed)
        );
        println!(
            "    with answer_spin 0            {:>8.1} µs                                        ratio {:.2}",
            micros(asleep),
            ratio(asleep, socket)
        );
    }
    if wanted("isolation") {
        let pipe = per_round_trip(|n| pipe_ping_pong(n, false));
        let relayed = per_round_trip(|n| pipe_ping_pong(n, true));
        let isolation = under_isolation(&rt, DEFAULT_ANSWER_SPIN);
        let asleep = under_isolation(&rt, Duration::ZERO);
        println!(
            "  under process isolation         {:>8.1} µs   floor {:>6.1} µs (pipe ping-pong)     ratio {:.2}",
            micros(isolation),
            micros(pipe),
            ratio(isolation, pipe)
        );
        println!(
            "                                              {:>6.1} µs (with a hand-off)      ratio {:.2}",
            micros(relayed),
            ratio(isolation, relayed)
        );
        println!(
            "    with answer_spin 0            {:>8.1} µs                                        ratio {:.2}",
            micros(asleep),
            ratio(asleep, pipe)
        );
    }
}

/// One call over `codemode serve` on a Unix socket.
fn over_daemon(rt: &tokio::runtime::Runtime, answer_spin: Duration) -> Duration {
    let spin = answer_spin.as_micros().to_string();
    let (daemon, path) = common::serve_with("daemon", &["--answer-spin-us", &spin]);
    let remote = rt.block_on(common::connect(&path));
    let over_socket = per_call(|n| {
        let started = Instant::now();
        rt.block_on(remote.execute(common::calls(n)));
        started.elapsed()
    });
    drop(daemon);
    over_socket
}

/// One call under process isolation (a `codemode stdio` worker process).
fn under_isolation(rt: &tokio::runtime::Runtime, answer_spin: Duration) -> Duration {
    let command = WorkerCommand::new(common::codemode_binary(), ["stdio"]);
    // `CODEMODE_BENCH_CONFINEMENT=off`: unconfined workers, each serving many runs. A
    // confined worker serves one run, and on one CPU (`taskset -c 0`) its replacement's
    // start shares the CPU with the run being timed.
    let confinement = match std::env::var("CODEMODE_BENCH_CONFINEMENT").as_deref() {
        Ok("off") => codemode_executor::Confinement::Off,
        _ => codemode_executor::Confinement::default(),
    };
    let config = ExecutorConfig::default().workers(1).confinement(confinement).answer_spin(answer_spin);
    let isolated = ProcessExecutor::new(config, command);
    per_call(|n| {
        // A confined worker serves one run, and the pool starts its replacement as a run
        // takes it: this pause (not timed) lets the worker this run takes finish starting,
        // so the run does not wait for it; and the program's own pause (timed in runs of
        // no calls too, so it cancels out) lets the replacement's start end before the
        // calls, so they are not timed on a CPU shared with it.
        std::thread::sleep(Duration::from_millis(30));
        let started = Instant::now();
        rt.block_on(isolated.execute(common::calls_after(n, 20)));
        started.elapsed()
    })
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn ratio(a: Duration, b: Duration) -> f64 {
    a.as_secs_f64() / b.as_secs_f64()
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

/// The median cost of one round trip of `measure(n)`, which times `n` round trips.
fn per_round_trip(measure: impl Fn(usize) -> Duration) -> Duration {
    measure(CALLS); // warm up
    median((0..SAMPLES).map(|_| measure(CALLS)).collect()) / CALLS as u32
}

/// The median cost of one call: runs of `CALLS` calls less runs of none, paired.
fn per_call(run: impl Fn(usize) -> Duration) -> Duration {
    run(CALLS);
    run(0);
    median((0..SAMPLES).map(|_| run(CALLS).saturating_sub(run(0))).collect()) / CALLS as u32
}

fn echo(mut input: impl BufRead, mut output: impl Write) {
    let mut line = String::new();
    while input.read_line(&mut line).map(|n| n > 0).unwrap_or(false) {
        // Answer as a host would: a line of the answer's size.
        let _ = output.write_all(ANSWER_LINE.as_bytes());
        let _ = output.write_all(b"\n");
        let _ = output.flush();
        line.clear();
    }
}

fn far_side(mode: &str, stdio: bool) -> Child {
    let mut command = Command::new(std::env::current_exe().unwrap());
    command.env("CODEMODE_BENCH_ECHO", mode);
    if stdio {
        command.stdin(Stdio::piped()).stdout(Stdio::piped());
    }
    command.spawn().expect("the bench re-executes itself")
}

/// `n` round trips: a line written to `to`, its answer read from `from`. With `relay`, a
/// thread of its own reads the answers and hands each over a channel to the writing
/// thread. `end` tells the far side there is no more.
fn round_trips<W: Write>(
    n: usize,
    mut to: W,
    mut from: impl BufRead + Send + 'static,
    relay: bool,
    end: impl FnOnce(W),
) -> Duration {
    let mut line = String::new();
    let ask = |to: &mut W| {
        to.write_all(CALL_LINE.as_bytes()).unwrap();
        to.write_all(b"\n").unwrap();
        to.flush().unwrap();
    };
    if !relay {
        let started = Instant::now();
        for _ in 0..n {
            ask(&mut to);
            line.clear();
            from.read_line(&mut line).unwrap();
        }
        let elapsed = started.elapsed();
        end(to);
        return elapsed;
    }
    let (answered, answers) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        while from.read_line(&mut line).map(|n| n > 0).unwrap_or(false) {
            line.clear();
            if answered.send(()).is_err() {
                break;
            }
        }
    });
    let started = Instant::now();
    for _ in 0..n {
        ask(&mut to);
        answers.recv().unwrap();
    }
    let elapsed = started.elapsed();
    end(to);
    let _ = reader.join();
    elapsed
}

fn pipe_ping_pong(n: usize, relay: bool) -> Duration {
    let mut child = far_side("pipe", true);
    let to = child.stdin.take().unwrap();
    let from = BufReader::new(child.stdout.take().unwrap());
    let elapsed = round_trips(n, to, from, relay, drop);
    let _ = child.wait();
    elapsed
}

fn socket_ping_pong(n: usize, relay: bool) -> Duration {
    let path = std::env::temp_dir().join(format!("codemode-bench-floor-{}.sock", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let listener = UnixListener::bind(&path).unwrap();
    let mut child = far_side(path.to_str().unwrap(), false);
    let (stream, _) = listener.accept().unwrap();
    let from = BufReader::new(stream.try_clone().unwrap());
    // The far side reads to the end of the stream, then exits.
    let end = |stream: UnixStream| drop(stream.shutdown(std::net::Shutdown::Write));
    let elapsed = round_trips(n, stream, from, relay, end);
    let _ = child.wait();
    let _ = std::fs::remove_file(&path);
    elapsed
}
