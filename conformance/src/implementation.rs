//! Implementations under test: any `Execute` (the built-in executor in-process or under
//! process isolation, a daemon to connect to), any program that speaks the wire protocol
//! on stdin and stdout, and the built-in daemon (`codemode serve`) started for the run.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;

use codemode_executor::{EngineKind, Execute, Executor, ExecutorConfig, Request};
use codemode_protocol::wire::{ClientMessage, Hello, ServerMessage};
use codemode_protocol::{Dispatch, ExecuteRequest, Outcome, OutcomeKind};
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

/// Any implementation of the executor's [`Execute`]: the built-in executor in-process
/// or under process isolation, or a daemon through `RemoteExecutor`. One adapter for all:
/// `Execute` is the whole contract, retained runs included.
pub struct Executes {
    name: String,
    engine: String,
    executor: Arc<dyn Execute>,
}

impl Executes {
    /// `executor`, named `name` in reports, whose outcomes are `engine`'s.
    pub fn new(name: impl Into<String>, engine: &str, executor: impl Execute + 'static) -> Executes {
        Executes { name: name.into(), engine: engine.to_owned(), executor: Arc::new(executor) }
    }

    /// The built-in executor in this process with its default configuration (QuickJS).
    pub fn in_process() -> Executes {
        Executes::on(EngineKind::default())
    }

    /// The built-in executor in this process with its default configuration on `engine`.
    pub fn on(engine: EngineKind) -> Executes {
        let executor = Executor::new(ExecutorConfig::default().engine(engine));
        Executes::new(format!("built-in on {}, in-process", engine.name()), engine.name(), executor)
    }

    /// A daemon at `address` (`unix:PATH` or `tcp:HOST:PORT`) with `token`, through
    /// `RemoteExecutor`; `engine` names the daemon's engine.
    pub async fn connect(address: &str, token: Option<&str>, engine: &str) -> Result<Executes, String> {
        let executor =
            codemode_executor::RemoteExecutor::connect(address, token).await.map_err(|e| e.to_string())?;
        Ok(Executes::new(format!("daemon at {address}"), engine, executor))
    }
}

impl Default for Executes {
    fn default() -> Executes {
        Executes::in_process()
    }
}

impl Implementation for Executes {
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
            match self.executor.execute_retained(request).await {
                Ok((outcome, retained)) => {
                    keep_for_grace(retained);
                    Ok(outcome)
                }
                // As a daemon answers a retained execute it cannot keep.
                Err(refused) => Ok(Outcome::failure(OutcomeKind::Invalid, refused.to_string(), Vec::new())),
            }
        })
    }
}

/// Any program speaking the wire protocol on its stdin and stdout, one process per case.
pub struct Subprocess {
    name: String,
    engine: String,
    program: PathBuf,
    args: Vec<String>,
}

impl Subprocess {
    /// `command` split on whitespace: the program, then its arguments.
    pub fn new(command: &str, engine: &str) -> Result<Subprocess, String> {
        let mut words = command.split_whitespace().map(str::to_owned);
        let program =
            words.next().ok_or("--executor-cmd is empty; give the command that starts the executor")?;
        Ok(Subprocess {
            name: command.to_owned(),
            engine: engine.to_owned(),
            program: PathBuf::from(program),
            args: words.collect(),
        })
    }

    /// The built-in executor behind the wire protocol: `codemode stdio --engine NAME`, with
    /// `codemode` the binary at that path.
    /// This command with `arg` after its own (`--webassembly`).
    pub fn arg(mut self, arg: &str) -> Subprocess {
        self.args.push(arg.to_owned());
        self.name = format!("codemode {}", self.args.join(" "));
        self
    }

    pub fn codemode_stdio(codemode: &Path, engine: EngineKind) -> Subprocess {
        let args = vec!["stdio".to_owned(), "--engine".to_owned(), engine.name().to_owned()];
        Subprocess {
            name: format!("codemode {}", args.join(" ")),
            engine: engine.name().to_owned(),
            program: codemode.to_path_buf(),
            args,
        }
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
                .map_err(|e| format!("cannot start {}: {e}", self.program.display()))?;
            let mut stdin = child.stdin.take().ok_or("no stdin")?;
            let mut lines = BufReader::new(child.stdout.take().ok_or("no stdout")?).lines();
            let send = |message: ClientMessage| {
                let mut line = serde_json::to_string(&message).unwrap_or_default();
                line.push('\n');
                line
            };
            // Version 1's behaviour, which every version keeps, unless the request needs a
            // later version's fields (a v2 transcript's limits: version 5).
            let version = request.least_version();
            stdin
                .write_all(send(ClientMessage::Hello(Hello::version(version))).as_bytes())
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
                                // The call reaches the host here, in arrival order; only its answer is awaited apart.
                                let (answer, answered) = (host.dispatch(tool_call), answered.clone());
                                tokio::spawn(async move { let _ = answered.send((call, answer.await)); });
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

/// Where a started daemon listens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Listen {
    /// A Unix socket at this path (removed when the daemon is dropped).
    Unix(PathBuf),
    /// Plain TCP on a free loopback port, with this token (written to `token_file` for
    /// `--token-file`, and removed when the daemon is dropped).
    Tcp {
        /// The token every client presents.
        token: String,
        /// The file it is handed to the daemon in.
        token_file: PathBuf,
    },
}

/// The built-in daemon, `codemode serve --engine NAME --listen ...`, started by the
/// runner and reached with `RemoteExecutor`; killed when dropped.
pub struct Served {
    name: String,
    remote: Executes,
    _child: tokio::process::Child,
    leftovers: Vec<PathBuf>,
}

/// How long a started daemon may take to say it listens.
const LISTEN_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

impl Served {
    /// Start `codemode serve` (the binary at `codemode`) on `engine`, wait until it says
    /// it listens, and connect.
    pub async fn start(codemode: &Path, engine: EngineKind, listen: Listen) -> Result<Served, String> {
        Served::start_with(codemode, engine, listen, &[]).await
    }

    /// [`Served::start`] with `extra` flags for `codemode serve` (`--webassembly`).
    pub async fn start_with(
        codemode: &Path,
        engine: EngineKind,
        listen: Listen,
        extra: &[&str],
    ) -> Result<Served, String> {
        let mut args = vec!["serve".to_owned(), "--engine".to_owned(), engine.name().to_owned()];
        args.extend(extra.iter().map(|a| (*a).to_owned()));
        let (token, leftovers) = match &listen {
            Listen::Unix(path) => {
                args.extend(["--listen".to_owned(), format!("unix:{}", path.display())]);
                (None, vec![path.clone()])
            }
            Listen::Tcp { token, token_file } => {
                std::fs::write(token_file, format!("{token}\n"))
                    .map_err(|e| format!("cannot write the token file {}: {e}", token_file.display()))?;
                args.extend([
                    "--listen".to_owned(),
                    "tcp:127.0.0.1:0".to_owned(),
                    "--token-file".to_owned(),
                    token_file.display().to_string(),
                ]);
                (Some(token.clone()), vec![token_file.clone()])
            }
        };
        let mut child = tokio::process::Command::new(codemode)
            .args(&args)
            .args(["--log-format", "json"])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", codemode.display()))?;
        let command = format!("codemode {}", args.join(" "));
        let mut lines = BufReader::new(child.stderr.take().ok_or("no stderr")?).lines();
        let mut said = Vec::new();
        let address = tokio::time::timeout(LISTEN_WAIT, async {
            while let Ok(Some(line)) = lines.next_line().await {
                let event: Option<serde_json::Value> = serde_json::from_str(&line).ok();
                match event
                    .as_ref()
                    .filter(|e| e["message"] == "listening")
                    .and_then(|e| e["address"].as_str())
                {
                    Some(address) => return Some(address.to_owned()),
                    None => said.push(line),
                }
            }
            None
        })
        .await
        .ok()
        .flatten()
        .ok_or_else(|| format!("`{command}` did not start listening: {}", said.join("\n")))?;
        // Its log lines go on being read, so the daemon never blocks on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        let remote = Executes::connect(&address, token.as_deref(), engine.name()).await?;
        let name = format!("codemode serve --engine {} at {address}", engine.name());
        Ok(Served { name, remote, _child: child, leftovers })
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        for path in &self.leftovers {
            let _ = std::fs::remove_file(path);
        }
    }
}

impl Implementation for Served {
    fn name(&self) -> &str {
        &self.name
    }

    fn engine(&self) -> &str {
        self.remote.engine()
    }

    fn run<'a>(
        &'a self,
        request: ExecuteRequest,
        host: Host,
    ) -> Pin<Box<dyn Future<Output = Result<Outcome, String>> + Send + 'a>> {
        self.remote.run(request, host)
    }
}
