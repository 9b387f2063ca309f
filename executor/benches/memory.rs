//! Memory held per live execution: retain N engines and read the process's resident set.
//! A bench binary (`cargo bench --bench memory`), not a test: it reports, it asserts nothing.

use codemode_executor::{EngineKind, Executor, ExecutorConfig, Request};

fn resident_bytes() -> usize {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: usize = statm.split_whitespace().nth(1).and_then(|p| p.parse().ok()).unwrap_or(0);
    pages * 4096
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    // One engine per process: the resident set does not shrink when engines are freed.
    let engine: EngineKind = std::env::var("CODEMODE_BENCH_ENGINE").map_or(EngineKind::QuickJs, |name| {
        name.parse().unwrap_or_else(|e| panic!("CODEMODE_BENCH_ENGINE: {e}"))
    });
    let executor = Executor::new(ExecutorConfig { workers: 1, engine, ..Default::default() });
    const N: usize = 500;
    runtime.block_on(async {
        // Warm up: the process-wide bytecode and allocator arenas are not per execution.
        drop(executor.execute_retained(Request::new("async () => 1")).await);
        // The resident set does not shrink when engines are freed, so one case per process.
        for (label, code) in [("async () => 1", "async () => 1")] {
            let before = resident_bytes();
            let mut retained = Vec::with_capacity(N);
            for _ in 0..N {
                retained.push(executor.execute_retained(Request::new(code)).await.1);
            }
            let after = resident_bytes();
            println!(
                "memory per live execution on {} ({label}): {:.0} KiB ({N} retained engines, resident set +{:.1} MiB)",
                engine.name(),
                (after.saturating_sub(before)) as f64 / N as f64 / 1024.0,
                (after.saturating_sub(before)) as f64 / (1 << 20) as f64
            );
            drop(retained);
        }
    });
}
