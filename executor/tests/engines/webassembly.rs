//! WebAssembly is a choice: absent by default on both engines, on V8 when a run asks for
//! it (every byte it uses charged to the memory limit first), refused on QuickJS; and
//! V8's own tasks (a module compiled in the background, an `Atomics.waitAsync` timeout)
//! are run while the program waits.

use crate::support::{engine, json, run};
use codemode_executor::{EngineKind, Request};
use codemode_protocol::texts::WEB_ASSEMBLY_NEEDS_V8;

/// A module of `add(a, b)`, `grow(pages)` and its memory `mem` of one page, whose
/// maximum `limits` names.
fn module(limits: &str) -> String {
    let memory = match limits {
        "none" => "5,3,1,0,1",
        "max 8" => "5,4,1,1,1,8",
        "max 128" => "5,5,1,1,1,128,1",
        "max 2048" => "5,5,1,1,1,128,16",
        other => panic!("no such limits {other}"),
    };
    format!(
        "new Uint8Array([0,97,115,109,1,0,0,0, 1,12,2,96,2,127,127,1,127,96,1,127,1,127, 3,3,2,0,1, {memory}, \
         7,20,3,3,97,100,100,0,0,4,103,114,111,119,0,1,3,109,101,109,2,0, \
         10,16,2,7,0,32,0,32,1,106,11,6,0,32,0,64,0,11])"
    )
}

fn wasm(code: &str) -> Request {
    Request::new(code).web_assembly(true)
}

const MEMORY_64_MIB: &str =
    r#"{"error":"Execution ran out of memory: the limit is 67108864 bytes.","kind":"memory","logs":[]}"#;

#[tokio::test]
async fn web_assembly_is_absent_unless_a_run_asks() {
    let outcome = run(Request::new("async () => [typeof WebAssembly, 'WebAssembly' in globalThis]")).await;
    assert_eq!(json(&outcome), r#"{"result":["undefined",false],"logs":[]}"#);
}

#[tokio::test]
async fn a_run_asking_for_web_assembly_gets_it_on_v8_and_is_refused_on_quickjs() {
    let code = format!(
        "async () => {{ const {{ instance }} = await WebAssembly.instantiate({}); \
         const e = instance.exports; return [e.add(2, 3), e.mem.buffer.byteLength, e.grow(1)] }}",
        module("max 8")
    );
    let outcome = run(wasm(&code)).await;
    match engine() {
        EngineKind::V8 => assert_eq!(json(&outcome), r#"{"result":[5,65536,1],"logs":[]}"#),
        _ => assert_eq!(
            json(&outcome),
            format!(r#"{{"error":"{WEB_ASSEMBLY_NEEDS_V8}","kind":"invalid","logs":[]}}"#)
        ),
    }
}

#[tokio::test]
async fn a_memory_without_a_maximum_cannot_grow_and_one_past_the_limit_is_refused() {
    if engine() != EngineKind::V8 {
        return;
    }
    let grow = |limits| {
        format!(
            "async () => {{ const m = new WebAssembly.Module({}); const i = new WebAssembly.Instance(m); \
             return [i.exports.grow(1), i.exports.mem.buffer.byteLength] }}",
            module(limits)
        )
    };
    assert_eq!(json(&run(wasm(&grow("none"))).await), r#"{"result":[-1,65536],"logs":[]}"#);
    assert_eq!(json(&run(wasm(&grow("max 2048"))).await), MEMORY_64_MIB);
    let memory = "async () => { const m = new WebAssembly.Memory({ initial: 1 }); \
                  try { m.grow(1) } catch (e) { return [e.name, m.buffer.byteLength] } }";
    assert_eq!(json(&run(wasm(memory)).await), r#"{"result":["RangeError",65536],"logs":[]}"#);
    let big = "async () => new WebAssembly.Memory({ initial: 1, maximum: 2048 })";
    assert_eq!(json(&run(wasm(big)).await), MEMORY_64_MIB);
    // Each instance is charged its memory again: 8 of 8 MiB fit in 64 MiB, 9 do not.
    let many = |n| {
        format!(
            "async () => {{ const m = new WebAssembly.Module({}); const all = []; \
             for (let i = 0; i < {n}; i++) all.push(new WebAssembly.Instance(m)); return all.length }}",
            module("max 128")
        )
    };
    assert_eq!(json(&run(wasm(&many(7))).await), r#"{"result":7,"logs":[]}"#);
    assert_eq!(json(&run(wasm(&many(8))).await), MEMORY_64_MIB);
}

#[tokio::test]
async fn resizable_buffers_and_intl_objects_are_charged_before_they_are_made() {
    let resizable = "async () => { const b = new ArrayBuffer(8, { maxByteLength: 1 << 20 }); b.resize(1 << 19); \
                     return [b.resizable, b.byteLength, b.maxByteLength] }";
    assert_eq!(json(&run(Request::new(resizable)).await), r#"{"result":[true,524288,1048576],"logs":[]}"#);
    let reserve =
        "async () => { const b = new ArrayBuffer(0, { maxByteLength: 1 << 30 }); return b.maxByteLength }";
    let growable = "async () => new SharedArrayBuffer(0, { maxByteLength: 1 << 30 }).maxByteLength";
    let formatters = "async () => { const all = []; for (let i = 0; i < 2000; i++) all.push(new Intl.NumberFormat('en')); return all.length }";
    if engine() != EngineKind::V8 {
        return;
    }
    assert_eq!(json(&run(Request::new(reserve)).await), MEMORY_64_MIB);
    assert_eq!(json(&run(Request::new(growable)).await), MEMORY_64_MIB);
    assert_eq!(json(&run(Request::new(formatters)).await), MEMORY_64_MIB);
    let few = "async () => { const all = []; for (let i = 0; i < 100; i++) all.push(new Intl.NumberFormat('en')); \
               return [all.length, all[0].format(1234.5), all[0] instanceof Intl.NumberFormat, new ArrayBuffer(1).constructor === ArrayBuffer] }";
    assert_eq!(json(&run(Request::new(few)).await), r#"{"result":[100,"1,234.5",true,true],"logs":[]}"#);
}

#[tokio::test]
async fn the_engines_own_tasks_run_while_the_program_waits() {
    if engine() != EngineKind::V8 {
        return;
    }
    let compiled = format!(
        "async () => {{ const m = await WebAssembly.compile({}); return WebAssembly.Module.exports(m).map(e => e.name) }}",
        module("none")
    );
    assert_eq!(json(&run(wasm(&compiled)).await), r#"{"result":["add","grow","mem"],"logs":[]}"#);
    let wait = "async () => { const a = new Int32Array(new SharedArrayBuffer(4)); \
                const w = Atomics.waitAsync(a, 0, 0, 30); return [w.async, await w.value] }";
    assert_eq!(json(&run(Request::new(wait)).await), r#"{"result":[true,"timed-out"],"logs":[]}"#);
}

/// What V8 does not report (a two-byte string of 512 MiB flattened from a rope, far past
/// a 32 MiB limit, in one native step) is bounded under process isolation by the cap on
/// the worker's committed memory: the worker dies of it, the run ends with the memory
/// outcome, and the next run is served.
#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_past_its_memory_cap_ends_the_run_with_the_memory_outcome() {
    use codemode_executor::{Confinement, ProcessExecutor, WorkerCommand};
    if engine() != EngineKind::V8 {
        return;
    }
    let codemode = codemode_devtools::codemode_binary(&["v8"]).unwrap();
    let executor = ProcessExecutor::new(
        crate::support::config().workers(1).confinement(Confinement::Off),
        WorkerCommand::new(codemode.clone(), ["stdio"]),
    );
    let rope = "async () => { let s = 'é'.repeat(1 << 20); for (let i = 0; i < 8; i++) s = s + s; \
                return s.indexOf('y') }";
    let watching = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let watcher = crate::support::watch_children(watching.clone(), codemode.clone());
    let outcome = executor.execute(Request::new(rope).memory_limit_bytes(32 << 20)).await;
    watching.store(false, std::sync::atomic::Ordering::Release);
    let peak = watcher.join().unwrap();
    // The worker says it ran out (status 86, the memory outcome) when V8 or C++'s
    // `operator new` meets the cap; about one run in four it meets it in a path of its own
    // and dies without a word (`lost`). Its memory is held either way.
    let memory =
        r#"{"error":"Execution ran out of memory: the limit is 33554432 bytes.","kind":"memory","logs":[]}"#;
    let lost =
        format!(r#"{{"error":"{}","kind":"lost","logs":[]}}"#, codemode_protocol::texts::WORKER_PROCESS_DIED);
    assert!(json(&outcome) == memory || json(&outcome) == lost, "{}", json(&outcome));
    let next = executor.execute(Request::new("async () => 1")).await;
    assert_eq!(json(&next), r#"{"result":1,"logs":[]}"#);
    // ICU garbage: 20,000 dates formatted with a time zone held 190 MiB before the heap
    // was collected for it; the worker's whole resident memory now stays under 160 MiB.
    let dates = "async () => { let n = 0; for (let i = 0; i < 20000; i++) \
                 n += new Date(0).toLocaleString('de', { timeZone: 'Asia/Tokyo', dateStyle: 'full', timeStyle: 'long' }).length; return n }";
    let watching = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let watcher = crate::support::watch_children(watching.clone(), codemode.clone());
    let formatted = executor.execute(Request::new(dates).timeout(std::time::Duration::from_secs(60))).await;
    watching.store(false, std::sync::atomic::Ordering::Release);
    let dates_peak = watcher.join().unwrap();
    assert_eq!(json(&formatted), r#"{"result":880000,"logs":[]}"#);
    assert!(dates_peak > 0 && dates_peak < 160 << 20, "the worker reached {} MiB", dates_peak >> 20);
    // The flattened string alone is 512 MiB; the cap is the worker's start plus 2 × 32 MiB
    // + 256 MiB: the worker died well before the string was whole.
    assert!(peak > 0 && peak < 400 << 20, "the worker reached {} MiB", peak >> 20);
}

/// In-process, the same string passes V8's heap limit in one step without V8 asking: the
/// run still ends with the memory outcome, read from the heap at the end of its turn.
#[tokio::test]
async fn a_string_flattened_past_the_heap_limit_in_one_step_ends_with_the_memory_outcome() {
    let rope = "async () => { let s = 'é'.repeat(1 << 20); for (let i = 0; i < 6; i++) s = s + s; \
                return s.indexOf('y') }";
    let outcome = run(Request::new(rope).memory_limit_bytes(32 << 20)).await;
    assert_eq!(
        json(&outcome),
        r#"{"error":"Execution ran out of memory: the limit is 33554432 bytes.","kind":"memory","logs":[]}"#
    );
}
