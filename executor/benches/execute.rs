//! Criterion benchmarks of the executor: a whole run, tool-call overhead, 1 MiB of bytes
//! through one call, and runs per second with every core busy. `cargo xtask bench`. The
//! in-process rows run on `CODEMODE_BENCH_ENGINE` (`quickjs` by default, `v8` with the
//! feature).

mod common;

use std::time::Duration;

use codemode_executor::{Executor, ExecutorConfig, Request};
use common::RawWorker;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

/// The engine of the in-process rows: `CODEMODE_BENCH_ENGINE=v8` (with `--features v8`)
/// measures V8's, QuickJS by default.
fn engine() -> codemode_executor::EngineKind {
    std::env::var("CODEMODE_BENCH_ENGINE").map_or(codemode_executor::EngineKind::QuickJs, |name| {
        name.parse().unwrap_or_else(|e| panic!("CODEMODE_BENCH_ENGINE: {e}"))
    })
}

fn benches(c: &mut Criterion) {
    let rt = runtime();
    let one_worker = Executor::new(ExecutorConfig::default().workers(1).engine(engine()));
    let executor = Executor::new(ExecutorConfig::default().engine(engine()));

    let mut group = c.benchmark_group("execute");
    group.bench_function("async () => 1, one at a time", |b| {
        b.iter(|| rt.block_on(one_worker.execute(Request::new("async () => 1"))))
    });
    // As an agent's runs arrive: apart, with the pool idle in between (the pause is not
    // timed; `CODEMODE_BENCH_PAUSE_MS` sets it, 2 ms by default).
    let pause = std::env::var("CODEMODE_BENCH_PAUSE_MS").map_or(2, |ms| ms.parse().unwrap_or(2));
    group.bench_function(format!("async () => 1, after a pause of {pause} ms"), |b| {
        b.iter_custom(|iterations| {
            let mut total = Duration::ZERO;
            for _ in 0..iterations {
                std::thread::sleep(Duration::from_millis(pause));
                let started = std::time::Instant::now();
                rt.block_on(one_worker.execute(Request::new("async () => 1")));
                total += started.elapsed();
            }
            total
        })
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

    let command = codemode_executor::WorkerCommand::new(common::codemode_binary(), ["stdio"]);
    let isolated = codemode_executor::ProcessExecutor::new(ExecutorConfig::default().workers(1), command);
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
    // during its first run, so only the two together compare), a call's round trip (a
    // fresh worker's second run, as a confined worker serves one execution), and runs of 0
    // and 100 calls through the pool, with the workers confined (`required`) and not (`off`).
    let mut group = c.benchmark_group("confinement");
    group.sample_size(20);
    for confinement in [codemode_executor::Confinement::Off, codemode_executor::Confinement::Required] {
        let level = confinement.name();
        let executor_at = || {
            let command = codemode_executor::WorkerCommand::new(common::codemode_binary(), ["stdio"]);
            let config = ExecutorConfig::default().workers(1).confinement(confinement);
            codemode_executor::ProcessExecutor::new(config, command)
        };
        let check = rt.block_on(executor_at().execute(Request::new("async () => 1")));
        assert_eq!(check.to_json_string(), r#"{"result":1,"logs":[]}"#, "{level}");
        group.bench_function(format!("a worker's start to its first outcome, {level}"), |b| {
            b.iter_custom(|iterations| interleaved(confinement, iterations, worker_start))
        });
        group.bench_function(format!("100 calls, a fresh worker's second run, {level}"), |b| {
            b.iter_custom(|iterations| interleaved(confinement, iterations, second_run_of_100_calls))
        });
        let warm = executor_at();
        group.bench_function(format!("a run with no calls, {level}"), |b| {
            b.iter(|| rt.block_on(warm.execute(common::calls(0))))
        });
        group.bench_function(format!("a run of 100 sequential calls, {level}"), |b| {
            b.iter(|| rt.block_on(warm.execute(common::calls(100))))
        });
        // 16 runs at once, the pool as configured by default (as many workers kept ready as
        // the machine's parallelism): what a burst of a model's runs costs under each level.
        let command = codemode_executor::WorkerCommand::new(common::codemode_binary(), ["stdio"]);
        let pool = codemode_executor::ProcessExecutor::new(
            ExecutorConfig::default().confinement(confinement),
            command,
        );
        group.bench_function(format!("16 runs at once, {level}"), |b| {
            b.iter(|| {
                rt.block_on(async {
                    let mut runs = tokio::task::JoinSet::new();
                    for _ in 0..16 {
                        let pool = pool.clone();
                        runs.spawn(async move { pool.execute(common::calls(0)).await });
                    }
                    runs.join_all().await
                })
            })
        });
    }
    group.finish();

    let (unix, tcp) = rt.block_on(async {
        use codemode_executor::daemon::{Address, Daemon, DaemonConfig};
        let config = |listen, token| DaemonConfig::new(listen).token(token).max_frame_bytes(1 << 24);
        let path = std::env::temp_dir().join(format!("codemode-bench-{}.sock", std::process::id()));
        let on_unix = Daemon::bind(config(Address::Unix(path), None)).await.unwrap();
        let on_tcp =
            Daemon::bind(config(Address::Tcp("127.0.0.1:0".into()), Some("bench".into()))).await.unwrap();
        let (unix, tcp) = (on_unix.address().to_string(), on_tcp.address().to_string());
        tokio::spawn(on_unix.serve(Executor::new(ExecutorConfig::default().workers(1))));
        tokio::spawn(on_tcp.serve(Executor::new(ExecutorConfig::default().workers(1))));
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

/// `measure` at `level` `iterations` times, each paired with one at the other level,
/// discarded, so that both levels are timed under the same load on a shared machine.
fn interleaved(
    level: codemode_executor::Confinement,
    iterations: u64,
    measure: fn(codemode_executor::Confinement) -> Duration,
) -> Duration {
    let other = match level {
        codemode_executor::Confinement::Off => codemode_executor::Confinement::Required,
        _ => codemode_executor::Confinement::Off,
    };
    let mut total = Duration::ZERO;
    for _ in 0..iterations {
        total += measure(level);
        measure(other);
    }
    total
}

/// A worker of `confinement`'s level, as the pool starts one.
fn raw_worker(confinement: codemode_executor::Confinement) -> RawWorker {
    let level = [(codemode_executor::confine::CONFINEMENT_VAR, confinement.name())];
    let env: &[(&str, &str)] = if confinement.confines() { &level } else { &[] };
    RawWorker::spawn(&common::codemode_binary(), &["stdio"], env)
}

impl RawWorker {
    /// Execution `id` of `code` with a `store` provider whose calls are answered 1 at once;
    /// its result.
    fn run(&mut self, id: u64, code: &str) -> serde_json::Value {
        let request = serde_json::json!({
            "type": "execute", "execution": id,
            "request": { "code": code, "dispatch": true, "providers": [{ "name": "store", "tools": ["one"] }] },
        });
        self.send(&request.to_string());
        loop {
            let message = self.line();
            match message["type"].as_str() {
                Some("call") => {
                    let answer = serde_json::json!({
                        "type": "answer", "execution": id, "call": message["call"], "answer": r#"{"result":1}"#,
                    });
                    self.send(&answer.to_string());
                }
                Some("outcome") => return message["outcome"]["result"].clone(),
                _ => panic!("unexpected {message}"),
            }
        }
    }
}

/// The time from spawning a worker to the outcome of its first run, `async () => 1`.
fn worker_start(confinement: codemode_executor::Confinement) -> Duration {
    let started = std::time::Instant::now();
    let mut worker = raw_worker(confinement);
    let result = worker.run(1, "async () => 1");
    let elapsed = started.elapsed();
    assert_eq!(result, 1);
    elapsed
}

/// The time of a fresh worker's second run, 100 sequential calls (the first, `async () =>
/// 1`, warms both levels alike): a call's round trip with the filter on and off.
fn second_run_of_100_calls(confinement: codemode_executor::Confinement) -> Duration {
    let mut worker = raw_worker(confinement);
    assert_eq!(worker.run(1, "async () => 1"), 1);
    let started = std::time::Instant::now();
    let result = worker
        .run(2, "async () => { let s = 0; for (let i = 0; i < 100; i++) s += await store.one(i); return s }");
    let elapsed = started.elapsed();
    assert_eq!(result, 100);
    elapsed
}

criterion_group!(execute, benches);
criterion_main!(execute);
