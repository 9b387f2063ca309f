//! The engine boundary: the primitives a JavaScript engine offers the runtime, and nothing more.
//!
//! An engine evaluates scripts, calls functions, runs microtasks, reads a promise's state,
//! reports rejections nothing handled, stops from another thread and charges its heap to the execution's budget. It
//! knows nothing of calls, timers, logs, budgets' rules or texts: those are the runtime's
//! (`crate::runtime`), written once above every engine. QuickJS (`quickjs/`) is bindings
//! over rquickjs; a second engine implements [`Engine`] the same way.

#[cfg(all(target_os = "linux", feature = "confinement-probe"))]
pub(crate) mod probe;
pub(crate) mod quickjs;
#[cfg(feature = "v8")]
pub(crate) mod v8;

use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

pub(crate) use codemode_protocol::ColumnUnit;

use crate::budget::Budget;

/// The name every engine gives the script of [`Engine::evaluate`] (the entry scope), by
/// which the runtime finds the program's frames in a stack.
pub(crate) const PROGRAM_SCRIPT: &str = "program.js";

/// A value copied between the host and an engine.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum HostValue {
    Undefined,
    Bool(bool),
    Number(f64),
    /// A JavaScript string; lone surrogates arrive as U+FFFD.
    String(String),
    /// Bytes: from a typed array or ArrayBuffer; to the engine, a fresh ArrayBuffer.
    Bytes(Vec<u8>),
    /// To the engine only: a fresh array.
    List(Vec<HostValue>),
    /// To the engine only: this JSON text parsed by the engine's own parser, in a
    /// one-element array with no prototype (so never a thenable); the text itself, as a
    /// string, when its syntax is wrong (the codec's path then says what is wrong).
    Json(String),
    /// To the engine only: the value of a built-in script of the runtime, compiled once per
    /// process where the engine can (as [`Engine::evaluate_builtin`]), evaluated now.
    Builtin(BuiltinScript),
}

/// A built-in script of the runtime, by name; its source is made on first use.
#[derive(Clone, Copy, Debug)]
pub(crate) struct BuiltinScript {
    pub(crate) name: &'static str,
    pub(crate) source: fn() -> String,
}

impl PartialEq for BuiltinScript {
    fn eq(&self, other: &BuiltinScript) -> bool {
        self.name == other.name
    }
}

impl HostValue {
    pub(crate) fn as_str(&self) -> Option<&str> {
        match self {
            HostValue::String(text) => Some(text),
            _ => None,
        }
    }
}

/// A native function the runtime hands the engine: arguments in, a value out, or an
/// error the engine throws into JavaScript as an `Error` with this message.
pub(crate) type Op = Rc<dyn Fn(Vec<HostValue>) -> Result<HostValue, String>>;

/// Why a call into the engine did not return a value.
#[derive(Debug)]
pub(crate) enum Thrown<V> {
    /// JavaScript threw this value.
    Value(V),
    /// The engine was stopped (deadline, cancel, budget) and ran nothing further.
    Stopped,
}

/// A promise's state, read natively (no JavaScript runs).
pub(crate) enum PromiseState<V> {
    Pending,
    Fulfilled(V),
    Rejected(V),
}

/// A rejection with no handler, or a handler attached later to one.
pub(crate) struct Rejection<V> {
    /// Unique among the promises the runtime holds (it keeps `promise` alive).
    pub(crate) key: u64,
    pub(crate) promise: V,
    /// `Some(reason)` when it became unhandled; `None` when it became handled.
    pub(crate) reason: Option<V>,
}

/// Stops an engine from any thread: what runs ends, and nothing runs after.
pub(crate) type Stopper = Arc<dyn Fn() + Send + Sync>;

/// What an engine is armed with for its one execution.
pub(crate) struct EngineSetup {
    /// Heap allocations are charged here; one refused puts the budget over its limit.
    pub(crate) budget: Arc<Budget>,
    pub(crate) stack_limit_bytes: usize,
    /// Raised by the watchdog or the host: the engine stops at once.
    pub(crate) stop: Arc<AtomicBool>,
    /// Put `WebAssembly` on the global, every byte it uses charged to `budget`. Only an
    /// engine with [`Engine::WEB_ASSEMBLY`] is armed so: the executor refuses it for others.
    pub(crate) web_assembly: bool,
}

/// One execution's JavaScript engine, used from the thread that made it.
///
/// An engine is made ahead of demand on an idle thread ([`Engine::new`]), where the
/// runtime evaluates its own built-ins in it, then armed for exactly one execution
/// ([`Engine::arm`]) before any program source reaches it.
pub(crate) trait Engine: Sized {
    /// A handle to a JavaScript value that stays valid while the engine lives.
    type Value: Clone;

    /// A short name for texts and benches: `quickjs`, `v8`.
    const NAME: &'static str;
    /// How the columns of the engine's stacks and positions count.
    const COLUMNS: ColumnUnit;
    /// Whether the engine has WebAssembly to offer a run that asks ([`EngineSetup::web_assembly`]).
    const WEB_ASSEMBLY: bool = false;
    /// How long a waiting run may sleep before the engine's own tasks are looked for
    /// ([`Engine::pump`]); `None` for an engine that posts none.
    const PLATFORM_POLL: Option<std::time::Duration> = None;

    /// A new engine on this thread for executions with these limits. Until it is armed its
    /// allocations are counted but charged to no budget, and nothing can stop it: only the
    /// runtime's built-ins run in it.
    fn new(memory_limit_bytes: usize, stack_limit_bytes: usize) -> Result<Self, String>;
    /// Whether this engine, made by [`Engine::new`], can be armed for this memory limit (V8
    /// fixes an isolate's heap limit when it is made; the stack limit is set when armed).
    fn fits(&self, memory_limit_bytes: usize) -> bool;
    /// Arm the engine for its one execution: every byte it holds and allocates from now on
    /// is charged to `setup.budget`, and `setup.stop` stops it.
    fn arm(&mut self, setup: EngineSetup);
    /// Remember the engine as it is now, before it is armed, so that [`Engine::renew`] can
    /// put it back; false when this engine cannot. Every handle taken before the seal stays
    /// valid through renewals; no native object may be made after it.
    fn seal(&mut self) -> bool {
        false
    }
    /// Put a sealed engine back as it was sealed, unarmed, for the next execution: nothing
    /// an execution did in it is left, in JavaScript or in its memory. Every handle taken
    /// since the seal must be dropped first. False when the engine was not sealed (it is
    /// then dropped, as one that cannot be renewed).
    fn renew(&mut self) -> bool {
        false
    }
    /// Give up the seal (and the memory that keeps it): this engine will not be renewed.
    fn unseal(&mut self) {}
    /// Evaluate a built-in script of the runtime; the engine may compile `source` once per process.
    fn evaluate_builtin(
        &mut self,
        name: &'static str,
        source: fn() -> String,
    ) -> Result<Self::Value, Thrown<Self::Value>>;
    /// Evaluate a strict classic script given as source, named [`PROGRAM_SCRIPT`] in stacks,
    /// its lines and columns as written (a prefix the engine adds stays on the first line).
    fn evaluate(&mut self, source: &str) -> Result<Self::Value, Thrown<Self::Value>>;
    /// Where in the script of [`Engine::evaluate`] `error`, a syntax error it threw,
    /// points (line and column from 1, counted as [`Engine::COLUMNS`]), when the engine
    /// keeps it outside the error's `stack`.
    fn syntax_error_position(&mut self, error: &Self::Value) -> Option<(u32, u32)>;
    /// An object whose properties are native functions.
    fn native_object(&mut self, ops: &[(&'static str, Op)]) -> Result<Self::Value, Thrown<Self::Value>>;
    /// Call `function` with `this` undefined.
    fn call(
        &mut self,
        function: &Self::Value,
        args: &[Arg<'_, Self::Value>],
    ) -> Result<Self::Value, Thrown<Self::Value>>;
    /// Element `index` of an array.
    fn index(&mut self, array: &Self::Value, index: u32) -> Option<Self::Value>;
    /// A value as the host reads it (strings lossy; objects as `Undefined`).
    fn read(&mut self, value: &Self::Value) -> HostValue;
    /// Whether two handles hold the same value (`===`).
    fn same(&mut self, a: &Self::Value, b: &Self::Value) -> bool;
    /// Run the engine's own tasks that are due (V8's platform: a wasm compilation's result,
    /// an `Atomics.waitAsync` timeout); true when one ran, so microtasks may be queued.
    fn pump(&mut self) -> bool {
        false
    }
    /// Run every queued microtask; stops early only when the engine is stopped.
    fn run_microtasks(&mut self) -> Result<(), Thrown<Self::Value>>;
    fn promise_state(&mut self, promise: &Self::Value) -> PromiseState<Self::Value>;
    /// Rejection events since the last take, in order.
    fn take_rejections(&mut self) -> Vec<Rejection<Self::Value>>;
    fn stopper(&self) -> Stopper;
}

/// An argument of [`Engine::call`].
pub(crate) enum Arg<'a, V> {
    Value(&'a V),
    Host(HostValue),
}
