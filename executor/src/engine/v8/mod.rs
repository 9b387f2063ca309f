//! The V8 engine: the runtime's primitives bound to the `v8` crate, one isolate and
//! context per execution, and nothing of an execution's rules.
//!
//! Every engine knob (heap limit and its callback, the ArrayBuffer allocator and budget,
//! stack limit, microtask policy, rejection callback) is set where the isolate is made
//! ([`made`]) or attached when it is armed, and nowhere else. An isolate per execution is
//! the strong boundary V8 offers: nothing (heap, compiled code, intrinsics) is shared
//! between executions. Built-in scripts keep V8's code cache per process.

mod alloc;
mod bounds;
mod builtins;
mod convert;
mod stack;

use std::any::Any;
use std::cell::{Cell, RefCell};
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use super::{Arg, Engine, EngineSetup, HostValue, Op, PromiseState, Rejection, Stopper, Thrown};
use alloc::Account;

/// A value kept across turns.
pub(crate) type Handle = v8::Global<v8::Value>;

/// One execution on V8.
pub(crate) struct V8 {
    made: Made,
    stop: Arc<AtomicBool>,
    stack_limit_bytes: usize,
    /// Built-ins this engine compiled without a code cache: their cache is made when the
    /// engine ends, once the runtime has called (and V8 lazily compiled) their functions.
    uncached: Vec<(Arc<builtins::Builtin>, v8::Global<v8::UnboundScript>)>,
    /// Armed for an execution: only a run's engine has called the built-ins' functions
    /// (a warm engine never used has not, and its cache would leave them uncompiled).
    armed: bool,
}

/// An isolate with its context and what its callbacks reach. Fields drop in order: the
/// handles before the isolate, the account (read by the allocator and heap callback) after.
struct Made {
    heap_limit: usize,
    /// Set once the bounds' script has run ([`V8::new`] refuses an engine without them).
    bounds: Option<bounds::Bounds>,
    context: v8::Global<v8::Context>,
    shared: Rc<Shared>,
    isolate: v8::OwnedIsolate,
    account: Arc<Account>,
}

/// What native functions and the rejection callback reach, through an isolate slot.
struct Shared {
    account: Arc<Account>,
    ops: RefCell<Vec<Op>>,
    rejections: RefCell<Vec<Rejection<Handle>>>,
    /// The private key a promise's id is kept under.
    promise_key: RefCell<Option<v8::Global<v8::Private>>>,
    next_key: Cell<u64>,
    /// A panic in an op, carried across V8's frames and resumed once V8 has returned.
    panic: RefCell<Option<Box<dyn Any + Send>>>,
    /// ICU objects made and dropped since the heap was last collected for them ([`bounds`]).
    icu_garbage: Cell<usize>,
}

impl Shared {
    /// Every handle kept here, dropped while the isolate lives.
    fn clear(&self) {
        self.rejections.borrow_mut().clear();
        self.promise_key.borrow_mut().take();
        self.ops.borrow_mut().clear();
    }

    /// The promise's id, given on first sight and kept on the promise itself.
    fn key(&self, scope: &v8::PinScope<'_, '_>, promise: v8::Local<'_, v8::Promise>) -> u64 {
        let Some(private) = self.promise_key.borrow().as_ref().map(|key| v8::Local::new(scope, key)) else {
            return 0;
        };
        if let Some(id) = promise.get_private(scope, private)
            && let Ok(id) = v8::Local::<v8::Number>::try_from(id)
        {
            return id.value() as u64;
        }
        let id = self.next_key.get() + 1;
        self.next_key.set(id);
        let value = v8::Number::new(scope, id as f64);
        promise.set_private(scope, private, value.into());
        id
    }
}

impl Drop for V8 {
    fn drop(&mut self) {
        let uncached = std::mem::take(&mut self.uncached);
        if !uncached.is_empty() && self.armed && !self.stopped() {
            v8::scope!(let scope, &mut self.made.isolate);
            for (builtin, script) in uncached {
                if let Some(data) = v8::Local::new(scope, &script).create_code_cache() {
                    builtin.keep_cache(data.to_vec());
                }
            }
        }
        // Handles kept for the runtime go before the isolate that owns them.
        self.made.shared.clear();
    }
}

/// V8's process-wide state, made once; the platform runs the isolates' tasks ([`V8::pump`]).
fn platform() -> &'static v8::SharedRef<v8::Platform> {
    static PLATFORM: OnceLock<v8::SharedRef<v8::Platform>> = OnceLock::new();
    PLATFORM.get_or_init(|| {
        // Entropy from getrandom, set before initialisation: V8 never opens /dev/urandom,
        // which a confined worker could not (docs/security.md).
        #[cfg(target_os = "linux")]
        v8::V8::set_entropy_source(fill_random);
        // A wasm memory is at most 4 GiB (bounds.js charges each its maximum before it is
        // made), a module at most 64 MiB (its bytes are charged eightfold), and a table at
        // most 2^20 entries: a table's entries are made whole, in one step past the heap
        // limit (10 million took 230 MiB at a 32 MiB limit), 8 MiB at most so.
        v8::V8::set_flags_from_string(
            "--wasm-max-mem-pages=65536 --wasm-max-module-size=67108864 --wasm-max-table-size=1048576",
        );
        alloc::exit_when_cpp_runs_out();
        let platform = v8::new_default_platform(0, false).make_shared();
        v8::V8::initialize_platform(platform.clone());
        v8::V8::initialize();
        platform
    })
}

/// V8's entropy source: the kernel's random bytes (`getrandom`), `false` if they fail.
#[cfg(target_os = "linux")]
fn fill_random(buffer: &mut [u8]) -> bool {
    let mut filled = 0;
    while filled < buffer.len() {
        let rest = &mut buffer[filled..];
        // SAFETY: getrandom writes at most `rest.len()` bytes into `rest`, which is live.
        let n = unsafe { libc::getrandom(rest.as_mut_ptr().cast(), rest.len(), 0) };
        if n <= 0 {
            return false;
        }
        filled += n as usize;
    }
    true
}

/// A new isolate and context on this thread, whose stack has `stack_limit_bytes` (and a
/// margin) below here.
fn made(heap_limit: usize, stack_limit_bytes: usize) -> Made {
    platform();
    let account = Account::new();
    let params = v8::CreateParams::default()
        .heap_limits(0, heap_limit)
        .array_buffer_allocator(alloc::allocator(&account));
    let mut isolate = v8::Isolate::new(params);
    stack::set_stack_limit(&mut isolate, stack_limit_bytes);
    account.set_isolate(isolate.thread_safe_handle());
    isolate.add_near_heap_limit_callback(alloc::near_heap_limit, Arc::as_ptr(&account).cast_mut().cast());
    isolate.set_oom_error_handler(alloc::out_of_memory);
    isolate.set_microtasks_policy(v8::MicrotasksPolicy::Explicit);
    isolate.set_promise_reject_callback(promise_rejected);
    let shared = Rc::new(Shared {
        account: account.clone(),
        ops: RefCell::default(),
        rejections: RefCell::default(),
        promise_key: RefCell::default(),
        next_key: Cell::new(0),
        panic: RefCell::default(),
        icu_garbage: Cell::new(0),
    });
    isolate.set_slot(shared.clone());
    let context = {
        v8::scope!(let scope, &mut isolate);
        let context = v8::Context::new(scope, Default::default());
        let name = v8::String::new(scope, "codemode:promise");
        let key = v8::Private::new(scope, name);
        *shared.promise_key.borrow_mut() = Some(v8::Global::new(scope, key));
        v8::Global::new(scope, context)
    };
    Made { heap_limit, bounds: None, context, shared, isolate, account }
}

impl Engine for V8 {
    type Value = Handle;
    const NAME: &'static str = "v8";
    const COLUMNS: super::ColumnUnit = super::ColumnUnit::Utf16Units;
    const WEB_ASSEMBLY: bool = true;
    // Delayed tasks are not announced: a waiting run looks for them this often.
    const PLATFORM_POLL: Option<std::time::Duration> = Some(std::time::Duration::from_millis(5));

    fn new(memory_limit_bytes: usize, stack_limit_bytes: usize) -> Result<V8, String> {
        let made = made(memory_limit_bytes, stack_limit_bytes);
        let mut engine =
            V8 { made, stop: Arc::default(), stack_limit_bytes, uncached: Vec::new(), armed: false };
        // Compiled once per process with V8's code cache, as the runtime's built-ins are.
        let installer = engine.evaluate_builtin("codemode:v8-bounds", bounds::Bounds::source);
        let mut bounds = None;
        if let Ok(installer) = installer {
            let _ = engine.with(|scope, _| {
                bounds = bounds::Bounds::install(scope, &installer);
                Some(v8::undefined(scope).into())
            });
        }
        if bounds.is_none() {
            return Err("the V8 engine's memory bounds did not install".to_owned());
        }
        engine.made.bounds = bounds;
        #[cfg(all(target_os = "linux", feature = "confinement-probe"))]
        super::probe::install(&mut engine)?;
        Ok(engine)
    }

    fn fits(&self, memory_limit_bytes: usize) -> bool {
        self.made.heap_limit == memory_limit_bytes
    }

    fn arm(&mut self, setup: EngineSetup) {
        self.made.account.attach(setup.budget);
        self.stop = setup.stop;
        self.stack_limit_bytes = setup.stack_limit_bytes;
        self.armed = true;
        if setup.web_assembly {
            // Fails only when the isolate is out of memory or stopped: the run then ends so.
            let bounds = self.made.bounds.take();
            let _ = self.with(|scope, _| bounds.as_ref()?.enable_web_assembly(scope));
            self.made.bounds = bounds;
        }
    }

    fn evaluate_builtin(
        &mut self,
        name: &'static str,
        source: fn() -> String,
    ) -> Result<Handle, Thrown<Handle>> {
        let builtin = builtins::builtin(name, source);
        let cache = builtin.cache();
        let mut uncached = Vec::new();
        let value = self.with(|scope, _| {
            let text = convert::string(scope, &builtin.source)?;
            let origin = origin(scope, builtin.name)?;
            let (mut source, options) = match &cache {
                Some(bytes) => (
                    v8::script_compiler::Source::new_with_cached_data(
                        text,
                        Some(&origin),
                        v8::CachedData::new(bytes),
                    ),
                    v8::script_compiler::CompileOptions::ConsumeCodeCache,
                ),
                None => (
                    v8::script_compiler::Source::new(text, Some(&origin)),
                    v8::script_compiler::CompileOptions::NoCompileOptions,
                ),
            };
            let script = v8::script_compiler::compile(
                scope,
                &mut source,
                options,
                v8::script_compiler::NoCacheReason::NoReason,
            )?;
            if source.get_cached_data().is_some_and(|data| data.rejected()) {
                builtin.drop_cache();
            }
            if cache.is_none() {
                let unbound = script.get_unbound_script(scope);
                uncached.push((builtin.clone(), v8::Global::new(scope, unbound)));
            }
            script.run(scope)
        });
        self.uncached.append(&mut uncached);
        value
    }

    fn evaluate(&mut self, source: &str) -> Result<Handle, Thrown<Handle>> {
        // The directive on the first line keeps the program's line numbers.
        let source = format!("'use strict';{source}");
        self.with(|scope, _| {
            let text = convert::string(scope, &source)?;
            let origin = origin(scope, super::PROGRAM_SCRIPT)?;
            let script = v8::Script::compile(scope, text, Some(&origin))?;
            script.run(scope)
        })
    }

    fn syntax_error_position(&mut self, error: &Handle) -> Option<(u32, u32)> {
        // V8 keeps a compile error's place on the error, out of its `stack`: the message
        // made for it reads it back.
        self.enter(|scope| {
            let error = v8::Local::new(scope, error);
            let message = v8::Exception::create_message(scope, error);
            let name = message.get_script_resource_name(scope)?.to_rust_string_lossy(scope);
            if name != super::PROGRAM_SCRIPT {
                return None;
            }
            let line = u32::try_from(message.get_line_number(scope)?).ok()?;
            let column = u32::try_from(message.get_start_column()).ok()?;
            Some((line, column + 1))
        })
    }

    fn native_object(&mut self, ops: &[(&'static str, Op)]) -> Result<Handle, Thrown<Handle>> {
        self.with(|scope, shared| {
            let object = v8::Object::new(scope);
            for (name, op) in ops {
                let index = {
                    let mut all = shared.ops.borrow_mut();
                    all.push(op.clone());
                    all.len() - 1
                };
                let data = v8::Number::new(scope, index as f64);
                let function = v8::Function::builder(native)
                    .data(data.into())
                    .constructor_behavior(v8::ConstructorBehavior::Throw)
                    .build(scope)?;
                let key = convert::string(scope, name)?;
                function.set_name(key);
                object.set(scope, key.into(), function.into())?;
            }
            Some(object.into())
        })
    }

    fn call(&mut self, function: &Handle, args: &[Arg<'_, Handle>]) -> Result<Handle, Thrown<Handle>> {
        self.with(|scope, shared| {
            let function = v8::Local::new(scope, function);
            let Ok(function) = v8::Local::<v8::Function>::try_from(function) else {
                let message = convert::string(scope, "not a function")?;
                let error = v8::Exception::type_error(scope, message);
                scope.throw_exception(error);
                return None;
            };
            let mut values = Vec::with_capacity(args.len());
            for arg in args {
                values.push(match arg {
                    Arg::Value(handle) => v8::Local::new(scope, *handle),
                    Arg::Host(value) => convert::from_host(scope, &shared.account, value.clone())?,
                });
            }
            let undefined = v8::undefined(scope).into();
            function.call(scope, undefined, &values)
        })
    }

    fn index(&mut self, array: &Handle, index: u32) -> Option<Handle> {
        self.with(|scope, _| {
            let array = v8::Local::new(scope, array);
            let array = v8::Local::<v8::Object>::try_from(array).ok()?;
            array.get_index(scope, index)
        })
        .ok()
    }

    fn read(&mut self, value: &Handle) -> HostValue {
        self.enter(|scope| {
            let value = v8::Local::new(scope, value);
            convert::to_host(scope, value)
        })
    }

    fn same(&mut self, a: &Handle, b: &Handle) -> bool {
        self.enter(|scope| {
            let a = v8::Local::new(scope, a);
            let b = v8::Local::new(scope, b);
            a.strict_equals(b)
        })
    }

    fn pump(&mut self) -> bool {
        let mut ran = false;
        // Each task runs in its own scopes; a stopped isolate runs none.
        while !self.stopped() && v8::Platform::pump_message_loop(platform(), &self.made.isolate, false) {
            ran = true;
        }
        ran
    }

    fn run_microtasks(&mut self) -> Result<(), Thrown<Handle>> {
        self.pump();
        self.with(|scope, _| {
            scope.perform_microtask_checkpoint();
            Some(v8::undefined(scope).into())
        })?;
        // One allocation in large-object space (a rope flattened in one native step) can
        // pass the heap limit without V8 asking: the run's heap is read at each turn's end.
        if self.made.isolate.get_heap_statistics().used_heap_size() > self.made.heap_limit {
            self.made.account.exceed();
        }
        if self.stopped() || self.made.isolate.is_execution_terminating() {
            return Err(Thrown::Stopped);
        }
        Ok(())
    }

    fn promise_state(&mut self, promise: &Handle) -> PromiseState<Handle> {
        self.enter(|scope| {
            let value = v8::Local::new(scope, promise);
            let Ok(promise) = v8::Local::<v8::Promise>::try_from(value) else {
                return PromiseState::Fulfilled(v8::Global::new(scope, value));
            };
            match promise.state() {
                v8::PromiseState::Pending => PromiseState::Pending,
                v8::PromiseState::Fulfilled => {
                    let result = promise.result(scope);
                    PromiseState::Fulfilled(v8::Global::new(scope, result))
                }
                v8::PromiseState::Rejected => {
                    let result = promise.result(scope);
                    PromiseState::Rejected(v8::Global::new(scope, result))
                }
            }
        })
    }

    fn take_rejections(&mut self) -> Vec<Rejection<Handle>> {
        std::mem::take(&mut *self.made.shared.rejections.borrow_mut())
    }

    fn stopper(&self) -> Stopper {
        let stop = self.stop.clone();
        let isolate = self.made.isolate.thread_safe_handle();
        Arc::new(move || {
            stop.store(true, Ordering::Release);
            isolate.terminate_execution();
        })
    }
}

impl V8 {
    fn stopped(&self) -> bool {
        self.stop.load(Ordering::Acquire) || self.made.account.exceeded()
    }

    /// Run `f` in the context; `None` from it is a throw (kept as the value thrown) or, when
    /// the engine was stopped, [`Thrown::Stopped`]. A panic in an op resumes here.
    fn with(
        &mut self,
        f: impl for<'s, 'i> FnOnce(&mut v8::PinScope<'s, 'i>, &Shared) -> Option<v8::Local<'s, v8::Value>>,
    ) -> Result<Handle, Thrown<Handle>> {
        if self.stopped() {
            return Err(Thrown::Stopped);
        }
        self.made.account.settle();
        // JavaScript gets the stack limit from where the host calls in, whatever the host's depth.
        stack::set_stack_limit(&mut self.made.isolate, self.stack_limit_bytes);
        let (stop, account) = (self.stop.clone(), self.made.account.clone());
        let Made { context, shared, isolate, .. } = &mut self.made;
        let outcome = {
            v8::scope!(let scope, isolate);
            let context = v8::Local::new(scope, &*context);
            let scope = &mut v8::ContextScope::new(scope, context);
            v8::tc_scope!(let scope, scope);
            match f(scope, shared) {
                Some(value) => Ok(v8::Global::new(scope, value)),
                None => {
                    let stopped = stop.load(Ordering::Acquire) || account.exceeded();
                    if stopped || scope.has_terminated() || scope.is_execution_terminating() {
                        Err(Thrown::Stopped)
                    } else {
                        let thrown = scope.exception().unwrap_or_else(|| v8::undefined(scope).into());
                        Err(Thrown::Value(v8::Global::new(scope, thrown)))
                    }
                }
            }
        };
        if let Some(payload) = shared.panic.borrow_mut().take() {
            resume_unwind(payload);
        }
        outcome
    }

    /// Run `f` in the context, with anything it throws dropped; runs when stopped too.
    fn enter<R>(&mut self, f: impl for<'s, 'i> FnOnce(&mut v8::PinScope<'s, 'i>) -> R) -> R {
        let Made { context, isolate, .. } = &mut self.made;
        v8::scope!(let scope, isolate);
        let context = v8::Local::new(scope, &*context);
        let scope = &mut v8::ContextScope::new(scope, context);
        v8::tc_scope!(let scope, scope);
        f(scope)
    }
}

/// Where a script came from, for stack traces.
fn origin<'s>(scope: &v8::PinScope<'s, '_>, name: &str) -> Option<v8::ScriptOrigin<'s>> {
    let name = convert::string(scope, name)?;
    Some(v8::ScriptOrigin::new(scope, name.into(), 0, 0, false, 0, None, false, false, false, None))
}

/// An op as V8 calls it: arguments copied out, the answer copied in, an `Err` thrown as an
/// `Error`. A panic stops the isolate and is resumed by [`V8::with`] once V8 has returned.
fn native(
    scope: &mut v8::PinScope<'_, '_>,
    args: v8::FunctionCallbackArguments<'_>,
    mut answer: v8::ReturnValue<'_, v8::Value>,
) {
    let Some(shared) = scope.get_slot::<Rc<Shared>>().cloned() else { return };
    let index = v8::Local::<v8::Number>::try_from(args.data()).map_or(usize::MAX, |n| n.value() as usize);
    let Some(op) = shared.ops.borrow().get(index).cloned() else { return };
    let values = (0..args.length()).map(|i| convert::to_host(scope, args.get(i))).collect();
    match catch_unwind(AssertUnwindSafe(|| op(values))) {
        Ok(Ok(value)) => {
            if let Some(value) = convert::from_host(scope, &shared.account, value) {
                answer.set(value);
            }
        }
        Ok(Err(text)) => {
            if let Some(message) = convert::string(scope, &text) {
                let error = v8::Exception::error(scope, message);
                scope.throw_exception(error);
            }
        }
        Err(payload) => {
            *shared.panic.borrow_mut() = Some(payload);
            scope.terminate_execution();
        }
    }
}

/// V8 reports a rejection nothing handles, or a handler added to one later.
extern "C" fn promise_rejected(message: v8::PromiseRejectMessage<'_>) {
    let unhandled = match message.get_event() {
        v8::PromiseRejectEvent::PromiseRejectWithNoHandler => true,
        v8::PromiseRejectEvent::PromiseHandlerAddedAfterReject => false,
        _ => return,
    };
    // SAFETY: V8 calls this on the isolate's thread, inside its own handle scope and context,
    // with a message that lives through the call.
    v8::callback_scope!(unsafe scope, &message);
    v8::scope!(let scope, scope);
    let Some(shared) = scope.get_slot::<Rc<Shared>>().cloned() else { return };
    let promise = message.get_promise();
    let key = shared.key(scope, promise);
    let reason = unhandled.then(|| {
        let reason = message.get_value().unwrap_or_else(|| v8::undefined(scope).into());
        v8::Global::new(scope, reason)
    });
    let promise: v8::Local<v8::Value> = promise.into();
    shared.rejections.borrow_mut().push(Rejection { key, promise: v8::Global::new(scope, promise), reason });
}
