//! The daemon: the executor as a service on a Unix socket or TCP (token, TLS), every
//! call travelling back over the connection to the host that holds the data.
//!
//! Nothing a client does stops it: a failed accept (out of file descriptors, say) is
//! logged and retried after a pause that doubles from [`ACCEPT_BACKOFF_MIN`] to
//! [`ACCEPT_BACKOFF_MAX`]; connections past [`DaemonLimits::max_connections`] get an error
//! frame and are closed at once; and each connection is held to its bounds
//! ([`crate::wire::server`]).

use std::net::SocketAddr;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, BufReader};
use tokio::net::{TcpListener, UnixListener};
use tracing::Instrument;

use codemode_protocol::texts;
use codemode_protocol::wire::{ProtocolError, ProtocolErrorKind, ServerMessage};

use crate::Execute;
pub use crate::remote::{CONNECT_TIMEOUT, KEEPALIVE, RemoteOptions};
use crate::service::tls::Acceptor as TlsAcceptor;
pub use crate::service::tls::{RemoteTls, TlsFiles};
use crate::sync::lock;
pub use crate::wire::address::{Address, ParseAddressError};
use crate::wire::framing::QuietStream;
use crate::wire::server::{self, ServeOptions, SharedExecutions};

/// Connections open at once by default (authenticated or not).
pub const MAX_CONNECTIONS: usize = 256;

/// Executions live at once by default across all connections: each holds a thread and an
/// engine of up to its memory limit.
pub const MAX_LIVE_EXECUTIONS: usize = 1024;

/// Engines stuck at once (`Execute::stuck_engines`) a daemon stays ready with by default;
/// past it `/readyz` answers 503 `stuck` so an orchestrator replaces the daemon.
pub const MAX_STUCK_ENGINES: usize = 4;

/// The least `max_frame_bytes` a daemon accepts: room for any error frame and the
/// `resultTooLarge` outcome that stands in for a longer one.
pub const MIN_FRAME_BYTES: usize = 1024;

/// The first pause after a failed accept.
pub const ACCEPT_BACKOFF_MIN: Duration = Duration::from_millis(10);

/// The longest pause after failed accepts (the pause doubles up to it).
pub const ACCEPT_BACKOFF_MAX: Duration = Duration::from_secs(1);

/// Why [`Daemon::bind`] refused a configuration or could not listen. Its Display says
/// what to change; the variant says which of these it is.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BindError {
    /// [`DaemonConfig::max_frame_bytes`] is below [`MIN_FRAME_BYTES`].
    #[error(
        "the maximum frame of {max_frame_bytes} bytes is below the least a daemon serves with, {MIN_FRAME_BYTES} bytes"
    )]
    FrameTooSmall {
        /// The bound given.
        max_frame_bytes: usize,
    },
    /// TCP without a token.
    #[error("a TCP daemon requires a token: give --token-file")]
    TokenRequired,
    /// Plain TCP on an address that is not loopback: TLS is needed there.
    #[error(
        "plain TCP is accepted only on a loopback address, and {address} is not one: give --tls-cert and --tls-key"
    )]
    PlainTcpNotLoopback {
        /// The address bound.
        address: SocketAddr,
    },
    /// The TLS files do not make a configuration, or TLS is not built in.
    #[error("{0}")]
    Tls(#[source] crate::service::tls::TlsError),
    /// Another socket holds the address.
    #[error("cannot listen on {address}: {source}")]
    AddressInUse {
        /// The address as given (a Unix socket's path, `HOST:PORT`).
        address: String,
        /// The system's error.
        #[source]
        source: std::io::Error,
    },
    /// Listening failed otherwise: a host name that does not resolve, a directory that
    /// does not exist, no permission.
    #[error("cannot listen on {address}: {source}")]
    Listen {
        /// The address as given (a Unix socket's path, `HOST:PORT`).
        address: String,
        /// The system's error.
        #[source]
        source: std::io::Error,
    },
    /// The bound TCP address could not be read back.
    #[error("{0}")]
    LocalAddress(#[source] std::io::Error),
    /// The Unix socket could not be restricted to its owner.
    #[error("cannot restrict the socket {} to its owner: {source}", path.display())]
    Restrict {
        /// The socket's path.
        path: PathBuf,
        /// The system's error.
        #[source]
        source: std::io::Error,
    },
    /// The Unix socket, bound under a temporary name, could not be moved into place.
    #[error("cannot move the socket to {}: {source}", path.display())]
    Move {
        /// The socket's path.
        path: PathBuf,
        /// The system's error.
        #[source]
        source: std::io::Error,
    },
}

impl BindError {
    /// Listening on `address` failed: in use, or otherwise.
    fn listen(address: String, source: std::io::Error) -> BindError {
        if source.kind() == std::io::ErrorKind::AddrInUse {
            BindError::AddressInUse { address, source }
        } else {
            BindError::Listen { address, source }
        }
    }
}

/// How a daemon runs. Made with [`DaemonConfig::new`] (it is `#[non_exhaustive]`), then
/// fields set or the setters of the same names chained:
/// `DaemonConfig::new(listen).token(Some(token)).max_frame_bytes(8 << 20)`.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct DaemonConfig {
    /// Where it listens.
    pub listen: Address,
    /// The token every client's hello must carry; required on TCP.
    pub token: Option<String>,
    /// TLS for TCP; plain TCP is accepted only on a loopback address.
    pub tls: Option<TlsFiles>,
    /// Executions live at once per connection. Default [`server::MAX_EXECUTIONS`] (1024).
    pub max_executions: usize,
    /// The largest frame read or written, its JSON without the newline; at least
    /// [`MIN_FRAME_BYTES`]. Default [`crate::wire::MAX_FRAME_BYTES`] (64 MiB).
    pub max_frame_bytes: usize,
}

impl DaemonConfig {
    /// Listen on `listen` with no token, no TLS and the default bounds.
    pub fn new(listen: Address) -> DaemonConfig {
        DaemonConfig {
            listen,
            token: None,
            tls: None,
            max_executions: server::MAX_EXECUTIONS,
            max_frame_bytes: crate::wire::MAX_FRAME_BYTES,
        }
    }
}

/// What a daemon holds for its clients: the bounds that keep any client from growing or
/// stopping it. [`Default`] gives the documented defaults; it is `#[non_exhaustive]`, so
/// set fields on it or chain the setters of the same names
/// (`DaemonLimits::default().max_connections(64)`).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct DaemonLimits {
    /// Connections open at once, from accept to close, authenticated or not. Past it a new
    /// connection gets an error frame of kind `tooManyConnections` and is closed at once
    /// (a TLS one is closed without it). Default [`MAX_CONNECTIONS`].
    pub max_connections: usize,
    /// Executions live at once across all connections (running, retained, or with an
    /// outcome waiting to be sent). Past it an execute is refused
    /// ([`texts::DAEMON_EXECUTIONS_FULL`]: a `refused` message from version 2, an outcome of
    /// kind `invalid` for version 1) and does not start. The daemon's
    /// memory is bounded by this times the ceiling on `memoryLimitBytes`. Default
    /// [`MAX_LIVE_EXECUTIONS`].
    pub max_live_executions: usize,
    /// The largest hello: all a connection may send before it is authenticated. Default
    /// [`server::MAX_HELLO_BYTES`] (4 KiB).
    pub max_hello_bytes: usize,
    /// From accept to a complete hello (the TLS handshake included); past it the
    /// connection is closed, with an error frame of kind `hello` once past TLS. Default
    /// [`server::HELLO_TIMEOUT`] (5 s).
    pub hello_timeout: Duration,
    /// How long an authenticated connection may go with no message either way and no
    /// execution live before it is closed with an error frame of kind `idle`. Default
    /// [`server::IDLE_TIMEOUT`] (5 minutes).
    pub idle_timeout: Duration,
    /// Bytes of messages queued for one client past which its connection starts no
    /// execution and reads nothing until the client reads. Default
    /// [`server::MAX_QUEUED_BYTES`] (4 MiB).
    pub max_queued_bytes: usize,
    /// How long a client may read nothing while an outcome waits for room in its queue;
    /// past it that outcome is dropped for a short failure. Default
    /// [`server::SEND_TIMEOUT`] (10 s).
    pub send_timeout: Duration,
    /// Engines stuck at once ([`crate::Execute::stuck_engines`]: stopped and still running
    /// past [`crate::STUCK_AFTER`], each holding a thread) the daemon stays ready with;
    /// past it [`DaemonHealth::is_ready`] is false (`/readyz` 503 `stuck`) until enough of
    /// them return, so an orchestrator sends no more work and replaces the daemon.
    /// Default [`MAX_STUCK_ENGINES`].
    pub max_stuck_engines: usize,
}

crate::api::config::setters!(DaemonConfig {
    /// Listening on this address.
    listen: Address,
    /// With this token (required on TCP).
    token: Option<String>,
    /// With this TLS (for TCP).
    tls: Option<TlsFiles>,
    /// With this bound on executions live per connection.
    max_executions: usize,
    /// With this largest frame.
    max_frame_bytes: usize,
});

crate::api::config::setters!(DaemonLimits {
    /// With this bound on connections open at once.
    max_connections: usize,
    /// With this bound on executions live across all connections.
    max_live_executions: usize,
    /// With this largest hello.
    max_hello_bytes: usize,
    /// With this time from accept to a complete hello.
    hello_timeout: Duration,
    /// With this idle time before a connection is closed.
    idle_timeout: Duration,
    /// With this bound on bytes queued for one client.
    max_queued_bytes: usize,
    /// With this time an outcome waits for a client that reads nothing.
    send_timeout: Duration,
    /// With this many stuck engines still ready.
    max_stuck_engines: usize,
});

impl Default for DaemonLimits {
    fn default() -> DaemonLimits {
        DaemonLimits {
            max_connections: MAX_CONNECTIONS,
            max_live_executions: MAX_LIVE_EXECUTIONS,
            max_hello_bytes: server::MAX_HELLO_BYTES,
            hello_timeout: server::HELLO_TIMEOUT,
            idle_timeout: server::IDLE_TIMEOUT,
            max_queued_bytes: server::MAX_QUEUED_BYTES,
            send_timeout: server::SEND_TIMEOUT,
            max_stuck_engines: MAX_STUCK_ENGINES,
        }
    }
}

enum Listener {
    Unix(UnixListener, PathBuf),
    Tcp(TcpListener, Option<TlsAcceptor>),
}

/// A bound daemon, ready to serve.
pub struct Daemon {
    listener: Listener,
    config: DaemonConfig,
    limits: DaemonLimits,
    address: Address,
    health: DaemonHealth,
}

impl Daemon {
    /// Bind the address with the default [`DaemonLimits`]; refuse a configuration that
    /// would expose the executor unprotected.
    pub async fn bind(config: DaemonConfig) -> Result<Daemon, BindError> {
        Daemon::bind_with(config, DaemonLimits::default()).await
    }

    /// Bind the address, holding clients to `limits`.
    pub async fn bind_with(config: DaemonConfig, limits: DaemonLimits) -> Result<Daemon, BindError> {
        if config.max_frame_bytes < MIN_FRAME_BYTES {
            return Err(BindError::FrameTooSmall { max_frame_bytes: config.max_frame_bytes });
        }
        let (listener, address) = match &config.listen {
            Address::Unix(path) => {
                let listener = bind_owner_only(path)?;
                (Listener::Unix(listener, path.clone()), config.listen.clone())
            }
            Address::Tcp(host) => {
                if config.token.is_none() {
                    return Err(BindError::TokenRequired);
                }
                let tls = match &config.tls {
                    Some(files) => Some(TlsAcceptor::new(files).map_err(BindError::Tls)?),
                    None => None,
                };
                let listener =
                    TcpListener::bind(host).await.map_err(|e| BindError::listen(host.clone(), e))?;
                let local = listener.local_addr().map_err(BindError::LocalAddress)?;
                if tls.is_none() && !local.ip().is_loopback() {
                    return Err(BindError::PlainTcpNotLoopback { address: local });
                }
                (Listener::Tcp(listener, tls), Address::Tcp(local.to_string()))
            }
        };
        Ok(Daemon { listener, config, limits, address, health: DaemonHealth::default() })
    }

    /// The address it listens on (a TCP port 0 resolved).
    pub fn address(&self) -> &Address {
        &self.address
    }

    /// What probes read: ready, draining, and whether the daemon's runtime still runs.
    pub fn health(&self) -> DaemonHealth {
        self.health.clone()
    }

    /// Accept connections until the process ends, serving `executor` on each. A failed
    /// accept is logged and retried; it never ends the daemon (no `Err` comes today: the
    /// `io::Result` leaves room for a listener that fails for good).
    pub async fn serve(self, executor: impl Execute + 'static) -> std::io::Result<()> {
        self.serve_until(executor, std::future::pending(), Duration::MAX).await
    }

    /// Serve as [`Daemon::serve`] until `drain` completes, then drain: stop accepting,
    /// tell every connection (a version 2 client gets a `draining` message), refuse every
    /// later execute, and let the executions admitted run to their outcomes for up to
    /// `drain_timeout`; any still live then end with [`texts::DAEMON_SHUT_DOWN`]. Returns
    /// once every connection has closed (or a grace after the timeout).
    pub async fn serve_until(
        self,
        executor: impl Execute + 'static,
        drain: impl std::future::Future<Output = ()>,
        drain_timeout: Duration,
    ) -> std::io::Result<()> {
        let open = Arc::new(AtomicUsize::new(0));
        let live = SharedExecutions::new(self.limits.max_live_executions);
        let signal = server::Drain { timeout: drain_timeout, ..server::Drain::default() };
        let heartbeat = tokio::spawn(beat(self.health.clone()));
        let executor: Arc<dyn Execute> = Arc::new(executor);
        let engine = server::engine_name(&*executor);
        crate::service::metrics::build_info(engine);
        crate::service::metrics::draining(false);
        crate::service::metrics::in_flight(0);
        crate::service::metrics::connections_open(0);
        *lock(&self.health.inner.live) = Some(live.clone());
        *lock(&self.health.inner.executor) = Some(StuckSource(Arc::downgrade(&executor)));
        self.health.inner.max_stuck.store(self.limits.max_stuck_engines, Ordering::Release);
        crate::service::metrics::stuck_engines(0);
        self.health.inner.ready.store(true, Ordering::Release);
        tracing::info!(address = %self.address, "listening");
        tokio::pin!(drain);
        tokio::select! {
            () = self.accept_loop(&executor, &open, &live, &signal) => {}
            () = &mut drain => {}
        }
        // Draining: readiness first, then admission closes, under the word that admits.
        self.health.inner.draining.store(true, Ordering::Release);
        crate::service::metrics::draining(true);
        live.drain();
        signal.draining.cancel();
        tracing::info!(live = live.live(), timeout_ms = drain_timeout.as_millis() as u64, "draining");
        drop(self);
        let started = tokio::time::Instant::now();
        let deadline = started.checked_add(drain_timeout);
        while open.load(Ordering::Acquire) > 0 {
            if deadline.is_some_and(|at| tokio::time::Instant::now() >= at) {
                tracing::warn!(live = live.live(), "drain timeout passed; ending what still runs");
                signal.shut_down.cancel();
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // Outcomes of the executions ended at the timeout go out within the close grace.
        let grace = tokio::time::Instant::now() + Duration::from_secs(2);
        while open.load(Ordering::Acquire) > 0 && tokio::time::Instant::now() < grace {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        heartbeat.abort();
        tracing::info!(duration_ms = started.elapsed().as_millis() as u64, "drained");
        Ok(())
    }

    /// Accept connections for ever; a failed accept is logged and retried.
    async fn accept_loop(
        &self,
        executor: &Arc<dyn Execute>,
        open: &Arc<AtomicUsize>,
        live: &Arc<SharedExecutions>,
        signal: &server::Drain,
    ) {
        let connections = AtomicU64::new(0);
        let mut backoff = ACCEPT_BACKOFF_MIN;
        loop {
            let accepted = match &self.listener {
                Listener::Unix(listener, _) => {
                    listener.accept().await.map(|(stream, _)| (Accepted::Unix(stream), "unix".to_owned()))
                }
                Listener::Tcp(listener, _) => listener.accept().await.map(|(stream, peer)| {
                    let _ = stream.set_nodelay(true);
                    (Accepted::Tcp(stream, peer), peer.to_string())
                }),
            };
            let (stream, peer) = match accepted {
                Ok(accepted) => {
                    backoff = ACCEPT_BACKOFF_MIN;
                    accepted
                }
                Err(problem) => {
                    // Out of file descriptors, a connection reset before it was accepted:
                    // the listener stays, and a pause lets connections end and free them.
                    tracing::warn!(error = %problem, retry_ms = backoff.as_millis() as u64, "accept failed");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(ACCEPT_BACKOFF_MAX);
                    continue;
                }
            };
            let connection = connections.fetch_add(1, Ordering::Relaxed) + 1;
            let Some(slot) = Slot::take(open, self.limits.max_connections) else {
                let reason = texts::DAEMON_BUSY.fill(&[&self.limits.max_connections.to_string()]);
                stream.refuse_at_once(&reason);
                tracing::warn!(connection, peer, reason, "refused");
                continue;
            };
            let deadline = tokio::time::Instant::now() + self.limits.hello_timeout;
            let options = ServeOptions {
                token: self.config.token.clone(),
                max_frame_bytes: self.config.max_frame_bytes,
                max_executions: self.config.max_executions,
                max_hello_bytes: self.limits.max_hello_bytes,
                hello_timeout: Some(self.limits.hello_timeout),
                idle_timeout: Some(self.limits.idle_timeout),
                max_queued_bytes: self.limits.max_queued_bytes,
                send_timeout: Some(self.limits.send_timeout),
                shared_executions: Some(live.clone()),
                drain: Some(signal.clone()),
            };
            let executor = executor.clone();
            let tls = match &self.listener {
                Listener::Tcp(_, Some(acceptor)) => Some(acceptor.clone()),
                _ => None,
            };
            match (stream, tls) {
                (Accepted::Unix(stream), _) => {
                    let socket = stream.into_std().map(Into::into);
                    let back = |socket: OwnedFd| tokio::net::UnixStream::from_std(socket.into());
                    spawn_socket(executor, socket, back, options, connection, peer, slot);
                }
                (Accepted::Tcp(stream, _), None) => {
                    let socket = stream.into_std().map(Into::into);
                    let back = |socket: OwnedFd| tokio::net::TcpStream::from_std(socket.into());
                    spawn_socket(executor, socket, back, options, connection, peer, slot);
                }
                (Accepted::Tcp(stream, peer), Some(acceptor)) => {
                    tokio::spawn(async move {
                        // The handshake counts against the hello's deadline.
                        let refused = match tokio::time::timeout_at(deadline, acceptor.accept(stream)).await {
                            Ok(Ok(stream)) => {
                                let left = deadline.saturating_duration_since(tokio::time::Instant::now());
                                let options = ServeOptions { hello_timeout: Some(left), ..options };
                                let peer = tls_peer(peer);
                                return spawn_connection(executor, stream, options, connection, peer, slot);
                            }
                            Ok(Err(e)) => format!("TLS: {e}"),
                            Err(_) => "TLS: no handshake before the hello's deadline".to_owned(),
                        };
                        tracing::warn!(connection, reason = refused, "refused");
                    });
                }
            }
        }
    }
}

/// A stream just accepted.
enum Accepted {
    Unix(tokio::net::UnixStream),
    Tcp(tokio::net::TcpStream, SocketAddr),
}

impl Accepted {
    /// Say why in an error frame, if the socket takes it now (it is new, so its buffer is
    /// empty), and close. A TLS client sees only the close: the frame would need a handshake.
    fn refuse_at_once(self, reason: &str) {
        let frame = ServerMessage::Error(ProtocolError {
            kind: ProtocolErrorKind::TooManyConnections,
            message: reason.to_owned(),
        });
        let Some(frame) = crate::wire::framing::encode_frame(&frame, usize::MAX) else { return };
        let _ = match self {
            Accepted::Unix(stream) => stream.try_write(&frame),
            Accepted::Tcp(stream, _) => stream.try_write(&frame),
        };
    }
}

/// One of the daemon's connections; dropped when the connection ends.
struct Slot(Arc<AtomicUsize>);

impl Slot {
    fn take(open: &Arc<AtomicUsize>, max: usize) -> Option<Slot> {
        let n =
            open.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < max).then_some(n + 1)).ok()?;
        crate::service::metrics::connections_open(n + 1);
        Some(Slot(open.clone()))
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let n = self.0.fetch_sub(1, Ordering::AcqRel);
        crate::service::metrics::connections_open(n - 1);
    }
}

/// What a daemon's probes read, from any thread: whether it is ready (serving, not
/// draining, and no more engines stuck than [`DaemonLimits::max_stuck_engines`]),
/// draining, and live (its runtime beat within the last few seconds: a starved or wedged
/// runtime is caught, a busy one is not).
#[derive(Clone, Debug, Default)]
pub struct DaemonHealth {
    inner: Arc<HealthState>,
}

#[derive(Debug, Default)]
struct HealthState {
    ready: AtomicBool,
    draining: AtomicBool,
    /// Milliseconds from `started` to the runtime's last beat.
    beat: AtomicU64,
    started: std::sync::OnceLock<std::time::Instant>,
    live: std::sync::Mutex<Option<Arc<SharedExecutions>>>,
    /// The executor served, for its stuck engines.
    executor: std::sync::Mutex<Option<StuckSource>>,
    max_stuck: AtomicUsize,
}

/// The executor a daemon serves, not kept alive by its health.
struct StuckSource(std::sync::Weak<dyn Execute>);

impl std::fmt::Debug for StuckSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StuckSource")
    }
}

/// How often the runtime beats.
pub const HEARTBEAT: Duration = Duration::from_secs(1);

/// How long without a beat before the daemon is not live.
pub const HEARTBEAT_MISSED: Duration = Duration::from_secs(10);

impl DaemonHealth {
    /// Serving, not draining, and no more engines stuck than
    /// [`DaemonLimits::max_stuck_engines`]: `/readyz` answers 200.
    pub fn is_ready(&self) -> bool {
        self.inner.ready.load(Ordering::Acquire) && !self.is_draining() && !self.too_many_stuck()
    }

    /// Engines of the executor served that are stuck now ([`crate::Execute::stuck_engines`];
    /// 0 for one that cannot count them, such as process isolation, whose workers are
    /// killed instead).
    pub fn stuck_engines(&self) -> usize {
        let executor = lock(&self.inner.executor).as_ref().and_then(|source| source.0.upgrade());
        executor.and_then(|executor| executor.stuck_engines()).unwrap_or(0)
    }

    /// More engines stuck than [`DaemonLimits::max_stuck_engines`]: not ready, so an
    /// orchestrator replaces the daemon (`/readyz` answers 503 `stuck`).
    pub fn too_many_stuck(&self) -> bool {
        self.stuck_engines() > self.inner.max_stuck.load(Ordering::Acquire)
    }

    /// Draining since a signal.
    pub fn is_draining(&self) -> bool {
        self.inner.draining.load(Ordering::Acquire)
    }

    /// The runtime beat within [`HEARTBEAT_MISSED`] (or has not started yet): `/livez`
    /// answers 200.
    pub fn is_live(&self) -> bool {
        let Some(started) = self.inner.started.get() else { return true };
        let last = Duration::from_millis(self.inner.beat.load(Ordering::Acquire));
        started.elapsed().saturating_sub(last) < HEARTBEAT_MISSED
    }

    /// Executions admitted and not ended.
    pub fn live_executions(&self) -> usize {
        lock(&self.inner.live).as_ref().map_or(0, |live| live.live())
    }
}

/// The runtime's heartbeat: a task that only runs when the runtime schedules it. Each beat
/// also records the stuck engines, and says when their number turns the daemon not ready
/// and ready again.
async fn beat(health: DaemonHealth) {
    let started = *health.inner.started.get_or_init(std::time::Instant::now);
    let mut too_many = false;
    loop {
        health.inner.beat.store(started.elapsed().as_millis() as u64, Ordering::Release);
        let stuck = health.stuck_engines();
        crate::service::metrics::stuck_engines(stuck);
        let max = health.inner.max_stuck.load(Ordering::Acquire);
        if (stuck > max) != too_many {
            too_many = stuck > max;
            if too_many {
                tracing::warn!(stuck, max_stuck_engines = max, "not ready: too many stuck engines");
            } else {
                tracing::info!(stuck, max_stuck_engines = max, "ready again: stuck engines returned");
            }
        }
        tokio::time::sleep(HEARTBEAT).await;
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Listener::Unix(_, path) = &self.listener {
            let _ = std::fs::remove_file(path);
        }
    }
}

fn tls_peer(peer: SocketAddr) -> String {
    format!("{peer} (TLS)")
}

fn spawn_connection<S>(
    executor: Arc<dyn Execute>,
    stream: S,
    options: ServeOptions,
    connection: u64,
    peer: String,
    slot: Slot,
) where
    S: AsyncRead + AsyncWrite + Send + 'static,
{
    let (read, write) = tokio::io::split(stream);
    spawn_served(
        connection,
        peer,
        slot,
        server::serve_shared(executor, BufReader::new(read), write, options),
    );
}

/// Run a connection's serving as a task of its own in the connection's span, holding its
/// place until it ends.
fn spawn_served(
    connection: u64,
    peer: String,
    slot: Slot,
    served: impl std::future::Future<Output = Result<(), server::ConnectionError>> + Send + 'static,
) {
    let span = tracing::info_span!("connection", id = connection, peer);
    tokio::spawn(
        async move {
            let _slot = slot;
            tracing::info!("connection opened");
            match served.await {
                Ok(()) => tracing::info!("connection closed"),
                Err(problem) => tracing::info!(error = %problem, "connection closed"),
            }
        }
        .instrument(span),
    );
}

/// Serve a socket read and written directly (a Unix socket, TCP without TLS), its input
/// lent to an execution waiting awake for an answer (`wire::lend`); as any stream, made
/// by `back`, when that cannot be set up (out of descriptors for the copy it takes).
fn spawn_socket<S>(
    executor: Arc<dyn Execute>,
    socket: std::io::Result<OwnedFd>,
    back: impl FnOnce(OwnedFd) -> std::io::Result<S>,
    options: ServeOptions,
    connection: u64,
    peer: String,
    slot: Slot,
) where
    S: AsyncRead + AsyncWrite + Send + 'static,
{
    let socket = match socket {
        Ok(socket) => socket,
        Err(e) => {
            tracing::warn!(connection, error = %e, "connection dropped: its socket could not be taken over");
            return;
        }
    };
    match QuietStream::lend_socket(socket, options.max_frame_bytes) {
        Ok(lent) => spawn_served(connection, peer, slot, server::serve_lent(executor, lent, options)),
        Err((e, socket)) => {
            tracing::warn!(connection, error = %e, "connection served without lending its input");
            match back(socket) {
                Ok(stream) => spawn_connection(executor, stream, options, connection, peer, slot),
                Err(e) => tracing::warn!(connection, error = %e, "connection dropped"),
            }
        }
    }
}

/// Bind a Unix socket only its owner may connect to: bound under a temporary name,
/// restricted, then renamed into place, so it is never reachable with wider permissions.
fn bind_owner_only(path: &Path) -> Result<UnixListener, BindError> {
    use std::os::unix::fs::PermissionsExt;
    let staging = path.with_extension(format!("binding-{}", std::process::id()));
    let _ = std::fs::remove_file(&staging);
    let listener =
        UnixListener::bind(&staging).map_err(|e| BindError::listen(path.display().to_string(), e))?;
    std::fs::set_permissions(&staging, std::fs::Permissions::from_mode(0o600))
        .map_err(|source| BindError::Restrict { path: path.to_owned(), source })?;
    std::fs::rename(&staging, path).map_err(|source| BindError::Move { path: path.to_owned(), source })?;
    Ok(listener)
}

#[cfg(test)]
mod tests {
    use codemode_protocol::wire::ProtocolErrorKind;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    /// The configurations `bind` refuses, each told apart by its variant, with the text
    /// the command line prints.
    #[tokio::test]
    async fn bind_errors_say_their_kind() {
        let tcp = Address::Tcp("127.0.0.1:0".to_owned());
        let refused = Daemon::bind(DaemonConfig::new(tcp.clone())).await.err().unwrap();
        assert!(matches!(refused, BindError::TokenRequired), "{refused:?}");
        assert_eq!(refused.to_string(), "a TCP daemon requires a token: give --token-file");

        let small = DaemonConfig::new(tcp.clone()).token(Some("t".to_owned())).max_frame_bytes(10);
        let refused = Daemon::bind(small).await.err().unwrap();
        assert!(matches!(refused, BindError::FrameTooSmall { max_frame_bytes: 10 }), "{refused:?}");
        assert_eq!(
            refused.to_string(),
            "the maximum frame of 10 bytes is below the least a daemon serves with, 1024 bytes"
        );

        // A port out of range: refused before any lookup.
        let bad = Address::Tcp("127.0.0.1:99999".to_owned());
        let refused = Daemon::bind(DaemonConfig::new(bad).token(Some("t".to_owned()))).await.err().unwrap();
        assert!(matches!(&refused, BindError::Listen { address, .. } if address == "127.0.0.1:99999"));
        assert!(refused.to_string().starts_with("cannot listen on 127.0.0.1:99999: "), "{refused}");
    }

    /// A port another daemon holds is `AddressInUse`, not any other failure to listen.
    #[tokio::test]
    async fn a_port_bound_twice_is_address_in_use() {
        let config = |address: Address| DaemonConfig::new(address).token(Some("t".to_owned()));
        let first = Daemon::bind(config(Address::Tcp("127.0.0.1:0".to_owned()))).await.unwrap();
        let Address::Tcp(bound) = first.address().clone() else { unreachable!() };
        let refused = Daemon::bind(config(Address::Tcp(bound.clone()))).await.err().unwrap();
        assert!(
            matches!(&refused, BindError::AddressInUse { address, .. } if *address == bound),
            "{refused:?}"
        );
        let source = std::error::Error::source(&refused).and_then(|e| e.downcast_ref::<std::io::Error>());
        assert_eq!(source.map(std::io::Error::kind), Some(std::io::ErrorKind::AddrInUse));
        assert!(refused.to_string().starts_with(&format!("cannot listen on {bound}: ")), "{refused}");
    }

    #[test]
    fn an_address_without_its_scheme_is_refused_by_its_text() {
        let refused = "/run/codemode.sock".parse::<Address>().unwrap_err();
        assert_eq!(refused, ParseAddressError { text: "/run/codemode.sock".to_owned() });
        assert_eq!(
            refused.to_string(),
            "\"/run/codemode.sock\" is not an address: write unix:/path/to.sock or tcp:HOST:PORT"
        );
        assert_eq!("unix:/a.sock".parse::<Address>(), Ok(Address::Unix("/a.sock".into())));
    }

    /// A connection that does not begin with a hello ends with the refusal's kind and text,
    /// the same the client reads in the error frame.
    #[tokio::test]
    async fn a_connection_refused_says_the_frame_it_sent() {
        let (client, server) = tokio::io::duplex(1 << 16);
        let (read, write) = tokio::io::split(server);
        let served = tokio::spawn(crate::wire::server::serve_with(
            crate::Executor::default(),
            BufReader::new(read),
            write,
            ServeOptions::default(),
        ));
        let (mut from_server, mut to_server) = tokio::io::split(client);
        to_server.write_all(b"{\"type\":\"ping\",\"id\":1}\n").await.unwrap();
        let ended = served.await.unwrap().unwrap_err();
        assert!(
            matches!(&ended, server::ConnectionError::Refused { kind: ProtocolErrorKind::Hello, message }
                if message == "the first message must be a hello"),
            "{ended:?}"
        );
        let mut frame = String::new();
        let _ = from_server.read_to_string(&mut frame).await;
        assert!(frame.contains("the first message must be a hello"), "{frame}");
    }
}
