//! What process isolation adds to a run's latency, p50 and p99: `async () => 1` end to end
//! (the execute call to the outcome in hand) in-process and in a warm pool of locked
//! workers, on each engine built in, one at a time and 16 at once, in one run so the ratios
//! come from one machine state. `cargo bench -p codemode-executor --features v8 --bench
//! isolation_latency`; without the feature the V8 rows are left out. It asserts nothing.
//!
//! Every executor keeps [`READY`] engines (in-process) or locked workers (process
//! isolation, `Confinement::Required`: a worker serves one run) ready. A locked worker's
//! replacement starts when a run takes it, so each sample begins after a pause, not timed,
//! long enough for the pool to be full again: one at a time, `CODEMODE_BENCH_PAUSE_MS`
//! (50 by default) before each run; 16 at once, the 16 runs started together (each
//! sample one run's latency) after `CODEMODE_BENCH_SETTLE_MS` (1,500 by default). The
//! configurations take turns, round by round, so a change in the machine's load reaches
//! all of them alike. A last table keeps 16 runs in flight without a pause (each run's
//! end starts the next), where a locked pool runs as fast as its workers start.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use codemode_executor::{
    Confinement, EngineKind, Execute, Executor, ExecutorConfig, ProcessExecutor, Request, WorkerCommand,
};
use codemode_protocol::OutcomeKind;
use common::RawWorker;

/// Engines or locked workers kept ready by every executor measured.
const READY: usize = 16;
/// Runs in flight at once in the concurrent measurements.
const AT_ONCE: usize = 16;
/// Samples one at a time, per configuration.
const SAMPLES_ONE: usize = 250;
/// Rounds of [`AT_ONCE`] runs, per configuration (16 × 16 = 256 samples).
const ROUNDS: usize = 16;
/// Samples kept in flight without a pause, per configuration.
const SAMPLES_SUSTAINED: usize = 256;

struct Configuration {
    name: String,
    executor: Arc<dyn Execute>,
    engine: EngineKind,
    isolated: bool,
}

fn env_ms(name: &str, default: u64) -> Duration {
    Duration::from_millis(std::env::var(name).ok().and_then(|ms| ms.parse().ok()).unwrap_or(default))
}

/// The worker: the codemode binary of this bench's profile, with V8 when this bench has
/// it (one binary serves both engines: each worker is told its engine), or the one
/// `CODEMODE_BENCH_WORKER` names (to compare two builds of the host side with one worker).
fn worker_binary() -> std::path::PathBuf {
    if let Some(path) = std::env::var_os("CODEMODE_BENCH_WORKER") {
        return path.into();
    }
    let v8 = EngineKind::BUILT_IN.contains(&EngineKind::V8);
    common::codemode_binary_with(if v8 { &["v8"] } else { &[] })
}

fn configurations() -> Vec<Configuration> {
    let binary = worker_binary();
    let mut all = Vec::new();
    for &engine in EngineKind::BUILT_IN {
        let config = ExecutorConfig::default().workers(READY).engine(engine);
        all.push(Configuration {
            name: format!("{} in-process", engine.name()),
            executor: Arc::new(Executor::new(config.clone())),
            engine,
            isolated: false,
        });
        let command = WorkerCommand::new(binary.clone(), ["stdio"]);
        all.push(Configuration {
            name: format!("{} process isolation, locked", engine.name()),
            executor: Arc::new(ProcessExecutor::new(config.confinement(Confinement::Required), command)),
            engine,
            isolated: true,
        });
    }
    all
}

/// One run's latency; panics unless it returned 1.
async fn timed(executor: &dyn Execute) -> Duration {
    let started = Instant::now();
    let outcome = executor.execute(Request::new("async () => 1")).await;
    let elapsed = started.elapsed();
    assert_eq!(outcome.kind(), OutcomeKind::Returned, "{}", outcome.to_json_string());
    elapsed
}

/// `AT_ONCE` runs started together; each one's latency.
async fn burst(executor: &Arc<dyn Execute>) -> Vec<Duration> {
    let mut runs = tokio::task::JoinSet::new();
    for _ in 0..AT_ONCE {
        let executor = executor.clone();
        runs.spawn(async move { timed(&*executor).await });
    }
    runs.join_all().await
}

/// `AT_ONCE` runs kept in flight until `SAMPLES_SUSTAINED` have ended; each one's latency.
async fn sustained(executor: &Arc<dyn Execute>) -> Vec<Duration> {
    let left = Arc::new(std::sync::atomic::AtomicUsize::new(SAMPLES_SUSTAINED));
    let mut lanes = tokio::task::JoinSet::new();
    for _ in 0..AT_ONCE {
        let (executor, left) = (executor.clone(), left.clone());
        lanes.spawn(async move {
            let mut samples = Vec::new();
            while left
                .fetch_update(std::sync::atomic::Ordering::SeqCst, std::sync::atomic::Ordering::SeqCst, |n| {
                    n.checked_sub(1)
                })
                .is_ok()
            {
                samples.push(timed(&*executor).await);
            }
            samples
        });
    }
    lanes.join_all().await.concat()
}

/// The sample at `q` (0 to 1) of sorted samples, nearest rank.
fn quantile(sorted: &[Duration], q: f64) -> Duration {
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

struct Row {
    p50: Duration,
    p99: Duration,
    max: Duration,
    samples: usize,
}

fn row(mut samples: Vec<Duration>) -> Row {
    samples.sort();
    Row {
        p50: quantile(&samples, 0.50),
        p99: quantile(&samples, 0.99),
        max: *samples.last().unwrap(),
        samples: samples.len(),
    }
}

/// A markdown table: one line per configuration, its ratios against in-process V8 (or
/// in-process QuickJS when V8 is not built).
fn print_table(title: &str, configurations: &[Configuration], rows: &[Row]) {
    let base_engine =
        if EngineKind::BUILT_IN.contains(&EngineKind::V8) { EngineKind::V8 } else { EngineKind::QuickJs };
    let base = configurations.iter().position(|c| c.engine == base_engine && !c.isolated).unwrap();
    let base_name = &configurations[base].name;
    println!("\n{title}\n");
    println!(
        "| configuration | p50 ms | p99 ms | max ms | samples | p50 / {base_name} | p99 / {base_name} |"
    );
    println!("|---|---|---|---|---|---|---|");
    for (configuration, row) in configurations.iter().zip(rows) {
        println!(
            "| {} | {:.3} | {:.3} | {:.2} | {} | {:.2}× | {:.2}× |",
            configuration.name,
            ms(row.p50),
            ms(row.p99),
            ms(row.max),
            row.samples,
            row.p50.as_secs_f64() / rows[base].p50.as_secs_f64(),
            row.p99.as_secs_f64() / rows[base].p99.as_secs_f64(),
        );
    }
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let pause = env_ms("CODEMODE_BENCH_PAUSE_MS", 50);
    let settle = env_ms("CODEMODE_BENCH_SETTLE_MS", 1500);
    // `-- pool` or `-- direct` measures only those tables.
    let only: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with("--")).collect();
    let wanted = |part: &str| only.is_empty() || only.iter().any(|o| o == part);
    println!(
        "async () => 1 end to end, {READY} engines or locked workers kept ready; pause {} ms, settle {} ms",
        pause.as_millis(),
        settle.as_millis()
    );
    if wanted("pool") {
        through_executors(pause, settle);
    }
    if wanted("direct") {
        direct(pause, settle);
    }
}

/// Every configuration through its executor: the three tables.
fn through_executors(pause: Duration, settle: Duration) {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let configurations = configurations();

    // Warm up: a burst each, then the pools fill.
    rt.block_on(async {
        for configuration in &configurations {
            burst(&configuration.executor).await;
        }
    });
    std::thread::sleep(settle);

    let mut one: Vec<Vec<Duration>> = vec![Vec::new(); configurations.len()];
    for _ in 0..SAMPLES_ONE {
        for (i, configuration) in configurations.iter().enumerate() {
            std::thread::sleep(pause);
            one[i].push(rt.block_on(timed(&*configuration.executor)));
        }
    }
    std::thread::sleep(settle);

    let mut at_once: Vec<Vec<Duration>> = vec![Vec::new(); configurations.len()];
    for _ in 0..ROUNDS {
        for (i, configuration) in configurations.iter().enumerate() {
            std::thread::sleep(settle);
            at_once[i].extend(rt.block_on(burst(&configuration.executor)));
        }
    }

    let mut kept: Vec<Vec<Duration>> = Vec::new();
    for configuration in &configurations {
        std::thread::sleep(settle);
        kept.push(rt.block_on(sustained(&configuration.executor)));
    }

    let rows = |samples: Vec<Vec<Duration>>| samples.into_iter().map(row).collect::<Vec<_>>();
    print_table("one at a time (a pause before each run):", &configurations, &rows(one));
    print_table(
        &format!("{AT_ONCE} at once (started together, the pool full before each round):"),
        &configurations,
        &rows(at_once),
    );
    print_table(
        &format!("{AT_ONCE} kept in flight, no pause (each run's end starts the next):"),
        &configurations,
        &rows(kept),
    );
}

/// Where a locked worker's run goes without the pool: workers spawned as the pool spawns
/// them and spoken to directly, blocking, each run timed from the request's write to the
/// outcome's read, with no replacement starting beside it.
fn direct(pause: Duration, settle: Duration) {
    println!("\nlocked workers spoken to directly (no pool, no replacement starting beside the run):\n");
    println!(
        "| engine | start to hello, p50 ms | one at a time p50 ms | p99 ms | the worker's CPU in the run, p50 ms | its page faults in the run, p50 | {AT_ONCE} at once p50 ms | p99 ms |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for &engine in EngineKind::BUILT_IN {
        let binary = worker_binary();
        let (mut starts, mut one, mut many) = (Vec::new(), Vec::new(), Vec::new());
        let (mut cpu, mut faults) = (Vec::new(), Vec::new());
        for _ in 0..SAMPLES_ONE {
            let started = Instant::now();
            let mut worker = raw_worker(&binary, engine);
            starts.push(started.elapsed());
            std::thread::sleep(pause);
            let before = worker.usage();
            one.push(worker.run());
            let after = worker.usage();
            cpu.push(after.0.saturating_sub(before.0));
            faults.push(after.1.saturating_sub(before.1));
        }
        faults.sort();
        for _ in 0..ROUNDS {
            let workers: Vec<RawWorker> = (0..AT_ONCE).map(|_| raw_worker(&binary, engine)).collect();
            std::thread::sleep(settle);
            let gate = Arc::new(std::sync::Barrier::new(AT_ONCE));
            let threads: Vec<_> = workers
                .into_iter()
                .map(|mut worker| {
                    let gate = gate.clone();
                    std::thread::spawn(move || {
                        gate.wait();
                        worker.run()
                    })
                })
                .collect();
            many.extend(threads.into_iter().map(|thread| thread.join().unwrap()));
        }
        let (starts, one, many, cpu) = (row(starts), row(one), row(many), row(cpu));
        println!(
            "| {} | {:.2} | {:.3} | {:.3} | {:.3} | {} | {:.3} | {:.3} |",
            engine.name(),
            ms(starts.p50),
            ms(one.p50),
            ms(one.p99),
            ms(cpu.p50),
            faults[faults.len() / 2],
            ms(many.p50),
            ms(many.p99)
        );
    }
}

/// A locked worker of `binary` on `engine`, as the pool starts one.
fn raw_worker(binary: &std::path::Path, engine: EngineKind) -> RawWorker {
    let level = [(codemode_executor::confine::CONFINEMENT_VAR, Confinement::Required.name())];
    RawWorker::spawn(binary, &["stdio", "--engine", engine.name()], &level)
}

impl RawWorker {
    /// The CPU time its threads have had (from each one's `schedstat`) and its minor page
    /// faults so far.
    fn usage(&self) -> (Duration, u64) {
        let proc = format!("/proc/{}", self.child.id());
        let mut on_cpu = 0;
        for task in std::fs::read_dir(format!("{proc}/task")).into_iter().flatten().flatten() {
            let schedstat = std::fs::read_to_string(task.path().join("schedstat")).unwrap_or_default();
            on_cpu += schedstat.split(' ').next().and_then(|ns| ns.parse::<u64>().ok()).unwrap_or(0);
        }
        // Field 10 of stat, counted after the command's closing parenthesis.
        let stat = std::fs::read_to_string(format!("{proc}/stat")).unwrap_or_default();
        let after_name = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
        let minor_faults = after_name.split_whitespace().nth(7).and_then(|n| n.parse().ok()).unwrap_or(0);
        (Duration::from_nanos(on_cpu), minor_faults)
    }

    /// `async () => 1`, from the request's write to the outcome's read.
    fn run(&mut self) -> Duration {
        let request = r#"{"type":"execute","execution":1,"request":{"code":"async () => 1"}}"#;
        let started = Instant::now();
        self.send(request);
        let outcome = self.line();
        let elapsed = started.elapsed();
        assert_eq!(outcome["outcome"]["result"], 1, "{outcome}");
        elapsed
    }
}
