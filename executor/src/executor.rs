//! `Executor::execute`: a request in, an outcome out, the program on a worker thread and
//! its calls served on the caller's tokio runtime.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use codemode_protocol::{Outcome, scope_source};
use tokio::runtime::Handle;

use crate::config::{ExecutorConfig, Isolation};
use crate::wire::process::ProcessPool;
use crossbeam_channel::Sender;

use crate::engine::{Event, Job, Settlement};
use crate::host::{Deliver, Host};
use crate::pool::Pool;
use crate::request::Request;
use crate::watchdog::Watch;
use crate::worker::WorkerMessage;

/// The text of `execute_retained` on an executor with process isolation.
pub const RETAIN_NEEDS_IN_PROCESS: &str = "Retaining an engine (retainHandles) is not available with process isolation. Use an in-process executor for it.";

/// The text of an `execute` called outside a Tokio runtime.
pub const NO_TOKIO_RUNTIME: &str = "execute must run inside a Tokio runtime: tool calls are served on the caller's runtime. Call it from within #[tokio::main] or Runtime::block_on.";

/// Runs programs, each in a fresh engine, on a pool of worker threads.
///
/// Cheap to clone; clones share the pool.
#[derive(Clone)]
pub struct Executor {
    inner: Arc<Inner>,
}

struct Inner {
    config: ExecutorConfig,
    pool: Arc<Pool>,
    processes: Option<ProcessPool>,
    next_execution: AtomicU64,
}

impl Default for Executor {
    fn default() -> Executor {
        Executor::new(ExecutorConfig::default())
    }
}

impl Executor {
    /// An executor with `config`'s workers and default limits.
    pub fn new(config: ExecutorConfig) -> Executor {
        let pool = Pool::new(if config.isolation == Isolation::InProcess { config.workers } else { 1 });
        let processes = match &config.isolation {
            Isolation::InProcess => None,
            Isolation::Process(command) => Some(ProcessPool::new(command.clone(), config.workers)),
        };
        Executor { inner: Arc::new(Inner { config, pool, processes, next_execution: AtomicU64::new(1) }) }
    }

    /// The configuration it runs with.
    pub fn config(&self) -> &ExecutorConfig {
        &self.inner.config
    }

    /// Executions holding an engine now or queued to start one, retained ones included.
    pub fn live_engines(&self) -> usize {
        self.inner.pool.live_engines()
    }

    /// Run one program in a fresh engine, disposed the moment the run ends.
    ///
    /// Never panics and never fails for anything the program does: the outcome says
    /// `result` or `error`, with the logs either way. Dropping the future ends the
    /// engine promptly.
    pub async fn execute(&self, request: Request) -> Outcome {
        if let Some(processes) = &self.inner.processes {
            let timeout = request.limits(&self.inner.config.limits).timeout;
            return match scope_source(&request.code, &request.providers) {
                Ok(_) => processes.execute(request, timeout).await,
                Err(refusal) => Outcome::error(refusal.to_string(), Vec::new()),
            };
        }
        self.run(request, false).await.0
    }

    /// Run one program and keep its engine after the run ends (`retainHandles`): its
    /// timers keep firing, and their tool calls meet `Execution has already completed.`
    /// inside the sandbox without reaching dispatch. The engine goes when the returned
    /// handle is released or dropped.
    pub async fn execute_retained(&self, request: Request) -> (Outcome, RetainedExecution) {
        if self.inner.processes.is_some() {
            return (
                Outcome::error(RETAIN_NEEDS_IN_PROCESS, Vec::new()),
                RetainedExecution { retained: None, _remote: None },
            );
        }
        let (outcome, retained) = self.run(request, true).await;
        (outcome, RetainedExecution { retained, _remote: None })
    }

    async fn run(&self, request: Request, retain: bool) -> (Outcome, Option<Retained>) {
        let started = Instant::now();
        let scope = match scope_source(&request.code, &request.providers) {
            Ok(entry) => entry,
            Err(refusal) => return (Outcome::error(refusal.to_string(), Vec::new()), None),
        };
        let Ok(runtime) = Handle::try_current() else {
            return (Outcome::error(NO_TOKIO_RUNTIME, Vec::new()), None);
        };
        let limits = request.limits(&self.inner.config.limits);
        let execution = self.inner.next_execution.fetch_add(1, Ordering::Relaxed);
        let (events, mut incoming) = tokio::sync::mpsc::unbounded_channel();
        let stop = Arc::new(AtomicBool::new(false));
        let done = Arc::new(AtomicBool::new(false));
        let home: Arc<OnceLock<Sender<WorkerMessage>>> = Arc::default();
        let mut ticket = Ticket { home: home.clone(), execution, armed: true, stop: stop.clone() };
        let answers_home = home.clone();
        let deliver: Deliver = Arc::new(move |call, answer| {
            if let Some(inbox) = answers_home.get() {
                let _ = inbox.send(WorkerMessage::Answer { execution, call, answer });
            }
        });
        let host =
            Host { dispatch: request.dispatch.clone(), outbound: request.outbound.clone(), runtime, deliver };
        let deadline = started + limits.timeout;
        self.inner.pool.watch(Watch {
            deadline,
            timeout_ms: limits.timeout.as_millis(),
            stop: stop.clone(),
            done: done.clone(),
            events: events.clone(),
        });
        let job = Job {
            execution,
            scope_source: scope,
            deadline,
            limits,
            host: Arc::new(host),
            retain,
            events,
            stop,
            home,
        };
        if !self.inner.pool.submit(job) {
            ticket.armed = false;
            return (Outcome::error(WORKER_GONE, Vec::new()), None);
        }
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
                        Settlement::Failed(text) => Outcome::error(text, logs),
                    };
                    if retain {
                        return (outcome, Some(Retained { _ticket: ticket, incoming }));
                    }
                    // The worker disposed the engine before it reported; nothing to cancel.
                    ticket.armed = false;
                    return (outcome, None);
                }
                Some(Event::TimedOut(text)) => {
                    // The watchdog answered for an engine that may still be inside a native
                    // call: the ticket's drop stops and disposes it when it returns.
                    return (
                        Outcome::error(text, logs),
                        retain.then_some(Retained { _ticket: ticket, incoming }),
                    );
                }
                None => {
                    ticket.armed = false;
                    return (Outcome::error(WORKER_GONE, logs), None);
                }
            }
        }
    }
}

const WORKER_GONE: &str = "The executor's worker stopped before the run ended. This is a bug in codemode-executor; please report it.";

/// Disposes an execution's engine when dropped, unless disarmed.
struct Ticket {
    home: Arc<OnceLock<Sender<WorkerMessage>>>,
    execution: u64,
    armed: bool,
    stop: Arc<AtomicBool>,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if self.armed {
            // The flag stops a busy engine at its next interrupt check; the message disposes it.
            self.stop.store(true, Ordering::Release);
            // Not started yet: the worker sees the flag and never starts it.
            if let Some(inbox) = self.home.get() {
                let _ = inbox.send(WorkerMessage::Cancel(self.execution));
            }
        }
    }
}

struct Retained {
    /// Held for its `Drop`, which disposes the engine.
    _ticket: Ticket,
    incoming: tokio::sync::mpsc::UnboundedReceiver<Event>,
}

/// A retained execution's engine; released explicitly or when dropped.
pub struct RetainedExecution {
    retained: Option<Retained>,
    /// A daemon's retained engine, held for its `Drop`, which releases it over the connection.
    _remote: Option<crate::remote::ReleaseOnDrop>,
}

impl RetainedExecution {
    pub(crate) fn remote(release: crate::remote::ReleaseOnDrop) -> RetainedExecution {
        RetainedExecution { retained: None, _remote: Some(release) }
    }
}

impl RetainedExecution {
    /// The log lines its timers and handlers wrote since the outcome (or the last call).
    /// A daemon's retained engine keeps its late logs to itself: this is empty for one.
    pub fn late_logs(&mut self) -> Vec<String> {
        let mut logs = Vec::new();
        if let Some(retained) = &mut self.retained {
            while let Ok(event) = retained.incoming.try_recv() {
                if let Event::Log(line) = event {
                    logs.push(line);
                }
            }
        }
        logs
    }

    /// Dispose the engine now: its timers stop and nothing of it runs again.
    pub fn release(self) {}
}
