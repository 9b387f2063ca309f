//! Process isolation's pool of worker processes (`codemode stdio`), each spoken to over
//! its stdin and stdout by the wire's one client session (`wire::client`).
//!
//! The host's dispatch stays in this process; only the three strings of each call and
//! its answer cross. A call is answered by the session's reader, the moment it is read,
//! and its answer written from there when the dispatch is ready at once: no other thread
//! wakes for it. Each run has an execution id of its own. A worker whose run ended with kind `timeout` is killed (its engine
//! may still be inside a native call) and replaced, as is one whose run ended `internal`;
//! so is one that has not answered by the deadline plus [`KILL_GRACE`]. The decision reads
//! the outcome's kind, never its text: a program can throw the timeout's text itself. A
//! worker that ended otherwise serves the next execution. A worker killed (or lost) is
//! replaced in the background as its run ends, so the next run finds one ready.
//!
//! Failures of this layer: a worker process that cannot start (or does not answer its
//! hello within [`HELLO_WAIT`]) ends the run `internal`; one that dies or breaks the
//! protocol mid-run ends it `lost`; no answer by the deadline plus the grace ends it
//! `timeout`. A ready worker found dead when a run takes it is dropped, not handed the run. A dead worker's exit status is read: killed by SIGSYS (its seccomp
//! filter) gives [`texts::WORKER_CONFINEMENT_KILLED`] and an error event with its pid.
//!
//! A worker is treated as a hostile client (docs/security.md): it starts with an empty
//! environment plus [`confine::CONFINEMENT_VAR`], the data cap, the answer spin, the
//! engine and `TZ`;
//! its stderr is piped and only its last [`STDERR_TAIL`] bytes are kept, for the log;
//! each call it sends is checked against the request (the run it serves, the payload
//! bound, the calls in flight) before it reaches the dispatch. Under confinement
//! ([`Confinement::confines`]) a worker serves one execution and is replaced; the pool
//! keeps fresh, already locked workers ready, and before a worker's first execution the
//! host reads `/proc/<pid>/task/*/status` itself (no-new-privs 1, seccomp 2 on every
//! thread). A run that leaves other workers ready starts its replacement when it ends, so
//! the start does not share the CPUs with it; one that takes the last, at once.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use codemode_protocol::wire::{ClientMessage, Hello};
use codemode_protocol::{Outcome, OutcomeKind, texts};
use tokio::io::AsyncReadExt;
use tokio::process::{Child, ChildStderr, Command};

use crate::api::clock::{Deadline, within};
use crate::api::config::{EngineKind, Limits};
use crate::api::request::Request;
use crate::api::watch::{Logs, WireEvents};
use crate::confine::{self, Confinement};
use crate::sync::lock;
use crate::wire::client::admit::Admission;
use crate::wire::client::{Ended, Handlers, HelloError, MAX_QUEUED_BYTES, Session, SessionOptions};
use crate::wire::framing::{MAX_FRAME_BYTES, encode_frame};

/// The bytes of a worker's stderr kept (its last ones), for the log when it dies.
pub(crate) const STDERR_TAIL: usize = 4 << 10;

/// How long the host waits for a worker whose output ended to report its exit status.
const EXIT_WAIT: Duration = Duration::from_secs(1);

/// How long a worker process may take to start and answer the hello.
const HELLO_WAIT: Duration = Duration::from_secs(30);

/// How long past the deadline a worker process may take to answer before it is killed.
pub(crate) const KILL_GRACE: Duration = Duration::from_millis(200);

/// How long a run with no worker ready waits for one already starting before it starts
/// its own.
const START_WAIT: Duration = Duration::from_secs(2);

pub(crate) use crate::api::config::WorkerCommand;

struct Worker {
    child: Child,
    /// The last bytes of its stderr.
    stderr: Arc<Mutex<Vec<u8>>>,
    /// The wire session over its stdin and stdout.
    session: Arc<Session>,
    /// Each run has an id of its own, so an answer late for one run never meets the next.
    next_execution: u64,
}

impl Worker {
    /// Whether its process has not exited and its connection is open.
    fn is_alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None)) && !self.session.is_closed()
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        // Its stdin closes once what is queued is written: an idle worker process exits.
        self.session.finish();
    }
}

/// Keep the last [`STDERR_TAIL`] bytes of a worker's stderr; the rest is read and dropped,
/// so a worker that writes without end neither blocks nor grows the host.
fn keep_stderr_tail(mut stderr: ChildStderr) -> Arc<Mutex<Vec<u8>>> {
    let tail = Arc::new(Mutex::new(Vec::new()));
    let kept = tail.clone();
    tokio::spawn(async move {
        let mut buffer = vec![0u8; 4096];
        while let Ok(n) = stderr.read(&mut buffer).await {
            if n == 0 {
                break;
            }
            let mut kept = lock(&kept);
            kept.extend_from_slice(&buffer[..n]);
            let excess = kept.len().saturating_sub(STDERR_TAIL);
            kept.drain(..excess);
        }
    });
    tail
}

pub(crate) struct ProcessPool {
    shared: Arc<PoolShared>,
}

struct PoolShared {
    command: WorkerCommand,
    /// The executor's engine, which its workers take.
    engine: EngineKind,
    confinement: Confinement,
    /// The data-segment cap a confined worker sets (above the memory ceiling).
    data_limit_bytes: u64,
    /// The host's [`crate::ExecutorConfig::answer_spin`], which its workers take.
    answer_spin: Duration,
    idle: Mutex<Vec<Worker>>,
    keep_idle: usize,
    /// Workers being started ahead of demand now.
    starting: AtomicUsize,
    /// Told each time a worker started ahead of demand is ready (or failed to start).
    started: tokio::sync::Notify,
    /// Runs waiting for one of those; never more than are starting, so each has its own.
    waiting: AtomicUsize,
}

impl ProcessPool {
    pub(crate) fn new(
        command: WorkerCommand,
        engine: EngineKind,
        keep_idle: usize,
        confinement: Confinement,
        memory_ceiling: usize,
        answer_spin: Duration,
    ) -> ProcessPool {
        // The engine's budget, plus room for what the engine and runtime hold beside it.
        let data_limit_bytes = (memory_ceiling as u64).saturating_mul(2).saturating_add(2 << 30);
        let shared = PoolShared {
            command,
            engine,
            confinement,
            data_limit_bytes,
            answer_spin,
            idle: Mutex::new(Vec::new()),
            keep_idle: keep_idle.max(1),
            starting: AtomicUsize::new(0),
            started: tokio::sync::Notify::new(),
            waiting: AtomicUsize::new(0),
        };
        ProcessPool { shared: Arc::new(shared) }
    }

    /// Workers started and ready for the next runs now.
    pub(crate) fn ready_workers(&self) -> usize {
        lock(&self.shared.idle).len()
    }

    /// The outcome, and whether its logs were reported as they happened.
    pub(crate) async fn execute(&self, request: Request, limits: &Limits) -> (Outcome, Logs) {
        let shared = &self.shared;
        #[cfg(not(target_os = "linux"))]
        if shared.confinement == Confinement::Required {
            return (Outcome::failure(OutcomeKind::Invalid, confine::unavailable(), Vec::new()), Logs::Live);
        }
        let mut taken = shared.take_idle();
        if shared.confinement.confines() {
            let waiting = shared.waiting.fetch_add(1, Ordering::SeqCst);
            if taken.is_none() && waiting < shared.starting.load(Ordering::SeqCst) {
                // One is on its way for this run: waiting for it is sooner than starting
                // another beside it on the same cores.
                let _ = tokio::time::timeout(START_WAIT, shared.started.notified()).await;
                taken = shared.take_idle();
            }
            shared.waiting.fetch_sub(1, Ordering::SeqCst);
            // With others ready for the next runs, this one's replacement starts when it ends
            // (`Replace` in `run_on`), so the start does not take a CPU from the run; else
            // at once, so the next run finds one ready. (Always at the end measured no
            // better at 16 at once, p50 36.7 ms and p99 120 ms against 40–43 and 71–86:
            // docs/performance.md, "Process isolation on V8".)
            if taken.is_none() || lock(&shared.idle).is_empty() {
                PoolShared::refill(shared);
            }
        }
        let worker = match taken {
            Some(worker) => worker,
            None => match shared.spawn().await {
                Ok(worker) => worker,
                Err(problem) => {
                    return (Outcome::failure(OutcomeKind::Internal, problem, Vec::new()), Logs::Live);
                }
            },
        };
        let logs = if worker.session.version() >= 3 { Logs::Live } else { Logs::WithOutcome };
        (self.run_on(worker, &request, limits).await, logs)
    }

    async fn run_on(&self, mut worker: Worker, request: &Request, limits: &Limits) -> Outcome {
        let shared = &self.shared;
        let timeout = limits.timeout;
        // The worker's own deadline pauses while a call is held (it hears the holds); so does this one.
        let deadline = Deadline::new(std::time::Instant::now(), timeout + KILL_GRACE, request.clock.clone());
        if let Some(pid) = worker.child.id()
            && let Err(problem) = confine::cap_worker_memory(pid, limits.memory_limit_bytes)
        {
            tracing::warn!(pid, %problem, "cannot cap the worker's memory for the run");
        }
        // Unless the worker goes back to the pool, a fresh one is started as this run ends
        // (or is dropped: the worker is killed with it), so the next run finds one ready.
        let mut replace = Replace { shared, armed: true };
        match within(&deadline, run(&mut worker, request, limits)).await.ok_or(()) {
            Ok(Ok(outcome)) => {
                let spent = matches!(
                    outcome.kind(),
                    OutcomeKind::Timeout
                        | OutcomeKind::CpuTime
                        | OutcomeKind::Internal
                        | OutcomeKind::Lost
                        | OutcomeKind::Cancelled
                );
                if spent || shared.confinement.confines() {
                    // A stopped run's engine may still be inside a native call: killed at
                    // once, never waited for. A confined worker has seen a program: it
                    // serves no other.
                    let _ = worker.child.start_kill();
                } else {
                    replace.armed = false;
                    shared.put_idle(worker);
                }
                outcome
            }
            Ok(Err(())) => died(worker, limits).await,
            Err(_) => {
                let _ = worker.child.start_kill();
                let text = texts::TIMEOUT.fill(&[&timeout.as_millis().to_string()]);
                Outcome::failure(OutcomeKind::Timeout, text, Vec::new())
            }
        }
    }
}

impl PoolShared {
    async fn spawn(&self) -> Result<Worker, String> {
        let mut command = Command::new(&self.command.program);
        command
            .args(&self.command.args)
            .env_clear()
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true);
        if self.confinement.confines() {
            command.env(confine::CONFINEMENT_VAR, self.confinement.name());
            command.env(confine::DATA_LIMIT_VAR, self.data_limit_bytes.to_string());
        }
        command.env(crate::wire::worker::ANSWER_SPIN_VAR, self.answer_spin.as_micros().to_string());
        command.env(crate::wire::worker::ENGINE_VAR, self.engine.name());
        // The host's time zone, so a worker's dates read as an in-process run's.
        if let Some(zone) = std::env::var_os("TZ") {
            command.env("TZ", zone);
        }
        let mut child = command.spawn().map_err(|e| {
            format!("cannot start the worker process {}: {e}", self.command.program.display())
        })?;
        let (Some(stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err("the worker process has no stdio".to_owned());
        };
        let stderr = keep_stderr_tail(stderr);
        let options = SessionOptions {
            max_frame_bytes: MAX_FRAME_BYTES,
            max_queued_bytes: MAX_QUEUED_BYTES,
            keepalive: None,
        };
        let greeted =
            tokio::time::timeout(HELLO_WAIT, Session::start(stdout, stdin, Hello::current(), options));
        let session = match greeted.await.unwrap_or(Err(HelloError::Silent)) {
            Ok(session) => session,
            Err(problem) => {
                let problem = match problem {
                    HelloError::Refused { message, .. } => {
                        format!("the worker process refused the hello: {message}")
                    }
                    HelloError::Write(problem) => problem.to_string(),
                    HelloError::Closed => "the worker process closed its output before its hello".to_owned(),
                    HelloError::Unexpected(message) => {
                        format!("the worker process did not answer the hello: {message:?}")
                    }
                    HelloError::Frame(problem) => problem.to_string(),
                    HelloError::Silent => {
                        let _ = child.start_kill();
                        format!(
                            "the worker process did not answer the hello within {} s",
                            HELLO_WAIT.as_secs()
                        )
                    }
                };
                let status = exit_status(&mut child).await;
                let tail = tail_text(&stderr);
                tracing::error!(pid = child.id(), status, stderr = %tail, "worker process failed to start");
                return Err(format!("{problem} ({status}; its stderr ends: {tail})"));
            }
        };
        if self.confinement.confines() {
            self.check_confined(&child)?;
        }
        Ok(Worker { child, stderr, session, next_execution: 1 })
    }

    /// The host's own look at a worker that says it is locked: `Err` at `required` when
    /// it is not; a warning at `best-effort`.
    fn check_confined(&self, child: &Child) -> Result<(), String> {
        #[cfg(target_os = "linux")]
        let found = match child.id() {
            Some(pid) => confine::check_worker(pid).map_err(|e| e.to_string()),
            None => Err("the worker process has already ended".to_owned()),
        };
        #[cfg(not(target_os = "linux"))]
        let found: Result<(), String> = Err("this operating system has no seccomp".to_owned());
        match (found, self.confinement) {
            (Ok(()), _) => Ok(()),
            (Err(why), Confinement::Required) => {
                tracing::error!(pid = child.id(), why = %why, "worker process is not confined");
                Err(texts::CONFINEMENT_UNAVAILABLE.fill(&[&why]))
            }
            (Err(why), _) => {
                tracing::warn!(pid = child.id(), why = %why, "worker process is not confined (best-effort)");
                Ok(())
            }
        }
    }

    /// A ready worker still alive: one that died while it waited (its process has exited,
    /// or its session closed) is dropped here rather than handed a run it would lose.
    fn take_idle(&self) -> Option<Worker> {
        let mut idle = lock(&self.idle);
        while let Some(mut worker) = idle.pop() {
            if worker.is_alive() {
                return Some(worker);
            }
        }
        None
    }

    fn put_idle(&self, worker: Worker) {
        let mut idle = lock(&self.idle);
        if idle.len() < self.keep_idle {
            idle.push(worker);
        }
    }

    /// Start workers in the background until `keep_idle` are ready or starting.
    fn refill(shared: &Arc<PoolShared>) {
        // A ready worker that died while it waited is not counted as ready.
        let idle = {
            let mut idle = lock(&shared.idle);
            idle.retain_mut(Worker::is_alive);
            idle.len()
        };
        let starting = shared.starting.load(Ordering::SeqCst);
        for _ in (idle + starting)..shared.keep_idle {
            shared.starting.fetch_add(1, Ordering::SeqCst);
            let shared = shared.clone();
            tokio::spawn(async move {
                let started = shared.spawn().await;
                shared.starting.fetch_sub(1, Ordering::SeqCst);
                if let Ok(worker) = started {
                    shared.put_idle(worker);
                }
                shared.started.notify_one();
            });
        }
    }
}

/// Starts workers until the pool's ready ones are back to its number when dropped armed:
/// a run whose worker was killed (or died, or was dropped with the run) leaves the next
/// run a worker ready rather than one to start.
struct Replace<'a> {
    shared: &'a Arc<PoolShared>,
    armed: bool,
}

impl Drop for Replace<'_> {
    fn drop(&mut self) {
        // A run dropped outside a runtime (its runtime shutting down) starts nothing.
        if self.armed && tokio::runtime::Handle::try_current().is_ok() {
            PoolShared::refill(self.shared);
        }
    }
}

/// The outcome of a run whose worker ended before it: its exit status read, SIGSYS told
/// apart (its confinement stopped a forbidden system call).
async fn died(mut worker: Worker, limits: &Limits) -> Outcome {
    let pid = worker.child.id();
    let status = tokio::time::timeout(EXIT_WAIT, worker.child.wait()).await;
    let tail = tail_text(&worker.stderr);
    if let Ok(Ok(status)) = &status
        && status.code() == Some(codemode_protocol::wire::WORKER_OUT_OF_MEMORY_EXIT)
    {
        tracing::warn!(pid, "worker process ran out of memory mid-run");
        let text = texts::MEMORY_LIMIT.fill(&[&limits.memory_limit_bytes.to_string()]);
        return Outcome::failure(OutcomeKind::Memory, text, Vec::new());
    }
    #[cfg(unix)]
    if let Ok(Ok(status)) = &status
        && confine::killed_by_seccomp(status)
    {
        tracing::error!(pid, stderr = %tail, "confined worker process killed by its seccomp filter (SIGSYS)");
        return Outcome::failure(OutcomeKind::Internal, texts::WORKER_CONFINEMENT_KILLED, Vec::new());
    }
    let _ = worker.child.start_kill();
    let status = match status {
        Ok(Ok(status)) => status.to_string(),
        _ => "no exit status yet".to_owned(),
    };
    tracing::warn!(pid, status = %status, stderr = %tail, "worker process ended mid-run");
    Outcome::failure(OutcomeKind::Lost, texts::WORKER_PROCESS_DIED, Vec::new())
}

/// A failed worker's exit status, as text, if it comes within [`EXIT_WAIT`].
async fn exit_status(child: &mut Child) -> String {
    match tokio::time::timeout(EXIT_WAIT, child.wait()).await {
        Ok(Ok(status)) => status.to_string(),
        _ => {
            let _ = child.start_kill();
            "no exit status yet".to_owned()
        }
    }
}

fn tail_text(tail: &Mutex<Vec<u8>>) -> String {
    String::from_utf8_lossy(&lock(tail)).trim_end().to_owned()
}

/// One execution on a worker process: its calls are served as they arrive (by the
/// session's reader), until the outcome arrives. `Err` when the worker went first.
async fn run(worker: &mut Worker, request: &Request, limits: &Limits) -> Result<Outcome, ()> {
    let execution = worker.next_execution;
    worker.next_execution += 1;
    // Only a worker of version 3 or newer knows `events`; an older one refuses it.
    let events = request.watcher.clone().filter(|_| worker.session.version() >= 3).map(WireEvents::new);
    let handlers = Handlers {
        dispatch: request.dispatch.clone(),
        outbound: request.outbound.clone(),
        admission: Admission::new(limits.max_payload_bytes, limits.max_calls_in_flight),
        events,
        clock: request.clock.clone(),
    };
    let mut wire = request.to_wire();
    wire.events = handlers.events.is_some();
    let Some(frame) = encode_frame(&ClientMessage::Execute { execution, request: wire }, usize::MAX) else {
        return Err(());
    };
    let submitted = worker.session.submit(execution, frame, handlers);
    if !submitted.sent {
        return Err(());
    }
    match submitted.ended.await {
        Ok(Ended::Outcome(outcome)) => Ok(outcome),
        Ok(_) | Err(_) => Err(()),
    }
}
