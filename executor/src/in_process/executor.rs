//! `Executor::execute`: a request in, an outcome out, the program on an execution thread and
//! its calls served on the caller's tokio runtime.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use codemode_protocol::{Outcome, OutcomeKind, entry_scope};
use tokio::runtime::Handle;

use crate::api::clock::Deadline;
use crate::api::config::{EngineKind, ExecutorConfig};
use crate::api::execute::{Execute, ExecuteFuture, Profile, RetainFuture, RetainedEngine, RetainedExecution};
use crate::api::request::Request;
use crate::api::watch::{self, Logs};
use crate::engine::quickjs::QuickJs;
use crate::in_process::host::{Deliver, Host};
use crate::in_process::pool::Pool;
use crate::in_process::stuck::{Cause, StopWatch, Stuck};
use crate::in_process::watchdog::Watchdog;
use crate::runtime::{Control, CpuWatch, Event, Job, Limit, Message, Settlement};

/// The text of an `execute` called outside a Tokio runtime.
pub const NO_TOKIO_RUNTIME: &str = "execute must run inside a Tokio runtime: tool calls are served on the caller's runtime. Call it from within #[tokio::main] or Runtime::block_on.";

/// Runs programs in this process, each in a fresh engine on a thread of its own. For a
/// worker process per run see [`crate::ProcessExecutor`]; for daemons, [`crate::RemoteExecutor`].
///
/// Cheap to clone; clones share the pool.
#[derive(Clone)]
pub struct Executor {
    inner: Arc<Inner>,
}

struct Inner {
    config: ExecutorConfig,
    pool: Pool,
    watchdog: Watchdog,
    /// Engines stuck now, and abandoned ever.
    stuck: Arc<Stuck>,
}

impl Default for Executor {
    fn default() -> Executor {
        Executor::new(ExecutorConfig::default())
    }
}

impl Executor {
    /// An executor configured by `config`: its workers, limits, ceilings and engine.
    pub fn new(config: ExecutorConfig) -> Executor {
        let keep = config.workers;
        let pool = match config.engine {
            EngineKind::QuickJs => Pool::new::<QuickJs>(keep, &config.limits),
            #[cfg(feature = "v8")]
            EngineKind::V8 => Pool::new::<crate::engine::v8::V8>(keep, &config.limits),
            // Not built in: `Executor::run` refuses every execution with V8_NOT_BUILT, so
            // the pool (the least one: a thread) never runs a program.
            #[cfg(not(feature = "v8"))]
            EngineKind::V8 => Pool::new::<QuickJs>(1, &config.limits),
        };
        // The CPUs this process may use, read once, here rather than in an execution.
        crate::runtime::cpus();
        Executor {
            inner: Arc::new(Inner { config, pool, watchdog: Watchdog::spawn(), stuck: Arc::default() }),
        }
    }

    /// The configuration it runs with.
    pub fn config(&self) -> &ExecutorConfig {
        &self.inner.config
    }

    /// Executions holding an engine now or queued to start one, retained ones included.
    pub fn live_engines(&self) -> usize {
        self.inner.pool.live_engines()
    }

    /// Execution threads running now, idle ones included: one per live execution, plus
    /// the ones kept ready. A thread stuck in a native call past its deadline counts
    /// until it returns; it never takes a new execution's place.
    pub fn execution_threads(&self) -> usize {
        self.inner.pool.threads()
    }

    /// Engines ready for the next executions, on idle threads: made ahead of demand (as
    /// many as `workers`), or renewed after a run (a burst's, freed after a second idle).
    pub fn warm_engines(&self) -> usize {
        self.inner.pool.warm_engines()
    }

    /// Engines that were still running one second after their deadline stopped them
    /// (each also wrote one line on stderr). Their threads hold only their own
    /// execution; new executions never wait for them. Zero unless an engine's builtin
    /// ignores its stop.
    pub fn abandoned_engines(&self) -> u64 {
        self.inner.stuck.abandoned()
    }

    /// Engines stuck now: stopped (by the deadline, a cancel or the memory limit) more
    /// than [`crate::STUCK_AFTER`] ago and still running, each holding its thread until
    /// it returns (a `tracing` warning names each, in the span its run started in). The
    /// count goes down as each one returns. New executions never wait for them, but each
    /// holds a thread and often a core: a daemon turns not ready past
    /// `max_stuck_engines` (docs/daemon.md). Zero unless an engine's native call ignores
    /// its stop (V8's builtins ignore `TerminateExecution` in their loops).
    pub fn stuck_engines(&self) -> usize {
        self.inner.stuck.now()
    }

    /// Run one program in a fresh engine: a new one, or one renewed byte for byte to its
    /// state before any program ran in it (QuickJS), so nothing of an earlier execution
    /// is left in it. The engine is freed, or renewed for the next, once the run ends.
    ///
    /// Never panics and never fails for anything the program does: the outcome says
    /// `result` or `error`, with the logs either way. Dropping the future ends the
    /// engine promptly.
    pub async fn execute(&self, request: Request) -> Outcome {
        self.run(request, false).await.0
    }

    /// Run one program and keep its engine after the run ends (`retainHandles`): its
    /// timers keep firing, and their tool calls meet `Execution has already completed.`
    /// inside the sandbox without reaching dispatch. The engine goes when the returned
    /// handle is released or dropped.
    pub async fn execute_retained(&self, request: Request) -> (Outcome, RetainedExecution) {
        let (outcome, retained) = self.run(request, true).await;
        (outcome, RetainedExecution::holding(retained))
    }

    async fn run(&self, request: Request, retain: bool) -> (Outcome, Option<Retained>) {
        // The toolbox's execution ends with this run, however it ends (even dropped).
        let (mut request, _end) = request.open();
        let (watcher, delivery) = request.watch();
        let started = Instant::now();
        // An engine this build lacks refuses every execution.
        if let Some(refusal) = self.inner.config.engine.not_built_text() {
            return (Outcome::failure(OutcomeKind::Invalid, refusal, Vec::new()), None);
        }
        let limits = match request.limits(&self.inner.config) {
            Ok(limits) => limits,
            Err(refusal) => return (Outcome::failure(OutcomeKind::Invalid, refusal, Vec::new()), None),
        };
        if let Some(refusal) = request.web_assembly_refusal(&self.inner.config) {
            return (Outcome::failure(OutcomeKind::Invalid, refusal, Vec::new()), None);
        }
        let web_assembly = request.web_assembly_on(&self.inner.config);
        let scope = match entry_scope(&request.code, &request.providers) {
            Ok(entry) => entry,
            Err(refusal) => return (refusal_outcome(&refusal), None),
        };
        let Ok(runtime) = Handle::try_current() else {
            return (Outcome::failure(OutcomeKind::Invalid, NO_TOKIO_RUNTIME, Vec::new()), None);
        };
        let (events, mut incoming) = tokio::sync::mpsc::unbounded_channel();
        let (messages, inbox) = crossbeam_channel::unbounded();
        let control = Control::new();
        let stop_watch =
            StopWatch::new(control.clone(), self.inner.stuck.clone(), self.inner.watchdog.clone());
        let done = Arc::new(AtomicBool::new(false));
        let ticket = Ticket {
            messages: messages.clone(),
            armed: true,
            control: control.clone(),
            watch: stop_watch.clone(),
        };
        let deliver: Deliver = Arc::new(move |call, answer| {
            let _ = messages.send(Message::Answer { call, answer });
        });
        let host = Host {
            dispatch: request.dispatch.clone(),
            outbound: request.outbound.clone(),
            runtime,
            deliver,
            answers: request.answers.clone(),
        };
        let deadline = Deadline::new(started, limits.timeout, request.clock.clone());
        let (timed_out, watched, timeout) = (events.clone(), control.clone(), Settlement::timeout(&limits));
        let deadline_watch = stop_watch.clone();
        watch_deadline(
            &self.inner.watchdog,
            deadline.clone(),
            done.clone(),
            Box::new(move || {
                watched.stop();
                // An engine still running a while after its stop is counted, never waited
                // for. Watched before the outcome goes: the host, once it has the outcome,
                // drops the run's ticket, whose stop is this one, not a cancel.
                deadline_watch.stopped(Cause::Deadline);
                let _ = timed_out.send(Event::Settled(timeout));
            }),
        );
        let cpu_watch = limits.cpu_time_limit.map(|limit| {
            let (events, control, done, watch) =
                (events.clone(), control.clone(), done.clone(), stop_watch.clone());
            CpuWatch {
                limit,
                done: done.clone(),
                on_spent: Box::new(move || {
                    if !done.load(Ordering::Acquire) {
                        control.stop_for(Limit::CpuTime);
                        watch.stopped(Cause::CpuTime);
                        let _ = events.send(Event::Settled(Settlement::cpu_time(limit)));
                    }
                }),
            }
        });
        let memory_watch = stop_watch;
        let job = Job {
            scope_source: scope.source,
            program: scope.map,
            deadline,
            limits,
            host: Arc::new(host),
            retain,
            events,
            inbox,
            control,
            watchdog: self.inner.watchdog.clone(),
            live: self.inner.pool.live(),
            watch: watcher,
            answer_spin: self.inner.config.answer_spin.min(crate::runtime::MAX_ANSWER_SPIN),
            web_assembly,
            on_memory_stop: Some(Box::new(move || memory_watch.stopped(Cause::Memory))),
            cpu_watch,
        };
        self.inner.pool.submit(job);
        let settled = async move {
            let mut ticket = ticket;
            let mut logs = Vec::new();
            loop {
                let event = incoming.recv().await;
                // From here on the deadline no longer applies (a retained engine keeps running).
                if !matches!(event, Some(Event::Log(_))) {
                    done.store(true, Ordering::Release);
                }
                match event {
                    Some(Event::Log(line)) => logs.push(line),
                    Some(Event::Settled(settlement)) => {
                        let outcome = match settlement {
                            Settlement::Returned(value) => Outcome::result(value, logs),
                            Settlement::Failed(kind, text) => Outcome::failure(kind, text, logs),
                            Settlement::Threw(kind, text, location) => {
                                Outcome::failure(kind, text, logs).with_location(location)
                            }
                        };
                        if retain {
                            return (outcome, Some(Retained { _ticket: ticket, incoming }));
                        }
                        // A run that settled disposed its engine before it reported; the ticket of a
                        // timeout or a spent CPU budget (the watchdog's outcomes) stops and
                        // disposes an engine still inside a native call.
                        if !matches!(outcome.kind(), OutcomeKind::Timeout | OutcomeKind::CpuTime) {
                            ticket.armed = false;
                        }
                        return (outcome, None);
                    }
                    None => {
                        ticket.armed = false;
                        return (Outcome::failure(OutcomeKind::Internal, WORKER_GONE, logs), None);
                    }
                }
            }
        };
        watch::delivered(settled, delivery, |(outcome, _)| (outcome, Logs::Live)).await
    }
}

impl Execute for Executor {
    fn execute(&self, request: Request) -> ExecuteFuture<'_> {
        Box::pin(Executor::execute(self, request))
    }

    fn execute_retained(&self, request: Request) -> RetainFuture<'_> {
        Box::pin(async move { Ok(Executor::execute_retained(self, request).await) })
    }

    fn profile(&self) -> Profile {
        Profile::of(self.config())
    }

    fn live_engines(&self) -> Option<usize> {
        Some(Executor::live_engines(self))
    }

    fn stuck_engines(&self) -> Option<usize> {
        Some(Executor::stuck_engines(self))
    }
}

/// Have the watchdog run `at_deadline` once `deadline` has passed, unless the run is
/// `done` first. A deadline that moved (a call was held meanwhile) is looked at again
/// when it now falls due.
fn watch_deadline(
    watchdog: &Watchdog,
    deadline: Deadline,
    done: Arc<AtomicBool>,
    at_deadline: Box<dyn FnOnce() + Send>,
) {
    let again = watchdog.clone();
    let now = Instant::now();
    watchdog.at(
        deadline.next(now),
        Some(done.clone()),
        Box::new(move || {
            if done.load(Ordering::Acquire) {
                return;
            }
            if deadline.passed(Instant::now()) {
                at_deadline();
            } else {
                watch_deadline(&again, deadline, done, at_deadline);
            }
        }),
    );
}

/// A request the entry scope refused: a provider name breaks a rule, or the code does not parse.
pub(crate) fn refusal_outcome(refusal: &codemode_protocol::EntryError) -> Outcome {
    let (kind, location) = match refusal {
        codemode_protocol::EntryError::Syntax(error) => (OutcomeKind::Syntax, error.location()),
        codemode_protocol::EntryError::ProviderName(_) => (OutcomeKind::Invalid, None),
    };
    Outcome::failure(kind, refusal.to_string(), Vec::new()).with_location(location)
}

const WORKER_GONE: &str = "The executor's execution thread stopped before the run ended. This is a bug in codemode-executor; please report it.";

/// Ends an execution's engine when dropped, unless disarmed.
struct Ticket {
    messages: crossbeam_channel::Sender<Message>,
    armed: bool,
    control: Arc<Control>,
    watch: Arc<StopWatch>,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if self.armed {
            // The stop ends whatever the engine runs now; the message ends a waiting one.
            self.control.stop();
            let _ = self.messages.send(Message::Cancel);
            self.watch.stopped(Cause::Cancel);
        }
    }
}

struct Retained {
    /// Held for its `Drop`, which disposes the engine.
    _ticket: Ticket,
    incoming: tokio::sync::mpsc::UnboundedReceiver<Event>,
}

impl RetainedEngine for Retained {
    fn late_logs(&mut self) -> Vec<String> {
        let mut logs = Vec::new();
        while let Ok(event) = self.incoming.try_recv() {
            if let Event::Log(line) = event {
                logs.push(line);
            }
        }
        logs
    }
}
