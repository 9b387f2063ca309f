//! `RemoteExecutor`: the host side of the daemon arrangement, with the same execute API
//! as the in-process executor. The dispatch stays in this process; only the three
//! strings of each call and its answer cross the connection.
//!
//! Outcomes arrive with the kind the daemon gave them. The ones this side makes: a lost
//! connection ends every pending execute `internal` ([`texts::DAEMON_CONNECTION_LOST`]);
//! a daemon that cannot be reached again ends the execute `internal` before it ran
//! ([`texts::DAEMON_UNREACHABLE`]); a daemon silent past the run's timeout plus a grace
//! ends it `timeout`; a request longer than the frame bound ends `invalid` unsent; and an
//! outcome frame longer than the bound ends its own execution `resultTooLarge`, the
//! connection's other executions going on.
//!
//! A daemon that reads nothing is read no more once [`MAX_QUEUED_BYTES`] of answers wait
//! for it, so a stuck or hostile daemon cannot grow the host.
//!
//! The client remembers where and how it connected: the execute after a lost connection
//! connects again. Executes pending when the daemon closed an idle connection never
//! started there, so they are sent again once on the new connection.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use codemode_protocol::wire::{ClientMessage, FetchAnswer, Hello, ProtocolErrorKind, ServerMessage};
use codemode_protocol::{Dispatch, Outcome, OutcomeKind, error_envelope, texts};
use tokio::io::{AsyncRead, AsyncWrite, BufReader};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use crate::daemon::{Address, RemoteOptions, RemoteTls};
use crate::host::{answer_in_order, dispatch_panicked, fetch_panicked};
use crate::request::Request;
use crate::tls::Connector;
use crate::wire::{
    FrameError, FrameHead, FrameReader, FrameWriter, QuietStream, encode_frame, too_large_outcome,
    write_message,
};

/// How long past a run's own timeout the client waits before it gives the run up.
const ANSWER_GRACE: Duration = Duration::from_secs(2);

/// Bytes of answers waiting for a daemon that does not read, past which the client reads
/// nothing more from it until it does: a frame (at most the frame bound) more at most.
pub(crate) const MAX_QUEUED_BYTES: usize = 4 << 20;

/// The default timeout the client assumes when a request sets none (the daemon's default).
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// How an execute ended on one connection.
enum Ended {
    Outcome(Outcome),
    /// The connection went; the run may have started.
    Lost,
    /// The daemon closed the connection as idle: it read nothing, so the run never started.
    NotStarted,
    /// The daemon refused it (version 2): it did not start; the text says why.
    Refused(String),
}

struct Pending {
    dispatch: Option<Arc<dyn Dispatch>>,
    outbound: Option<Arc<dyn crate::Outbound>>,
    done: oneshot::Sender<Ended>,
}

/// Frames for the daemon, each checked against the bound before it is sent: written by
/// the thread that makes it when nothing else waits (an answer, by the reader that read
/// its call), queued otherwise.
#[derive(Clone)]
struct Outgoing {
    writer: FrameWriter,
    max_frame_bytes: usize,
}

impl Outgoing {
    /// Whether answers waiting for the daemon hold [`MAX_QUEUED_BYTES`] or more.
    fn is_full(&self) -> bool {
        self.writer.queued().load(Ordering::Acquire) >= MAX_QUEUED_BYTES
    }

    /// Once the queue is under its bound, or the writer has stopped.
    async fn room(&self) {
        let drained = self.writer.drained();
        tokio::pin!(drained);
        // Registered before the check, so a drain between the two is not missed.
        drained.as_mut().enable();
        if self.is_full() && !self.writer.is_closed() {
            drained.await;
        }
    }

    /// Send `message`; `false` when it is longer than the bound (nothing is sent).
    fn send(&self, message: &ClientMessage) -> bool {
        match encode_frame(message, self.max_frame_bytes) {
            Some(frame) => {
                self.writer.send(frame);
                true
            }
            None => false,
        }
    }

    /// An answer, or the refusal that stands in for one longer than the bound.
    fn answer(&self, execution: u64, call: u64, answer: String) {
        if !self.send(&ClientMessage::Answer { execution, call, answer }) {
            let answer = error_envelope(&texts::ANSWER_TOO_LARGE.fill(&[&self.max_frame_bytes.to_string()]));
            self.send(&ClientMessage::Answer { execution, call, answer });
        }
    }

    /// A fetch's answer, or the refusal that stands in for one longer than the bound.
    fn fetch_answer(&self, execution: u64, call: u64, answer: FetchAnswer) {
        if !self.send(&ClientMessage::FetchAnswer { execution, call, answer }) {
            let error = texts::ANSWER_TOO_LARGE.fill(&[&self.max_frame_bytes.to_string()]);
            let answer = FetchAnswer::Refused { error };
            self.send(&ClientMessage::FetchAnswer { execution, call, answer });
        }
    }
}

struct Connection {
    out: Outgoing,
    pending: Mutex<HashMap<u64, Pending>>,
    closed: CancellationToken,
    /// The daemon said it drains: it refuses new executes.
    draining: CancellationToken,
}

impl Connection {
    fn pending(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Pending>> {
        lock(&self.pending)
    }

    /// The connection is gone: every pending execute resolves as `ended` says.
    fn close(&self, ended: fn() -> Ended) {
        self.closed.cancel();
        for (_, pending) in self.pending().drain() {
            let _ = pending.done.send(ended());
        }
    }
}

/// Where and how to connect, resolved once.
struct Target {
    address: Address,
    token: Option<String>,
    tls: Option<Connector>,
    max_frame_bytes: usize,
    connect_timeout: Duration,
}

struct Remote {
    target: Target,
    current: Mutex<Arc<Connection>>,
    /// Held while connecting again; the last failure, so executes that waited share it.
    reconnecting: tokio::sync::Mutex<Option<(Instant, String)>>,
    next_execution: AtomicU64,
}

impl Drop for Remote {
    fn drop(&mut self) {
        lock(&self.current).closed.cancel();
    }
}

/// An executor in another process or on another machine, reached over one connection
/// that carries many executions at once, made again when it is lost.
#[derive(Clone)]
pub struct RemoteExecutor {
    remote: Arc<Remote>,
}

impl RemoteExecutor {
    /// Connect to a daemon at `unix:/path` or `tcp:HOST:PORT` (plain TCP: loopback only),
    /// presenting `token` in the hello.
    pub async fn connect(address: &str, token: Option<&str>) -> Result<RemoteExecutor, String> {
        let options = RemoteOptions { token: token.map(str::to_owned), ..RemoteOptions::default() };
        RemoteExecutor::connect_with(address, options).await
    }

    /// Connect to a TLS daemon at `tcp:HOST:PORT`, verifying it against the CA in `ca`
    /// (PEM) under the name `server_name`.
    pub async fn connect_tls(
        address: &str,
        token: Option<&str>,
        ca: &Path,
        server_name: &str,
    ) -> Result<RemoteExecutor, String> {
        let tls = RemoteTls { ca: ca.to_owned(), server_name: server_name.to_owned() };
        let options =
            RemoteOptions { token: token.map(str::to_owned), tls: Some(tls), ..RemoteOptions::default() };
        RemoteExecutor::connect_with(address, options).await
    }

    /// Connect as `options` say; the same settings serve every later connection.
    pub async fn connect_with(address: &str, options: RemoteOptions) -> Result<RemoteExecutor, String> {
        let address = address.parse::<Address>()?;
        let tls = match (&options.tls, &address) {
            (None, _) => None,
            (Some(_), Address::Unix(_)) => return Err("TLS is for tcp:HOST:PORT addresses".to_owned()),
            (Some(tls), Address::Tcp(_)) => Some(Connector::new(tls)?),
        };
        let target = Target {
            address,
            token: options.token,
            tls,
            max_frame_bytes: options.max_frame_bytes,
            connect_timeout: options.connect_timeout,
        };
        let connection = target.open().await?;
        let remote = Remote {
            target,
            current: Mutex::new(connection),
            reconnecting: tokio::sync::Mutex::new(None),
            next_execution: AtomicU64::new(1),
        };
        Ok(RemoteExecutor { remote: Arc::new(remote) })
    }

    /// Run one program on the daemon. Calls come back here to the request's dispatch.
    /// Never panics; a lost connection is an error outcome, and the next execute connects
    /// again. Dropping the future cancels the execution on the daemon.
    pub async fn execute(&self, request: Request) -> Outcome {
        self.run(request, false).await.0
    }

    /// Run one program and keep its engine on the daemon after the run ends
    /// (`retainHandles`), as [`crate::Executor::execute_retained`] does; the engine goes
    /// when the handle is released or dropped.
    pub async fn execute_retained(&self, request: Request) -> (Outcome, crate::RetainedExecution) {
        let (outcome, on) = self.run(request, true).await;
        let release = on.map(|(connection, execution)| ReleaseOnDrop { connection, execution });
        (outcome, crate::RetainedExecution::remote(release))
    }

    /// The outcome, and the connection and id the run had there.
    async fn run(&self, request: Request, retain: bool) -> (Outcome, Option<(Arc<Connection>, u64)>) {
        // The toolbox's execution ends with this run, however it ends (even dropped).
        let (request, _end) = request.open();
        let execution = self.remote.next_execution.fetch_add(1, Ordering::Relaxed);
        let mut wire = request.to_wire();
        wire.retain_handles = retain;
        let max = self.remote.target.max_frame_bytes;
        let Some(frame) = encode_frame(&ClientMessage::Execute { execution, request: wire }, max) else {
            let text = texts::REQUEST_TOO_LARGE.fill(&[&max.to_string()]);
            return (Outcome::failure(OutcomeKind::Invalid, text, Vec::new()), None);
        };
        let timeout = request.timeout.unwrap_or(DEFAULT_TIMEOUT);
        let deadline = tokio::time::Instant::now() + timeout + ANSWER_GRACE;
        let mut again = true;
        loop {
            let connection = match self.connection().await {
                Ok(connection) => connection,
                Err(problem) => {
                    let text = texts::DAEMON_UNREACHABLE.fill(&[&problem]);
                    return (Outcome::failure(OutcomeKind::Internal, text, Vec::new()), None);
                }
            };
            let (done, ended) = oneshot::channel();
            let pending =
                Pending { dispatch: request.dispatch.clone(), outbound: request.outbound.clone(), done };
            connection.pending().insert(execution, pending);
            let guard = CancelOnDrop { connection: connection.clone(), execution };
            // Closed before the entry was there: its close did not see it, and it never left.
            let ended = if connection.closed.is_cancelled() {
                connection.pending().remove(&execution);
                Ok(Ok(Ended::NotStarted))
            } else {
                connection.out.writer.send(frame.clone());
                tokio::time::timeout_at(deadline, ended).await
            };
            let outcome = match ended {
                Ok(Ok(Ended::Outcome(outcome))) => outcome,
                Ok(Ok(Ended::NotStarted)) if again => {
                    again = false;
                    continue;
                }
                Ok(Ok(Ended::Refused(text))) => Outcome::failure(OutcomeKind::Internal, text, Vec::new()),
                Ok(Ok(Ended::Lost | Ended::NotStarted) | Err(_)) => connection_lost(),
                Err(_) => Outcome::failure(
                    OutcomeKind::Timeout,
                    texts::TIMEOUT.fill(&[&timeout.as_millis().to_string()]),
                    Vec::new(),
                ),
            };
            drop(guard);
            return (outcome, Some((connection, execution)));
        }
    }

    /// The connection, made again if it was lost. Executes waiting while another makes it
    /// share that attempt, its failure included.
    async fn connection(&self) -> Result<Arc<Connection>, String> {
        let seen = lock(&self.remote.current).clone();
        if !seen.closed.is_cancelled() {
            return Ok(seen);
        }
        let asked = Instant::now();
        let mut failure = self.remote.reconnecting.lock().await;
        let now = lock(&self.remote.current).clone();
        if !now.closed.is_cancelled() {
            return Ok(now);
        }
        if let Some((at, problem)) = &*failure {
            if *at >= asked {
                return Err(problem.clone());
            }
        }
        match self.remote.target.open().await {
            Ok(fresh) => {
                *lock(&self.remote.current) = fresh.clone();
                *failure = None;
                Ok(fresh)
            }
            Err(problem) => {
                *failure = Some((Instant::now(), problem.clone()));
                Err(problem)
            }
        }
    }
}

/// The outcome of an execute whose connection to the daemon is gone.
fn connection_lost() -> Outcome {
    Outcome::failure(OutcomeKind::Internal, texts::DAEMON_CONNECTION_LOST, Vec::new())
}

/// Releases a daemon's retained engine when dropped.
pub(crate) struct ReleaseOnDrop {
    connection: Arc<Connection>,
    execution: u64,
}

impl Drop for ReleaseOnDrop {
    fn drop(&mut self) {
        self.connection.out.send(&ClientMessage::Release { execution: self.execution });
    }
}

/// Cancels an execution on the daemon when its execute future goes before the outcome.
struct CancelOnDrop {
    connection: Arc<Connection>,
    execution: u64,
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if self.connection.pending().remove(&self.execution).is_some() {
            self.connection.out.send(&ClientMessage::Cancel { execution: self.execution });
        }
    }
}

impl Target {
    /// A new connection, its hello answered.
    async fn open(&self) -> Result<Arc<Connection>, String> {
        let connecting = async {
            match &self.address {
                Address::Unix(path) => {
                    let stream = tokio::net::UnixStream::connect(path)
                        .await
                        .and_then(QuietStream::unix)
                        .map_err(|e| format!("cannot connect to {}: {e}", path.display()))?;
                    self.start(stream).await
                }
                Address::Tcp(host) => {
                    let stream = tokio::net::TcpStream::connect(host)
                        .await
                        .map_err(|e| format!("cannot connect to {host}: {e}"))?;
                    let _ = stream.set_nodelay(true);
                    match &self.tls {
                        None => self.start(stream).await,
                        Some(connector) => {
                            let stream = connector
                                .connect(stream)
                                .await
                                .map_err(|e| format!("TLS with {host} failed: {e}"))?;
                            self.start(stream).await
                        }
                    }
                }
            }
        };
        tokio::time::timeout(self.connect_timeout, connecting).await.unwrap_or_else(|_| {
            Err(format!(
                "no answer from the daemon at {} within {} ms",
                self.address,
                self.connect_timeout.as_millis()
            ))
        })
    }

    async fn start<S>(&self, stream: S) -> Result<Arc<Connection>, String>
    where
        S: AsyncRead + AsyncWrite + Send + 'static,
    {
        let (read, mut write) = tokio::io::split(stream);
        let mut read = BufReader::new(read);
        let mut frames = FrameReader::new(self.max_frame_bytes);
        let hello = Hello { token: self.token.clone(), ..Hello::current() };
        let wrote = write_message(&mut write, &ClientMessage::Hello(hello)).await;
        // A daemon at its maximum of connections writes its refusal and closes at once,
        // maybe before the hello arrives: the refusal is still there to read.
        match frames.next::<_, ServerMessage>(&mut read).await {
            Ok(Some(ServerMessage::Error(problem))) => {
                return Err(format!("the daemon refused the connection: {}", problem.message));
            }
            _ if wrote.is_err() => {
                return Err(format!(
                    "the hello failed: {}",
                    wrote.err().map(|e| e.to_string()).unwrap_or_default()
                ));
            }
            Ok(Some(ServerMessage::Hello(_))) => {}
            Ok(_) => return Err("the daemon closed the connection without a hello".to_owned()),
            Err(problem) => return Err(problem.to_string()),
        }
        let (writer, written) = FrameWriter::start(write);
        let connection = Arc::new(Connection {
            out: Outgoing { writer, max_frame_bytes: self.max_frame_bytes },
            pending: Mutex::new(HashMap::new()),
            closed: CancellationToken::new(),
            draining: CancellationToken::new(),
        });
        let writer_connection = connection.clone();
        tokio::spawn(async move {
            let connection = writer_connection;
            tokio::select! {
                _ = written => {}
                () = connection.closed.cancelled() => {}
            }
            connection.out.writer.close();
            connection.close(|| Ended::Lost);
        });
        let reader_connection = connection.clone();
        tokio::spawn(async move {
            let connection = reader_connection;
            let ended = loop {
                // A daemon that does not read its answers stops being read (so sends no
                // more calls): what waits for it here stays under the bound.
                if connection.out.is_full() {
                    tokio::select! {
                        () = connection.out.room() => continue,
                        () = connection.closed.cancelled() => break Ended::Lost,
                    }
                }
                let frame = tokio::select! {
                    frame = frames.next::<_, ServerMessage>(&mut read) => frame,
                    () = connection.closed.cancelled() => break Ended::Lost,
                };
                let message = match frame {
                    Ok(Some(message)) => message,
                    Err(FrameError::TooLarge { max, head }) => {
                        if oversized(&connection, &FrameHead::read(&head), max) {
                            continue;
                        }
                        break Ended::Lost;
                    }
                    Ok(None) | Err(_) => break Ended::Lost,
                };
                match message {
                    ServerMessage::Call { execution, call, tool_call } => {
                        let dispatch = connection.pending().get(&execution).and_then(|p| p.dispatch.clone());
                        let Some(dispatch) = dispatch else { continue };
                        let out = connection.out.clone();
                        answer_in_order(
                            Box::pin(async move { dispatch.dispatch(tool_call).await }),
                            dispatch_panicked,
                            move |answer| out.answer(execution, call, answer),
                        );
                    }
                    ServerMessage::Fetch { execution, call, request } => {
                        let outbound = connection.pending().get(&execution).and_then(|p| p.outbound.clone());
                        let Some(outbound) = outbound else { continue };
                        let out = connection.out.clone();
                        answer_in_order(
                            Box::pin(async move { outbound.fetch(request.into()).await }),
                            fetch_panicked,
                            move |answer| {
                                out.fetch_answer(execution, call, crate::outbound::to_fetch_answer(answer))
                            },
                        );
                    }
                    ServerMessage::Outcome { execution, outcome } => {
                        if let Some(pending) = connection.pending().remove(&execution) {
                            let _ = pending.done.send(Ended::Outcome(outcome));
                        }
                    }
                    ServerMessage::Error(problem) if problem.kind == ProtocolErrorKind::Idle => {
                        break Ended::NotStarted;
                    }
                    ServerMessage::Error(_) => break Ended::Lost,
                    ServerMessage::Refused { execution, message, .. } => {
                        if let Some(pending) = connection.pending().remove(&execution) {
                            let _ = pending.done.send(Ended::Refused(message));
                        }
                    }
                    ServerMessage::Draining {} => connection.draining.cancel(),
                    ServerMessage::Hello(_) | ServerMessage::Pong { .. } => {}
                }
            };
            connection.close(match ended {
                Ended::NotStarted => || Ended::NotStarted,
                _ => || Ended::Lost,
            });
        });
        Ok(connection)
    }
}

/// A frame longer than the bound, skipped: the execution it belongs to ends (or its call
/// is refused) and the others go on. `false` when the head does not tell whose it was.
fn oversized(connection: &Connection, head: &FrameHead, max: usize) -> bool {
    match *head {
        FrameHead::Outcome { execution } => {
            if let Some(pending) = connection.pending().remove(&execution) {
                let _ = pending.done.send(Ended::Outcome(too_large_outcome(execution, &[], max)));
            }
            true
        }
        FrameHead::Call { execution, call } => {
            let text = texts::CALL_TOO_LARGE.fill(&[&max.to_string()]);
            connection.out.send(&ClientMessage::Answer { execution, call, answer: error_envelope(&text) });
            true
        }
        FrameHead::Fetch { execution, call } => {
            let answer = FetchAnswer::Refused { error: texts::CALL_TOO_LARGE.fill(&[&max.to_string()]) };
            connection.out.send(&ClientMessage::FetchAnswer { execution, call, answer });
            true
        }
        FrameHead::Unknown => false,
    }
}
