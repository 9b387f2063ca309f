//! One connection to one daemon: the hello (the version negotiated, falling back to
//! version 1 for an older daemon), the reader that answers calls from the host's
//! dispatch, the writer, the keepalive, and how each execute on it ended.
//!
//! A daemon that reads nothing is read no more once [`MAX_QUEUED_BYTES`] of answers wait
//! for it, so a stuck or hostile daemon cannot grow the host. On version 2 the client
//! pings at half its keepalive and takes the connection for lost when nothing has arrived
//! for a whole keepalive, so a daemon cut off without closing is found.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use codemode_protocol::wire::{
    ClientMessage, FetchAnswer, Hello, OLDEST_PROTOCOL_VERSION, PROTOCOL_VERSION, ProtocolErrorKind,
    ServerMessage,
};
use codemode_protocol::{Dispatch, Outcome, error_envelope, texts};
use tokio::io::{AsyncRead, AsyncWrite, BufReader};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use crate::daemon::Address;
use crate::host::{answer_in_order, dispatch_panicked, fetch_panicked};
use crate::tls::Connector;
use crate::watch::WireEvents;
use crate::wire::admit::Admission;
use crate::wire::{
    FrameError, FrameHead, FrameReader, FrameWriter, QuietStream, encode_frame, too_large_outcome,
    write_message,
};

/// Bytes of answers waiting for a daemon that does not read, past which the client reads
/// nothing more from it until it does: a frame (at most the frame bound) more at most.
pub(crate) const MAX_QUEUED_BYTES: usize = 4 << 20;

pub(super) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// How an execute ended on one connection.
pub(super) enum Ended {
    Outcome(Outcome),
    /// The connection went; the run may have started.
    Lost,
    /// The daemon closed the connection as idle: it read nothing, so the run never started.
    NotStarted,
    /// The daemon refused it (version 2): it did not start; the text says why.
    Refused(String),
}

/// An execute awaiting its outcome on a connection.
pub(super) struct Pending {
    pub(super) dispatch: Option<Arc<dyn Dispatch>>,
    pub(super) outbound: Option<Arc<dyn crate::Outbound>>,
    pub(super) done: oneshot::Sender<Ended>,
    /// Set before any of its calls or fetches reaches the host: from then on the run
    /// has had effects outside the daemon and must never run again elsewhere.
    pub(super) dispatched: Arc<AtomicBool>,
    /// The bounds its calls and fetches are held to: the daemon is a peer like any other.
    pub(super) admission: Admission,
    /// The host's watch, when the execute asked the daemon for its events (version 3).
    pub(super) events: Option<WireEvents>,
}

/// Frames for the daemon, each checked against the bound before it is sent: written by
/// the thread that makes it when nothing else waits (an answer, by the reader that read
/// its call), queued otherwise.
#[derive(Clone)]
pub(super) struct Outgoing {
    pub(super) writer: FrameWriter,
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
    pub(super) fn send(&self, message: &ClientMessage) -> bool {
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

pub(super) struct Connection {
    pub(super) out: Outgoing,
    pending: Mutex<HashMap<u64, Pending>>,
    pub(super) closed: CancellationToken,
    /// The daemon said it drains: it refuses new executes.
    pub(super) draining: CancellationToken,
    /// The version this connection speaks.
    pub(super) version: u32,
    opened: Instant,
    /// Milliseconds from `opened` to the last frame read.
    heard: AtomicU64,
}

impl Connection {
    pub(super) fn pending(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Pending>> {
        lock(&self.pending)
    }

    /// Open, and the daemon has not said it drains.
    pub(super) fn is_usable(&self) -> bool {
        !self.closed.is_cancelled() && !self.draining.is_cancelled()
    }

    /// The connection is gone: every pending execute resolves as `ended` says.
    fn close(&self, ended: fn() -> Ended) {
        self.closed.cancel();
        for (_, pending) in self.pending().drain() {
            let _ = pending.done.send(ended());
        }
    }

    fn heard_now(&self) {
        self.heard.store(self.opened.elapsed().as_millis() as u64, Ordering::Release);
    }

    fn silent_for(&self) -> Duration {
        self.opened.elapsed().saturating_sub(Duration::from_millis(self.heard.load(Ordering::Acquire)))
    }
}

/// Where and how to connect to one daemon.
pub(super) struct Target {
    pub(super) address: Address,
    pub(super) token: Option<String>,
    pub(super) tls: Option<Connector>,
    pub(super) max_frame_bytes: usize,
    pub(super) connect_timeout: Duration,
    pub(super) keepalive: Option<Duration>,
    /// The version to say in the hello: the newest, until a daemon refuses it.
    version: AtomicU32,
}

/// Why a connection could not be made.
enum OpenError {
    /// The daemon refused the hello for its version.
    Version(String),
    Other(String),
}

impl Target {
    pub(super) fn new(
        address: Address,
        token: Option<String>,
        tls: Option<Connector>,
        options: &crate::daemon::RemoteOptions,
    ) -> Target {
        Target {
            address,
            token,
            tls,
            max_frame_bytes: options.max_frame_bytes,
            connect_timeout: options.connect_timeout,
            keepalive: options.keepalive,
            version: AtomicU32::new(PROTOCOL_VERSION),
        }
    }

    /// A new connection, its hello answered. A daemon older than this client refuses the
    /// newest version's hello; the client then says the oldest, once, and remembers.
    pub(super) async fn open(&self) -> Result<Arc<Connection>, String> {
        let version = self.version.load(Ordering::Relaxed);
        match self.open_as(version).await {
            Ok(connection) => Ok(connection),
            Err(OpenError::Version(_)) if version > OLDEST_PROTOCOL_VERSION => {
                self.version.store(OLDEST_PROTOCOL_VERSION, Ordering::Relaxed);
                self.open_as(OLDEST_PROTOCOL_VERSION).await.map_err(|e| match e {
                    OpenError::Version(problem) | OpenError::Other(problem) => problem,
                })
            }
            Err(OpenError::Version(problem) | OpenError::Other(problem)) => Err(problem),
        }
    }

    async fn open_as(&self, version: u32) -> Result<Arc<Connection>, OpenError> {
        let connecting = async {
            match &self.address {
                Address::Unix(path) => {
                    let stream =
                        tokio::net::UnixStream::connect(path).await.and_then(QuietStream::unix).map_err(
                            |e| OpenError::Other(format!("cannot connect to {}: {e}", path.display())),
                        )?;
                    self.start(stream, version).await
                }
                Address::Tcp(host) => {
                    let stream = tokio::net::TcpStream::connect(host)
                        .await
                        .map_err(|e| OpenError::Other(format!("cannot connect to {host}: {e}")))?;
                    let _ = stream.set_nodelay(true);
                    match &self.tls {
                        None => self.start(stream, version).await,
                        Some(connector) => {
                            let stream = connector
                                .connect(stream)
                                .await
                                .map_err(|e| OpenError::Other(format!("TLS with {host} failed: {e}")))?;
                            self.start(stream, version).await
                        }
                    }
                }
            }
        };
        tokio::time::timeout(self.connect_timeout, connecting).await.unwrap_or_else(|_| {
            Err(OpenError::Other(format!(
                "no answer from the daemon at {} within {} ms",
                self.address,
                self.connect_timeout.as_millis()
            )))
        })
    }

    async fn start<S>(&self, stream: S, version: u32) -> Result<Arc<Connection>, OpenError>
    where
        S: AsyncRead + AsyncWrite + Send + 'static,
    {
        let (read, mut write) = tokio::io::split(stream);
        let mut read = BufReader::new(read);
        let mut frames = FrameReader::new(self.max_frame_bytes);
        let hello = Hello { token: self.token.clone(), ..Hello::version(version) };
        let wrote = write_message(&mut write, &ClientMessage::Hello(hello)).await;
        // A daemon at its maximum of connections writes its refusal and closes at once,
        // maybe before the hello arrives: the refusal is still there to read.
        let spoken = match frames.next::<_, ServerMessage>(&mut read).await {
            Ok(Some(ServerMessage::Error(problem))) => {
                let text = format!("the daemon refused the connection: {}", problem.message);
                return Err(match problem.kind {
                    ProtocolErrorKind::Hello => OpenError::Version(text),
                    _ => OpenError::Other(text),
                });
            }
            _ if wrote.is_err() => {
                return Err(OpenError::Other(format!(
                    "the hello failed: {}",
                    wrote.err().map(|e| e.to_string()).unwrap_or_default()
                )));
            }
            Ok(Some(ServerMessage::Hello(hello))) => hello.version.min(version),
            Ok(_) => {
                return Err(OpenError::Other("the daemon closed the connection without a hello".to_owned()));
            }
            Err(problem) => return Err(OpenError::Other(problem.to_string())),
        };
        let (writer, written) = FrameWriter::start(write);
        let connection = Arc::new(Connection {
            out: Outgoing { writer, max_frame_bytes: self.max_frame_bytes },
            pending: Mutex::new(HashMap::new()),
            closed: CancellationToken::new(),
            draining: CancellationToken::new(),
            version: spoken,
            opened: Instant::now(),
            heard: AtomicU64::new(0),
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
        if let (Some(keepalive), true) = (self.keepalive, connection.version >= 2) {
            tokio::spawn(keep_alive(Arc::downgrade(&connection), keepalive));
        }
        tokio::spawn(read_frames(connection.clone(), frames, read));
        Ok(connection)
    }
}

/// Pings at half the keepalive; a connection that heard nothing for a whole keepalive
/// is closed as lost.
async fn keep_alive(connection: std::sync::Weak<Connection>, keepalive: Duration) {
    let mut id = 0;
    loop {
        tokio::time::sleep(keepalive / 2).await;
        let Some(connection) = connection.upgrade() else { return };
        if connection.closed.is_cancelled() {
            return;
        }
        if connection.silent_for() >= keepalive {
            tracing::warn!(
                keepalive_ms = keepalive.as_millis() as u64,
                "the daemon went silent; connection lost"
            );
            connection.closed.cancel();
            return;
        }
        id += 1;
        connection.out.send(&ClientMessage::Ping { id });
    }
}

/// The connection's reader: answers calls from the host's dispatch, delivers outcomes.
async fn read_frames<R>(connection: Arc<Connection>, mut frames: FrameReader, mut read: R)
where
    R: tokio::io::AsyncBufRead + Unpin,
{
    let ended = loop {
        // A daemon that does not read its answers stops being read (so sends no more
        // calls): what waits for it here stays under the bound.
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
        connection.heard_now();
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
                let dispatch = connection.pending().get(&execution).and_then(|p| {
                    p.dispatched.store(true, Ordering::Release);
                    Some((p.dispatch.clone()?, p.admission.call(&tool_call)))
                });
                let Some((dispatch, admitted)) = dispatch else { continue };
                let out = connection.out.clone();
                let in_flight = match admitted {
                    Ok(in_flight) => in_flight,
                    Err(refusal) => {
                        out.answer(execution, call, error_envelope(&refusal));
                        continue;
                    }
                };
                answer_in_order(
                    Box::pin(async move { dispatch.dispatch(tool_call).await }),
                    dispatch_panicked,
                    move |answer| {
                        drop(in_flight);
                        out.answer(execution, call, answer);
                    },
                );
            }
            ServerMessage::Fetch { execution, call, request } => {
                let outbound = connection.pending().get(&execution).and_then(|p| {
                    p.dispatched.store(true, Ordering::Release);
                    Some((p.outbound.clone()?, p.admission.fetch()))
                });
                let Some((outbound, admitted)) = outbound else { continue };
                let out = connection.out.clone();
                let in_flight = match admitted {
                    Ok(in_flight) => in_flight,
                    Err(refusal) => {
                        out.fetch_answer(execution, call, crate::outbound::to_fetch_answer(Err(refusal)));
                        continue;
                    }
                };
                answer_in_order(
                    Box::pin(async move { outbound.fetch(request.into()).await }),
                    fetch_panicked,
                    move |answer| {
                        drop(in_flight);
                        out.fetch_answer(execution, call, crate::outbound::to_fetch_answer(answer));
                    },
                );
            }
            ServerMessage::Outcome { execution, outcome } => {
                if let Some(pending) = connection.pending().remove(&execution) {
                    if let Some(events) = &pending.events {
                        events.ended(&outcome);
                    }
                    let _ = pending.done.send(Ended::Outcome(outcome));
                }
            }
            // Reported by this reader, which dispatches the calls: so in order with them.
            ServerMessage::Log { execution, level, line } => {
                let events = connection.pending().get(&execution).and_then(|p| p.events.clone());
                if let Some(events) = events {
                    events.log(level, line);
                }
            }
            ServerMessage::Waiting { execution, calls, timers } => {
                let events = connection.pending().get(&execution).and_then(|p| p.events.clone());
                if let Some(events) = events {
                    events.waiting(calls, timers);
                }
            }
            ServerMessage::Refused { execution, message, .. } => {
                if let Some(pending) = connection.pending().remove(&execution) {
                    let _ = pending.done.send(Ended::Refused(message));
                }
            }
            ServerMessage::Draining {} => connection.draining.cancel(),
            ServerMessage::Error(problem) if problem.kind == ProtocolErrorKind::Idle => {
                break Ended::NotStarted;
            }
            ServerMessage::Error(_) => break Ended::Lost,
            ServerMessage::Hello(_) | ServerMessage::Pong { .. } => {}
        }
    };
    connection.close(match ended {
        Ended::NotStarted => || Ended::NotStarted,
        _ => || Ended::Lost,
    });
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

/// Releases a daemon's retained engine when dropped.
pub(crate) struct ReleaseOnDrop {
    pub(super) connection: Arc<Connection>,
    pub(super) execution: u64,
}

impl Drop for ReleaseOnDrop {
    fn drop(&mut self) {
        self.connection.out.send(&ClientMessage::Release { execution: self.execution });
    }
}

/// Cancels an execution on the daemon when its execute future goes before the outcome.
pub(super) struct CancelOnDrop {
    pub(super) connection: Arc<Connection>,
    pub(super) execution: u64,
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if self.connection.pending().remove(&self.execution).is_some() {
            self.connection.out.send(&ClientMessage::Cancel { execution: self.execution });
        }
    }
}
