//! The CPU time budget measured, on each engine built in, beside a reference in the same
//! run: `cargo bench -p codemode-executor [--features v8] --bench cpu_budget`. Medians of
//! [`SAMPLES`] runs; it asserts nothing, it prints the outcomes' kinds with the times.
//!
//! 1. `for (;;) {}` under `cpuTimeLimitMs: 300`, against the same loop under `timeoutMs:
//!    300` (the wall clock): the time from `execute` to the outcome, and from the outcome
//!    to the engine gone (live engines back to zero).
//! 2. Two bursts of 200 ms around a 1 s wait, under 300 ms and 500 ms of CPU: kinds and
//!    time, idle and while two other programs spin on both cores.
//! 3. What the budget costs a run of 1,000 calls answered at once: with a budget of 10 s
//!    against none (the clock is read around each wait awake for an answer).

use std::time::{Duration, Instant};

use codemode_executor::{EngineKind, Executor, ExecutorConfig, Request};
use codemode_protocol::{ProviderDescriptor, ToolCall};

const SAMPLES: usize = 9;

const BURSTS: &str = "async () => { const burn = ms => { const t = Date.now(); while (Date.now() - t < ms) {} }; burn(200); await new Promise(r => setTimeout(r, 1000)); burn(200); return 'done' }";

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

/// The median time to the outcome and to the engine gone, and the kinds seen.
async fn timed(executor: &Executor, request: impl Fn() -> Request) -> (Duration, Duration, String) {
    let (mut outcome_times, mut gone_times, mut kinds) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..SAMPLES {
        let started = Instant::now();
        let outcome = executor.execute(request()).await;
        outcome_times.push(started.elapsed());
        let ended = Instant::now();
        while executor.live_engines() > 0 {
            tokio::time::sleep(Duration::from_micros(200)).await;
        }
        gone_times.push(ended.elapsed());
        kinds.push(outcome.kind().as_str());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    kinds.dedup();
    (median(outcome_times), median(gone_times), kinds.join("/"))
}

async fn endless_loop(engine: EngineKind) {
    let executor = Executor::new(ExecutorConfig::default().engine(engine));
    let spin = || Request::new("async () => { for (;;) {} }");
    let (cpu, cpu_gone, cpu_kind) = timed(&executor, || {
        spin().cpu_time_limit(Duration::from_millis(300)).timeout(Duration::from_secs(10))
    })
    .await;
    let (wall, wall_gone, wall_kind) = timed(&executor, || spin().timeout(Duration::from_millis(300))).await;
    println!(
        "{:<8} for(;;){{}}  cpuTimeLimitMs 300: {} to the outcome ({cpu_kind}), engine gone {} later | timeoutMs 300: {} ({wall_kind}), gone {} later | ratio {:.3}",
        engine.name(),
        ms(cpu),
        ms(cpu_gone),
        ms(wall),
        ms(wall_gone),
        cpu.as_secs_f64() / wall.as_secs_f64()
    );
}

async fn bursts(engine: EngineKind, neighbours: bool) {
    let executor = Executor::new(ExecutorConfig::default().engine(engine).workers(3));
    let spinners: Vec<_> = (0..if neighbours { 2 } else { 0 })
        .map(|_| {
            let executor = executor.clone();
            tokio::spawn(async move {
                executor
                    .execute(Request::new("async () => { for (;;) {} }").timeout(Duration::from_secs(60)))
                    .await
            })
        })
        .collect();
    let budget = |ms_| move || Request::new(BURSTS).cpu_time_limit(Duration::from_millis(ms_));
    let (under_300, _, kind_300) = timed(&executor, budget(300)).await;
    let (under_500, _, kind_500) = timed(&executor, budget(500)).await;
    for spinner in spinners {
        spinner.abort();
    }
    println!(
        "{:<8} 2 × 200 ms around 1 s{}: 300 ms budget {} ({kind_300}), 500 ms budget {} ({kind_500})",
        engine.name(),
        if neighbours { ", two neighbours spinning" } else { "" },
        ms(under_300),
        ms(under_500)
    );
}

async fn call_overhead(engine: EngineKind) {
    let executor = Executor::new(ExecutorConfig::default().engine(engine));
    let code = "async () => { let n = 0; for (let i = 0; i < 1000; i++) n += await store.x(i); return n }";
    let request = || {
        Request::new(code)
            .provider(ProviderDescriptor::new("store", ["x"]))
            .dispatch(|_: ToolCall| async { r#"{"result":1}"#.to_owned() })
    };
    let (mut with, mut without) = (Vec::new(), Vec::new());
    for _ in 0..SAMPLES * 3 {
        let started = Instant::now();
        executor.execute(request().cpu_time_limit(Duration::from_secs(10))).await;
        with.push(started.elapsed());
        let started = Instant::now();
        executor.execute(request()).await;
        without.push(started.elapsed());
    }
    let (with, without) = (median(with), median(without));
    println!(
        "{:<8} 1,000 calls: with a CPU budget {}, without {}, ratio {:.3}",
        engine.name(),
        ms(with),
        ms(without),
        with.as_secs_f64() / without.as_secs_f64()
    );
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    runtime.block_on(async {
        for &engine in EngineKind::BUILT_IN {
            endless_loop(engine).await;
            bursts(engine, false).await;
            bursts(engine, true).await;
            call_overhead(engine).await;
        }
    });
}
