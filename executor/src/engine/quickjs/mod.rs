//! The QuickJS engine: the runtime's primitives bound to rquickjs, one `Runtime` and
//! `Context` per execution (made afresh, or renewed byte for byte from its sealed heap),
//! and nothing of an execution's rules.
//!
//! Every engine knob is set in [`QuickJs::new`] (allocator, rejection tracker) or when
//! the engine is armed for its execution (budget, stack limit, interrupt handler), and
//! nowhere else. Built-in scripts are compiled to QuickJS bytecode once per process:
//! parsing them anew for each engine would cost most of a short run.

mod alloc;
mod strings;

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use rquickjs::context::EvalOptions;
use rquickjs::function::Rest;
use rquickjs::module::WriteOptions;
use rquickjs::promise::PromiseState as QuickJsPromiseState;
use rquickjs::{
    ArrayBuffer, Context, Ctx, Exception, Function, Module, Object, Persistent, Runtime, TypedArray,
};

use super::{Arg, Engine, EngineSetup, HostValue, Op, PromiseState, Rejection, Stopper, Thrown};
use crate::sync::lock;
use alloc::{Counting, Heap};

type JsValue<'js> = rquickjs::Value<'js>;

/// A value kept across turns.
pub(crate) type Handle = Persistent<JsValue<'static>>;

/// One execution on QuickJS.
pub(crate) struct QuickJs {
    rejections: Rc<RefCell<Vec<Rejection<Handle>>>>,
    /// The native functions made in this engine, each held from here: a sealed heap
    /// points to their Rust closures, so no program may have them finalized before a renewal.
    natives: Vec<Handle>,
    /// Set when a native function panicked: rquickjs keeps the panic to raise it at the next
    /// exception, so this engine is never renewed for another execution.
    poisoned: Rc<Cell<bool>>,
    heap: Rc<Heap>,
    stop: Arc<AtomicBool>,
    context: Context,
    runtime: Runtime,
}

impl Drop for QuickJs {
    fn drop(&mut self) {
        // Persistent values must go before the runtime that owns them.
        self.rejections.borrow_mut().clear();
        self.natives.clear();
        // Freeing the runtime object by object was a quarter of a short run's CPU; its
        // allocator frees it whole instead, after QuickJS has run the finalizers that
        // reach outside its memory (vendor/rquickjs-sys/PATCHES.md, section 7).
        // SAFETY: the context's runtime is alive (both are fields of this engine, dropped
        // after this), and its allocator is `Counting`, which frees every block it still
        // holds when it is dropped, after `JS_FreeRuntime`.
        unsafe {
            let runtime = rquickjs::qjs::JS_GetRuntime(self.context.as_raw().as_ptr());
            rquickjs::qjs::JS_SetDiscardOnFree(runtime);
        }
    }
}

impl Engine for QuickJs {
    type Value = Handle;
    const NAME: &'static str = "quickjs";
    const COLUMNS: super::ColumnUnit = super::ColumnUnit::Utf8Bytes;

    fn new(_memory_limit_bytes: usize, stack_limit_bytes: usize) -> Result<QuickJs, String> {
        let heap = Rc::new(Heap::default());
        let runtime = Runtime::new_with_alloc(Counting::new(heap.clone()))
            .map_err(|e| format!("QuickJS runtime: {e}"))?;
        let context = Context::full(&runtime).map_err(|e| format!("QuickJS context: {e}"))?;
        runtime.set_max_stack_size(stack_limit_bytes);
        let rejections: Rc<RefCell<Vec<Rejection<Handle>>>> = Rc::default();
        let tracked = rejections.clone();
        runtime.set_host_promise_rejection_tracker(Some(Box::new(move |ctx, promise, reason, handled| {
            let key = identity(&promise);
            tracked.borrow_mut().push(Rejection {
                key,
                promise: Persistent::save(&ctx, promise),
                reason: (!handled).then(|| Persistent::save(&ctx, reason)),
            });
        })));
        #[allow(unused_mut)]
        let mut engine = QuickJs {
            rejections,
            natives: Vec::new(),
            poisoned: Rc::default(),
            heap,
            stop: Arc::default(),
            context,
            runtime,
        };
        #[cfg(all(target_os = "linux", feature = "confinement-probe"))]
        super::probe::install(&mut engine)?;
        Ok(engine)
    }

    fn fits(&self, _memory_limit_bytes: usize) -> bool {
        true // the budget is attached when armed
    }

    fn arm(&mut self, setup: EngineSetup) {
        // QuickJS has no WebAssembly: the executor refuses such a run before it has an engine.
        debug_assert!(!setup.web_assembly, "a run asking for WebAssembly reached QuickJS");
        self.heap.account.attach(setup.budget);
        self.runtime.set_max_stack_size(setup.stack_limit_bytes);
        self.stop = setup.stop;
        let (stop, heap) = (self.stop.clone(), self.heap.clone());
        // Asked every 100 ticks of the interpreter and in long builtin loops (vendor/rquickjs-sys).
        self.runtime.set_interrupt_handler(Some(Box::new(move || {
            stop.load(Ordering::Relaxed) || heap.account.exceeded()
        })));
        // SAFETY: the context is alive (a field of this engine) and no JavaScript runs.
        unsafe { rquickjs::qjs::JS_StartExecution(self.context.as_raw().as_ptr(), fastrand::u64(..)) };
    }

    fn seal(&mut self) -> bool {
        // Nothing queued or held but what the built-ins' boot left: the seal is what every
        // execution starts from.
        self.rejections.borrow_mut().clear();
        self.heap.seal();
        true
    }

    fn renew(&mut self) -> bool {
        self.rejections.borrow_mut().clear();
        // The last execution's handler holds its stop flag; the renewed heap has none set.
        self.runtime.set_interrupt_handler(None);
        self.stop = Arc::default();
        if self.poisoned.get() {
            return false;
        }
        self.heap.renew()
    }

    fn unseal(&mut self) {
        self.heap.unseal();
    }

    fn evaluate_builtin(
        &mut self,
        name: &'static str,
        source: fn() -> String,
    ) -> Result<Handle, Thrown<Handle>> {
        let bytecode = compiled(name, source);
        self.with(|ctx| {
            // SAFETY: the bytecode was written by `compiled` from this build's own sources and
            // QuickJS; nothing from outside the process is ever loaded.
            let module = unsafe { Module::load(ctx.clone(), &bytecode) }?;
            let (module, evaluated) = module.eval()?;
            evaluated.finish::<()>()?;
            module.get::<_, JsValue>("default")
        })
    }

    fn evaluate(&mut self, source: &str) -> Result<Handle, Thrown<Handle>> {
        self.with(|ctx| {
            let mut options = EvalOptions::default();
            options.global = true;
            options.strict = true;
            options.filename = Some(super::PROGRAM_SCRIPT.to_owned());
            ctx.eval_with_options::<JsValue, _>(source, options)
        })
    }

    fn syntax_error_position(&mut self, _error: &Handle) -> Option<(u32, u32)> {
        None // QuickJS writes a syntax error's place into its `stack`
    }

    fn native_object(&mut self, ops: &[(&'static str, Op)]) -> Result<Handle, Thrown<Handle>> {
        let mut natives = Vec::with_capacity(ops.len());
        let poisoned = self.poisoned.clone();
        let object = self.with(|ctx| {
            let object = Object::new(ctx.clone())?;
            for (name, op) in ops {
                let function = native(ctx, op.clone(), poisoned.clone())?;
                natives.push(Persistent::save(ctx, function.clone().into_value()));
                object.set(*name, function)?;
            }
            Ok(object.into_value())
        });
        self.natives.extend(natives);
        object
    }

    fn call(&mut self, function: &Handle, args: &[Arg<'_, Handle>]) -> Result<Handle, Thrown<Handle>> {
        self.with(|ctx| {
            let function: Function = function.clone().restore(ctx)?.get()?;
            let mut values = Vec::with_capacity(args.len());
            for arg in args {
                values.push(match arg {
                    Arg::Value(handle) => (*handle).clone().restore(ctx)?,
                    Arg::Host(value) => from_host(ctx, value.clone())?,
                });
            }
            function.call::<_, JsValue>((Rest(values),))
        })
    }

    fn index(&mut self, array: &Handle, index: u32) -> Option<Handle> {
        self.context.with(|ctx| {
            let array: rquickjs::Array = array.clone().restore(&ctx).ok()?.get().ok()?;
            let value: JsValue = array.get(index as usize).ok()?;
            Some(Persistent::save(&ctx, value))
        })
    }

    fn read(&mut self, value: &Handle) -> HostValue {
        self.context.with(|ctx| {
            value.clone().restore(&ctx).map(|value| to_host(&ctx, &value)).unwrap_or(HostValue::Undefined)
        })
    }

    fn same(&mut self, a: &Handle, b: &Handle) -> bool {
        self.context.with(|ctx| match (a.clone().restore(&ctx), b.clone().restore(&ctx)) {
            (Ok(a), Ok(b)) => a == b,
            _ => false,
        })
    }

    fn run_microtasks(&mut self) -> Result<(), Thrown<Handle>> {
        loop {
            if self.stopped() {
                return Err(Thrown::Stopped);
            }
            match self.runtime.execute_pending_job() {
                Ok(true) => {}
                Ok(false) => return Ok(()),
                // A job's own exception went to its promise; the loop goes on.
                Err(_) => {}
            }
        }
    }

    fn promise_state(&mut self, promise: &Handle) -> PromiseState<Handle> {
        self.context.with(|ctx| {
            let Ok(value) = promise.clone().restore(&ctx) else { return PromiseState::Pending };
            let Some(promise) = value.as_promise() else {
                return PromiseState::Fulfilled(Persistent::save(&ctx, value));
            };
            match promise.state() {
                QuickJsPromiseState::Pending => PromiseState::Pending,
                QuickJsPromiseState::Resolved => match promise.result::<JsValue>() {
                    Some(Ok(value)) => PromiseState::Fulfilled(Persistent::save(&ctx, value)),
                    _ => PromiseState::Rejected(Persistent::save(&ctx, ctx.catch())),
                },
                QuickJsPromiseState::Rejected => {
                    let _ = promise.result::<JsValue>();
                    PromiseState::Rejected(Persistent::save(&ctx, ctx.catch()))
                }
            }
        })
    }

    fn take_rejections(&mut self) -> Vec<Rejection<Handle>> {
        std::mem::take(&mut *self.rejections.borrow_mut())
    }

    fn stopper(&self) -> Stopper {
        let stop = self.stop.clone();
        Arc::new(move || stop.store(true, Ordering::Release))
    }
}

impl QuickJs {
    fn stopped(&self) -> bool {
        self.stop.load(Ordering::Acquire) || self.heap.account.exceeded()
    }

    /// Run `f` in the context; a thrown value is kept, and anything after a stop is `Stopped`.
    fn with(
        &mut self,
        f: impl for<'js> FnOnce(&Ctx<'js>) -> rquickjs::Result<JsValue<'js>>,
    ) -> Result<Handle, Thrown<Handle>> {
        let stopped = self.stop.clone();
        let heap = self.heap.clone();
        self.context.with(|ctx| match f(&ctx) {
            Ok(value) => Ok(Persistent::save(&ctx, value)),
            Err(error) => {
                let thrown = match error {
                    rquickjs::Error::Exception => ctx.catch(),
                    other => Exception::from_message(ctx.clone(), &other.to_string())
                        .map(|e| e.into_value())
                        .unwrap_or_else(|_| JsValue::new_undefined(ctx.clone())),
                };
                if stopped.load(Ordering::Acquire) || heap.account.exceeded() {
                    return Err(Thrown::Stopped);
                }
                Err(Thrown::Value(Persistent::save(&ctx, thrown)))
            }
        })
    }
}

/// An op as a JavaScript function: arguments copied out, the answer copied in, an `Err`
/// thrown. A panic marks the engine `poisoned` on its way to rquickjs, which raises it later.
fn native<'js>(ctx: &Ctx<'js>, op: Op, poisoned: Rc<Cell<bool>>) -> rquickjs::Result<Function<'js>> {
    Function::new(
        ctx.clone(),
        move |ctx: Ctx<'js>, args: Rest<JsValue<'js>>| -> rquickjs::Result<JsValue<'js>> {
            let args = args.0.iter().map(|value| to_host(&ctx, value)).collect();
            let answer = std::panic::catch_unwind(AssertUnwindSafe(|| op(args))).unwrap_or_else(|panic| {
                poisoned.set(true);
                std::panic::resume_unwind(panic)
            });
            match answer {
                Ok(value) => from_host(&ctx, value),
                Err(text) => Err(Exception::throw_message(&ctx, &text)),
            }
        },
    )
}

/// A promise's address, unique while the runtime holds it.
fn identity(promise: &JsValue<'_>) -> u64 {
    let raw = promise.as_raw();
    // SAFETY: a promise is an object, whose JSValue carries its address in `u.ptr`.
    unsafe { raw.u.ptr as usize as u64 }
}

/// A value as the host reads it.
fn to_host<'js>(ctx: &Ctx<'js>, value: &JsValue<'js>) -> HostValue {
    if let Some(string) = value.as_string() {
        return HostValue::String(strings::to_string_lossy(ctx, string));
    }
    if let Some(number) = value.as_number() {
        return HostValue::Number(number);
    }
    if let Some(flag) = value.as_bool() {
        return HostValue::Bool(flag);
    }
    if value.is_object() {
        if let Ok(view) = TypedArray::<u8>::from_value(value.clone()) {
            // SAFETY: no JavaScript runs while the slice is alive; it is copied out here.
            return HostValue::Bytes(unsafe { view.as_bytes() }.map(<[u8]>::to_vec).unwrap_or_default());
        }
        if let Some(buffer) = ArrayBuffer::from_value(value.clone()) {
            // SAFETY: no JavaScript runs while the slice is alive; it is copied out here.
            return HostValue::Bytes(unsafe { buffer.as_bytes() }.map(<[u8]>::to_vec).unwrap_or_default());
        }
    }
    HostValue::Undefined
}

/// `text` parsed by QuickJS's JSON parser where it lies, or the text back when it is not
/// JSON (the exception left pending). `Ctx::json_parse` would copy the text and scan it for
/// a NUL first (a tool's answer can be megabytes); QuickJS reads the length it is given,
/// where a NUL is a stray byte like any other, and needs only a NUL after it (pushing one
/// reallocates only when the text has no room left).
fn parse_json<'js>(ctx: &Ctx<'js>, mut text: String) -> Result<JsValue<'js>, String> {
    let length = text.len();
    text.push('\0');
    // SAFETY: `text` holds `length` bytes then a NUL and outlives the call; the name is a
    // C string; the value returned is owned (one reference), as `from_raw` takes it.
    let value = unsafe {
        let raw = rquickjs::qjs::JS_ParseJSON(
            ctx.as_raw().as_ptr(),
            text.as_ptr().cast(),
            length as _,
            c"<input>".as_ptr(),
        );
        JsValue::from_raw(ctx.clone(), raw)
    };
    text.pop();
    if value.is_exception() {
        return Err(text);
    }
    Ok(value)
}

/// A host value as a fresh JavaScript value; bytes are copied into the engine's own heap,
/// where the budget counts them.
fn from_host<'js>(ctx: &Ctx<'js>, value: HostValue) -> rquickjs::Result<JsValue<'js>> {
    Ok(match value {
        HostValue::Undefined => JsValue::new_undefined(ctx.clone()),
        HostValue::Bool(flag) => JsValue::new_bool(ctx.clone(), flag),
        HostValue::Number(number) => JsValue::new_number(ctx.clone(), number),
        HostValue::String(text) => rquickjs::String::from_str(ctx.clone(), &text)?.into_value(),
        HostValue::Json(text) => match parse_json(ctx, text) {
            Ok(value) => {
                // No prototype: the array goes through Promise.resolve, which must find no
                // `then` a program put on Array.prototype (a string never had one).
                let array = rquickjs::Array::new(ctx.clone())?;
                array.set(0, value)?;
                array.as_object().set_prototype(None)?;
                array.into_value()
            }
            // A syntax error (or a stop, which JavaScript meets again at once) leaves the text
            // to the codec's own path, which says what is wrong as it always did.
            Err(text) => {
                let _ = ctx.catch();
                rquickjs::String::from_str(ctx.clone(), &text)?.into_value()
            }
        },
        HostValue::Bytes(bytes) => ArrayBuffer::new_copy(ctx.clone(), &bytes)?.into_value(),
        HostValue::Builtin(script) => {
            let bytecode = compiled(script.name, script.source);
            // SAFETY: the bytecode was written by `compiled` from this build's own sources and
            // QuickJS; nothing from outside the process is ever loaded.
            let module = unsafe { Module::load(ctx.clone(), &bytecode) }?;
            let (module, evaluated) = module.eval()?;
            evaluated.finish::<()>()?;
            module.get::<_, JsValue>("default")?
        }
        HostValue::List(values) => {
            let array = rquickjs::Array::new(ctx.clone())?;
            for (i, value) in values.into_iter().enumerate() {
                array.set(i, from_host(ctx, value)?)?;
            }
            array.into_value()
        }
    })
}

/// The bytecode of a built-in script, compiled on first use. Without its source text:
/// every engine loading it would hold its own copy (48 KiB per live engine), kept only for
/// `Function.prototype.toString` of the runtime's own functions.
fn compiled(name: &'static str, source: fn() -> String) -> Arc<Vec<u8>> {
    type Cache = Mutex<HashMap<&'static str, Arc<Vec<u8>>>>;
    static COMPILED: OnceLock<Cache> = OnceLock::new();
    let cache = COMPILED.get_or_init(Mutex::default);
    if let Some(bytecode) = lock(cache).get(name) {
        return bytecode.clone();
    }
    let runtime = Runtime::new().unwrap_or_else(|e| panic!("QuickJS runtime: {e}"));
    let context = Context::full(&runtime).unwrap_or_else(|e| panic!("QuickJS context: {e}"));
    let bytecode = context.with(|ctx| {
        Module::declare(ctx.clone(), name, format!("export default {};", source()))
            .and_then(|module| module.write(WriteOptions { strip_source: true, ..WriteOptions::default() }))
            .unwrap_or_else(|e| panic!("the built-in source {name} compiles: {e}"))
    });
    let bytecode = Arc::new(bytecode);
    lock(cache).insert(name, bytecode.clone());
    bytecode
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::budget::Budget;

    /// An engine armed with a budget of its own, and an object of natives made of `ops`.
    fn armed(ops: &[(&'static str, Op)]) -> (QuickJs, Arc<Budget>, Handle) {
        let budget = Arc::new(Budget::new(256 << 20));
        let mut engine = QuickJs::new(256 << 20, 1 << 20).expect("an engine");
        engine.arm(EngineSetup {
            budget: budget.clone(),
            stack_limit_bytes: 1 << 20,
            stop: Arc::default(),
            web_assembly: false,
        });
        let natives = engine.native_object(ops).expect("the natives");
        (engine, budget, natives)
    }

    /// Call `source`, a function of the natives; its microtasks are left queued.
    fn call_with(engine: &mut QuickJs, natives: Handle, source: &str) {
        let function = engine.evaluate(source).unwrap_or_else(|_| panic!("the script"));
        engine.call(&function, &[Arg::Value(&natives)]).unwrap_or_else(|_| panic!("the call"));
    }

    /// QuickJS no longer frees a runtime object by object (`JS_SetDiscardOnFree`): the
    /// allocator frees the blocks, and the finalizers that reach outside still run.
    #[test]
    fn a_dropped_engine_gives_back_its_whole_heap_and_drops_what_its_natives_hold() {
        let held = Rc::new(());
        let kept = held.clone();
        let keep: Op = Rc::new(move |_| {
            let _ = &kept;
            Ok(HostValue::Bytes(vec![7; 100_000]))
        });
        let (mut engine, budget, natives) = armed(&[("keep", keep)]);
        call_with(
            &mut engine,
            natives,
            "(natives) => { globalThis.natives = natives; globalThis.bytes = natives.keep();
               globalThis.cycles = Array.from({ length: 10000 }, (_, i) => { const o = { i }; o.self = o; return o; });
               globalThis.text = 'x'.repeat(1 << 20); }",
        );
        assert!(budget.used() > 2 << 20, "the heap is charged: {}", budget.used());
        assert_eq!(Rc::strong_count(&held), 2, "the native function holds its op");

        drop(engine);
        assert_eq!(Rc::strong_count(&held), 1, "the native function's finalizer ran");
        assert_eq!(budget.used(), 0, "every block went back");
    }

    /// A program leaves the engine in any state it likes when it is dropped: jobs queued
    /// and never run, registries and weak references about to fire, suspended functions,
    /// proxies, shared memory. Teardown runs none of it and gives every block back (and,
    /// in a test build, checks that nothing is held from outside first).
    #[test]
    fn a_dropped_engine_runs_nothing_a_program_left_behind() {
        let ran = Rc::new(std::cell::Cell::new(0));
        let count = ran.clone();
        let report: Op = Rc::new(move |_| {
            count.set(count.get() + 1);
            Ok(HostValue::Undefined)
        });
        let (mut engine, budget, natives) = armed(&[("report", report)]);
        call_with(
            &mut engine,
            natives,
            "(natives) => {
               const report = natives.report;
               const registry = new FinalizationRegistry(() => report());
               for (let i = 0; i < 100; i++) { registry.register({ i }, i); registry.register(Symbol(i), i); }
               globalThis.kept = [registry, new WeakRef({}), new WeakMap([[Symbol('k'), {}]])];
               for (let i = 0; i < 100; i++) Promise.resolve(i).then(() => report());
               (async () => { await new Promise(() => {}); report(); })();
               function* g() { try { yield 1; } finally { report(); } }
               const it = g(); it.next(); kept.push(it);
               kept.push(new Proxy({}, { get() { report(); }, ownKeys() { report(); return []; } }));
               const shared = new SharedArrayBuffer(1024);
               kept.push(new Int32Array(shared), new DataView(new ArrayBuffer(64)), shared);
               const a = {}, b = { a }; a.b = b; kept.push(a, Object.freeze([a, b]));
               class Held { #x = report; get x() { return report(); } }
               kept.push(new Held());
             }",
        );
        assert_eq!(ran.get(), 0, "nothing has run yet: the microtasks are still queued");

        drop(engine);
        assert_eq!(ran.get(), 0, "teardown ran no job, callback, trap or getter");
        assert_eq!(Rc::strong_count(&ran), 1, "the native function's finalizer ran");
        assert_eq!(budget.used(), 0, "every block went back");
    }

    /// A sealed engine armed for an execution: the budget it is charged to.
    fn arm_sealed(engine: &mut QuickJs) -> Arc<Budget> {
        let budget = Arc::new(Budget::new(256 << 20));
        engine.arm(EngineSetup {
            budget: budget.clone(),
            stack_limit_bytes: 1 << 20,
            stop: Arc::default(),
            web_assembly: false,
        });
        budget
    }

    fn text_of(engine: &mut QuickJs, source: &str) -> String {
        let value = engine.evaluate(source).unwrap_or_else(|_| panic!("the script {source}"));
        match engine.read(&value) {
            HostValue::String(text) => text,
            other => panic!("{source} gave {other:?}"),
        }
    }

    /// Whatever a program does to a renewed engine, the next execution finds it as it was
    /// sealed: the same globals, prototypes and natives, and the same bytes charged.
    #[test]
    fn a_renewed_engine_is_the_sealed_one_whatever_the_last_program_did() {
        let calls = Rc::new(std::cell::Cell::new(0));
        let count = calls.clone();
        let op: Op = Rc::new(move |_| {
            count.set(count.get() + 1);
            Ok(HostValue::String("from the host".into()))
        });
        let mut engine = QuickJs::new(256 << 20, 1 << 20).expect("an engine");
        let natives = engine.native_object(&[("op", op)]).expect("the natives");
        let boot = engine
            .evaluate("(natives) => { globalThis.natives = natives; globalThis.base = { n: 1 }; }")
            .unwrap_or_else(|_| panic!("the boot"));
        engine.call(&boot, &[Arg::Value(&natives)]).unwrap_or_else(|_| panic!("the boot ran"));
        drop((boot, natives));
        assert!(engine.seal());
        let mut charged = None;
        for round in 0..5 {
            let budget = arm_sealed(&mut engine);
            let held = budget.used();
            assert_eq!(
                *charged.get_or_insert(held),
                held,
                "round {round}: the same bytes charged when armed"
            );
            let seen = text_of(
                &mut engine,
                "JSON.stringify([typeof Object.prototype.polluted, base.n, typeof natives.op, natives.op(),
                  typeof globalThis.left, Array.prototype.map.name, Object.isFrozen(Array.prototype)])",
            );
            assert_eq!(
                seen, r#"["undefined",1,"function","from the host","undefined","map",false]"#,
                "round {round}"
            );
            let hostile = engine
                .evaluate(
                    "Object.prototype.polluted = 1; base.n = 2; globalThis.left = 'x'.repeat(1 << 20);
                     delete natives.op; natives = null; delete Array.prototype.map; Object.freeze(Array.prototype);
                     globalThis.cycles = Array.from({ length: 10000 }, (_, i) => { const o = { i }; o.self = o; return o; });
                     for (let i = 0; i < 100; i++) Promise.resolve(i).then(() => { throw i; });
                     new FinalizationRegistry(() => {}).register({}, 1);
                     'done'",
                )
                .unwrap_or_else(|_| panic!("the hostile program"));
            assert_eq!(engine.read(&hostile), HostValue::String("done".into()));
            drop(hostile);
            assert!(budget.used() > held + (2 << 20), "round {round}: the program's memory is charged");
            assert!(engine.renew(), "round {round}: renewed");
        }
        assert_eq!(calls.get(), 5, "the native ran once a round");
        drop(engine);
        assert_eq!(Rc::strong_count(&calls), 1, "the native function's finalizer ran at the end");
    }

    /// Each execution gets its own Math.random sequence and a time origin of its own, as
    /// a new engine would, though its engine was made earlier and renewed since.
    #[test]
    fn a_renewed_engine_starts_random_and_its_clock_afresh() {
        let mut engine = QuickJs::new(256 << 20, 1 << 20).expect("an engine");
        assert!(engine.seal());
        let (mut sequences, mut origins) = (Vec::new(), Vec::new());
        for _ in 0..3 {
            std::thread::sleep(std::time::Duration::from_millis(30));
            let _budget = arm_sealed(&mut engine);
            let now = text_of(&mut engine, "String(performance.now() < 20)");
            assert_eq!(now, "true", "performance.now() counts from when the execution started");
            origins.push(
                text_of(&mut engine, "String(performance.timeOrigin)").parse::<f64>().expect("a number"),
            );
            sequences.push(text_of(&mut engine, "String([Math.random(), Math.random()])"));
            assert!(engine.renew());
        }
        assert!(sequences[0] != sequences[1] && sequences[1] != sequences[2], "{sequences:?}");
        assert!(origins[1] - origins[0] >= 30.0 && origins[2] - origins[1] >= 30.0, "{origins:?}");
    }

    /// An engine unsealed after blocks of its seal were freed (a retained engine) gives
    /// every byte back when it goes, and runs on as any engine meanwhile.
    #[test]
    fn an_unsealed_engine_gives_back_every_byte() {
        let mut engine = QuickJs::new(256 << 20, 1 << 20).expect("an engine");
        let boot =
            engine.evaluate("globalThis.big = 'y'.repeat(100000); 1").unwrap_or_else(|_| panic!("boot"));
        drop(boot);
        assert!(engine.seal());
        let budget = arm_sealed(&mut engine);
        let freed = engine.evaluate("globalThis.big = null; 2").unwrap_or_else(|_| panic!("free"));
        drop(freed);
        let held = budget.used();
        engine.unseal();
        assert!(held - budget.used() > 100_000, "the sealed string is charged until the unseal frees it");
        assert!(!engine.renew(), "an unsealed engine is not renewed");
        drop(engine);
        assert_eq!(budget.used(), 0, "every block went back");
    }

    /// rquickjs keeps a native function's panic to raise at the engine's next exception,
    /// even when JavaScript caught the error it became: such an engine is freed, never
    /// renewed into another execution's.
    #[test]
    fn an_engine_whose_native_panicked_is_not_renewed() {
        let op: Op = Rc::new(|_| panic!("a bug in an op"));
        let mut engine = QuickJs::new(256 << 20, 1 << 20).expect("an engine");
        let natives = engine.native_object(&[("op", op)]).expect("the natives");
        assert!(engine.seal());
        let _budget = arm_sealed(&mut engine);
        let catching = engine
            .evaluate("(natives) => { try { natives.op(); } catch { return 'caught'; } }")
            .unwrap_or_else(|_| panic!("the script"));
        let caught = engine.call(&catching, &[Arg::Value(&natives)]).unwrap_or_else(|_| panic!("the call"));
        assert_eq!(engine.read(&caught), HostValue::String("caught".into()));
        drop((caught, catching, natives));
        assert!(!engine.renew(), "not renewed");
    }
}
