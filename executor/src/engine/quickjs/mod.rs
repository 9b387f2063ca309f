//! The QuickJS engine (rquickjs): one `Runtime` and `Context` per execution.
//!
//! Every engine knob (memory limit, stack limit, interrupt handler) is set in
//! [`QuickJs::start`] and nowhere else. Host functions close over the execution's
//! [`State`]; JavaScript values the host keeps between turns (pending calls' resolvers,
//! timers, the run's promise) are `Persistent`s dropped before the runtime.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;
use std::sync::OnceLock;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use codemode_protocol::{ToolCall, ToolNotFoundError, error_envelope, parse_for_dispatch, texts};
use rquickjs::context::EvalOptions;
use rquickjs::convert::Coerced;
use rquickjs::function::{Opt, Rest};
use rquickjs::module::WriteOptions;
use rquickjs::object::Accessor;
use rquickjs::promise::PromiseState;
use rquickjs::{
    ArrayBuffer, Context, Ctx, Exception, Function, Module, Object, Persistent, Promise, Runtime, TypedArray,
};

use super::{CallAnswer, Engine, Event, Job, Settlement};
mod console;
use crate::outbound::OutboundRequest;

type JsValue<'js> = rquickjs::Value<'js>;

const SANDBOX_SOURCE: &str = include_str!("sandbox.js");

/// The parts every execution shares, compiled to QuickJS bytecode once per process:
/// parsing them anew for each engine would cost most of a run.
struct Compiled {
    codec: Vec<u8>,
    sandbox: Vec<u8>,
}

fn compiled() -> &'static Compiled {
    static COMPILED: OnceLock<Compiled> = OnceLock::new();
    COMPILED.get_or_init(|| {
        let runtime = Runtime::new().unwrap_or_else(|e| panic!("QuickJS runtime: {e}"));
        let context = Context::full(&runtime).unwrap_or_else(|e| panic!("QuickJS context: {e}"));
        context.with(|ctx| {
            let compile = |name: &str, source: String| {
                Module::declare(ctx.clone(), name, source)
                    .and_then(|module| module.write(WriteOptions::default()))
                    .unwrap_or_else(|e| panic!("the built-in source {name} compiles: {e}"))
            };
            Compiled {
                codec: compile(
                    "codemode:codec",
                    format!("export default {};", codemode_protocol::codec_source()),
                ),
                sandbox: compile("codemode:sandbox", format!("export default {SANDBOX_SOURCE}")),
            }
        })
    })
}

/// Evaluate a compiled built-in module and return its default export.
fn load_compiled<'js, T: rquickjs::FromJs<'js>>(ctx: &Ctx<'js>, bytecode: &[u8]) -> rquickjs::Result<T> {
    // SAFETY: the bytecode was written by `compiled()` from this build's own sources and
    // QuickJS; nothing from outside the process is ever loaded.
    let module = unsafe { Module::load(ctx.clone(), bytecode) }?;
    let (module, evaluated) = module.eval()?;
    evaluated.finish::<()>()?;
    module.get("default")
}

/// The timeout a retained engine's timer callbacks each get once the run has settled.
const LATE_CALLBACK_BUDGET: Duration = Duration::from_secs(1);

struct Pending {
    resolve: Persistent<Function<'static>>,
    reject: Persistent<Function<'static>>,
}

struct Timer {
    id: u64,
    callback: Persistent<Function<'static>>,
    args: Vec<Persistent<JsValue<'static>>>,
    interval: Option<Duration>,
}

/// What the host functions of one execution share.
struct State {
    job: Job,
    next_call: u64,
    pending: HashMap<u64, Pending>,
    next_timer: u64,
    timers: BTreeMap<(Instant, u64), Timer>,
    timer_due: HashMap<u64, Instant>,
    /// The interval whose callback runs now, and whether the callback cleared it.
    firing: Option<(u64, bool)>,
    /// The run settled (or ended): calls meet the completion text inside the sandbox.
    over: bool,
    log_bytes: usize,
    logs_stopped: bool,
    /// A timer callback threw before the run settled: the run ends with this.
    uncaught: Option<String>,
    /// Rejections nothing has handled yet, with their text; logged once the microtasks run out.
    unhandled: Vec<(Persistent<JsValue<'static>>, String)>,
}

impl State {
    fn clear(&mut self) {
        self.unhandled.clear();
        self.pending.clear();
        self.timers.clear();
        self.timer_due.clear();
    }

    fn send(&self, event: Event) {
        // The host side may be gone (dropped execute, retained after the outcome): nothing to tell.
        let _ = self.job.events.send(event);
    }

    fn log(&mut self, line: String) {
        if self.logs_stopped {
            return;
        }
        let limit = self.job.limits.max_log_bytes;
        if self.log_bytes + line.len() > limit {
            self.logs_stopped = true;
            self.send(Event::Log(texts::LOG_LIMIT_REACHED.fill(&[&limit.to_string()])));
            return;
        }
        self.log_bytes += line.len();
        self.send(Event::Log(line));
    }

    /// Why a call may not leave, if it may not.
    fn refusal(&self, payload_bytes: usize) -> Option<String> {
        if self.over {
            return Some(texts::EXECUTION_COMPLETED.to_owned());
        }
        let limit = self.job.limits.max_payload_bytes;
        if payload_bytes > limit {
            return Some(texts::PAYLOAD_TOO_LARGE.fill(&[&payload_bytes.to_string(), &limit.to_string()]));
        }
        let in_flight = self.job.limits.max_calls_in_flight;
        if self.pending.len() >= in_flight {
            return Some(texts::TOO_MANY_CALLS_IN_FLIGHT.fill(&[&in_flight.to_string()]));
        }
        None
    }

    fn open_call<'js>(&mut self, ctx: &Ctx<'js>, resolve: Function<'js>, reject: Function<'js>) -> u64 {
        self.next_call += 1;
        let pending =
            Pending { resolve: Persistent::save(ctx, resolve), reject: Persistent::save(ctx, reject) };
        self.pending.insert(self.next_call, pending);
        self.next_call
    }

    fn add_timer<'js>(
        &mut self,
        ctx: &Ctx<'js>,
        callback: Function<'js>,
        delay: Duration,
        args: Vec<JsValue<'js>>,
        repeat: bool,
    ) -> u64 {
        self.next_timer += 1;
        let id = self.next_timer;
        let due = Instant::now() + delay;
        let timer = Timer {
            id,
            callback: Persistent::save(ctx, callback),
            args: args.into_iter().map(|a| Persistent::save(ctx, a)).collect(),
            interval: repeat.then_some(delay),
        };
        self.timers.insert((due, id), timer);
        self.timer_due.insert(id, due);
        id
    }

    fn clear_timer(&mut self, id: u64) {
        if let Some((firing, cleared)) = &mut self.firing {
            if *firing == id {
                *cleared = true;
            }
        }
        if let Some(due) = self.timer_due.remove(&id) {
            self.timers.remove(&(due, id));
        }
    }
}

/// One execution on QuickJS.
pub(crate) struct QuickJs {
    state: Rc<RefCell<State>>,
    run: Option<Persistent<Promise<'static>>>,
    stringify: Option<Persistent<Function<'static>>>,
    settlement: Option<Settlement>,
    reported: bool,
    deadline: Rc<Cell<Instant>>,
    interrupted: Rc<Cell<bool>>,
    context: Context,
    runtime: Runtime,
}

impl Drop for QuickJs {
    fn drop(&mut self) {
        // Persistent values must go before the runtime that owns them.
        self.run = None;
        self.stringify = None;
        self.state.borrow_mut().clear();
    }
}

impl Engine for QuickJs {
    type Blank = (Runtime, Context);

    fn blank() -> (Runtime, Context) {
        let runtime = Runtime::new().unwrap_or_else(|e| panic!("QuickJS runtime: {e}"));
        let context = Context::full(&runtime).unwrap_or_else(|e| panic!("QuickJS context: {e}"));
        (runtime, context)
    }

    fn start(mut job: Job, blank: Option<(Runtime, Context)>) -> QuickJs {
        let scope_source = std::mem::take(&mut job.scope_source);
        let deadline = Rc::new(Cell::new(job.deadline));
        let interrupted = Rc::new(Cell::new(false));
        let limits = job.limits.clone();
        let (runtime, context) = blank.unwrap_or_else(Self::blank);
        runtime.set_memory_limit(limits.memory_limit_bytes);
        runtime.set_max_stack_size(limits.stack_limit_bytes);
        let (until, flag, stop) = (deadline.clone(), interrupted.clone(), job.stop.clone());
        let mut calls: u32 = 0;
        runtime.set_interrupt_handler(Some(Box::new(move || {
            // The flag is the deadline (the watchdog raises it) and the host's cancel; the
            // clock, read on every 16th check, is the budget of a retained engine's late callbacks.
            calls = calls.wrapping_add(1);
            let over = stop.load(Ordering::Relaxed) || (calls % 16 == 0 && Instant::now() >= until.get());
            if over {
                flag.set(true);
            }
            over
        })));
        let state = Rc::new(RefCell::new(State {
            job,
            next_call: 0,
            pending: HashMap::new(),
            next_timer: 0,
            timers: BTreeMap::new(),
            timer_due: HashMap::new(),
            firing: None,
            over: false,
            log_bytes: 0,
            logs_stopped: false,
            uncaught: None,
            unhandled: Vec::new(),
        }));
        let tracked = state.clone();
        runtime.set_host_promise_rejection_tracker(Some(Box::new(move |ctx, promise, reason, handled| {
            let mut state = tracked.borrow_mut();
            if handled {
                state.unhandled.retain(|(p, _)| p.clone().restore(&ctx).map_or(true, |p| p != promise));
            } else {
                drop(state);
                let text = thrown_text(&ctx, &reason, &crate::config::Limits::default());
                tracked.borrow_mut().unhandled.push((Persistent::save(&ctx, promise), text));
            }
        })));
        let mut engine = QuickJs {
            state,
            run: None,
            stringify: None,
            settlement: None,
            reported: false,
            deadline,
            interrupted,
            context,
            runtime,
        };
        engine.evaluate(&scope_source);
        engine.run_microtasks();
        engine.check_settled();
        engine
    }

    fn answer(&mut self, call: u64, answer: CallAnswer) {
        let Some(pending) = self.state.borrow_mut().pending.remove(&call) else { return };
        self.context.with(|ctx| {
            let (Ok(resolve), Ok(reject)) = (pending.resolve.restore(&ctx), pending.reject.restore(&ctx))
            else {
                return;
            };
            let _ = match answer {
                CallAnswer::Tool(text) => resolve.call::<_, ()>((text,)),
                CallAnswer::Fetch(Ok(response)) => {
                    fetch_response(&ctx, response).and_then(|value| resolve.call::<_, ()>((value,)))
                }
                CallAnswer::Fetch(Err(text)) => Exception::from_message(ctx.clone(), &text)
                    .and_then(|error| reject.call::<_, ()>((error,))),
            };
        });
        self.run_microtasks();
        self.check_settled();
    }

    fn fire_due_timers(&mut self, now: Instant) {
        loop {
            let due = {
                let mut state = self.state.borrow_mut();
                match state.timers.first_key_value() {
                    Some((&(at, id), _)) if at <= now => {
                        let timer = state.timers.remove(&(at, id));
                        state.timer_due.remove(&id);
                        timer
                    }
                    _ => None,
                }
            };
            let Some(timer) = due else { break };
            if self.state.borrow().over {
                self.deadline.set(Instant::now() + LATE_CALLBACK_BUDGET);
                self.interrupted.set(false);
            }
            self.run_timer(timer, now);
            self.run_microtasks();
            self.check_settled();
            if self.settlement.is_some() && !self.state.borrow().job.retain {
                break;
            }
        }
    }

    fn next_timer(&self) -> Option<Instant> {
        self.state.borrow().timers.first_key_value().map(|(&(at, _), _)| at)
    }

    fn take_settlement(&mut self) -> Option<Settlement> {
        if self.reported {
            return None;
        }
        let settlement = self.settlement.take();
        self.reported = settlement.is_some();
        settlement
    }

    fn end(&mut self) {
        self.state.borrow_mut().over = true;
    }
}

impl QuickJs {
    /// Install the host functions, load the codec, then evaluate and call the entry scope.
    fn evaluate(&mut self, scope_source: &str) {
        let state = self.state.clone();
        let outcome = self.context.with(|ctx| -> Result<(), Settlement> {
            let failed = |e| Settlement::Failed(describe_error(&ctx, e));
            install_host_functions(&ctx, &state).map_err(failed)?;
            let bindings: rquickjs::Array = load_compiled(&ctx, &compiled().codec).map_err(failed)?;
            let mut options = EvalOptions::default();
            options.global = true;
            options.strict = true;
            options.filename = Some("program.js".to_owned());
            let scope: Function =
                ctx.eval_with_options(format!("({scope_source})"), options).map_err(failed)?;
            let bindings: Vec<JsValue> = bindings.iter().collect::<rquickjs::Result<_>>().map_err(failed)?;
            let pair: rquickjs::Array = scope.call((Rest(bindings),)).map_err(failed)?;
            let run: Promise = pair.get(0).map_err(failed)?;
            let stringify: Function = pair.get(1).map_err(failed)?;
            self.run = Some(Persistent::save(&ctx, run));
            self.stringify = Some(Persistent::save(&ctx, stringify));
            Ok(())
        });
        if let Err(failed) = outcome {
            self.settle(failed);
        }
    }

    fn run_microtasks(&mut self) {
        while !self.interrupted.get() {
            match self.runtime.execute_pending_job() {
                Ok(true) => {}
                Ok(false) => break,
                Err(_) => {}
            }
        }
        self.log_unhandled_rejections();
    }

    /// A floating rejection does not fail the run; it is one `[warn]` line in the logs.
    fn log_unhandled_rejections(&mut self) {
        let unhandled = std::mem::take(&mut self.state.borrow_mut().unhandled);
        if unhandled.is_empty() {
            return;
        }
        let run = self.run.clone();
        let lines: Vec<String> = self.context.with(|ctx| {
            let run: Option<JsValue> = run.and_then(|r| r.restore(&ctx).ok()).map(|p| p.into_value());
            unhandled
                .into_iter()
                .filter(|(promise, _)| promise.clone().restore(&ctx).ok() != run)
                .map(|(_, text)| texts::UNHANDLED_REJECTION.fill(&[&text]))
                .collect()
        });
        let mut state = self.state.borrow_mut();
        for line in lines {
            state.log(line);
        }
    }

    fn run_timer(&mut self, timer: Timer, now: Instant) {
        self.state.borrow_mut().firing = Some((timer.id, false));
        let threw = self.context.with(|ctx| -> Option<String> {
            let callback = timer.callback.clone().restore(&ctx).ok()?;
            let args: Vec<JsValue> = timer.args.iter().filter_map(|a| a.clone().restore(&ctx).ok()).collect();
            let result = callback.call::<_, JsValue>((Rest(args),));
            result.err().map(|e| describe_error(&ctx, e))
        });
        let cleared = matches!(self.state.borrow_mut().firing.take(), Some((_, true)));
        if let (Some(interval), false) = (timer.interval, cleared) {
            let mut state = self.state.borrow_mut();
            let due = now.max(Instant::now()) + interval;
            state.timer_due.insert(timer.id, due);
            state.timers.insert((due, timer.id), timer);
        }
        if let Some(text) = threw {
            let mut state = self.state.borrow_mut();
            if !state.over && state.uncaught.is_none() {
                state.uncaught = Some(text);
            }
        }
    }

    fn settle(&mut self, settlement: Settlement) {
        if self.settlement.is_none() && !self.reported {
            // Whatever surfaced after an interrupt (QuickJS's own "interrupted"), the run timed out.
            let settlement = if self.interrupted.get() { self.timeout() } else { settlement };
            self.settlement = Some(settlement);
            self.state.borrow_mut().over = true;
        }
    }

    /// Read the run's promise natively; settle once it is no longer pending.
    fn check_settled(&mut self) {
        if self.settlement.is_some() || self.reported {
            return;
        }
        let limits = self.state.borrow().job.limits.clone();
        if self.interrupted.get() {
            return self.settle(self.timeout());
        }
        let uncaught = self.state.borrow_mut().uncaught.take();
        if let Some(text) = uncaught {
            return self.settle(Settlement::Failed(text));
        }
        let (Some(run), Some(stringify)) = (self.run.clone(), self.stringify.clone()) else { return };
        let settlement = self.context.with(|ctx| -> Option<Settlement> {
            let run = run.restore(&ctx).ok()?;
            match run.state() {
                PromiseState::Pending => None,
                PromiseState::Rejected => {
                    let _ = run.result::<JsValue>();
                    let thrown = ctx.catch();
                    Some(Settlement::Failed(thrown_text(&ctx, &thrown, &limits)))
                }
                PromiseState::Resolved => {
                    let value: JsValue = run.result::<JsValue>()?.ok()?;
                    Some(result_settlement(&ctx, value, &stringify, limits.max_result_bytes, &limits))
                }
            }
        });
        if let Some(settlement) = settlement {
            self.settle(settlement);
        }
    }

    fn timeout(&self) -> Settlement {
        let ms = self.state.borrow().job.limits.timeout.as_millis();
        Settlement::Failed(texts::TIMEOUT.fill(&[&ms.to_string()]))
    }
}

/// Write the result in the codec's form, refusing it before copying out when it is too large.
fn result_settlement<'js>(
    ctx: &Ctx<'js>,
    value: JsValue<'js>,
    stringify: &Persistent<Function<'static>>,
    max_bytes: usize,
    limits: &crate::config::Limits,
) -> Settlement {
    if value.is_undefined() {
        return Settlement::Returned(None);
    }
    let too_large = || Settlement::Failed(texts::RESULT_TOO_LARGE.fill(&[&max_bytes.to_string()]));
    let written =
        stringify.clone().restore(ctx).and_then(|stringify| stringify.call::<_, rquickjs::String>((value,)));
    let json = match written {
        Ok(json) => json,
        Err(error) => return Settlement::Failed(error_text(ctx, error, limits)),
    };
    // UTF-16 units never outnumber UTF-8 bytes: past the bound in units is past it in bytes.
    let units: usize = json.as_value().get::<rquickjs::Object>().and_then(|o| o.get("length")).unwrap_or(0);
    if units > max_bytes {
        return too_large();
    }
    let Ok(text) = json.to_string() else { return too_large() };
    if text.len() > max_bytes {
        return too_large();
    }
    match parse_for_dispatch(&text) {
        Ok(value) => Settlement::Returned(Some(value)),
        Err(error) => Settlement::Failed(error.to_string()),
    }
}

fn error_text<'js>(ctx: &Ctx<'js>, error: rquickjs::Error, limits: &crate::config::Limits) -> String {
    match error {
        rquickjs::Error::Exception => thrown_text(ctx, &ctx.catch(), limits),
        other => other.to_string(),
    }
}

fn describe_error<'js>(ctx: &Ctx<'js>, error: rquickjs::Error) -> String {
    error_text(ctx, error, &crate::config::Limits::default())
}

/// The outcome text of a thrown value: an Error's message, `String(value)` otherwise.
fn thrown_text<'js>(ctx: &Ctx<'js>, thrown: &JsValue<'js>, limits: &crate::config::Limits) -> String {
    if let Some(object) = thrown.as_object() {
        if thrown.is_error() {
            let name: String = object.get::<_, Coerced<String>>("name").map(|c| c.0).unwrap_or_default();
            let message = object.get::<_, Coerced<String>>("message").map(|c| c.0).unwrap_or_default();
            // QuickJS's string-length bound (2^30 characters) guards memory the same way.
            if name == "InternalError" && (message == "out of memory" || message == "string too long") {
                return texts::MEMORY_LIMIT.fill(&[&limits.memory_limit_bytes.to_string()]);
            }
            return message;
        }
    }
    console::to_js_string(ctx, thrown).unwrap_or_else(|| texts::UNPRINTABLE_THROWN_VALUE.to_owned())
}

fn settle_fetch<'js>(
    ctx: &Ctx<'js>,
    resolve: &Function<'js>,
    reject: &Function<'js>,
    answer: CallAnswer,
) -> rquickjs::Result<()> {
    match answer {
        CallAnswer::Fetch(Ok(response)) => resolve.call((fetch_response(ctx, response)?,)),
        CallAnswer::Fetch(Err(text)) => reject.call((Exception::from_message(ctx.clone(), &text)?,)),
        CallAnswer::Tool(_) => Ok(()),
    }
}

fn fetch_response<'js>(
    ctx: &Ctx<'js>,
    response: crate::outbound::OutboundResponse,
) -> rquickjs::Result<JsValue<'js>> {
    let headers = serde_json::to_string(&response.headers).unwrap_or_else(|_| "[]".to_owned());
    let array = rquickjs::Array::new(ctx.clone())?;
    array.set(0, response.status)?;
    array.set(1, headers)?;
    array.set(2, ArrayBuffer::new(ctx.clone(), response.body)?)?;
    Ok(array.into_value())
}

fn install_host_functions<'js>(ctx: &Ctx<'js>, state: &Rc<RefCell<State>>) -> rquickjs::Result<()> {
    let globals = ctx.globals();

    let shared = state.clone();
    let dispatch = Function::new(
        ctx.clone(),
        move |ctx: Ctx<'js>, provider: Coerced<String>, tool: Coerced<String>, args_json: Coerced<String>| {
            let (promise, resolve, reject) = ctx.promise()?;
            let call = ToolCall::new(provider.0, tool.0, args_json.0);
            let mut state = shared.borrow_mut();
            let payload = call.provider.len() + call.tool.len() + call.args_json.len();
            if let Some(text) = state.refusal(payload) {
                drop(state);
                reject.call::<_, ()>((Exception::from_message(ctx.clone(), &text)?,))?;
            } else if state.job.host.dispatch.is_none() {
                drop(state);
                resolve.call::<_, ()>((error_envelope(&ToolNotFoundError::new(call.tool).to_string()),))?;
            } else {
                let id = state.open_call(&ctx, resolve.clone(), reject);
                let host = state.job.host.clone();
                drop(state);
                if let Some(answer) = host.tool_call(id, call) {
                    shared.borrow_mut().pending.remove(&id);
                    if let CallAnswer::Tool(text) = answer {
                        resolve.call::<_, ()>((text,))?;
                    }
                }
            }
            rquickjs::Result::Ok(promise)
        },
    )?;
    globals.set("__dispatch", dispatch)?;

    globals.set("__bytesToBase64", bytes_to_base64(ctx)?)?;
    globals.set("__base64ToBytes", base64_to_bytes(ctx)?)?;

    let shared = state.clone();
    globals
        .set("console", console::console_object(ctx, Rc::new(move |line| shared.borrow_mut().log(line)))?)?;
    install_timers(ctx, &globals, state)?;
    install_web_globals_lazily(&globals, state)
}

/// The globals `sandbox.js` defines; most programs use none of them.
const WEB_GLOBALS: &[&str] = &[
    "queueMicrotask",
    "TextEncoder",
    "TextDecoder",
    "atob",
    "btoa",
    "structuredClone",
    "Headers",
    "Response",
    "fetch",
];

/// Each web global starts as an accessor that installs them all on first touch: loading
/// `sandbox.js` for every engine would cost a program that uses none of them ~40 us.
fn install_web_globals_lazily<'js>(
    globals: &Object<'js>,
    state: &Rc<RefCell<State>>,
) -> rquickjs::Result<()> {
    let installed = Rc::new(Cell::new(false));
    for &name in WEB_GLOBALS {
        let (get_state, get_installed) = (state.clone(), installed.clone());
        let (set_state, set_installed) = (state.clone(), installed.clone());
        let get = move |ctx: Ctx<'js>| -> rquickjs::Result<JsValue<'js>> {
            install_web_globals_once(&ctx, &get_state, &get_installed)?;
            ctx.globals().get(name)
        };
        let set = move |ctx: Ctx<'js>, value: JsValue<'js>| -> rquickjs::Result<()> {
            install_web_globals_once(&ctx, &set_state, &set_installed)?;
            ctx.globals().set(name, value)
        };
        globals.prop(name, Accessor::new(get, set).configurable())?;
    }
    Ok(())
}

fn install_web_globals_once<'js>(
    ctx: &Ctx<'js>,
    state: &Rc<RefCell<State>>,
    installed: &Cell<bool>,
) -> rquickjs::Result<()> {
    if installed.replace(true) {
        return Ok(());
    }
    install_web_globals(ctx, state)
}

fn bytes_to_base64<'js>(ctx: &Ctx<'js>) -> rquickjs::Result<Function<'js>> {
    Function::new(ctx.clone(), |view: TypedArray<'js, u8>| -> rquickjs::Result<String> {
        // SAFETY: no JavaScript runs while the slice is alive; it is encoded and dropped here.
        let bytes = unsafe { view.as_bytes() }.unwrap_or_default();
        Ok(STANDARD.encode(bytes))
    })
}

fn base64_to_bytes<'js>(ctx: &Ctx<'js>) -> rquickjs::Result<Function<'js>> {
    Function::new(ctx.clone(), |ctx: Ctx<'js>, text: Coerced<String>| {
        match STANDARD.decode(text.0.as_bytes()) {
            Ok(bytes) => ArrayBuffer::new(ctx, bytes).map(|b| b.into_value()),
            Err(_) => Ok(JsValue::new_undefined(ctx)),
        }
    })
}

/// The web globals, built in JavaScript on natives that are not left on the global object.
fn install_web_globals<'js>(ctx: &Ctx<'js>, state: &Rc<RefCell<State>>) -> rquickjs::Result<()> {
    let natives = Object::new(ctx.clone())?;
    natives.set("bytesToBase64", bytes_to_base64(ctx)?)?;
    natives.set("base64ToBytes", base64_to_bytes(ctx)?)?;
    natives.set(
        "utf8Encode",
        Function::new(ctx.clone(), |ctx: Ctx<'js>, text: Coerced<String>| {
            TypedArray::<u8>::new(ctx, text.0.into_bytes())
        })?,
    )?;
    natives.set(
        "utf8Decode",
        Function::new(ctx.clone(), |view: TypedArray<'js, u8>| -> rquickjs::Result<String> {
            // SAFETY: no JavaScript runs while the slice is alive.
            let bytes = unsafe { view.as_bytes() }.unwrap_or_default();
            Ok(String::from_utf8_lossy(bytes).into_owned())
        })?,
    )?;
    natives.set(
        "latin1Decode",
        Function::new(ctx.clone(), |view: TypedArray<'js, u8>| -> rquickjs::Result<String> {
            // SAFETY: no JavaScript runs while the slice is alive.
            let bytes = unsafe { view.as_bytes() }.unwrap_or_default();
            Ok(bytes.iter().map(|&b| char::from(b)).collect())
        })?,
    )?;
    let has_outbound = state.borrow().job.host.outbound.is_some();
    if has_outbound {
        let shared = state.clone();
        natives.set(
            "outbound",
            Function::new(
                ctx.clone(),
                move |ctx: Ctx<'js>,
                      method: String,
                      url: String,
                      headers: String,
                      body: TypedArray<'js, u8>| {
                    let (promise, resolve, reject) = ctx.promise()?;
                    // SAFETY: no JavaScript runs while the slice is alive; it is copied out here.
                    let body = unsafe { body.as_bytes() }.unwrap_or_default().to_vec();
                    let headers: Vec<(String, String)> = serde_json::from_str(&headers).unwrap_or_default();
                    let request = OutboundRequest { method, url, headers, body };
                    let mut state = shared.borrow_mut();
                    let payload = request.url.len() + request.body.len();
                    if let Some(text) = state.refusal(payload) {
                        drop(state);
                        reject.call::<_, ()>((Exception::from_message(ctx.clone(), &text)?,))?;
                    } else {
                        let id = state.open_call(&ctx, resolve.clone(), reject.clone());
                        let host = state.job.host.clone();
                        drop(state);
                        if let Some(answer) = host.fetch(id, request) {
                            shared.borrow_mut().pending.remove(&id);
                            settle_fetch(&ctx, &resolve, &reject, answer)?;
                        }
                    }
                    rquickjs::Result::Ok(promise)
                },
            )?,
        )?;
    } else {
        natives.set("networkClosed", texts::NETWORK_CLOSED)?;
    }
    let install: Function = load_compiled(ctx, &compiled().sandbox)?;
    install.call::<_, ()>((natives,))?;
    Ok(())
}

fn install_timers<'js>(
    ctx: &Ctx<'js>,
    globals: &Object<'js>,
    state: &Rc<RefCell<State>>,
) -> rquickjs::Result<()> {
    for (name, repeat) in [("setTimeout", false), ("setInterval", true)] {
        let shared = state.clone();
        let set = Function::new(
            ctx.clone(),
            move |ctx: Ctx<'js>,
                  callback: JsValue<'js>,
                  delay: Opt<Coerced<f64>>,
                  args: Rest<JsValue<'js>>| {
                let Some(callback) = callback.into_function() else {
                    return Err(Exception::throw_type(
                        &ctx,
                        &format!("{name}: the callback must be a function"),
                    ));
                };
                let ms = delay.0.map_or(0.0, |d| d.0);
                let ms = if ms.is_finite() && ms > 0.0 { ms.min(f64::from(i32::MAX)) } else { 0.0 };
                let id = shared.borrow_mut().add_timer(
                    &ctx,
                    callback,
                    Duration::from_secs_f64(ms / 1000.0),
                    args.0,
                    repeat,
                );
                Ok(id as f64)
            },
        )?;
        globals.set(name, set)?;
    }
    for name in ["clearTimeout", "clearInterval"] {
        let shared = state.clone();
        let clear = Function::new(ctx.clone(), move |id: Opt<Coerced<f64>>| {
            if let Some(Coerced(id)) = id.0 {
                if id.is_finite() && id >= 1.0 {
                    shared.borrow_mut().clear_timer(id as u64);
                }
            }
        })?;
        globals.set(name, clear)?;
    }
    Ok(())
}
