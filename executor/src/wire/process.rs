//! Process isolation, the host side: each execution runs in a worker process from a
//! pool (`codemode stdio`), spoken to over its stdin and stdout.
//!
//! The host's dispatch stays in this process; only the three strings of each call and
//! its answer cross. A call is answered by the task reading the worker's output, the
//! moment it is read, and its answer written from there when the dispatch is ready at
//! once: no other thread wakes for it. Each run has an execution id of its own. A worker whose run ended with kind `timeout` is killed (its engine
//! may still be inside a native call) and replaced, as is one whose run ended `internal`;
//! so is one that has not answered by the deadline plus [`KILL_GRACE`]. The decision reads
//! the outcome's kind, never its text: a program can throw the timeout's text itself. A
//! worker that ended otherwise serves the next execution.
//!
//! Failures of this layer: a worker process that cannot start, or that dies or breaks the
//! protocol mid-run, ends the run `internal`; no answer by the deadline plus the grace
//! ends it `timeout`. A dead worker's exit status is read: killed by SIGSYS (its seccomp
//! filter) gives [`texts::WORKER_CONFINEMENT_KILLED`] and an error event with its pid.
//!
//! A worker is treated as a hostile client (docs/security.md): it starts with an empty
//! environment plus [`confine::CONFINEMENT_VAR`], the data cap, the answer spin and `TZ`;
//! its stderr is piped and only its last [`STDERR_TAIL`] bytes are kept, for the log;
//! each call it sends is checked against the request (the run it serves, the payload
//! bound, the calls in flight) before it reaches the dispatch. Under confinement
//! ([`Confinement::confines`]) a worker serves one execution and is replaced; the pool
//! keeps fresh, already locked workers ready, and before a worker's first execution the
//! host reads `/proc/<pid>/task/*/status` itself (no-new-privs 1, seccomp 2 on every
//! thread).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use codemode_protocol::wire::{ClientMessage, Hello, PROTOCOL_VERSION, ServerMessage};
use codemode_protocol::{Dispatch, Outcome, OutcomeKind, texts};
use tokio::io::{AsyncReadExt, BufReader};
use tokio::process::{Child, ChildStderr, ChildStdout, Command};
use tokio::sync::mpsc;

use super::admit::Admission;
use super::{FrameWriter, encode_frame, read_message, write_message};
use crate::config::Limits;
use crate::confine::{self, Confinement};
use crate::host::{answer_in_order, dispatch_panicked, fetch_panicked};
use crate::outbound::Outbound;
use crate::request::Request;
use crate::watch::{Logs, WireEvents};

/// The bytes of a worker's stderr kept (its last ones), for the log when it dies.
pub(crate) const STDERR_TAIL: usize = 4 << 10;

/// How long the host waits for a worker whose output ended to report its exit status.
const EXIT_WAIT: Duration = Duration::from_secs(1);

/// How long past the deadline a worker process may take to answer before it is killed.
pub(crate) const KILL_GRACE: Duration = Duration::from_millis(200);

/// How long a run with no worker ready waits for one already starting before it starts
/// its own.
const START_WAIT: Duration = Duration::from_secs(2);

pub(crate) use crate::config::WorkerCommand;

struct Worker {
    child: Child,
    /// The last bytes of its stderr.
    stderr: Arc<Mutex<Vec<u8>>>,
    /// Its stdin: frames are written by whoever makes them (an answer, by the reader
    /// that read its call), or queued for a task while the pipe is full.
    input: FrameWriter,
    /// The run it serves now, whose calls the reader answers as they arrive.
    serving: Serving,
    /// Its outcomes and its end, read whole by a task of their own: a receive is
    /// cancellation-safe where reading a line inside `select!` is not (a half-read line
    /// would be lost and the next read would see a torn frame).
    frames: mpsc::Receiver<Result<ServerMessage, String>>,
    /// Each run has an id of its own, so an answer late for one run never meets the next.
    next_execution: u64,
    /// The wire protocol version it answered the hello with: from 3 it sends log lines
    /// and waits as they happen.
    version: u32,
}

impl Drop for Worker {
    fn drop(&mut self) {
        // Its stdin closes once what is queued is written: an idle worker process exits.
        self.input.finish();
    }
}

/// The execution a worker serves now, with the host's handlers for its calls.
type Serving = Arc<Mutex<Option<(u64, Handlers)>>>;

/// What answers one run's calls and fetches, and the bounds its calls are held to.
#[derive(Clone, Default)]
struct Handlers {
    dispatch: Option<Arc<dyn Dispatch>>,
    outbound: Option<Arc<dyn Outbound>>,
    admission: Admission,
    /// The host's watch, when the run asked the worker for its events.
    events: Option<WireEvents>,
}

/// Read the worker's messages until its stdout ends or breaks (that ending is sent too).
/// Calls and fetches of the run being served are answered here, in the order they
/// arrive, each answer written as soon as it is ready; the rest goes to the run.
fn read_frames(
    mut stdout: BufReader<ChildStdout>,
    input: FrameWriter,
    serving: Serving,
) -> mpsc::Receiver<Result<ServerMessage, String>> {
    // A few frames of slack; past it the worker's writes wait, as a pipe's would.
    let (frames, received) = mpsc::channel(16);
    let answer = move |message: ClientMessage| {
        if let Some(frame) = encode_frame(&message, usize::MAX) {
            input.send(frame);
        }
    };
    tokio::spawn(async move {
        loop {
            let frame = match read_message::<_, ServerMessage>(&mut stdout).await {
                Ok(Some(ServerMessage::Call { execution, call, tool_call })) => {
                    let handlers = handlers(&serving, execution);
                    let Some(dispatch) = handlers.dispatch.clone() else { continue };
                    let answer = answer.clone();
                    let in_flight = match handlers.admission.call(&tool_call) {
                        Ok(in_flight) => in_flight,
                        Err(refusal) => {
                            let text = codemode_protocol::error_envelope(&refusal);
                            answer(ClientMessage::Answer { execution, call, answer: text });
                            continue;
                        }
                    };
                    answer_in_order(
                        Box::pin(async move { dispatch.dispatch(tool_call).await }),
                        dispatch_panicked,
                        move |text| {
                            drop(in_flight);
                            answer(ClientMessage::Answer { execution, call, answer: text });
                        },
                    );
                    continue;
                }
                Ok(Some(ServerMessage::Fetch { execution, call, request })) => {
                    let handlers = handlers(&serving, execution);
                    let answer = answer.clone();
                    let admitted = match &handlers.outbound {
                        None => Err(texts::NETWORK_CLOSED.to_owned()),
                        Some(_) => handlers.admission.fetch(),
                    };
                    let in_flight = match admitted {
                        Ok(in_flight) => in_flight,
                        Err(refusal) => {
                            if serving_now(&serving, execution) {
                                let response = crate::outbound::to_fetch_answer(Err(refusal));
                                answer(ClientMessage::FetchAnswer { execution, call, answer: response });
                            }
                            continue;
                        }
                    };
                    let Some(outbound) = handlers.outbound.clone() else { continue };
                    answer_in_order(
                        Box::pin(async move { outbound.fetch(request.into()).await }),
                        fetch_panicked,
                        move |response| {
                            drop(in_flight);
                            let response = crate::outbound::to_fetch_answer(response);
                            answer(ClientMessage::FetchAnswer { execution, call, answer: response });
                        },
                    );
                    continue;
                }
                // Reported here, by the task that dispatches the calls, so in order with them.
                Ok(Some(ServerMessage::Log { execution, level, line })) => {
                    if let Some(events) = handlers(&serving, execution).events {
                        events.log(level, line);
                    }
                    continue;
                }
                Ok(Some(ServerMessage::Waiting { execution, calls, timers })) => {
                    if let Some(events) = handlers(&serving, execution).events {
                        events.waiting(calls, timers);
                    }
                    continue;
                }
                Ok(Some(message)) => Ok(message),
                Ok(None) => Err("the worker process closed its output".to_owned()),
                Err(problem) => Err(problem),
            };
            let last = frame.is_err();
            if frames.send(frame).await.is_err() || last {
                break;
            }
        }
    });
    received
}

/// The handlers of `execution` if the worker serves it now.
fn handlers(serving: &Serving, execution: u64) -> Handlers {
    match &*serving.lock().unwrap_or_else(|p| p.into_inner()) {
        Some((now, handlers)) if *now == execution => handlers.clone(),
        _ => Handlers::default(),
    }
}

/// Whether the worker serves `execution` now.
fn serving_now(serving: &Serving, execution: u64) -> bool {
    matches!(&*serving.lock().unwrap_or_else(|p| p.into_inner()), Some((now, _)) if *now == execution)
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
            let mut kept = kept.lock().unwrap_or_else(|p| p.into_inner());
            kept.extend_from_slice(&buffer[..n]);
            let excess = kept.len().saturating_sub(STDERR_TAIL);
            kept.drain(..excess);
        }
    });
    tail
}

/// Ends a worker's service of a run when the run ends, however it ends.
struct Served<'a>(&'a Serving);

impl Drop for Served<'_> {
    fn drop(&mut self) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }
}

pub(crate) struct ProcessPool {
    shared: Arc<PoolShared>,
}

struct PoolShared {
    command: WorkerCommand,
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
        keep_idle: usize,
        confinement: Confinement,
        memory_ceiling: usize,
        answer_spin: Duration,
    ) -> ProcessPool {
        // The engine's budget, plus room for what the engine and runtime hold beside it.
        let data_limit_bytes = (memory_ceiling as u64).saturating_mul(2).saturating_add(2 << 30);
        let shared = PoolShared {
            command,
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
            // Replace what this run uses before it starts, so the next one finds it ready.
            PoolShared::refill(shared);
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
        let logs = if worker.version >= 3 { Logs::Live } else { Logs::WithOutcome };
        (self.run_on(worker, request, limits).await, logs)
    }

    async fn run_on(&self, mut worker: Worker, request: Request, limits: &Limits) -> Outcome {
        let shared = &self.shared;
        let timeout = limits.timeout;
        let deadline = tokio::time::Instant::now() + timeout + KILL_GRACE;
        match tokio::time::timeout_at(deadline, run(&mut worker, &request, limits)).await {
            Ok(Ok(outcome)) => {
                let spent = matches!(outcome.kind(), OutcomeKind::Timeout | OutcomeKind::Internal);
                if spent || shared.confinement.confines() {
                    // A confined worker has seen a program: it serves no other.
                    let _ = worker.child.start_kill();
                } else {
                    shared.put_idle(worker);
                }
                outcome
            }
            Ok(Err(_)) => died(worker).await,
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
        command.env(super::ANSWER_SPIN_VAR, self.answer_spin.as_micros().to_string());
        // The host's time zone, so a worker's dates read as an in-process run's.
        if let Some(zone) = std::env::var_os("TZ") {
            command.env("TZ", zone);
        }
        let mut child = command.spawn().map_err(|e| {
            format!("cannot start the worker process {}: {e}", self.command.program.display())
        })?;
        let (Some(mut stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err("the worker process has no stdio".to_owned());
        };
        let stderr = keep_stderr_tail(stderr);
        let mut stdout = BufReader::new(stdout);
        let greeted = async {
            write_message(&mut stdin, &ClientMessage::Hello(Hello::current()))
                .await
                .map_err(|e| e.to_string())?;
            read_message::<_, ServerMessage>(&mut stdout).await
        };
        let version = match greeted.await {
            Ok(Some(ServerMessage::Hello(hello))) => hello.version.min(PROTOCOL_VERSION),
            other => {
                let problem = match other {
                    Err(problem) => problem,
                    Ok(message) => format!("the worker process did not answer the hello: {message:?}"),
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
        let (input, written) = FrameWriter::start(stdin);
        tokio::spawn(written);
        let serving = Serving::default();
        let frames = read_frames(stdout, input.clone(), serving.clone());
        Ok(Worker { child, stderr, input, serving, frames, next_execution: 1, version })
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

    fn take_idle(&self) -> Option<Worker> {
        self.idle.lock().unwrap_or_else(|p| p.into_inner()).pop()
    }

    fn put_idle(&self, worker: Worker) {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        if idle.len() < self.keep_idle {
            idle.push(worker);
        }
    }

    /// Start workers in the background until `keep_idle` are ready or starting.
    fn refill(shared: &Arc<PoolShared>) {
        let idle = shared.idle.lock().unwrap_or_else(|p| p.into_inner()).len();
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

/// The outcome of a run whose worker ended before it: its exit status read, SIGSYS told
/// apart (its confinement stopped a forbidden system call).
async fn died(mut worker: Worker) -> Outcome {
    let pid = worker.child.id();
    let status = tokio::time::timeout(EXIT_WAIT, worker.child.wait()).await;
    let tail = tail_text(&worker.stderr);
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
    Outcome::failure(OutcomeKind::Internal, texts::WORKER_PROCESS_DIED, Vec::new())
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
    String::from_utf8_lossy(&tail.lock().unwrap_or_else(|p| p.into_inner())).trim_end().to_owned()
}

/// One execution on a worker process: its calls are served as they arrive (by the
/// reader), until the outcome arrives.
async fn run(worker: &mut Worker, request: &Request, limits: &Limits) -> Result<Outcome, String> {
    let died = || texts::WORKER_PROCESS_DIED.to_owned();
    let execution = worker.next_execution;
    worker.next_execution += 1;
    // Only a worker of version 3 or newer knows `events`; an older one refuses it.
    let events = request.watcher.clone().filter(|_| worker.version >= 3).map(WireEvents::new);
    let handlers = Handlers {
        dispatch: request.dispatch.clone(),
        outbound: request.outbound.clone(),
        admission: Admission::new(limits.max_payload_bytes, limits.max_calls_in_flight),
        events: events.clone(),
    };
    *worker.serving.lock().unwrap_or_else(|p| p.into_inner()) = Some((execution, handlers));
    let _served = Served(&worker.serving);
    let mut wire = request.to_wire();
    wire.events = events.is_some();
    let execute = ClientMessage::Execute { execution, request: wire };
    let sent = encode_frame(&execute, usize::MAX).is_some_and(|frame| worker.input.send(frame));
    if !sent {
        return Err(died());
    }
    loop {
        match worker.frames.recv().await {
            Some(Ok(ServerMessage::Outcome { execution: ended, outcome })) if ended == execution => {
                if let Some(events) = &events {
                    events.ended(&outcome);
                }
                return Ok(outcome);
            }
            Some(Ok(_)) => {}
            Some(Err(_)) | None => return Err(died()),
        }
    }
}
