//! What the balancing client adds to an execution: `async () => 1` through a client of one
//! daemon and through a fleet client of three endpoints (power of two choices over
//! in-flight executions) that are three connections to that same daemon, so only the
//! client differs; in the same run, samples alternated. Prints medians and the
//! difference. `cargo bench --bench fleet`.

use std::time::{Duration, Instant};

use codemode_executor::daemon::{Address, Daemon, DaemonConfig, RemoteOptions};
use codemode_executor::{Endpoints, Executor, ExecutorConfig, RemoteExecutor, Request};

const RUNS: usize = 200;
const SAMPLES: usize = 25;

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let (single, fleet) = rt.block_on(async {
        let path = std::env::temp_dir().join(format!("codemode-bench-fleet-{}.sock", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let daemon = Daemon::bind(DaemonConfig::new(Address::Unix(path))).await.unwrap();
        let address = daemon.address().to_string();
        tokio::spawn(daemon.serve(Executor::new(ExecutorConfig::default().workers(1))));
        let single = RemoteExecutor::connect(&address, None).await.unwrap();
        let three = Endpoints::Static(vec![address.clone(), address.clone(), address]);
        let fleet = RemoteExecutor::connect_fleet(three, RemoteOptions::default()).await.unwrap();
        (single, fleet)
    });
    let runs = |remote: &RemoteExecutor| {
        let started = Instant::now();
        rt.block_on(async {
            for _ in 0..RUNS {
                remote.execute(Request::new("async () => 1")).await;
            }
        });
        started.elapsed() / RUNS as u32
    };
    runs(&single);
    runs(&fleet);
    let (mut one, mut three) = (Vec::new(), Vec::new());
    for sample in 0..SAMPLES {
        // Alternated, so drift in the machine falls on both.
        if sample % 2 == 0 {
            one.push(runs(&single));
            three.push(runs(&fleet));
        } else {
            three.push(runs(&fleet));
            one.push(runs(&single));
        }
    }
    let (one, three) = (median(one), median(three));
    println!("one execution over a daemon, median of {SAMPLES} samples of {RUNS} runs:");
    println!("  a client of one daemon        {:>8.1} µs", micros(one));
    println!(
        "  a fleet client of three       {:>8.1} µs   difference {:+.1} µs",
        micros(three),
        micros(three) - micros(one)
    );
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}
