//! Process isolation, the host side: each execution runs in a worker process from a
//! pool (`codemode stdio`), spoken to over its stdin and stdout.
//!
//! The host's dispatch stays in this process; only the three strings of each call and
//! its answer cross. A worker whose run ended with kind `timeout` is killed (its engine
//! may still be inside a native call) and replaced, as is one whose run ended `internal`;
//! so is one that has not answered by the deadline plus [`KILL_GRACE`]. The decision reads
//! the outcome's kind, never its text: a program can throw the timeout's text itself. A
//! worker that ended otherwise serves the next execution.
//!
//! Failures of this layer: a worker process that cannot start, or that dies or breaks the
//! protocol mid-run, ends the run `internal`; no answer by the deadline plus the grace
//! ends it `timeout`.

use std::sync::Mutex;
use std::time::Duration;

use codemode_protocol::wire::{ClientMessage, Hello, ServerMessage};
use codemode_protocol::{Outcome, OutcomeKind, texts};
use tokio::io::BufReader;
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::sync::mpsc;

use super::{read_message, write_message};
use crate::host::{answer_in_order, dispatch_panicked, fetch_panicked};
use crate::request::Request;

/// How long past the deadline a worker process may take to answer before it is killed.
pub(crate) const KILL_GRACE: Duration = Duration::from_millis(200);

pub(crate) use crate::config::WorkerCommand;

struct Worker {
    child: Child,
    stdin: ChildStdin,
    /// The worker's messages, read whole by a task of their own: a receive is
    /// cancellation-safe where reading a line inside `select!` is not (a half-read line
    /// would be lost and the next read would see a torn frame).
    frames: mpsc::Receiver<Result<ServerMessage, String>>,
}

/// Read the worker's messages until its stdout ends or breaks (that ending is sent too).
fn read_frames(mut stdout: BufReader<ChildStdout>) -> mpsc::Receiver<Result<ServerMessage, String>> {
    // A few frames of slack; past it the worker's writes wait, as a pipe's would.
    let (frames, received) = mpsc::channel(16);
    tokio::spawn(async move {
        loop {
            let frame = match read_message::<_, ServerMessage>(&mut stdout).await {
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
            Some(ServerMessage::Hello(_)) => Ok(Worker { child, stdin, frames: read_frames(stdout) }),
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

/// One execution on a worker process: serve its calls until the outcome arrives.
async fn run(worker: &mut Worker, request: &Request) -> Result<Outcome, String> {
    let died = || texts::WORKER_PROCESS_DIED.to_owned();
    let wire = request.to_wire();
    write_message(&mut worker.stdin, &ClientMessage::Execute { execution: 1, request: wire })
        .await
        .map_err(|_| died())?;
    let (answered, mut answers) = mpsc::unbounded_channel::<ClientMessage>();
    loop {
        tokio::select! {
            frame = worker.frames.recv() => match frame {
                Some(Ok(ServerMessage::Call { call, tool_call, .. })) => {
                    let Some(dispatch) = request.dispatch.clone() else { continue };
                    let answered = answered.clone();
                    answer_in_order(
                        Box::pin(async move { dispatch.dispatch(tool_call).await }),
                        dispatch_panicked,
                        move |answer| drop(answered.send(ClientMessage::Answer { execution: 1, call, answer })),
                    );
                }
                Some(Ok(ServerMessage::Fetch { call, request: fetch, .. })) => {
                    let Some(outbound) = request.outbound.clone() else { continue };
                    let answered = answered.clone();
                    answer_in_order(
                        Box::pin(async move { outbound.fetch(fetch.into()).await }),
                        fetch_panicked,
                        move |answer| {
                            let answer = crate::outbound::to_fetch_answer(answer);
                            drop(answered.send(ClientMessage::FetchAnswer { execution: 1, call, answer }));
                        },
                    );
                }
                Some(Ok(ServerMessage::Outcome { outcome, .. })) => return Ok(outcome),
                Some(Ok(_)) => {}
                Some(Err(_)) | None => return Err(died()),
            },
            Some(answer) = answers.recv() => {
                write_message(&mut worker.stdin, &answer)
                    .await
                    .map_err(|_| died())?;
            }
        }
    }
}
