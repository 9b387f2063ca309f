//! The engines side by side (criterion, `cargo xtask bench`): each workload on every
//! engine built in, in one run, so the ratios in docs/performance.md come from one machine
//! state. Build with `--features v8` for the V8 column.

mod common;

use std::time::Duration;

use codemode_executor::{EngineKind, Executor, ExecutorConfig, Request};
use codemode_protocol::{ProviderDescriptor, ToolCall, result_envelope};
use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

fn one_call() -> Request {
    Request::new("async () => await store.one(1)")
        .provider(ProviderDescriptor::new("store", ["one"]))
        .dispatch(|_: ToolCall| async { r#"{"result":1}"#.to_owned() })
}

/// 10,000 records from a tool, filtered, grouped, summed and sorted: what a model's
/// program typically does with a tool's answer.
fn records() -> Request {
    let rows: Vec<serde_json::Value> = (0..10_000)
        .map(|i| {
            let region = ["north", "south", "east", "west"][i % 4];
            serde_json::json!({ "id": i, "region": region, "amount": (i * 37) % 1000, "open": i % 3 != 0 })
        })
        .collect();
    let answer = result_envelope(&rows).unwrap_or_default();
    Request::new(
        "async () => {
          const rows = await store.orders();
          const totals = {};
          for (const row of rows.filter((r) => r.open)) totals[row.region] = (totals[row.region] ?? 0) + row.amount;
          return Object.entries(totals).sort((a, b) => b[1] - a[1]).map(([region, total]) => `${region}: ${total}`);
        }",
    )
    .provider(ProviderDescriptor::new("store", ["orders"]))
    .dispatch(move |_: ToolCall| {
        let answer = answer.clone();
        async move { answer }
    })
}

/// Plain computation: a loop building objects and strings.
fn compute() -> Request {
    Request::new(
        "async () => {
          const parts = [];
          for (let i = 0; i < 200000; i++) { const o = { i, s: 'k' + (i % 97) }; if (o.i % 1000 === 0) parts.push(o.s + ':' + o.i) }
          return parts.join(',').length;
        }",
    )
}

/// A workload: a fresh request each run.
type Workload = fn() -> Request;

fn benches(c: &mut Criterion) {
    let rt = runtime();
    let workloads: [(&str, Workload); 6] = [
        ("async () => 1", || Request::new("async () => 1")),
        ("one tool call", one_call),
        ("100 sequential tool calls", || common::calls(100)),
        ("1 MiB Uint8Array to dispatch and back", common::echo_bytes),
        ("10,000 records filtered, grouped, sorted", records),
        ("a loop building 200,000 objects", compute),
    ];
    let mut group = c.benchmark_group("engines");
    group.measurement_time(Duration::from_secs(5));
    for &engine in EngineKind::BUILT_IN {
        let executor = Executor::new(ExecutorConfig::default().workers(1).engine(engine));
        for (name, request) in workloads {
            group.bench_with_input(BenchmarkId::new(name, engine.name()), &request, |b, request| {
                b.iter(|| rt.block_on(executor.execute(request())))
            });
        }
    }
    group.finish();
}

criterion_group!(engines, benches);
criterion_main!(engines);
