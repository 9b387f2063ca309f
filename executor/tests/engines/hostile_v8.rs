//! Hostile programs aimed at V8 (issue 36, item 6): memory made outside V8's heap and its
//! ArrayBuffer allocator, natives that do not look for `TerminateExecution`, and the work
//! V8 hands its platform. Each program gets the exact outcome a user sees; each memory
//! program also has the growth of the resident memory of the process that ran it bounded.
//! On QuickJS each program is either skipped (it needs what only V8 has) or held to
//! QuickJS's own outcome (a run asking for WebAssembly is refused).
//!
//! Where each runs:
//! - a memory program runs in a process of its own (this binary again, that one test
//!   alone, [`ALONE_VARIABLE`] naming it), so that the resident memory it reads is its
//!   run's and nothing else's, and a program that gets through cannot swell this process;
//! - a program whose native call may never return runs only behind process isolation
//!   ([`isolated`]), whose worker is killed at the deadline: in this process its thread
//!   would spin for the rest of the suite;
//! - everything runs once more in confined workers ([`CONFINED_VARIABLE`], as `hostile::`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::support::{config, engine, json};
use codemode_executor::{
    Confinement, EngineKind, Execute, Executor, ProcessExecutor, Request, WorkerCommand,
};
use codemode_protocol::texts::WEB_ASSEMBLY_NEEDS_V8;

/// The memory limit of every program here: small, so that each reaches it quickly.
const LIMIT: usize = 32 << 20;
/// The outcome of a run that reached [`LIMIT`].
const MEMORY: &str =
    r#"{"error":"Execution ran out of memory: the limit is 33554432 bytes.","kind":"memory","logs":[]}"#;
/// A deadline for the programs that end at it.
const TIMEOUT: Duration = Duration::from_millis(300);
/// A bound on "on time", generous for a loaded 2-core machine.
const MARGIN: Duration = Duration::from_millis(700);
/// How much the process's resident memory may grow while one memory program runs in it
/// (its peak, `VmHWM` reset at the start, over `VmRSS` at the start). The limit bounds two
/// things of its size on V8: the heap, and the budget (ArrayBuffers, wasm memories and
/// code, whatever else is charged); a third for what V8 may overshoot while it stops
/// (young generation, the room the heap-limit callback gives to unwind); 64 MiB for the
/// isolate itself, compiled code, the ICU data a run touches and the allocators' slack.
/// A program that gets past its charges grows far beyond it (hundreds of MiB).
const RSS_BOUND: u64 = 3 * LIMIT as u64 + (64 << 20);
/// A worker's peak resident memory for a program that in-process V8 cannot bound (one
/// native step past the heap limit: a rope flattened whole). The host caps a worker's
/// committed memory at what it holds plus twice the limit and 256 MiB
/// (`confine::worker_room`); 128 MiB is the most a worker holds before its run.
const WORKER_BOUND: u64 = 2 * LIMIT as u64 + (256 << 20) + (128 << 20);

/// Set to run every case in confined worker processes instead of in this process.
const CONFINED_VARIABLE: &str = "CODEMODE_TEST_HOSTILE_CONFINED";
/// Set, to a test's name, in the process of its own a memory program runs in.
const ALONE_VARIABLE: &str = "CODEMODE_TEST_HOSTILE_V8_ALONE";

fn confined() -> bool {
    std::env::var_os(CONFINED_VARIABLE).is_some()
}

/// The `codemode` binary (package `codemode-cli`) in this test's profile.
fn codemode_binary() -> std::path::PathBuf {
    codemode_devtools::codemode_binary(if cfg!(feature = "v8") { &["v8"] } else { &[] }).unwrap()
}

/// A `codemode stdio` worker pool on the suite's engine, each worker confined and killed at
/// its run's deadline.
fn isolated() -> Arc<dyn Execute> {
    let mut config = config().workers(1);
    let args = ["stdio", "--engine", config.engine.name()].map(str::to_owned).to_vec();
    config.confinement = Confinement::Required;
    Arc::new(ProcessExecutor::new(config, WorkerCommand::new(codemode_binary(), args)))
}

/// An executor of the test's own: in this process, or with [`CONFINED_VARIABLE`] in
/// confined workers.
fn fresh() -> Arc<dyn Execute> {
    if confined() {
        return isolated();
    }
    Arc::new(Executor::new(config().workers(1)))
}

/// Every case of this module again, each in a confined worker: same outcomes.
#[cfg(target_os = "linux")]
#[test]
fn the_v8_hostile_cases_hold_in_confined_workers() {
    if confined() || std::env::var_os(ALONE_VARIABLE).is_some() {
        return; // this is the confined run, or one case's own process
    }
    crate::support::run_again(
        CONFINED_VARIABLE,
        &["hostile_v8::", "--skip", "the_v8_hostile_cases_hold_in_confined_workers", "--test-threads", "2"],
        "the V8 hostile cases in confined workers",
    );
}

/// A memory program: its code, whether it asks for WebAssembly, its deadline, and its
/// outcome on V8 and on QuickJS (`None`: not run there, it needs what only V8 has).
struct Case {
    code: String,
    wasm: bool,
    timeout: Duration,
    v8: &'static str,
    quickjs: Option<&'static str>,
    /// V8 makes the program's memory in one native step past the heap limit, which no
    /// bound in the process stops: its memory is held to [`WORKER_BOUND`], under process
    /// isolation, where the worker's cap does.
    one_step: bool,
}

impl Case {
    fn new(code: impl Into<String>, v8: &'static str) -> Case {
        Case {
            code: code.into(),
            wasm: false,
            timeout: Duration::from_secs(5),
            v8,
            quickjs: None,
            one_step: false,
        }
    }

    /// WebAssembly on: refused on QuickJS.
    fn wasm(code: impl Into<String>, v8: &'static str) -> Case {
        Case { wasm: true, ..Case::new(code, v8) }
    }

    fn quickjs(self, outcome: &'static str) -> Case {
        Case { quickjs: Some(outcome), ..self }
    }

    fn timeout(self, timeout: Duration) -> Case {
        Case { timeout, ..self }
    }

    fn one_step(self) -> Case {
        Case { one_step: true, ..self }
    }

    fn request(&self) -> Request {
        Request::new(self.code.as_str())
            .web_assembly(self.wasm)
            .memory_limit_bytes(LIMIT)
            .timeout(self.timeout)
    }

    /// The outcome on the suite's engine, or `None` when it is not run there.
    fn expected(&self) -> Option<String> {
        match engine() {
            EngineKind::V8 => Some(self.v8.to_owned()),
            _ if self.wasm => {
                Some(format!(r#"{{"error":"{WEB_ASSEMBLY_NEEDS_V8}","kind":"invalid","logs":[]}}"#))
            }
            _ => self.quickjs.map(str::to_owned),
        }
    }
}

/// One of `/proc/self/status`'s sizes, in bytes.
fn status_bytes(field: &str) -> u64 {
    let text = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let line = text.lines().find(|l| l.starts_with(field)).unwrap_or_else(|| panic!("no {field}"));
    line.split_whitespace().nth(1).and_then(|kib| kib.parse::<u64>().ok()).expect("a size in kB") << 10
}

/// Run the memory program `case` (the test `name`): in a process of its own, where its
/// outcome and the growth of the process's resident memory are checked; or, confined,
/// in a worker, where its outcome is.
async fn memory_case(name: &str, case: Case) {
    let Some(expected) = case.expected() else {
        eprintln!("{name}: not run on {}: it needs what only V8 has", engine().name());
        return;
    };
    if confined() {
        let outcome = json(&fresh().execute(case.request()).await);
        let one_step_lost = case.one_step && engine() == EngineKind::V8 && outcome == lost();
        assert!(
            outcome == expected || one_step_lost,
            "{name}: {}\n  expected {expected}\n  got      {outcome}",
            case.code
        );
        return;
    }
    if std::env::var(ALONE_VARIABLE).as_deref() != Ok(name) {
        alone(name);
        return;
    }
    if case.one_step && engine() == EngineKind::V8 {
        return worker_case(name, case, &expected).await;
    }
    // This process is the program's alone. One run first, so that what the first isolate
    // of a process loads once (snapshot, code caches, ICU) is not counted as the program's.
    let executor = Executor::new(config().workers(1));
    let warm = executor.execute(Request::new("async () => 1").memory_limit_bytes(LIMIT)).await;
    assert_eq!(json(&warm), r#"{"result":1,"logs":[]}"#);
    std::fs::write("/proc/self/clear_refs", "5").expect("the peak resident size resets");
    let before = status_bytes("VmRSS:");
    let started = Instant::now();
    let outcome = json(&executor.execute(case.request()).await);
    let took = started.elapsed();
    let growth = status_bytes("VmHWM:").saturating_sub(before);
    println!(
        "{name} on {}: {outcome} after {} ms; resident memory grew {} MiB at its peak (bound {} MiB)",
        engine().name(),
        took.as_millis(),
        growth >> 20,
        RSS_BOUND >> 20
    );
    let on_time = took < case.timeout + MARGIN;
    assert!(
        outcome == expected && growth < RSS_BOUND && on_time,
        "{name}: {}\n  expected {expected}\n  got      {outcome} after {took:?}\n  resident memory grew {} MiB (bound {} MiB)",
        case.code,
        growth >> 20,
        RSS_BOUND >> 20
    );
}

/// The outcome of a run whose worker died without a word.
fn lost() -> String {
    format!(r#"{{"error":"{}","kind":"lost","logs":[]}}"#, codemode_protocol::texts::WORKER_PROCESS_DIED)
}

/// Run the one-step memory program `case` in a worker process of this one, whose peak
/// resident memory is watched.
async fn worker_case(name: &str, case: Case, expected: &str) {
    let codemode = codemode_binary();
    let executor = ProcessExecutor::new(
        config().workers(1).confinement(Confinement::Off),
        WorkerCommand::new(codemode.clone(), ["stdio"]),
    );
    let warm = executor.execute(Request::new("async () => 1")).await;
    assert_eq!(json(&warm), r#"{"result":1,"logs":[]}"#);
    let watching = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let watcher = crate::support::watch_children(watching.clone(), codemode);
    let started = Instant::now();
    let outcome = json(&executor.execute(case.request()).await);
    let took = started.elapsed();
    watching.store(false, std::sync::atomic::Ordering::Release);
    let peak = watcher.join().expect("the watcher ends");
    println!(
        "{name} on v8, process isolation: {outcome} after {} ms; the worker's resident memory peaked at {} MiB (bound {} MiB)",
        took.as_millis(),
        peak >> 20,
        WORKER_BOUND >> 20
    );
    // The cap stops the worker wherever the allocation that passes it is made: in V8 or
    // C++'s `operator new` the worker says so (exit status 86, the memory outcome); in a
    // path of its own (about one run in four of the two-byte rope) it dies without a word,
    // and the run is `lost`. Its memory is held either way.
    let expected_or_lost = outcome == expected || (expected == MEMORY && outcome == lost());
    assert!(
        expected_or_lost && peak > 0 && peak < WORKER_BOUND && took < case.timeout + MARGIN,
        "{name}: {}\n  expected {expected}\n  got      {outcome} after {took:?}\n  the worker peaked at {} MiB (bound {} MiB)",
        case.code,
        peak >> 20,
        WORKER_BOUND >> 20
    );
}

/// Run the test `name` again in a process of its own.
fn alone(name: &str) {
    let me = std::env::current_exe().expect("the suite knows its own binary");
    let output = std::process::Command::new(me)
        .env(ALONE_VARIABLE, name)
        .args([&format!("hostile_v8::{name}"), "--exact", "--nocapture", "--test-threads", "1"])
        .output()
        .expect("the suite runs again");
    let text = String::from_utf8_lossy(&output.stdout);
    let errors = String::from_utf8_lossy(&output.stderr);
    println!("{text}");
    assert!(output.status.success(), "{name}, in a process of its own:\n{text}\n{errors}");
    assert!(text.contains("test result: ok. 1 passed"), "{name} did not run alone:\n{text}");
}

macro_rules! memory_cases {
    ($($name:ident: $case:expr,)*) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            memory_case(stringify!($name), $case).await;
        }
    )*};
}

/// A JavaScript function `wasm(options)` that writes a module's bytes: `grow(pages)` (the
/// pages before, or -1), `run()` and the memory `mem`. Options: `memory`, `[initial]` or
/// `[initial, maximum]` in pages (default `[1, 8]`); `functions`, that many empty
/// functions `run` calls; `filler`, that many `i32.const 0; drop` in `run`; `tag`, a
/// number in a custom section, so that modules differ; `table`, a table of that many
/// function references, without a maximum.
const WASM: &str = "
  const leb = (n) => { const o = []; do { let b = n % 128; n = Math.floor(n / 128); if (n > 0) b |= 128; o.push(b) } while (n > 0); return o };
  const wasm = ({ memory = [1, 8], functions = 0, filler = 0, tag = 0, table = 0 } = {}) => {
    const b = [0, 97, 115, 109, 1, 0, 0, 0];
    const put = (id, body) => { b.push(id, ...leb(body.length)); for (const x of body) b.push(x) };
    put(1, [2, 0x60, 1, 0x7f, 1, 0x7f, 0x60, 0, 0]);
    const types = [0, 1]; for (let i = 0; i < functions; i++) types.push(1);
    put(3, [...leb(types.length), ...types]);
    if (table) put(4, [1, 0x70, 0, ...leb(table)]);
    put(5, [1, memory.length > 1 ? 1 : 0, ...leb(memory[0]), ...(memory.length > 1 ? leb(memory[1]) : [])]);
    put(7, [3, 4, 103, 114, 111, 119, 0, 0, 3, 114, 117, 110, 0, 1, 3, 109, 101, 109, 2, 0]);
    const run = [0]; for (let i = 0; i < functions; i++) run.push(0x10, ...leb(i + 2));
    for (let i = 0; i < filler; i++) run.push(0x41, 0, 0x1a); run.push(0x0b);
    const code = [...leb(types.length), 6, 0, 0x20, 0, 0x40, 0, 0x0b, ...leb(run.length)]; for (const x of run) code.push(x);
    for (let i = 0; i < functions; i++) code.push(2, 0, 0x0b);
    put(10, code);
    put(0, [1, 116, ...leb(tag)]);
    return new Uint8Array(b);
  };
";

/// `async () => { <WASM> body }`.
fn with_wasm(body: &str) -> String {
    format!("async () => {{ {WASM} {body} }}")
}

// ---------------------------------------------------------------------------------------
// Memory outside the heap: WebAssembly.

memory_cases! {
    a_wasm_memory_grown_from_javascript_to_its_maximum: Case::wasm(
        "async () => { const m = new WebAssembly.Memory({ initial: 1, maximum: 256 }); let n = 0; \
         try { for (;;) { m.grow(1); n++ } } catch (e) { new Uint8Array(m.buffer).fill(1); return [n, e.name, m.buffer.byteLength] } }",
        r#"{"result":[255,"RangeError",16777216],"logs":[]}"#,
    ),
    a_wasm_memory_grown_from_wasm_to_its_maximum: Case::wasm(
        with_wasm("const i = new WebAssembly.Instance(new WebAssembly.Module(wasm({ memory: [1, 256] }))); let n = 0; \
                   while (i.exports.grow(1) !== -1) n++; new Uint8Array(i.exports.mem.buffer).fill(1); return [n, i.exports.mem.buffer.byteLength]"),
        r#"{"result":[255,16777216],"logs":[]}"#,
    ),
    a_wasm_memory_without_a_maximum_grown_in_a_loop: Case::wasm(
        with_wasm("const i = new WebAssembly.Instance(new WebAssembly.Module(wasm({ memory: [1] }))); const m = new WebAssembly.Memory({ initial: 1 }); \
                   let refused = 0; for (let k = 0; k < 1000; k++) { if (i.exports.grow(1) === -1) refused++; try { m.grow(1) } catch { refused++ } } \
                   return [refused, i.exports.mem.buffer.byteLength, m.buffer.byteLength]"),
        r#"{"result":[2000,65536,65536],"logs":[]}"#,
    ),
    wasm_memories_made_in_a_loop: Case::wasm(
        "async () => { const keep = []; for (;;) { const m = new WebAssembly.Memory({ initial: 16, maximum: 16 }); new Uint8Array(m.buffer).fill(1); keep.push(m) } }",
        MEMORY,
    ),
    a_wasm_memory_with_a_maximum_past_the_limit: Case::wasm(
        "async () => { const m = new WebAssembly.Memory({ initial: 1, maximum: 65536 }); return m.buffer.byteLength }",
        MEMORY,
    ),
    many_instances_of_one_module_with_a_memory: Case::wasm(
        with_wasm("const m = new WebAssembly.Module(wasm({ memory: [128, 128] })); const keep = []; \
                   for (;;) { const i = new WebAssembly.Instance(m); new Uint8Array(i.exports.mem.buffer).fill(1); keep.push(i) }"),
        MEMORY,
    ),
    many_instances_made_by_instantiate: Case::wasm(
        with_wasm("const bytes = wasm({ memory: [128, 128] }); const keep = []; \
                   for (;;) { const { instance } = await WebAssembly.instantiate(bytes); new Uint8Array(instance.exports.mem.buffer).fill(1); keep.push(instance) }"),
        MEMORY,
    ),
    a_module_declaring_the_largest_maximum: Case::wasm(
        with_wasm("const m = new WebAssembly.Module(wasm({ memory: [1, 65536] })); return new WebAssembly.Instance(m).exports.grow(65535)"),
        MEMORY,
    ),
    many_modules_kept: Case::wasm(
        with_wasm("const keep = []; for (let i = 0; ; i++) keep.push(new WebAssembly.Module(wasm({ memory: [1], tag: i })))"),
        MEMORY,
    ).timeout(Duration::from_secs(20)),
    many_modules_compiled_by_compile: Case::wasm(
        with_wasm("const keep = []; for (let i = 0; i < 40; i++) keep.push(...await Promise.all(Array.from({ length: 1000 }, (_, k) => \
                   WebAssembly.compile(wasm({ memory: [1], tag: i * 1000 + k }))))); return keep.length"),
        MEMORY,
    ).timeout(Duration::from_secs(20)),
    module_bytes_past_the_limit: Case::wasm(
        with_wasm("return new WebAssembly.Module(wasm({ filler: 2000000 })) && 'compiled'"),
        MEMORY,
    ),
    a_big_function_compiled_and_run_hot: Case::wasm(
        with_wasm("const i = new WebAssembly.Instance(new WebAssembly.Module(wasm({ filler: 300000 }))); for (let k = 0; k < 2000; k++) i.exports.run(); return 'ran'"),
        r#"{"result":"ran","logs":[]}"#,
    ).timeout(Duration::from_secs(20)),
    a_hundred_thousand_functions_compiled: Case::wasm(
        with_wasm("const i = new WebAssembly.Instance(new WebAssembly.Module(wasm({ functions: 100000 }))); i.exports.run(); return 'ran'"),
        r#"{"result":"ran","logs":[]}"#,
    ).timeout(Duration::from_secs(20)),
    a_wasm_memory_as_a_resizable_buffer: Case::wasm(
        "async () => { const m = new WebAssembly.Memory({ initial: 1, maximum: 256 }); const b = m.toResizableBuffer(); \
         b.resize(256 * 65536); new Uint8Array(b).fill(1); try { b.resize(257 * 65536) } catch (e) { return [e.name, b.byteLength, m.buffer === b] } }",
        r#"{"result":["RangeError",16777216,true],"logs":[]}"#,
    ),
    // A table's entries are made whole in one step: V8's flag caps a table at 2^20.
    a_wasm_table_of_ten_million: Case::wasm(
        "async () => new WebAssembly.Table({ element: 'externref', initial: 1e7 }).length",
        r#"{"error":"WebAssembly.Table(): Property 'initial': value 10000000 is above the upper bound 1048576","kind":"thrown","location":{"line":1,"column":13},"logs":[]}"#,
    ),
    a_module_declaring_a_table_of_ten_million: Case::wasm(
        with_wasm("return new WebAssembly.Instance(new WebAssembly.Module(wasm({ table: 1e7 }))) instanceof WebAssembly.Instance"),
        r#"{"error":"WebAssembly.Module(): initial table size (10000000 elements) is larger than implementation limit (1048576 elements) @+29","kind":"thrown","location":{"line":20,"column":34},"logs":[]}"#,
    ),
    wasm_tables_made_in_a_loop: Case::wasm(
        "async () => { const keep = []; for (;;) keep.push(new WebAssembly.Table({ element: 'anyfunc', initial: 1e6 })) }",
        MEMORY,
    ),
}

// ---------------------------------------------------------------------------------------
// Memory outside the heap: resizable and growable buffers, and the constructors behind
// their charge.

memory_cases! {
    resizable_buffers_kept_and_grown: Case::new(
        "async () => { const keep = []; for (;;) { const b = new ArrayBuffer(0, { maxByteLength: 8 << 20 }); b.resize(8 << 20); new Uint8Array(b).fill(1); keep.push(b) } }",
        MEMORY,
    ).quickjs(MEMORY),
    growable_shared_buffers_kept_and_grown: Case::new(
        "async () => { const keep = []; for (;;) { const b = new SharedArrayBuffer(0, { maxByteLength: 8 << 20 }); b.grow(8 << 20); new Uint8Array(b).fill(1); keep.push(b) } }",
        MEMORY,
    ),
    // The maximum is read once (the spec's one Get and ToIndex): a getter or a valueOf
    // answering 0 first and 2 ** 28 after gives a buffer that cannot grow, on both
    // engines. A second read after the charge would reserve what was not charged.
    a_resizable_buffer_whose_maximum_is_read_twice: Case::new(
        "async () => { let reads = 0; const b = new ArrayBuffer(0, { maxByteLength: { valueOf: () => reads++ ? 2 ** 28 : 0 } }); \
         b.resize(2 ** 28); new Uint8Array(b).fill(1); return [reads, b.byteLength] }",
        r#"{"error":"ArrayBuffer.prototype.resize: Invalid length parameter","kind":"thrown","location":{"line":1,"column":123},"logs":[]}"#,
    ).quickjs(r#"{"error":"invalid array buffer length","kind":"thrown","location":{"line":1,"column":123},"logs":[]}"#),
    a_resizable_buffer_whose_maximum_is_a_getter: Case::new(
        "async () => { let reads = 0; const b = new ArrayBuffer(0, { get maxByteLength() { return reads++ ? 2 ** 28 : 0 } }); \
         b.resize(2 ** 28); new Uint8Array(b).fill(1); return [reads, b.byteLength] }",
        r#"{"error":"ArrayBuffer.prototype.resize: Invalid length parameter","kind":"thrown","location":{"line":1,"column":120},"logs":[]}"#,
    ).quickjs(r#"{"error":"invalid array buffer length","kind":"thrown","location":{"line":1,"column":120},"logs":[]}"#),
    a_growable_shared_buffer_whose_maximum_is_read_twice: Case::new(
        "async () => { let reads = 0; const b = new SharedArrayBuffer(0, { maxByteLength: { valueOf: () => reads++ ? 2 ** 28 : 0 } }); \
         b.grow(2 ** 28); new Uint8Array(b).fill(1); return [reads, b.byteLength] }",
        r#"{"error":"SharedArrayBuffer.prototype.grow: Invalid length parameter","kind":"thrown","location":{"line":1,"column":129},"logs":[]}"#,
    ),
    a_resizable_buffer_transferred_in_a_loop: Case::new(
        "async () => { let b = new ArrayBuffer(0, { maxByteLength: 16 << 20 }); const old = []; \
         for (let i = 0; i < 64; i++) { b.resize(16 << 20); new Uint8Array(b).fill(1); const next = i % 2 ? b.transfer() : b.transfer(1); old.push(b); b = next } \
         return [b.resizable, b.maxByteLength, old.every((x) => x.detached)] }",
        r#"{"result":[true,16777216,true],"logs":[]}"#,
    ).quickjs(r#"{"result":[true,16777216,true],"logs":[]}"#),
    a_subclass_of_array_buffer: Case::new(
        "async () => { class Big extends ArrayBuffer {} const keep = []; \
         for (;;) { const b = new Big(0, { maxByteLength: 8 << 20 }); b.resize(8 << 20); new Uint8Array(b).fill(1); keep.push(b) } }",
        MEMORY,
    ).quickjs(MEMORY),
    the_original_array_buffer_constructors: Case::new(
        "async () => { const found = [ArrayBuffer.prototype.constructor, Object.getPrototypeOf(new Uint8Array(1).buffer).constructor, \
         new ArrayBuffer(1).constructor, ArrayBuffer[Symbol.species], new ArrayBuffer(1, { maxByteLength: 2 }).constructor]; \
         function Other() {} Other.prototype = ArrayBuffer.prototype; \
         const keep = []; for (;;) for (const C of found) { const b = Reflect.construct(C, [0, { maxByteLength: 8 << 20 }], Other); b.resize(8 << 20); new Uint8Array(b).fill(1); keep.push(b) } }",
        MEMORY,
    ).quickjs(MEMORY),
    a_species_constructor_on_a_resizable_buffer: Case::new(
        "async () => { class Grow extends ArrayBuffer { static get [Symbol.species]() { return function (n) { return new ArrayBuffer(n, { maxByteLength: 8 << 20 }) } } } \
         const keep = []; const b = new Grow(8); for (;;) { const c = b.slice(0); c.resize(8 << 20); new Uint8Array(c).fill(1); keep.push(c) } }",
        MEMORY,
    ).quickjs(MEMORY),
    a_subclass_and_the_original_of_wasm_memory: Case::wasm(
        "async () => { class Big extends WebAssembly.Memory {} const found = [Big, WebAssembly.Memory.prototype.constructor, \
         Object.getPrototypeOf(new WebAssembly.Memory({ initial: 0, maximum: 1 })).constructor]; \
         function Other() {} Other.prototype = WebAssembly.Memory.prototype; \
         const keep = []; for (;;) for (const C of found) { const m = Reflect.construct(C, [{ initial: 16, maximum: 16 }], Other); new Uint8Array(m.buffer).fill(1); keep.push(m) } }",
        MEMORY,
    ),
}

/// A program that sets a sloppy getter (made by `Function`, so its frame can give the
/// functions below it) on an option that `make(options)` hands to a constructor, and
/// returns the functions the getter's call sites give: only the getter itself, no
/// original constructor behind a charge.
fn call_sites_under(option: &str, value: &str, make: &str) -> String {
    format!(
        "async () => {{ let found; \
         const getter = Function('keep', 'return function () {{ Error.prepareStackTrace = (e, sites) => sites.map((s) => s.getFunction()); keep(new Error().stack); Error.prepareStackTrace = undefined; return {value} }}')((fns) => {{ found = fns }}); \
         const options = {{}}; Object.defineProperty(options, '{option}', {{ get: getter }}); {make}; \
         return found.filter((f) => f !== undefined).map((f) => f === getter ? 'the getter' : String(f.name)) }}"
    )
}

memory_cases! {
    call_sites_give_no_original_array_buffer: Case::new(
        call_sites_under("maxByteLength", "8", "new ArrayBuffer(0, options)"),
        r#"{"result":["the getter"],"logs":[]}"#,
    ).quickjs(r#"{"result":[],"logs":[]}"#),
    call_sites_give_no_original_intl_constructor: Case::new(
        call_sites_under("style", "\"decimal\"", "new Intl.NumberFormat('en', options)"),
        r#"{"result":["the getter"],"logs":[]}"#,
    ),
    call_sites_give_no_original_wasm_memory: Case::wasm(
        call_sites_under("initial", "1", "new WebAssembly.Memory(options)"),
        r#"{"result":["the getter"],"logs":[]}"#,
    ),
}

// ---------------------------------------------------------------------------------------
// Memory outside the heap: Intl (ICU's objects) and the Atomics waiters.

memory_cases! {
    intl_formatters_kept: Case::new(
        "async () => { const keep = []; for (let i = 0; ; i++) keep.push(new Intl.NumberFormat('en'), new Intl.Collator('de'), \
         new Intl.DateTimeFormat('en', { timeZone: 'Asia/Tokyo' }), new Intl.PluralRules('ar'), new Intl.Segmenter('ja', { granularity: 'word' })) }",
        MEMORY,
    ),
    segment_results_kept: Case::new(
        "async () => { const s = new Intl.Segmenter('en', { granularity: 'word' }); const keep = []; for (;;) keep.push(s.segment('hello world')) }",
        MEMORY,
    ),
    segment_iterators_kept: Case::new(
        "async () => { const segments = new Intl.Segmenter('en', { granularity: 'word' }).segment('hello world'); const keep = []; \
         for (;;) keep.push(segments[Symbol.iterator]()) }",
        MEMORY,
    ),
    // V8's own break iterator, outside the standard, is gone rather than bounded.
    v8_break_iterators_kept: Case::new(
        "async () => { const keep = []; for (;;) keep.push(new Intl.v8BreakIterator('en')) }",
        r#"{"error":"Intl.v8BreakIterator is not a constructor","kind":"thrown","location":{"line":1,"column":51},"logs":[]}"#,
    ),
    locale_objects_made_by_maximize_kept: Case::new(
        "async () => { const l = new Intl.Locale('en'); const keep = []; for (;;) keep.push(l.maximize(), l.minimize()) }",
        MEMORY,
    ).timeout(Duration::from_secs(20)),
    many_locales_through_to_locale_string_and_locale_compare: Case::new(
        "async () => { let n = 0; for (const l of ['af','am','ar','az','be','bg','bn','bs','ca','cs','cy','da','de','el','en','es','et','eu','fa','fi','fil','fr','ga','gl','gu','he','hi','hr','hu','hy','id','is','it','ja','ka','kk','km','kn','ko','ky','lo','lt','lv','mk','ml','mn','mr','ms','my','nb','ne','nl','or','pa','pl','ps','pt','ro','ru','si','sk','sl','sq','sr','sv','sw','ta','te','th','tr','uk','ur','uz','vi','zh','zu']) \
         for (let k = 0; k < 20; k++) n += (1234567.891 + k).toLocaleString(l).length + new Date(k).toLocaleString(l, { timeZone: 'UTC', month: 'long' }).length + 'a'.localeCompare('b', l, { sensitivity: 'base' }); \
         return n > 0 }",
        r#"{"result":true,"logs":[]}"#,
    ),
    atomics_wait_async_with_timeouts_kept: Case::new(
        "async () => { const a = new Int32Array(new SharedArrayBuffer(4)); const keep = []; for (;;) keep.push(Atomics.waitAsync(a, 0, 0, 1e9).value) }",
        MEMORY,
    ).timeout(Duration::from_secs(20)),
}

// ---------------------------------------------------------------------------------------
// Memory past the limit, made whole by one native: strings made as ropes (cheap) and
// flattened, arrays a builtin copies an array-like into.

/// `async () => { <a rope of 2 ** 28 characters of `unit`> ; return <end> }`.
fn rope(unit: &str, end: &str) -> String {
    format!("async () => {{ let s = '{unit}'; for (let i = 0; i < 27; i++) s = s + s; return {end} }}")
}

memory_cases! {
    a_rope_flattened_by_index_of: Case::new(rope("xy", "s.indexOf('z')"), MEMORY).quickjs(MEMORY).one_step(),
    a_two_byte_rope_flattened_by_index_of: Case::new(rope("xé", "s.indexOf('z')"), MEMORY).quickjs(MEMORY).one_step(),
    a_rope_flattened_by_a_regexp: Case::new(rope("xy", "/z/.test(s)"), MEMORY).quickjs(MEMORY).one_step(),
    a_rope_written_by_json_stringify: Case::new(rope("xy", "JSON.stringify(s).length"), MEMORY).quickjs(MEMORY).one_step(),
    a_rope_flattened_by_char_code_at_in_a_loop: Case::new(
        "async () => { const keep = []; for (let k = 0; ; k++) { let s = String(k); for (let i = 0; i < 22; i++) s = s + s; s.charCodeAt(1); keep.push(s) } }",
        MEMORY,
    ).quickjs(MEMORY),
    // V8's sort copies an array-like into a work array of its length first, in one step:
    // 2 ** 26 elements are half a gigabyte, charged for the call (bounds.js) and refused.
    // QuickJS has nothing to sort.
    sort_of_an_empty_array_like_of_two_to_the_26: Case::new(
        "async () => Array.prototype.sort.call({ length: 2 ** 26 })",
        MEMORY,
    ).quickjs(r#"{"result":{"length":67108864},"logs":[]}"#).timeout(Duration::from_secs(20)),
    an_array_from_a_long_array_like: Case::new("async () => Array.from({ length: 2 ** 28 }).length", MEMORY)
        .quickjs(MEMORY)
        .timeout(Duration::from_secs(20)),
    // Few bytecodes a turn, each allocating 512 KiB: V8 notices the stop only when its
    // interpreter's budget runs out, hundreds of megabytes later (in-process, 220–400 MiB
    // at a 16 MiB limit), so the worker's cap is what holds it.
    an_allocation_loop_that_notices_its_stop_late: Case::new(
        "async () => { for (let i = 0; i < 30000; i++) globalThis['g' + i] = i; \
         globalThis.hog = []; while (true) hog.push(new Array(1 << 16).fill(7)) }",
        MEMORY,
    )
    .quickjs(MEMORY)
    .one_step(),
    a_huge_join: Case::new(
        "async () => { const parts = []; for (let i = 0; i < 2 ** 20; i++) parts.push('x'.repeat(256)); return parts.join('').length }",
        MEMORY,
    ).quickjs(MEMORY),
}

// ---------------------------------------------------------------------------------------
// Natives that do not look for TerminateExecution: the outcome comes at the deadline.

const TIMED_OUT: &str = r#"{"error":"Execution timed out after 300 ms.","kind":"timeout","logs":[]}"#;

/// `code` ends with `expected` on `executor` (at the deadline, for a timeout), and its
/// engine goes within `gone_within` of the deadline.
async fn ends_on(executor: &dyn Execute, code: &str, expected: &str, gone_within: Duration) {
    let started = Instant::now();
    let request = Request::new(code).memory_limit_bytes(LIMIT).timeout(TIMEOUT);
    let outcome = json(&executor.execute(request).await);
    let took = started.elapsed();
    assert_eq!(outcome, expected, "{code}");
    assert!(took < TIMEOUT + MARGIN, "{code}: the outcome took {took:?}");
    while executor.live_engines().unwrap_or(0) > 0 {
        assert!(
            started.elapsed() < TIMEOUT + gone_within,
            "{code}: the engine was still live {gone_within:?} after the deadline"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    println!(
        "{code}: {outcome} after {} ms, engine gone after {} ms",
        took.as_millis(),
        started.elapsed().as_millis()
    );
}

/// A sort whose comparator is a native (a collator's `compare`): each sort of 200,000
/// strings is one long native call, so the loop stops after the sort under way; in this
/// process, since that ends by itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sort_with_a_native_collator_comparator_in_a_loop() {
    if engine() != EngineKind::V8 {
        return; // QuickJS has no Intl
    }
    let code = "async () => { const compare = new Intl.Collator('en').compare; \
                const a = Array.from({ length: 2e5 }, (_, i) => String((i * 7919) % 200000)); for (;;) a.slice().sort(compare) }";
    ends_on(&*fresh(), code, TIMED_OUT, Duration::from_secs(5)).await;
}

/// Natives that never return, or only seconds after the deadline, on V8: only behind
/// process isolation (a confined worker killed at the deadline), on either engine. Each
/// ends at the deadline, unless the engine's outcome is named (`v8 => outcome`,
/// `quickjs => outcome`).
macro_rules! isolated_cases {
    ($($name:ident: $code:expr $(, v8 => $v8:expr)? $(, quickjs => $quickjs:expr)?;)*) => {$(
        #[cfg(target_os = "linux")]
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            #[allow(unused_mut)]
            let mut expected = TIMED_OUT;
            $(if engine() == EngineKind::V8 { expected = $v8 })?
            $(if engine() == EngineKind::QuickJs { expected = $quickjs })?
            ends_on(&*isolated(), $code, expected, Duration::from_secs(2)).await;
        }
    )*};
}

isolated_cases! {
    reverse_of_the_longest_array_like: "async () => Array.prototype.reverse.call({ length: 2 ** 53 - 1 })";
    includes_in_the_longest_array_like: "async () => Array.prototype.includes.call({ length: 2 ** 53 - 1 }, 1)";
    last_index_of_in_the_longest_array_like: "async () => Array.prototype.lastIndexOf.call({ length: 2 ** 53 - 1 }, 1)";
    copy_within_the_longest_array_like: "async () => Array.prototype.copyWithin.call({ length: 2 ** 53 - 1 }, 0, 1)";
    fill_of_the_longest_array_like: "async () => Array.prototype.fill.call({ length: 2 ** 53 - 1, __proto__: new Uint8Array(0) }, 1)";
    sort_of_the_longest_array_like_with_an_element: "async () => Array.prototype.sort.call({ length: 2 ** 53 - 1, 0: 1 })", v8 => MEMORY;
    // V8 asks for a work array of the whole length and ends the process ("Fatal JavaScript
    // out of memory: invalid array length"); in this process it would end the suite. The
    // work array is past any limit: the memory outcome.
    sort_of_the_longest_empty_array_like: "async () => Array.prototype.sort.call({ length: 2 ** 53 - 1 })", v8 => MEMORY;
    sort_of_an_empty_array_like_of_two_to_the_28: "async () => Array.prototype.sort.call({ length: 2 ** 28 })", v8 => MEMORY;
    to_sorted_of_an_empty_array_like_of_two_to_the_28:
        "async () => Array.prototype.toSorted.call({ length: 2 ** 28 })", v8 => MEMORY, quickjs => MEMORY;
    long_json_round_trips: "async () => { const big = Array.from({ length: 5e4 }, (_, i) => ({ i, s: 'x' + i })); for (;;) JSON.parse(JSON.stringify(big)) }";
    ropes_flattened_in_a_loop: "async () => { for (let k = 0; ; k++) { let s = String(k); for (let i = 0; i < 20; i++) s = s + s; s.indexOf('z') } }";
}

// ---------------------------------------------------------------------------------------
// The platform's work: a compile and an `Atomics.waitAsync` timeout settle with their value.

/// `code` (with WebAssembly when `wasm`) returns `v8` on V8; on QuickJS a WebAssembly run
/// is refused and any other is not run (it needs SharedArrayBuffer).
async fn settles(code: &str, wasm: bool, v8: &str) {
    let expected = match engine() {
        EngineKind::V8 => v8.to_owned(),
        _ if wasm => format!(r#"{{"error":"{WEB_ASSEMBLY_NEEDS_V8}","kind":"invalid","logs":[]}}"#),
        _ => return,
    };
    let started = Instant::now();
    let request =
        Request::new(code).web_assembly(wasm).memory_limit_bytes(LIMIT).timeout(Duration::from_secs(5));
    let outcome = json(&fresh().execute(request).await);
    assert_eq!(outcome, expected, "{code}");
    assert!(started.elapsed() < Duration::from_secs(5), "{code}: took {:?}", started.elapsed());
}

#[tokio::test]
async fn instantiate_and_compile_settle_with_their_value() {
    settles(
        &with_wasm("const { module, instance } = await WebAssembly.instantiate(wasm()); \
                    return [instance.exports.grow(0), module instanceof WebAssembly.Module, instance instanceof WebAssembly.Instance]"),
        true,
        r#"{"result":[1,true,true],"logs":[]}"#,
    )
    .await;
    settles(
        &with_wasm("const m = await WebAssembly.compile(wasm()); const i = await WebAssembly.instantiate(m); \
                    return [WebAssembly.Module.exports(m).map((e) => e.name), i.exports.grow(2), i.exports.mem.buffer.byteLength]"),
        true,
        r#"{"result":[["grow","run","mem"],1,196608],"logs":[]}"#,
    )
    .await;
    settles(
        &with_wasm("const all = await Promise.all(Array.from({ length: 20 }, (_, i) => WebAssembly.compile(wasm({ tag: i })))); \
                    const instances = await Promise.all(all.map((m) => WebAssembly.instantiate(m))); return instances.map((i) => i.exports.grow(0)).join('')"),
        true,
        r#"{"result":"11111111111111111111","logs":[]}"#,
    )
    .await;
    // A module that does not validate: the promise rejects, the program catches it.
    settles(
        "async () => { try { await WebAssembly.compile(new Uint8Array([0, 97, 115, 109, 1, 0, 0, 0, 1])) } catch (e) { return e.name } }",
        true,
        r#"{"result":"CompileError","logs":[]}"#,
    )
    .await;
}

#[tokio::test]
async fn atomics_wait_async_settles_with_its_value() {
    settles(
        "async () => { const a = new Int32Array(new SharedArrayBuffer(4)); \
         const waits = [40, 10, 20].map((ms) => Atomics.waitAsync(a, 0, 0, ms).value.then((v) => `${ms} ${v}`)); \
         const order = []; await Promise.all(waits.map((p) => p.then((v) => order.push(v)))); return order }",
        false,
        r#"{"result":["10 timed-out","20 timed-out","40 timed-out"],"logs":[]}"#,
    )
    .await;
    settles(
        "async () => { const a = new Int32Array(new SharedArrayBuffer(4)); const w = Atomics.waitAsync(a, 0, 0, 10000); \
         setTimeout(() => { Atomics.store(a, 0, 1); Atomics.notify(a, 0) }, 20); return [w.async, await w.value] }",
        false,
        r#"{"result":[true,"ok"],"logs":[]}"#,
    )
    .await;
    settles(
        "async () => { const a = new Int32Array(new SharedArrayBuffer(4)); return [Atomics.waitAsync(a, 0, 1, 10), Atomics.waitAsync(a, 0, 0, 0)] }",
        false,
        r#"{"result":[{"async":false,"value":"not-equal"},{"async":false,"value":"timed-out"}],"logs":[]}"#,
    )
    .await;
}

// ---------------------------------------------------------------------------------------
// WebAssembly when a run did not ask for it: nowhere to be found.

#[tokio::test]
async fn web_assembly_off_is_nowhere() {
    for on in [None, Some(false)] {
        let code = "async () => { const g = Function('return this')(); const found = [typeof WebAssembly, typeof g.WebAssembly, \
                    typeof globalThis.WebAssembly, 'WebAssembly' in globalThis, Reflect.ownKeys(globalThis).includes('WebAssembly'), \
                    Object.getOwnPropertyNames(globalThis).filter((n) => /wasm|assembly/i.test(n)).length, \
                    Object.getOwnPropertyDescriptor(globalThis, 'WebAssembly') === undefined, typeof (0, eval)('this').WebAssembly, \
                    await new Promise((resolve) => setTimeout(() => resolve(typeof WebAssembly), 0))]; \
                    try { eval('WebAssembly') } catch (e) { found.push(e.name) } try { new Function('return WebAssembly.Module')() } catch (e) { found.push(e.name) } return found }";
        let mut request = Request::new(code).timeout(Duration::from_secs(5));
        if let Some(on) = on {
            request = request.web_assembly(on);
        }
        let outcome = json(&fresh().execute(request).await);
        assert_eq!(
            outcome,
            r#"{"result":["undefined","undefined","undefined",false,false,0,true,"undefined","undefined","ReferenceError","ReferenceError"],"logs":[]}"#,
            "{on:?}"
        );
    }
}
