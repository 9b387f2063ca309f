//! The runtime: the rules of one execution, written once above every engine.
//!
//! It boots the prelude (host functions, console, timers, web globals) and the codec in
//! an engine made ahead of demand (`warm.rs`), runs the entry scope, and then drives the
//! engine from its thread: answers arriving from the host, timers falling due, the
//! deadline and the host's cancel. It owns the call table and its bounds, the timer
//! schedule, the log budget, rejection tracking, the memory budget's host side and the
//! settlement with its texts, and reports the run's events to a watcher
//! ([`crate::api::watch`]). An engine only offers primitives ([`crate::engine::Engine`]).

mod calls;
mod cpu;
mod cpus;
mod prelude;
mod spin;
mod timers;
mod warm;

use std::cell::RefCell;
use std::collections::HashMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use codemode_protocol::{Location, OutcomeKind, ProgramMap, Value, parse_for_dispatch, texts};
use crossbeam_channel::{Receiver, RecvTimeoutError};
use spin::Polled;
use tokio::sync::mpsc::UnboundedSender;

use crate::api::clock::Deadline;
use crate::api::config::Limits;
use crate::api::watch::{Event as Watched, Watcher};
use crate::budget::Budget;
use crate::engine::{Arg, Engine, EngineSetup, HostValue, PROGRAM_SCRIPT, PromiseState, Stopper, Thrown};
use crate::in_process::host::{CallAnswer, Host};
use crate::in_process::watchdog::Watchdog;
use calls::Calls;
use codemode_protocol::wire::LogLevel;
pub(crate) use cpu::CpuWatch;
pub(crate) use cpus::cpus;
pub(crate) use spin::MAX_ANSWER_SPIN;
use timers::Timers;
pub(crate) use warm::Warm;
use warm::{Builtins, Kept, Taken};

/// How long a retained engine's callback (a timer, a call's answer) may run once the run has settled.
const LATE_CALLBACK_BUDGET: Duration = Duration::from_secs(1);

/// What the host budget is charged for each thing it holds beyond its bytes.
const LOG_LINE_HOST_COST: usize = 32;
const REJECTION_HOST_COST: usize = 64;

const ENGINE_PANICKED: &str = "The executor failed internally while running this program (the engine panicked). This is a bug in codemode-executor; please report it with the program.";

/// Everything the runtime needs to run one execution.
pub(crate) struct Job {
    /// The protocol's entry scope for this program.
    pub(crate) scope_source: String,
    /// The way from a place in the entry scope back to the code as sent.
    pub(crate) program: ProgramMap,
    pub(crate) limits: Limits,
    pub(crate) deadline: Deadline,
    pub(crate) host: Arc<Host>,
    pub(crate) retain: bool,
    pub(crate) events: UnboundedSender<Event>,
    pub(crate) inbox: Receiver<Message>,
    pub(crate) control: Arc<Control>,
    pub(crate) watchdog: Watchdog,
    /// Counts the execution as live until its engine is gone.
    pub(crate) live: Live,
    /// Where the run's events go, when the host watches it.
    pub(crate) watch: Option<Watcher>,
    /// How long the thread waits awake for a call's answer before it sleeps ([`spin`]).
    pub(crate) answer_spin: Duration,
    /// `WebAssembly` on the global (the executor refused the run on an engine without it).
    pub(crate) web_assembly: bool,
    /// Told when the budget latches: the memory limit stops the engine.
    pub(crate) on_memory_stop: Option<crate::budget::OnExceeded>,
    /// The CPU time budget, started on the run's thread when the run starts.
    pub(crate) cpu_watch: Option<CpuWatch>,
}

/// Holds one execution in its pool's count of live engines until dropped.
pub(crate) struct Live(Arc<AtomicUsize>);

impl Live {
    pub(crate) fn new(count: Arc<AtomicUsize>) -> Live {
        count.fetch_add(1, Ordering::AcqRel);
        Live(count)
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// What the host side tells a running execution.
pub(crate) enum Message {
    Answer {
        call: u64,
        answer: CallAnswer,
    },
    /// The host dropped the execution (or released a retained one): end it.
    Cancel,
}

/// What an execution reports to its host side, in the order it happens.
#[derive(Debug)]
pub(crate) enum Event {
    /// One console call, formatted.
    Log(String),
    /// The run ended.
    Settled(Settlement),
}

/// How a run ended, before the logs are attached.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Settlement {
    Returned(Option<Value>),
    Failed(OutcomeKind, String),
    /// The program threw, or its code did not compile: with the place in the code as sent.
    Threw(OutcomeKind, String, Option<Location>),
}

impl Settlement {
    pub(crate) fn timeout(limits: &Limits) -> Settlement {
        Settlement::Failed(
            OutcomeKind::Timeout,
            texts::TIMEOUT.fill(&[&limits.timeout.as_millis().to_string()]),
        )
    }

    /// The run's engine thread spent its CPU time budget.
    pub(crate) fn cpu_time(limit: Duration) -> Settlement {
        Settlement::Failed(
            OutcomeKind::CpuTime,
            texts::CPU_TIME_LIMIT.fill(&[&limit.as_millis().to_string()]),
        )
    }

    /// The program made one call more than its budget of `limit`.
    fn call_limit(limit: usize) -> Settlement {
        Settlement::Failed(OutcomeKind::CallLimit, texts::CALL_LIMIT.fill(&[&limit.to_string()]))
    }

    fn memory(budget: &Budget) -> Settlement {
        Settlement::Failed(OutcomeKind::Memory, texts::MEMORY_LIMIT.fill(&[&budget.limit().to_string()]))
    }
}

/// A limit that stopped a run, beside the memory budget (whose latch is its own record).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Limit {
    /// The CPU time budget, spent (`Limits::cpu_time_limit`).
    CpuTime,
    /// The call budget, reached (`Limits::max_calls`).
    Calls,
}

/// Stops one execution from any thread: the watchdog at the deadline, the host on drop.
pub(crate) struct Control {
    stop: AtomicBool,
    /// The limit that stopped the run, set once before its stop.
    limit: OnceLock<Limit>,
    stopper: OnceLock<Stopper>,
    /// Counts a retained engine's late callbacks; the watchdog stops one that overruns.
    late_callbacks: AtomicU64,
    /// The engine is gone (disposed, or never made).
    ended: AtomicBool,
}

impl Control {
    pub(crate) fn new() -> Arc<Control> {
        Arc::new(Control {
            stop: AtomicBool::new(false),
            limit: OnceLock::new(),
            stopper: OnceLock::new(),
            late_callbacks: AtomicU64::new(0),
            ended: AtomicBool::new(false),
        })
    }

    /// Whether the execution's engine is gone.
    pub(crate) fn ended(&self) -> bool {
        self.ended.load(Ordering::Acquire)
    }

    pub(crate) fn stop(&self) {
        self.stop.store(true, Ordering::Release);
        if let Some(stopper) = self.stopper.get() {
            stopper();
        }
    }

    pub(crate) fn stopped(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }

    /// Stop the run because `limit` says so: its outcome is that limit's, whatever the
    /// program does before the engine notices (it cannot catch its way past it).
    pub(crate) fn stop_for(&self, limit: Limit) {
        let _ = self.limit.set(limit);
        self.stop();
    }

    /// The limit that stopped the run, if one did.
    pub(crate) fn limit(&self) -> Option<Limit> {
        self.limit.get().copied()
    }
}

/// What `receive` in prelude.js is handed: the same numbers there.
const RECEIVE_ANSWER: f64 = 1.0;
const RECEIVE_RESPONSE: f64 = 2.0;
const RECEIVE_FETCH_FAILED: f64 = 3.0;
const RECEIVE_TIMER: f64 = 4.0;

/// The runtime's end of the prelude: the functions it calls into JavaScript.
struct Prelude<V> {
    receive: V,
    finish: V,
    describe: V,
    refusal_text: V,
    stack: V,
}

/// The JavaScript values an execution holds; dropped before its engine.
struct Handles<V> {
    prelude: Prelude<V>,
    /// The run's promise, once the entry scope has run.
    run: Option<V>,
    /// Rejections nothing has handled yet, by key: (order, promise, reason).
    unhandled: HashMap<u64, (u64, V, V)>,
    next_rejection: u64,
}

/// What the ops the engine calls share with the runtime.
pub(crate) struct State {
    limits: Limits,
    host: Arc<Host>,
    events: UnboundedSender<Event>,
    budget: Arc<Budget>,
    /// The run settled (or ended): calls meet the completion text inside the sandbox.
    over: bool,
    calls: Calls,
    timers: Timers,
    log_bytes: usize,
    logs_stopped: bool,
    watch: Option<Watcher>,
    /// Stops the run when the call budget is reached.
    control: Arc<Control>,
}

impl State {
    /// Keep a log line, or stop logs with the marker line once past the bound. Only a
    /// kept line is watched, so the log bound bounds the watcher's lines too.
    fn log(&mut self, line: Option<String>, level: LogLevel) -> bool {
        // A stopped run writes nothing more: what an engine runs before it notices its stop
        // differs by engine, and the outcome must not.
        if self.logs_stopped || self.control.stopped() {
            return false;
        }
        let limit = self.limits.max_log_bytes;
        // A line costs its bytes and one for its end, so empty lines are bounded too.
        let cost = line.as_ref().map_or(usize::MAX, |line| line.len() + 1);
        if self.log_bytes.saturating_add(cost) > limit {
            self.logs_stopped = true;
            let marker = texts::LOG_LIMIT_REACHED.fill(&[&limit.to_string()]);
            self.watch_log(LogLevel::Warn, &marker);
            let _ = self.events.send(Event::Log(marker));
            return false;
        }
        let Some(line) = line else { return false };
        if !self.budget.charge(line.len() + LOG_LINE_HOST_COST) {
            return false;
        }
        self.log_bytes += cost;
        self.watch_log(level, &line);
        let _ = self.events.send(Event::Log(line));
        true
    }

    fn watch_log(&self, level: LogLevel, line: &str) {
        if let Some(watcher) = &self.watch {
            watcher.emit(Watched::Log { level, line: line.to_owned() });
        }
    }
}

/// Run one execution on this thread, from its entry scope to its end; its engine back,
/// renewed, when it could be and `renewable` (the thread runs others after it).
pub(crate) fn run<E: Engine>(job: Job, warm: Option<Warm<E>>, renewable: bool) -> Option<Warm<E>> {
    let start = || Execution::<E>::start(job, warm, renewable);
    let mut execution = match catch_unwind(AssertUnwindSafe(start)) {
        Ok(execution) => execution,
        Err(_) => return None,
    };
    execution.drive();
    execution.renewed.take()
}

struct Execution<E: Engine> {
    program: ProgramMap,
    /// Declared before the engine: handles go first.
    handles: Option<Handles<E::Value>>,
    /// The warm engine's prelude and codec, until the boot takes them.
    builtins: Option<Builtins<E::Value>>,
    /// What renews the engine once the run has ended; `None` for a retained engine.
    kept: Option<Kept<E::Value>>,
    /// The engine renewed after the run, for this thread's next.
    renewed: Option<Warm<E>>,
    state: Rc<RefCell<State>>,
    settlement: Option<Settlement>,
    reported: bool,
    retain: bool,
    deadline: Deadline,
    inbox: Receiver<Message>,
    answer_spin: Duration,
    /// Answers taken from the inbox so far.
    answered: u64,
    /// (calls opened, answers taken) when a wait awake last ran out: no other until one changes.
    spun_out: Option<(u64, u64)>,
    control: Arc<Control>,
    watchdog: Watchdog,
    /// The run's CPU time, when it has a budget: its waits awake are credited back.
    cpu: Option<Arc<cpu::CpuAccount>>,
    live: Option<Live>,
    engine: Option<E>,
}

impl<E: Engine> Drop for Execution<E> {
    fn drop(&mut self) {
        self.handles = None;
        self.builtins = None;
        self.kept = None;
        self.engine = None;
        self.control.ended.store(true, Ordering::Release);
    }
}

impl<E: Engine> Execution<E> {
    fn start(job: Job, warm: Option<Warm<E>>, renewable: bool) -> Execution<E> {
        // The run's CPU time counts from here, on this thread.
        let cpu = job.cpu_watch.and_then(|watch| watch.start(&job.watchdog));
        // A retained engine outlives its settlement and is never renewed.
        let renews = renewable && !job.retain;
        let budget = Arc::new(Budget::watched(job.limits.memory_limit_bytes, job.on_memory_stop));
        let state = Rc::new(RefCell::new(State {
            limits: job.limits.clone(),
            host: job.host.clone(),
            events: job.events,
            budget: budget.clone(),
            over: false,
            calls: Calls::default(),
            timers: Timers::default(),
            log_bytes: 0,
            logs_stopped: false,
            watch: job.watch,
            control: job.control.clone(),
        }));
        let mut execution = Execution {
            program: job.program,
            handles: None,
            builtins: None,
            kept: None,
            renewed: None,
            state,
            settlement: None,
            reported: false,
            retain: job.retain,
            deadline: job.deadline,
            inbox: job.inbox,
            answer_spin: job.answer_spin,
            answered: 0,
            spun_out: None,
            control: job.control.clone(),
            watchdog: job.watchdog,
            cpu,
            live: Some(job.live),
            engine: None,
        };
        let setup = EngineSetup {
            budget,
            stack_limit_bytes: job.limits.stack_limit_bytes,
            stop: Arc::new(AtomicBool::new(false)),
            web_assembly: job.web_assembly && E::WEB_ASSEMBLY,
        };
        let limits = &job.limits;
        let warm = catch_unwind(AssertUnwindSafe(|| match warm {
            Some(warm) if warm.fits(limits) => Ok(warm),
            other => {
                // V8 enters an isolate when it is made and leaves it when dropped, in
                // reverse order: an unfit engine goes before its replacement is made.
                drop(other);
                Warm::make(limits.memory_limit_bytes, limits.stack_limit_bytes, renews)
            }
        }));
        let mut warm = match warm {
            Ok(Ok(warm)) => warm,
            Ok(Err(text)) => {
                execution.settle(Settlement::Failed(OutcomeKind::Internal, text));
                return execution;
            }
            Err(_) => {
                execution.settle(Settlement::Failed(OutcomeKind::Internal, ENGINE_PANICKED.to_owned()));
                return execution;
            }
        };
        // Armed whole: a panic here drops the warm engine in its fields' order, handles first.
        warm.engine.arm(setup);
        let _ = job.control.stopper.set(warm.engine.stopper());
        if job.control.stopped() {
            warm.engine.stopper()();
        }
        if !warm.slot.fill(execution.state.clone()) {
            // A warm engine serves one execution at a time.
            execution.settle(Settlement::Failed(OutcomeKind::Internal, ENGINE_PANICKED.to_owned()));
            return execution;
        }
        let Taken { builtins, kept, mut engine } = warm.take();
        match kept {
            Some(kept) if renews => execution.kept = Some(kept),
            // The memory that keeps the seal of an engine never renewed goes now.
            _ => engine.unseal(),
        }
        execution.builtins = Some(builtins);
        execution.engine = Some(engine);
        execution.turn(|execution| execution.boot(&job.scope_source));
        execution
    }

    /// Give the booted prelude this execution's limits, then run the entry scope.
    fn boot(&mut self, scope_source: &str) -> Result<(), Failure<E::Value>> {
        // Locals: they are dropped on return, before a failed boot disposes of the engine.
        let Builtins { configure, exports, codec } = self.builtins.take().ok_or(Failure::Gone)?;
        let (max_log, max_result, has_outbound, max_payload) = {
            let state = self.state.borrow();
            let limits = &state.limits;
            (
                limits.max_log_bytes,
                limits.max_result_bytes,
                state.host.outbound.is_some(),
                limits.max_payload_bytes,
            )
        };
        let engine = self.engine.as_mut().ok_or(Failure::Gone)?;
        engine
            .call(
                &configure,
                &[
                    Arg::Host(HostValue::Number(max_log as f64)),
                    Arg::Host(HostValue::Number(max_result as f64)),
                    Arg::Host(HostValue::Bool(has_outbound)),
                    Arg::Host(HostValue::Number(max_payload as f64)),
                ],
            )
            .map_err(Failure::from)?;
        let export = |engine: &mut E, i| engine.index(&exports, i).ok_or(Failure::Gone);
        let prelude = Prelude {
            receive: export(engine, 0)?,
            finish: export(engine, 2)?,
            describe: export(engine, 3)?,
            refusal_text: export(engine, 4)?,
            stack: export(engine, 5)?,
        };
        let start = export(engine, 1)?;
        self.handles = Some(Handles { prelude, run: None, unhandled: HashMap::new(), next_rejection: 0 });
        let engine = self.engine.as_mut().ok_or(Failure::Gone)?;
        let scope = engine.evaluate(&format!("({scope_source})")).map_err(Failure::Syntax)?;
        let run = engine.call(&start, &[Arg::Value(&scope), Arg::Value(&codec)]).map_err(Failure::from)?;
        if let Some(handles) = self.handles.as_mut() {
            handles.run = Some(run);
        }
        Ok(())
    }

    /// Run `f` against the engine, then microtasks, then settle if the run ended.
    fn turn(&mut self, f: impl FnOnce(&mut Self) -> Result<(), Failure<E::Value>>) {
        if self.engine.is_none() {
            return;
        }
        let outcome = catch_unwind(AssertUnwindSafe(|| {
            // A thrown value ends the run (if it has not ended), and the microtasks it queued still run.
            if let Err(failure) = f(self) {
                let stopped = matches!(failure, Failure::Stopped | Failure::Gone);
                self.fail(failure);
                if stopped {
                    return;
                }
            }
            if let Err(failure) = self.microtasks() {
                self.fail(failure);
            }
            self.log_unhandled_rejections();
            self.check_settled();
        }));
        if outcome.is_err() {
            self.settle(Settlement::Failed(OutcomeKind::Internal, ENGINE_PANICKED.to_owned()));
            self.dispose();
        }
        if self.budget_exceeded() || self.control.stopped() {
            // Nothing more runs in this engine: a stopped or exhausted engine is ended now.
            let settlement = self.stop_settlement();
            self.settle(settlement);
            self.dispose();
        }
    }

    fn microtasks(&mut self) -> Result<(), Failure<E::Value>> {
        let engine = self.engine.as_mut().ok_or(Failure::Gone)?;
        engine.run_microtasks().map_err(Failure::from)
    }

    fn budget_exceeded(&self) -> bool {
        self.state.borrow().budget.exceeded()
    }

    /// Whether a limit ended the run: the memory budget's latch, or a limit the control
    /// records. Its outcome then stands over whatever the program did meanwhile.
    fn limit_hit(&self) -> bool {
        self.budget_exceeded() || self.control.limit().is_some()
    }

    /// Why a stopped engine stopped: memory first (its latch is the cause), then a limit
    /// the control records, then the clock.
    fn stop_settlement(&self) -> Settlement {
        let state = self.state.borrow();
        if state.budget.exceeded() {
            return Settlement::memory(&state.budget);
        }
        match (self.control.limit(), state.limits.cpu_time_limit, state.limits.max_calls) {
            (Some(Limit::CpuTime), Some(limit), _) => return Settlement::cpu_time(limit),
            (Some(Limit::Calls), _, Some(limit)) => return Settlement::call_limit(limit),
            _ => {}
        }
        if self.deadline.passed(Instant::now()) {
            return Settlement::timeout(&state.limits);
        }
        Settlement::Failed(OutcomeKind::Cancelled, texts::CANCELLED.to_owned())
    }

    /// A failure while booting or running a turn: a thrown value is the run's error until it settles.
    fn fail(&mut self, failure: Failure<E::Value>) {
        let settlement = match failure {
            Failure::Stopped | Failure::Gone => self.stop_settlement(),
            // Compiling the program ran out of memory: it is too large for its limit.
            Failure::Syntax(_) if self.budget_exceeded() => {
                let limit = self.state.borrow().budget.limit();
                Settlement::Failed(OutcomeKind::Memory, texts::PROGRAM_TOO_LARGE.fill(&[&limit.to_string()]))
            }
            Failure::Syntax(Thrown::Value(value)) => {
                let position = self.engine.as_mut().and_then(|engine| engine.syntax_error_position(&value));
                let location = match position {
                    Some((line, column)) => self.program.locate(line, column, E::COLUMNS),
                    None => self.location(&value),
                };
                Settlement::Threw(OutcomeKind::Syntax, self.describe(&value), location)
            }
            Failure::Syntax(Thrown::Stopped) => self.stop_settlement(),
            Failure::Thrown(value) => {
                if self.over() {
                    return; // a late callback threw after the run ended: nothing to report
                }
                self.thrown(&value)
            }
        };
        self.settle(settlement);
    }

    /// The settlement of a run that threw `value`.
    fn thrown(&mut self, value: &E::Value) -> Settlement {
        // Memory is the budget's latch alone: an error that merely reads like one (a
        // program can throw `new RangeError('Invalid string length')`) is the program's.
        if self.limit_hit() {
            return self.stop_settlement();
        }
        let refusal = self.refusal_text(value);
        let text = self.describe(value);
        // A refusal is the executor's only with its text as made: a program that caught one
        // and rethrew it with a message of its own threw its own text.
        let bound = self.state.borrow().limits.max_result_bytes;
        let refused = refusal.is_some_and(|refusal| bound_error_text(refusal, bound, None) == text);
        let location = self.location(value);
        Settlement::Threw(if refused { OutcomeKind::Payload } else { OutcomeKind::Thrown }, text, location)
    }

    /// Where in the code as sent a thrown Error arose: the newest frame of its stack in the
    /// program's own code. Frames of `async` callers are passed over: only V8 keeps them,
    /// and every engine must give the same place.
    fn location(&mut self, value: &E::Value) -> Option<Location> {
        let (Some(engine), Some(handles)) = (self.engine.as_mut(), self.handles.as_ref()) else {
            return None;
        };
        let stack = match engine.call(&handles.prelude.stack, &[Arg::Value(value)]).map(|v| engine.read(&v)) {
            Ok(HostValue::String(stack)) => stack,
            _ => return None,
        };
        program_frames(&stack).find_map(|(line, column)| self.program.locate(line, column, E::COLUMNS))
    }

    fn describe(&mut self, value: &E::Value) -> String {
        let bound = self.state.borrow().limits.max_result_bytes;
        let (Some(engine), Some(handles)) = (self.engine.as_mut(), self.handles.as_ref()) else {
            // Before the prelude exists (a syntax error in it would be a bug): read it plainly.
            return self
                .engine
                .as_mut()
                .map(|e| e.read(value))
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default();
        };
        let (text, length) = match engine.call(&handles.prelude.describe, &[Arg::Value(value)]) {
            Ok(described) => match engine.read(&described) {
                HostValue::String(text) => (text, None),
                // [head, length]: a text past the bound, of which only the head was copied.
                _ => {
                    let head = engine.index(&described, 0).map(|head| engine.read(&head));
                    let length = engine.index(&described, 1).map(|length| engine.read(&length));
                    match (head, length) {
                        (Some(HostValue::String(head)), Some(HostValue::Number(length))) => {
                            (head, Some(length as usize))
                        }
                        _ => (texts::UNPRINTABLE_THROWN_VALUE.to_owned(), None),
                    }
                }
            },
            Err(_) => (texts::UNPRINTABLE_THROWN_VALUE.to_owned(), None),
        };
        bound_error_text(text, bound, length)
    }

    /// The text of the refusal `value` is, when it is one the runtime made.
    fn refusal_text(&mut self, value: &E::Value) -> Option<String> {
        let (Some(engine), Some(handles)) = (self.engine.as_mut(), self.handles.as_ref()) else {
            return None;
        };
        match engine.call(&handles.prelude.refusal_text, &[Arg::Value(value)]).map(|v| engine.read(&v)) {
            Ok(HostValue::String(text)) => Some(text),
            _ => None,
        }
    }

    /// Read the run's promise natively; settle once it is no longer pending.
    fn check_settled(&mut self) {
        if self.over() {
            return;
        }
        let (Some(engine), Some(handles)) = (self.engine.as_mut(), self.handles.as_ref()) else { return };
        let Some(run) = handles.run.as_ref() else { return };
        let settlement = match engine.promise_state(run) {
            PromiseState::Pending => return,
            PromiseState::Rejected(reason) => self.thrown(&reason),
            PromiseState::Fulfilled(value) => {
                let finished = engine.call(&handles.prelude.finish, &[Arg::Value(&value)]);
                let max = self.state.borrow().limits.max_result_bytes;
                match finished {
                    Ok(json) => result_settlement(engine.read(&json), max),
                    Err(Thrown::Value(thrown)) => self.thrown(&thrown),
                    Err(Thrown::Stopped) => self.stop_settlement(),
                }
            }
        };
        let settlement = if self.limit_hit() { self.stop_settlement() } else { settlement };
        self.settle(settlement);
    }

    /// The run has ended (settled, whether reported yet or not).
    fn over(&self) -> bool {
        self.settlement.is_some() || self.reported
    }

    fn settle(&mut self, settlement: Settlement) {
        if !self.over() {
            self.settlement = Some(settlement);
            self.state.borrow_mut().over = true;
        }
    }

    /// A floating rejection does not fail the run; it is one `[warn]` line in the logs.
    fn log_unhandled_rejections(&mut self) {
        if self.budget_exceeded() || self.control.stopped() {
            return; // the run ends with its own outcome; the rejections it left say nothing more
        }
        let Some(engine) = self.engine.as_mut() else { return };
        let events = engine.take_rejections();
        let Some(handles) = self.handles.as_mut() else { return };
        let budget = self.state.borrow().budget.clone();
        for event in events {
            match event.reason {
                Some(reason) => {
                    if !budget.charge(REJECTION_HOST_COST) {
                        return;
                    }
                    handles.next_rejection += 1;
                    handles.unhandled.insert(event.key, (handles.next_rejection, event.promise, reason));
                }
                None => {
                    if handles.unhandled.remove(&event.key).is_some() {
                        budget.refund(REJECTION_HOST_COST);
                    }
                }
            }
        }
        if handles.unhandled.is_empty() {
            return;
        }
        let mut floating: Vec<(u64, E::Value, E::Value)> =
            handles.unhandled.drain().map(|(_, entry)| entry).collect();
        budget.refund(floating.len() * REJECTION_HOST_COST);
        floating.sort_by_key(|(order, _, _)| *order);
        for (_, promise, reason) in floating {
            if self.state.borrow().logs_stopped {
                break; // past the log bound no line is kept: describing the rest would only run code
            }
            if self.is_run(&promise) {
                continue;
            }
            let text = self.describe(&reason);
            self.state.borrow_mut().log(Some(texts::UNHANDLED_REJECTION.fill(&[&text])), LogLevel::Warn);
        }
    }

    fn is_run(&mut self, promise: &E::Value) -> bool {
        let (Some(engine), Some(handles)) = (self.engine.as_mut(), self.handles.as_ref()) else {
            return false;
        };
        handles.run.as_ref().is_some_and(|run| engine.same(promise, run))
    }

    /// Serve the execution until it is over: answers, timers, the deadline, the host's cancel.
    fn drive(&mut self) {
        loop {
            self.report();
            if self.engine.is_none() {
                return;
            }
            let now = Instant::now();
            let settled = self.over();
            if !settled && self.deadline.passed(now) {
                let timeout = Settlement::timeout(&self.state.borrow().limits);
                self.settle(timeout);
                continue;
            }
            let next_timer = self.state.borrow().timers.next_due();
            // The engine's own delayed tasks are not announced: a waiting run looks for them.
            let platform = E::PLATFORM_POLL.filter(|_| !settled).map(|poll| now + poll);
            let wake = [next_timer, (!settled).then(|| self.deadline.next(now)), platform]
                .into_iter()
                .flatten()
                .min();
            // Nothing to run until an answer or a timer: the watcher hears what the run waits on.
            if !settled && wake.is_none_or(|at| at > now) {
                self.state.borrow().watch_waiting();
            }
            let polled = if settled { Polled::Nothing } else { self.wait_awake(now, wake) };
            let message = match (polled, wake) {
                (Polled::Message(message), _) => Some(message),
                (Polled::Disconnected, _) => return self.dispose(),
                // Due now: take a waiting message first, so timers never starve answers.
                (Polled::Nothing, Some(at)) if at <= now => match self.inbox.try_recv() {
                    Ok(message) => Some(message),
                    Err(crossbeam_channel::TryRecvError::Empty) => None,
                    Err(crossbeam_channel::TryRecvError::Disconnected) => return self.dispose(),
                },
                (Polled::Nothing, Some(at)) => {
                    self.unseal_to_sleep();
                    match self.inbox.recv_timeout(at.saturating_duration_since(Instant::now())) {
                        Ok(message) => Some(message),
                        Err(RecvTimeoutError::Timeout) => None,
                        Err(RecvTimeoutError::Disconnected) => return self.dispose(),
                    }
                }
                (Polled::Nothing, None) => {
                    self.unseal_to_sleep();
                    match self.inbox.recv() {
                        Ok(message) => Some(message),
                        Err(_) => return self.dispose(),
                    }
                }
            };
            match message {
                Some(Message::Answer { call, answer }) => {
                    self.answered += 1;
                    self.answer(call, answer)
                }
                Some(Message::Cancel) => return self.dispose(),
                None => {
                    self.fire_due_timers();
                    self.pump_platform();
                }
            }
        }
    }

    /// The run is about to wait asleep, for an answer or a timer. It may wait long, holding
    /// its engine, and renewing the engine after it would save little against what it
    /// waits for: the memory that keeps the engine's seal goes now, and the engine is
    /// freed when the run ends.
    fn unseal_to_sleep(&mut self) {
        if self.kept.take().is_some()
            && let Some(engine) = self.engine.as_mut()
        {
            engine.unseal();
        }
    }

    /// With calls in flight and nothing due before `wake`, wait for an answer awake for a
    /// while ([`spin`]): once per call gone out or answer come in, not again at every
    /// timer's turn. An execution served over a connection that lends its input reads its
    /// answers from it meanwhile (`wire::lend`).
    fn wait_awake(&mut self, now: Instant, wake: Option<Instant>) -> Polled<Message> {
        if self.answer_spin.is_zero() || wake.is_some_and(|at| at <= now) {
            return Polled::Nothing;
        }
        let (in_flight, opened, answers) = {
            let state = self.state.borrow();
            (state.calls.len(), state.calls.opened(), state.host.answers.clone())
        };
        if in_flight == 0 || self.spun_out == Some((opened, self.answered)) {
            return Polled::Nothing;
        }
        let until = wake.map_or(now + self.answer_spin, |at| at.min(now + self.answer_spin));
        let read = answers.as_deref().map(|read| read as &dyn Fn());
        let poll = || spin::poll(&self.inbox, until, spin::Gate::process(), read);
        let polled = match &self.cpu {
            Some(cpu) => cpu.waiting(poll),
            None => poll(),
        };
        if matches!(polled, Polled::Nothing) {
            self.spun_out = Some((opened, self.answered));
        }
        polled
    }

    fn answer(&mut self, call: u64, answer: CallAnswer) {
        let Some(parsed) = self.state.borrow_mut().finish_call(call, &answer) else { return };
        self.callback_turn(|execution| {
            let (Some(engine), Some(handles)) = (execution.engine.as_mut(), execution.handles.as_ref())
            else {
                return Err(Failure::Gone);
            };
            let id = Arg::Host(HostValue::Number(call as f64));
            let args = match answer {
                CallAnswer::Tool(text) => vec![
                    Arg::Host(HostValue::Number(RECEIVE_ANSWER)),
                    id,
                    Arg::Host(calls::tool_answer(text, parsed)),
                ],
                CallAnswer::Fetch(Ok(response)) => vec![
                    Arg::Host(HostValue::Number(RECEIVE_RESPONSE)),
                    id,
                    Arg::Host(HostValue::Number(f64::from(response.status))),
                    Arg::Host(HostValue::String(calls::headers_json(&response.headers))),
                    Arg::Host(HostValue::Bytes(response.body)),
                ],
                CallAnswer::Fetch(Err(text)) => {
                    vec![
                        Arg::Host(HostValue::Number(RECEIVE_FETCH_FAILED)),
                        id,
                        Arg::Host(HostValue::String(text)),
                    ]
                }
            };
            engine.call(&handles.prelude.receive, &args).map(drop).map_err(Failure::from)
        });
    }

    /// A turn for a callback (an answer, a timer). Once the run has ended, such a callback
    /// runs in a retained engine: the watchdog stops the engine if it overruns its budget.
    fn callback_turn(&mut self, f: impl FnOnce(&mut Self) -> Result<(), Failure<E::Value>>) {
        let late = self.over();
        if late {
            let token = self.control.late_callbacks.fetch_add(1, Ordering::AcqRel) + 1;
            let control = self.control.clone();
            self.watchdog.at(
                Instant::now() + LATE_CALLBACK_BUDGET,
                None,
                Box::new(move || {
                    if control.late_callbacks.load(Ordering::Acquire) == token {
                        control.stop();
                    }
                }),
            );
        }
        self.turn(f);
        if late {
            self.control.late_callbacks.fetch_add(1, Ordering::AcqRel);
        }
    }

    /// Run the engine's tasks that came due while the run waited, then their microtasks.
    fn pump_platform(&mut self) {
        if let Some(engine) = self.engine.as_mut()
            && engine.pump()
        {
            self.callback_turn(|_| Ok(()));
        }
    }

    fn fire_due_timers(&mut self) {
        let now = Instant::now();
        loop {
            if self.engine.is_none() {
                return;
            }
            let Some(id) = self.state.borrow_mut().timers.take_due(now) else { return };
            self.callback_turn(|execution| {
                let (Some(engine), Some(handles)) = (execution.engine.as_mut(), execution.handles.as_ref())
                else {
                    return Err(Failure::Gone);
                };
                let args =
                    [Arg::Host(HostValue::Number(RECEIVE_TIMER)), Arg::Host(HostValue::Number(id as f64))];
                engine.call(&handles.prelude.receive, &args).map(drop).map_err(Failure::from)
            });
            self.state.borrow_mut().rearm_timer(id);
            self.report();
            if self.engine.is_none() {
                return;
            }
        }
    }

    /// Send the settlement once; dispose the engine first unless it is retained.
    fn report(&mut self) {
        if self.reported {
            return;
        }
        let Some(settlement) = self.settlement.take() else { return };
        self.reported = true;
        let disposed = if self.retain { None } else { self.take_engine() };
        // The engine is out of the live count before the host hears, so an outcome in hand
        // means the engine is gone from it; its memory is freed after the host has the outcome.
        let _ = self.state.borrow().events.send(Event::Settled(settlement));
        // On one CPU the host's thread that takes the outcome waits behind this one, and
        // what follows (freeing the engine, making the next) takes longer than the run:
        // give it the CPU first. With more CPUs it runs elsewhere, and a yield among many
        // runnable execution threads only adds switches.
        if disposed.is_some() && cpus() == 1 {
            std::thread::yield_now();
        }
        // Renewed for this thread's next run, where it can be; else freed.
        if let Some((handles, engine)) = disposed {
            drop(handles);
            match self.kept.take() {
                Some(kept) => self.renewed = Warm::renew(engine, kept),
                None => drop(engine),
            }
        }
    }

    /// The engine and its handles, out of the live count (they are freed when dropped).
    fn take_engine(&mut self) -> Option<(Option<Handles<E::Value>>, E)> {
        let handles = self.handles.take();
        self.builtins = None;
        let engine = self.engine.take();
        self.live = None;
        Some((handles, engine?))
    }

    fn dispose(&mut self) {
        if let Some((handles, engine)) = self.take_engine() {
            drop(handles);
            self.kept = None;
            drop(engine);
        }
        self.control.ended.store(true, Ordering::Release);
    }
}

/// Why a turn did not complete.
enum Failure<V> {
    Thrown(V),
    /// The entry scope did not compile.
    Syntax(Thrown<V>),
    Stopped,
    Gone,
}

impl<V> From<Thrown<V>> for Failure<V> {
    fn from(thrown: Thrown<V>) -> Failure<V> {
        match thrown {
            Thrown::Value(value) => Failure::Thrown(value),
            Thrown::Stopped => Failure::Stopped,
        }
    }
}

/// The places (line, column) of a stack's frames in the program's script, newest first,
/// `async` callers left out: `    at f (program.js:7:14)` on QuickJS, `    at program.js:7:14` on V8.
fn program_frames(stack: &str) -> impl Iterator<Item = (u32, u32)> + '_ {
    let script = format!("{PROGRAM_SCRIPT}:");
    stack.lines().filter_map(move |line| {
        let frame = line.trim_start().strip_prefix("at ")?;
        if frame.starts_with("async ") {
            return None;
        }
        let place = &frame[frame.rfind(&script)? + script.len()..];
        let (line, rest) = place.split_once(':')?;
        let column: String = rest.chars().take_while(char::is_ascii_digit).collect();
        Some((line.parse().ok()?, column.parse().ok()?))
    })
}

/// The result in the codec's form, refused when it is past the bound.
fn result_settlement(json: HostValue, max_bytes: usize) -> Settlement {
    let too_large = || {
        Settlement::Failed(
            OutcomeKind::ResultTooLarge,
            texts::RESULT_TOO_LARGE.fill(&[&max_bytes.to_string()]),
        )
    };
    match json {
        HostValue::String(text) if text.len() > max_bytes => too_large(),
        HostValue::String(text) => match parse_for_dispatch(&text) {
            Ok(value) => Settlement::Returned(Some(value)),
            // The program's own data can read as a malformed binary tag (a look-alike object,
            // or the codec's arrays broken through the prototypes): its result cannot be written.
            Err(error) => {
                Settlement::Failed(OutcomeKind::Thrown, bound_error_text(error.to_string(), max_bytes, None))
            }
        },
        HostValue::Bool(false) => too_large(),
        _ => Settlement::Returned(None),
    }
}

/// An error text longer than the result bound keeps its head and says how long it was,
/// in characters (UTF-16 units, as JavaScript counts them): `length` when only the head
/// was copied out of the engine.
fn bound_error_text(mut text: String, max_bytes: usize, length: Option<usize>) -> String {
    if text.len() <= max_bytes && length.is_none() {
        return text;
    }
    let total = length.unwrap_or_else(|| text.encode_utf16().count());
    let mut keep = max_bytes;
    while !text.is_char_boundary(keep) {
        keep -= 1;
    }
    text.truncate(keep);
    text.push_str(&texts::ERROR_TEXT_TRUNCATED.fill(&[&total.to_string(), &keep.to_string()]));
    text
}
