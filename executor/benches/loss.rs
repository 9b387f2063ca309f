//! No execution lost, at full counts: 10,000 sequential runs and 1,000 runs of 40
//! concurrent calls with 30 KB arguments, under process isolation and over a
//! `codemode serve` daemon on a Unix socket. `executor/cli/tests/transports.rs` runs the same
//! cases at smaller counts on every `cargo test`; this is the soak. Prints what was lost
//! (and the median run) per transport and exits 1 if anything was.
//! `cargo bench --bench loss`.

mod common;

use std::process::ExitCode;
use std::time::{Duration, Instant};

use codemode_executor::{Execute, ExecutorConfig, ProcessExecutor, Request, WorkerCommand};
use codemode_protocol::{ProviderDescriptor, ToolCall};

const SEQUENTIAL: usize = 10_000;
const CONCURRENT: usize = 1_000;

fn main() -> ExitCode {
    if std::env::args().any(|a| a == "--list") {
        return ExitCode::SUCCESS;
    }
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let (daemon, path) = common::serve("loss");
    let command = WorkerCommand::new(common::codemode_binary(), ["stdio"]);
    let isolated = ProcessExecutor::new(ExecutorConfig::default().workers(2), command);
    let remote = rt.block_on(common::connect(&path));
    let transports: [(&str, &dyn Execute); 2] = [("process isolation", &isolated), ("daemon", &remote)];
    let mut lost_any = false;
    println!(
        "executions lost, of {SEQUENTIAL} sequential runs and {CONCURRENT} runs of 40 calls with 30 KB arguments:"
    );
    for (name, executor) in transports {
        let (lost, run) = soak(&rt, executor, SEQUENTIAL, || Request::new("async () => 1"), "1");
        println!("  {name:<18} sequential      lost {lost:>5}   median run {:>8.1} µs", micros(run));
        let (lost_calls, run_calls) = soak(&rt, executor, CONCURRENT, forty_calls, "780");
        println!(
            "  {name:<18} 40 calls × 30 KB lost {lost_calls:>5}   median run {:>8.1} µs",
            micros(run_calls)
        );
        lost_any |= lost + lost_calls > 0;
    }
    drop(daemon);
    if lost_any { ExitCode::FAILURE } else { ExitCode::SUCCESS }
}

/// Runs `request()` `n` times in a row; how many did not return `expected`, and the
/// median run. The first failure is printed.
fn soak(
    rt: &tokio::runtime::Runtime,
    executor: &dyn Execute,
    n: usize,
    request: impl Fn() -> Request,
    expected: &str,
) -> (usize, Duration) {
    let want = format!(r#"{{"result":{expected},"logs":[]}}"#);
    let mut lost = 0;
    let mut runs = Vec::with_capacity(n);
    for run in 0..n {
        let started = Instant::now();
        let outcome = rt.block_on(executor.execute(request())).to_json_string();
        runs.push(started.elapsed());
        if outcome != want {
            if lost == 0 {
                println!("    run {run}: {outcome}");
            }
            lost += 1;
        }
    }
    runs.sort();
    (lost, runs[runs.len() / 2])
}

/// 40 concurrent calls, each with a 30 KB argument, answered with their index.
fn forty_calls() -> Request {
    let argument = "x".repeat(30_000);
    let code = format!(
        "async () => (await Promise.all(Array.from({{ length: 40 }}, (_, i) => store.echo(i, '{argument}')))).reduce((a, b) => a + b, 0)"
    );
    Request::new(code).provider(ProviderDescriptor::new("store", ["echo"])).dispatch(
        |call: ToolCall| async move {
            let index: String = call.args_json[1..].chars().take_while(char::is_ascii_digit).collect();
            format!(r#"{{"result":{index}}}"#)
        },
    )
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}
