//! How long an engine keeps its core after the deadline: for each busy program, the time
//! from the deadline (when the outcome is delivered) until the engine is disposed.
//! A bench binary (`cargo bench --bench overrun`): it reports, it asserts nothing.

use std::time::{Duration, Instant};

use codemode_executor::{Executor, ExecutorConfig, Request};

const PROGRAMS: &[(&str, &str)] = &[
    ("while (true) {}", "async () => { while (true) {} }"),
    (
        "const a = new Array(3e5); while (true) a.fill(1)",
        "async () => { const a = new Array(3e5); while (true) a.fill(1) }",
    ),
    ("while (true) new Array(3e5).fill(1)", "async () => { while (true) new Array(3e5).fill(1) }"),
    (
        "sorting 200,000 elements",
        "async () => { const a = Array.from({ length: 200000 }, (_, i) => (i * 7919) % 200000); while (true) a.slice().sort() }",
    ),
    (
        "one sort of 2,000,000 elements",
        "async () => { const a = Array.from({ length: 2e6 }, (_, i) => (i * 7919) % 2e6); a.sort(); return 1 }",
    ),
    ("'ab'.repeat(1e6)", "async () => { while (true) 'ab'.repeat(1e6) }"),
    ("/^(a+)+$/", "async () => /^(a+)+$/.test('a'.repeat(50) + 'b')"),
];

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let executor = Executor::new(ExecutorConfig::default().workers(1));
    let timeout = Duration::from_millis(200);
    runtime.block_on(async {
        for (label, code) in PROGRAMS {
            let mut overruns = Vec::new();
            for _ in 0..5 {
                let started = Instant::now();
                let outcome = executor.execute(Request::new(*code).timeout(timeout)).await;
                let delivered = started.elapsed();
                while executor.live_engines() > 0 {
                    tokio::time::sleep(Duration::from_micros(200)).await;
                }
                overruns.push((started.elapsed().saturating_sub(timeout), delivered, outcome.error_text().is_some()));
            }
            overruns.sort();
            let (overrun, delivered, _) = overruns[overruns.len() / 2];
            println!("overrun past a 200 ms deadline, {label}: outcome at {delivered:.0?}, engine gone {overrun:.1?} after the deadline (median of 5)");
        }
    });
}
