//! `Executor::execute`: a request in, an outcome out, the program on a worker thread and
//! its calls served on the caller's tokio runtime.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

use codemode_protocol::{Outcome, scope_source};
use tokio::runtime::Handle;

use crate::config::ExecutorConfig;
use crate::engine::quickjs::QuickJs;
use crate::engine::{Event, Job, Settlement};
use crate::host::{Deliver, Host};
use crate::request::Request;
use crate::worker::{WorkerHandle, WorkerMessage};

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
    workers: Vec<WorkerHandle>,
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
        let workers = (0..config.workers.max(1)).map(WorkerHandle::spawn::<QuickJs>).collect();
        Executor { inner: Arc::new(Inner { config, workers, next_execution: AtomicU64::new(1) }) }
    }

    /// The configuration it runs with.
    pub fn config(&self) -> &ExecutorConfig {
        &self.inner.config
    }

    /// Executions holding an engine now or queued to start one, retained ones included.
    pub fn live_engines(&self) -> usize {
        self.inner.workers.iter().map(|w| w.live.load(Ordering::Relaxed)).sum()
    }

    /// Run one program in a fresh engine, disposed the moment the run ends.
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
        (outcome, RetainedExecution { retained })
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
        let worker = self.pick_worker();
        let execution = self.inner.next_execution.fetch_add(1, Ordering::Relaxed);
        let (events, mut incoming) = tokio::sync::mpsc::unbounded_channel();
        let cancelled = Arc::new(AtomicBool::new(false));
        let mut ticket =
            Ticket { inbox: worker.inbox.clone(), execution, armed: true, cancelled: cancelled.clone() };
        let inbox = worker.inbox.clone();
        let deliver: Deliver = Arc::new(move |call, answer| {
            let _ = inbox.send(WorkerMessage::Answer { execution, call, answer });
        });
        let host =
            Host { dispatch: request.dispatch.clone(), outbound: request.outbound.clone(), runtime, deliver };
        let job = Job {
            execution,
            scope_source: scope,
            deadline: started + limits.timeout,
            limits,
            host: Arc::new(host),
            retain,
            events,
            cancelled,
        };
        worker.live.fetch_add(1, Ordering::Relaxed);
        if worker.inbox.send(WorkerMessage::Start(job)).is_err() {
            worker.live.fetch_sub(1, Ordering::Relaxed);
            ticket.armed = false;
            return (Outcome::error(WORKER_GONE, Vec::new()), None);
        }
        let mut logs = Vec::new();
        loop {
            match incoming.recv().await {
                Some(Event::Log(line)) => logs.push(line),
                Some(Event::Settled(settlement)) => {
                    let outcome = match settlement {
                        Settlement::Returned(value) => Outcome::result(value, logs),
                        Settlement::Failed(text) => Outcome::error(text, logs),
                    };
                    if retain {
                        return (outcome, Some(Retained { _ticket: ticket, incoming }));
                    }
                    ticket.armed = false;
                    return (outcome, None);
                }
                None => {
                    ticket.armed = false;
                    return (Outcome::error(WORKER_GONE, logs), None);
                }
            }
        }
    }

    fn pick_worker(&self) -> &WorkerHandle {
        let workers = &self.inner.workers;
        workers.iter().min_by_key(|w| w.live.load(Ordering::Relaxed)).unwrap_or(&workers[0])
    }
}

const WORKER_GONE: &str = "The executor's worker stopped before the run ended. This is a bug in codemode-executor; please report it.";

/// Disposes an execution's engine when dropped, unless disarmed.
struct Ticket {
    inbox: std::sync::mpsc::Sender<WorkerMessage>,
    execution: u64,
    armed: bool,
    cancelled: Arc<AtomicBool>,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if self.armed {
            // The flag stops a busy engine at its next interrupt check; the message disposes it.
            self.cancelled.store(true, Ordering::Relaxed);
            let _ = self.inbox.send(WorkerMessage::Cancel(self.execution));
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
}

impl RetainedExecution {
    /// The log lines its timers and handlers wrote since the outcome (or the last call).
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
