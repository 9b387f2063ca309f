//! Computation beside its floor (criterion, `cargo xtask bench`): each program of
//! `benches/programs/` run by codemode-rs's `execute` and, in the same run, on bare
//! rquickjs (the same vendored QuickJS, with no sandbox, limits, prelude or codec), the
//! reference issue 15 measures against; the records once more with an answer holding `\u`
//! escapes. `peers.js` runs the same files on node:vm. With
//! `--features v8`, each program through `execute` on V8 as well.

use std::sync::Arc;
use std::time::Duration;

use codemode_executor::{Executor, ExecutorConfig, Limits, Request};
use codemode_protocol::{Outcome, ProviderDescriptor, ToolCall, result_envelope};
use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};

/// A program file without its first line (the comment saying what it is).
fn program(source: &str) -> &str {
    source.split_once('\n').map_or(source, |(_, body)| body).trim()
}

const COMPUTE_MIX: &str = include_str!("programs/compute-mix.js");
const JSON: &str = include_str!("programs/json.js");
const RECORDS: &str = include_str!("programs/records.js");

/// The 10,000 rows `store.orders()` answers, as `peers.js` builds them.
fn rows_json() -> String {
    let rows: Vec<serde_json::Value> = (0..10_000)
        .map(|i| {
            let region = ["north", "south", "east", "west"][i % 4];
            serde_json::json!({ "id": i, "region": region, "amount": (i * 37) % 1000, "open": i % 3 != 0 })
        })
        .collect();
    serde_json::to_string(&rows).unwrap_or_default()
}

/// The program through `execute`; `store.orders()` answers `envelope` at once.
fn request(source: &'static str, envelope: &Arc<str>) -> Request {
    let envelope = envelope.clone();
    Request::new(program(source)).provider(ProviderDescriptor::new("store", ["orders"])).dispatch(
        move |_: ToolCall| {
            let envelope = envelope.to_string();
            async move { envelope }
        },
    )
}

/// The program on a fresh bare runtime and context: QuickJS's own allocator, no limits,
/// no interrupt handler; `store.orders()` is `JSON.parse` of the answer, as a host
/// without a codec would write it. Returns the result's JSON.
fn bare(source: &str, answer: &str) -> String {
    let runtime = rquickjs::Runtime::new().expect("a runtime");
    let context = rquickjs::Context::full(&runtime).expect("a context");
    context.with(|ctx| {
        ctx.globals().set("__answer", answer).expect("a global");
        let promise: rquickjs::Promise = ctx
            .eval(format!(
                "const store = {{ orders: async () => JSON.parse(__answer) }};\n({})()",
                program(source)
            ))
            .expect("the program runs");
        let value: rquickjs::Value = promise.finish().expect("the program settles");
        ctx.json_stringify(value).ok().flatten().and_then(|text| text.to_string().ok()).unwrap_or_default()
    })
}

fn benches(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    // 512 MiB for every run, set on the executor: its warm engines are made for its own
    // limits (a V8 isolate's heap limit is fixed when it is made).
    let limits = Limits::default().memory_limit_bytes(512 << 20);
    let executor = Executor::new(ExecutorConfig::default().workers(1).limits(limits.clone()));
    let rows = rows_json();
    let value: serde_json::Value = serde_json::from_str(&rows).unwrap_or_default();
    let envelope: Arc<str> = result_envelope(&value).unwrap_or_default().into();
    let workloads =
        [("compute mix", COMPUTE_MIX), ("JSON round trip of 2 MB", JSON), ("10,000 records", RECORDS)];
    // The same rows as Python's `json.dumps` writes a region that is not ASCII: escaped.
    let escaped_rows = rows.replace("\"north\"", "\"n\\u00f6rth\"");
    let escaped: Arc<str> = format!("{{\"result\":{escaped_rows}}}").into();
    let answers = [(&envelope, &rows), (&escaped, &escaped_rows)];
    for (_, source) in workloads {
        for (envelope, rows) in answers {
            let ours = rt.block_on(executor.execute(request(source, envelope)));
            let reference = bare(source, rows);
            let Outcome::Result { result: Some(result), .. } = &ours else { panic!("{ours:?}") };
            assert_eq!(
                serde_json::to_string(result).unwrap_or_default(),
                reference,
                "both run the same program"
            );
        }
    }
    // With the `v8` feature, the same programs through `execute` on V8 too (the engine to
    // pick for computation, docs/performance.md).
    #[cfg(feature = "v8")]
    let on_v8 = Executor::new(
        ExecutorConfig::default().workers(1).limits(limits).engine(codemode_executor::EngineKind::V8),
    );
    let mut group = c.benchmark_group("compute");
    group.sample_size(20).measurement_time(Duration::from_secs(8));
    for (name, source) in workloads {
        group.bench_with_input(BenchmarkId::new(name, "codemode-rs"), &source, |b, &source| {
            b.iter(|| rt.block_on(executor.execute(request(source, &envelope))))
        });
        #[cfg(feature = "v8")]
        group.bench_with_input(BenchmarkId::new(name, "codemode-rs on V8"), &source, |b, &source| {
            b.iter(|| rt.block_on(on_v8.execute(request(source, &envelope))))
        });
        group.bench_with_input(BenchmarkId::new(name, "bare rquickjs"), &source, |b, &source| {
            b.iter(|| bare(source, &rows))
        });
    }
    // An answer with `\u` escapes (of non-ASCII) is parsed natively too.
    let name = "10,000 records, escaped";
    group.bench_function(BenchmarkId::new(name, "codemode-rs"), |b| {
        b.iter(|| rt.block_on(executor.execute(request(RECORDS, &escaped))))
    });
    #[cfg(feature = "v8")]
    group.bench_function(BenchmarkId::new(name, "codemode-rs on V8"), |b| {
        b.iter(|| rt.block_on(on_v8.execute(request(RECORDS, &escaped))))
    });
    group
        .bench_function(BenchmarkId::new(name, "bare rquickjs"), |b| b.iter(|| bare(RECORDS, &escaped_rows)));
    group.finish();
}

criterion_group!(compute, benches);
criterion_main!(compute);
