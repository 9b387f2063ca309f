//! Criterion benchmarks of the executor: a whole run, tool-call overhead, 1 MiB of bytes
//! through one call, and runs per second with every core busy. `cargo xtask bench`.

mod common;

use std::time::Duration;

use codemode_executor::{Executor, ExecutorConfig, Request};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

fn benches(c: &mut Criterion) {
    let rt = runtime();
    let one_worker = Executor::new(ExecutorConfig { workers: 1, ..Default::default() });
    let executor = Executor::default();

    let mut group = c.benchmark_group("execute");
    group.bench_function("async () => 1, one at a time", |b| {
        b.iter(|| rt.block_on(one_worker.execute(Request::new("async () => 1"))))
    });
    const BATCH: u64 = 200;
    group.throughput(Throughput::Elements(BATCH));
    group.bench_function("async () => 1, 200 at once on every core", |b| {
        b.iter(|| {
            rt.block_on(async {
                let runs: Vec<_> = (0..BATCH)
                    .map(|_| {
                        let executor = executor.clone();
                        tokio::spawn(async move { executor.execute(Request::new("async () => 1")).await })
                    })
                    .collect();
                for run in runs {
                    run.await.unwrap();
                }
            })
        })
    });
    group.finish();

    let command =
        codemode_executor::WorkerCommand { program: common::codemode_binary(), args: vec!["stdio".into()] };
    let isolated = Executor::new(ExecutorConfig {
        workers: 1,
        isolation: codemode_executor::Isolation::Process(command),
        ..Default::default()
    });
    let mut group = c.benchmark_group("process isolation");
    group.bench_function("async () => 1 in a worker process", |b| {
        b.iter(|| rt.block_on(isolated.execute(Request::new("async () => 1"))))
    });
    group.bench_function("100 sequential calls in a worker process", |b| {
        b.iter(|| rt.block_on(isolated.execute(common::calls(100))))
    });
    group.finish();

    // Confinement side by side: a worker's start (spawned, locked, hello answered, then its
    // first run: a confined worker warms its engines before the hello, an unconfined one
    // during its first run, so only the two together compare), and runs of 0 and 100 calls,
    // with the workers confined (`required`) and not (`off`).
    let mut group = c.benchmark_group("confinement");
    group.sample_size(20);
    for confinement in [codemode_executor::Confinement::Off, codemode_executor::Confinement::Required] {
        let level = confinement.name();
        let executor_at = || {
            let command = codemode_executor::WorkerCommand {
                program: common::codemode_binary(),
                args: vec!["stdio".into()],
            };
            Executor::new(ExecutorConfig {
                workers: 1,
                isolation: codemode_executor::Isolation::Process(command),
                confinement,
                ..Default::default()
            })
        };
        let check = rt.block_on(executor_at().execute(Request::new("async () => 1")));
        assert_eq!(check.to_json_string(), r#"{"result":1,"logs":[]}"#, "{level}");
        group.bench_function(format!("a worker's start to its first outcome, {level}"), |b| {
            b.iter_custom(|iterations| {
                let mut total = Duration::ZERO;
                for _ in 0..iterations {
                    total += worker_start(confinement);
                }
                total
            })
        });
        let warm = executor_at();
        group.bench_function(format!("a run with no calls, {level}"), |b| {
            b.iter(|| rt.block_on(warm.execute(common::calls(0))))
        });
        group.bench_function(format!("a run of 100 sequential calls, {level}"), |b| {
            b.iter(|| rt.block_on(warm.execute(common::calls(100))))
        });
    }
    group.finish();

    let (unix, tcp) = rt.block_on(async {
        use codemode_executor::daemon::{Address, Daemon, DaemonConfig};
        let config =
            |listen, token| DaemonConfig { token, max_frame_bytes: 1 << 24, ..DaemonConfig::new(listen) };
        let path = std::env::temp_dir().join(format!("codemode-bench-{}.sock", std::process::id()));
        let on_unix = Daemon::bind(config(Address::Unix(path), None)).await.unwrap();
        let on_tcp =
            Daemon::bind(config(Address::Tcp("127.0.0.1:0".into()), Some("bench".into()))).await.unwrap();
        let (unix, tcp) = (on_unix.address().to_string(), on_tcp.address().to_string());
        tokio::spawn(on_unix.serve(Executor::new(ExecutorConfig { workers: 1, ..Default::default() })));
        tokio::spawn(on_tcp.serve(Executor::new(ExecutorConfig { workers: 1, ..Default::default() })));
        (
            codemode_executor::RemoteExecutor::connect(&unix, None).await.unwrap(),
            codemode_executor::RemoteExecutor::connect(&tcp, Some("bench")).await.unwrap(),
        )
    });
    let mut group = c.benchmark_group("daemon");
    for (name, remote) in [("unix socket", &unix), ("tcp loopback", &tcp)] {
        group.bench_function(format!("async () => 1 over a {name}"), |b| {
            b.iter(|| rt.block_on(remote.execute(Request::new("async () => 1"))))
        });
        group.bench_function(format!("100 sequential calls over a {name}"), |b| {
            b.iter(|| rt.block_on(remote.execute(common::calls(100))))
        });
    }
    group.finish();

    let mut group = c.benchmark_group("tool calls");
    for n in [0, 100] {
        group.bench_function(format!("{n} sequential calls in one run"), |b| {
            b.iter(|| rt.block_on(one_worker.execute(common::calls(n))))
        });
    }
    group.finish();

    let mut group = c.benchmark_group("bytes");
    group.measurement_time(Duration::from_secs(8));
    group.bench_function("1 MiB Uint8Array to dispatch and back", |b| {
        b.iter(|| rt.block_on(one_worker.execute(common::echo_bytes())))
    });
    group.finish();
}

/// The time from spawning `codemode stdio` (as the pool does: empty environment, the
/// level's variables) to the outcome of its first run, `async () => 1`, the worker then
/// killed.
fn worker_start(confinement: codemode_executor::Confinement) -> Duration {
    use std::io::{BufRead, Write};
    let mut command = std::process::Command::new(common::codemode_binary());
    // stderr to /dev/null, as the pool's bounded pipe would take it: a confined worker may
    // write no file (RLIMIT_FSIZE 0), so inheriting the bench's redirected stderr kills it.
    command
        .arg("stdio")
        .env_clear()
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null());
    if confinement.confines() {
        command.env(codemode_executor::confine::CONFINEMENT_VAR, confinement.name());
    }
    let started = std::time::Instant::now();
    let mut child = command.spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    writeln!(stdin, r#"{{"type":"hello","protocol":"codemode","version":1}}"#).unwrap();
    let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut hello = String::new();
    stdout.read_line(&mut hello).unwrap();
    writeln!(stdin, r#"{{"type":"execute","execution":1,"request":{{"code":"async () => 1"}}}}"#).unwrap();
    let mut outcome = String::new();
    stdout.read_line(&mut outcome).unwrap();
    let elapsed = started.elapsed();
    assert!(hello.contains(r#""type":"hello""#), "{hello}");
    assert!(outcome.contains(r#""result":1"#), "{outcome}");
    let _ = child.kill();
    let _ = child.wait();
    elapsed
}

criterion_group!(execute, benches);
criterion_main!(execute);
