//! Memory held per live execution: retain N engines and read the process's resident set.
//! A bench binary (`cargo bench --bench memory`), not a test: it reports, it asserts nothing.

use codemode_executor::{EngineKind, Executor, ExecutorConfig, Request};

fn resident_bytes() -> usize {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: usize = statm.split_whitespace().nth(1).and_then(|p| p.parse().ok()).unwrap_or(0);
    pages * 4096
}

/// Resident memory by kind of mapping (`CODEMODE_BENCH_SMAPS=1`), to see where a live
/// execution's memory sits: thread stacks (the 16 MiB mappings: only touched pages count),
/// malloc's main heap, and the anonymous mappings of malloc's thread arenas.
fn smaps_summary() {
    let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap_or_default();
    let mut totals: std::collections::BTreeMap<String, (usize, usize)> = Default::default();
    let mut kind = String::new();
    for line in smaps.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let Some(first) = fields.first() else { continue };
        if let Some((lo, hi)) = first.split_once('-').filter(|_| !first.ends_with(':')) {
            let size =
                usize::from_str_radix(hi, 16).unwrap_or(0) - usize::from_str_radix(lo, 16).unwrap_or(0);
            kind = match fields.get(5) {
                Some(name) => name.to_string(),
                None if (15 << 20..=17 << 20).contains(&size) => "anonymous, 16 MiB: thread stacks".into(),
                None => "anonymous, other: malloc arenas and large blocks".into(),
            };
        } else if *first == "Rss:" {
            let entry = totals.entry(kind.clone()).or_default();
            entry.0 += fields.get(1).and_then(|kib| kib.parse::<usize>().ok()).unwrap_or(0);
            entry.1 += 1;
        }
    }
    for (kind, (kib, count)) in totals.into_iter().filter(|(_, (kib, _))| *kib >= 1024) {
        println!("  {kind}: {kib} KiB resident in {count} mappings");
    }
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
    let executor = Executor::new(ExecutorConfig::default().workers(1).engine(engine));
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
            if std::env::var_os("CODEMODE_BENCH_SMAPS").is_some() {
                smaps_summary();
            }
            drop(retained);
        }
    });
}
