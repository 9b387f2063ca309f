//! Implementations under test: the built-in executor in-process, or any program that
//! speaks the wire protocol on stdin and stdout.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use codemode_executor::{Executor, Request};
use codemode_protocol::wire::{ClientMessage, Hello, ServerMessage};
use codemode_protocol::{Dispatch, ExecuteRequest, Outcome};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;

/// The host side the runner plays: answers each call the implementation makes.
pub type Host = Arc<dyn Dispatch>;

/// Something that runs an execute request and reports its outcome.
pub trait Implementation: Send + Sync {
    /// Its name in reports and in the expected-failures list.
    fn name(&self) -> &str;
    /// The engine it runs on, which picks engine-specific outcomes (`quickjs`, `v8`).
    fn engine(&self) -> &str;
    /// Run `request`, sending every call to `host`.
    fn run<'a>(
        &'a self,
        request: ExecuteRequest,
        host: Host,
    ) -> Pin<Box<dyn Future<Output = Result<Outcome, String>> + Send + 'a>>;
}

/// The built-in executor, in this process.
pub struct InProcess {
    executor: Executor,
}

impl InProcess {
    /// The built-in executor with its default configuration.
    pub fn new() -> InProcess {
        InProcess { executor: Executor::default() }
    }
}

impl Default for InProcess {
    fn default() -> InProcess {
        InProcess::new()
    }
}

impl Implementation for InProcess {
    fn name(&self) -> &str {
        "built-in (in-process)"
    }

    fn engine(&self) -> &str {
        "quickjs"
    }

    fn run<'a>(
        &'a self,
        request: ExecuteRequest,
        host: Host,
    ) -> Pin<Box<dyn Future<Output = Result<Outcome, String>> + Send + 'a>> {
        Box::pin(async move {
            let retain = request.retain_handles;
            let request = Request::from_wire(request, Some(host));
            if retain {
                let (outcome, retained) = self.executor.execute_retained(request).await;
                keep_for_grace(retained);
                Ok(outcome)
            } else {
                Ok(self.executor.execute(request).await)
            }
        })
    }
}

/// Any program speaking the wire protocol on its stdin and stdout, one process per case.
pub struct Subprocess {
    name: String,
    engine: String,
    program: String,
    args: Vec<String>,
}

impl Subprocess {
    /// `command` split on whitespace: the program, then its arguments.
    pub fn new(command: &str, engine: &str) -> Result<Subprocess, String> {
        let mut words = command.split_whitespace().map(str::to_owned);
        let program =
            words.next().ok_or("--executor-cmd is empty; give the command that starts the executor")?;
        Ok(Subprocess { name: command.to_owned(), engine: engine.to_owned(), program, args: words.collect() })
    }
}

impl Implementation for Subprocess {
    fn name(&self) -> &str {
        &self.name
    }

    fn engine(&self) -> &str {
        &self.engine
    }

    fn run<'a>(
        &'a self,
        request: ExecuteRequest,
        host: Host,
    ) -> Pin<Box<dyn Future<Output = Result<Outcome, String>> + Send + 'a>> {
        Box::pin(async move {
            let mut child = tokio::process::Command::new(&self.program)
                .args(&self.args)
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .kill_on_drop(true)
                .spawn()
                .map_err(|e| format!("cannot start {}: {e}", self.program))?;
            let mut stdin = child.stdin.take().ok_or("no stdin")?;
            let mut lines = BufReader::new(child.stdout.take().ok_or("no stdout")?).lines();
            let send = |message: ClientMessage| {
                let mut line = serde_json::to_string(&message).unwrap_or_default();
                line.push('\n');
                line
            };
            stdin
                .write_all(send(ClientMessage::Hello(Hello::current())).as_bytes())
                .await
                .map_err(|e| e.to_string())?;
            let retain = request.retain_handles;
            stdin
                .write_all(send(ClientMessage::Execute { execution: 1, request }).as_bytes())
                .await
                .map_err(|e| e.to_string())?;
            let (answered, mut answers) = mpsc::unbounded_channel::<(u64, String)>();
            let mut outcome = None;
            loop {
                tokio::select! {
                    line = lines.next_line() => {
                        let Some(line) = line.map_err(|e| e.to_string())? else { break };
                        match codemode_protocol::from_json_str::<ServerMessage>(&line) {
                            Ok(ServerMessage::Call { call, tool_call, .. }) => {
                                let (host, answered) = (host.clone(), answered.clone());
                                tokio::spawn(async move { let _ = answered.send((call, host.dispatch(tool_call).await)); });
                            }
                            Ok(ServerMessage::Outcome { outcome: o, .. }) => {
                                outcome = Some(o);
                                if !retain { break }
                                // A retained engine's late calls may still come: listen a little longer.
                                let _ = tokio::time::timeout(std::time::Duration::from_millis(200), async {
                                    while let Ok(Some(line)) = lines.next_line().await {
                                        if let Ok(ServerMessage::Call { tool_call, .. }) = codemode_protocol::from_json_str::<ServerMessage>(&line) {
                                            host.dispatch(tool_call).await;
                                        }
                                    }
                                }).await;
                                break;
                            }
                            Ok(ServerMessage::Error(problem)) => return Err(format!("the executor refused the connection: {}", problem.message)),
                            Ok(_) => {}
                            Err(e) => return Err(format!("the executor wrote a line that is not a message: {e}: {line}")),
                        }
                    }
                    Some((call, answer)) = answers.recv() => {
                        let message = send(ClientMessage::Answer { execution: 1, call, answer });
                        stdin.write_all(message.as_bytes()).await.map_err(|e| e.to_string())?;
                    }
                }
            }
            drop(stdin);
            let _ = child.kill().await;
            outcome.ok_or_else(|| "the executor ended without an outcome".to_owned())
        })
    }
}

/// Keep a retained engine through the runner's grace period, so late calls can show.
fn keep_for_grace(retained: codemode_executor::RetainedExecution) {
    tokio::spawn(async move {
        tokio::time::sleep(crate::runner::GRACE * 2).await;
        drop(retained);
    });
}

/// An executor behind a daemon (`codemode serve`), reached with `RemoteExecutor`.
pub struct Remote {
    name: String,
    engine: String,
    executor: codemode_executor::RemoteExecutor,
}

impl Remote {
    /// Connect to `address` (`unix:PATH` or `tcp:HOST:PORT`) with `token`.
    pub async fn connect(address: &str, token: Option<&str>, engine: &str) -> Result<Remote, String> {
        let executor = codemode_executor::RemoteExecutor::connect(address, token).await?;
        Ok(Remote { name: format!("daemon at {address}"), engine: engine.to_owned(), executor })
    }
}

impl Implementation for Remote {
    fn name(&self) -> &str {
        &self.name
    }

    fn engine(&self) -> &str {
        &self.engine
    }

    fn run<'a>(
        &'a self,
        request: ExecuteRequest,
        host: Host,
    ) -> Pin<Box<dyn Future<Output = Result<Outcome, String>> + Send + 'a>> {
        Box::pin(async move {
            let retain = request.retain_handles;
            let request = Request::from_wire(request, Some(host));
            if !retain {
                return Ok(self.executor.execute(request).await);
            }
            let (outcome, retained) = self.executor.execute_retained(request).await;
            keep_for_grace(retained);
            Ok(outcome)
        })
    }
}
