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
//! ends it `timeout`.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use codemode_protocol::wire::{ClientMessage, Hello, ServerMessage};
use codemode_protocol::{Dispatch, Outcome, OutcomeKind, texts};
use tokio::io::BufReader;
use tokio::process::{Child, ChildStdout, Command};
use tokio::sync::mpsc;

use super::{FrameWriter, encode_frame, read_message, write_message};
use crate::host::{answer_in_order, dispatch_panicked, fetch_panicked};
use crate::outbound::Outbound;
use crate::request::Request;

/// How long past the deadline a worker process may take to answer before it is killed.
pub(crate) const KILL_GRACE: Duration = Duration::from_millis(200);

pub(crate) use crate::config::WorkerCommand;

struct Worker {
    child: Child,
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
}

impl Drop for Worker {
    fn drop(&mut self) {
        // Its stdin closes once what is queued is written: an idle worker process exits.
        self.input.finish();
    }
}

/// The execution a worker serves now, with the host's handlers for its calls.
type Serving = Arc<Mutex<Option<(u64, Handlers)>>>;

/// What answers one run's calls and fetches.
#[derive(Clone, Default)]
struct Handlers {
    dispatch: Option<Arc<dyn Dispatch>>,
    outbound: Option<Arc<dyn Outbound>>,
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
                    let dispatch = handlers(&serving, execution).dispatch;
                    let Some(dispatch) = dispatch else { continue };
                    let answer = answer.clone();
                    answer_in_order(
                        Box::pin(async move { dispatch.dispatch(tool_call).await }),
                        dispatch_panicked,
                        move |text| answer(ClientMessage::Answer { execution, call, answer: text }),
                    );
                    continue;
                }
                Ok(Some(ServerMessage::Fetch { execution, call, request })) => {
                    let outbound = handlers(&serving, execution).outbound;
                    let Some(outbound) = outbound else { continue };
                    let answer = answer.clone();
                    answer_in_order(
                        Box::pin(async move { outbound.fetch(request.into()).await }),
                        fetch_panicked,
                        move |response| {
                            let response = crate::outbound::to_fetch_answer(response);
                            answer(ClientMessage::FetchAnswer { execution, call, answer: response });
                        },
                    );
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

/// Ends a worker's service of a run when the run ends, however it ends.
struct Served<'a>(&'a Serving);

impl Drop for Served<'_> {
    fn drop(&mut self) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }
}

pub(crate) struct ProcessPool {
    command: WorkerCommand,
    idle: Mutex<Vec<Worker>>,
    keep_idle: usize,
}

impl ProcessPool {
    pub(crate) fn new(command: WorkerCommand, keep_idle: usize) -> ProcessPool {
        ProcessPool { command, idle: Mutex::new(Vec::new()), keep_idle }
    }

    async fn spawn(&self) -> Result<Worker, String> {
        let mut child = Command::new(&self.command.program)
            .args(&self.command.args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| {
                format!("cannot start the worker process {}: {e}", self.command.program.display())
            })?;
        let (Some(mut stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err("the worker process has no stdio".to_owned());
        };
        let mut stdout = BufReader::new(stdout);
        write_message(&mut stdin, &ClientMessage::Hello(Hello::current()))
            .await
            .map_err(|e| e.to_string())?;
        match read_message::<_, ServerMessage>(&mut stdout).await? {
            Some(ServerMessage::Hello(_)) => {
                let (input, written) = FrameWriter::start(stdin);
                tokio::spawn(written);
                let serving = Serving::default();
                let frames = read_frames(stdout, input.clone(), serving.clone());
                Ok(Worker { child, input, serving, frames, next_execution: 1 })
            }
            other => Err(format!("the worker process did not answer the hello: {other:?}")),
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

    pub(crate) async fn execute(&self, request: Request, timeout: Duration) -> Outcome {
        let mut worker = match self.take_idle() {
            Some(worker) => worker,
            None => match self.spawn().await {
                Ok(worker) => worker,
                Err(problem) => return Outcome::failure(OutcomeKind::Internal, problem, Vec::new()),
            },
        };
        let deadline = tokio::time::Instant::now() + timeout + KILL_GRACE;
        match tokio::time::timeout_at(deadline, run(&mut worker, &request)).await {
            Ok(Ok(outcome)) => {
                if matches!(outcome.kind(), OutcomeKind::Timeout | OutcomeKind::Internal) {
                    let _ = worker.child.start_kill();
                } else {
                    self.put_idle(worker);
                }
                outcome
            }
            Ok(Err(problem)) => {
                let _ = worker.child.start_kill();
                Outcome::failure(OutcomeKind::Internal, problem, Vec::new())
            }
            Err(_) => {
                let _ = worker.child.start_kill();
                let text = texts::TIMEOUT.fill(&[&timeout.as_millis().to_string()]);
                Outcome::failure(OutcomeKind::Timeout, text, Vec::new())
            }
        }
    }
}

/// One execution on a worker process: its calls are served as they arrive (by the
/// reader), until the outcome arrives.
async fn run(worker: &mut Worker, request: &Request) -> Result<Outcome, String> {
    let died = || texts::WORKER_PROCESS_DIED.to_owned();
    let execution = worker.next_execution;
    worker.next_execution += 1;
    let handlers = Handlers { dispatch: request.dispatch.clone(), outbound: request.outbound.clone() };
    *worker.serving.lock().unwrap_or_else(|p| p.into_inner()) = Some((execution, handlers));
    let _served = Served(&worker.serving);
    let execute = ClientMessage::Execute { execution, request: request.to_wire() };
    let sent = encode_frame(&execute, usize::MAX).is_some_and(|frame| worker.input.send(frame));
    if !sent {
        return Err(died());
    }
    loop {
        match worker.frames.recv().await {
            Some(Ok(ServerMessage::Outcome { execution: ended, outcome })) if ended == execution => {
                return Ok(outcome);
            }
            Some(Ok(_)) => {}
            Some(Err(_)) | None => return Err(died()),
        }
    }
}
