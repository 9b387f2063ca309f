//! `RemoteExecutor`: the host side of the daemon arrangement, with the same execute API
//! as the in-process executor, over one daemon or a fleet of them. The dispatch stays in
//! this process; only the three strings of each call and its answer cross a connection.
//!
//! Each execute goes to one daemon, chosen by the power of two choices over executions
//! in flight, skipping a daemon that said it drains or failed to connect a moment ago.
//! It runs again on another daemon exactly when that is safe: the daemon refused it
//! (draining, or full), could not be reached, or the connection failed before any call
//! or fetch of it reached this host. One that dispatched a call never runs twice: it ends
//! with [`texts::DAEMON_CONNECTION_LOST`]. A retained execution stays on its daemon.
//!
//! Outcomes arrive with the kind the daemon gave them. The ones this side makes: a lost
//! connection ends the execute `lost` ([`texts::DAEMON_CONNECTION_LOST`]); no daemon
//! reachable ends it `lost` before it ran ([`texts::DAEMON_UNREACHABLE`]); refused by
//! every daemon (draining or full), `lost` with the refusal's text; a daemon silent past the run's
//! timeout plus a grace ends it `timeout`; a request longer than the frame bound ends
//! `invalid` unsent; and an outcome frame longer than the bound ends its own execution
//! `resultTooLarge`, the connection's other executions going on.
//!
//! A connection lost is made again by the next execute that picks its daemon. Executes
//! pending when a daemon closed an idle connection never started there, so they are
//! sent again once on a new connection.

mod connection;
mod options;

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use crate::api::clock::{Deadline, within};
use codemode_protocol::wire::{CPU_AND_CALL_LIMITS_VERSION, ClientMessage, ExecuteRequest};
use codemode_protocol::{Outcome, OutcomeKind, texts};

use connection::Target;

use crate::api::config::Limits;
use crate::api::execute::{Execute, ExecuteFuture, RetainFuture, RetainedExecution};
use crate::api::request::Request;
use crate::api::watch::{self, Logs, WireEvents};
use crate::service::tls::Connector;
use crate::service::tls::RemoteTls;
use crate::sync::lock;
use crate::wire::address::{Address, ParseAddressError};
use crate::wire::client::admit::Admission;
use crate::wire::client::{Ended, Handlers, ReleaseOnDrop, Session};
use crate::wire::framing::encode_frame;

/// How long past a run's own timeout the client waits before it gives the run up.
const ANSWER_GRACE: Duration = Duration::from_secs(2);

/// The default timeout the client assumes when a request sets none (the daemon's default).
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a daemon that could not be reached takes no new work while others can.
const UNREACHABLE_PAUSE: Duration = Duration::from_secs(1);

pub use self::options::{CONNECT_TIMEOUT, KEEPALIVE, RemoteOptions};

/// Why a [`RemoteExecutor`] could not connect; its Display says what to change.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConnectError {
    /// An address is neither `unix:` nor `tcp:`.
    #[error(transparent)]
    Address(#[from] ParseAddressError),
    /// TLS was asked for a Unix socket.
    #[error("TLS is for tcp:HOST:PORT addresses")]
    TlsOnUnix,
    /// The TLS files do not make a configuration, or TLS is not built in.
    #[error("{0}")]
    Tls(String),
    /// A fleet of no address.
    #[error("no daemon to connect to: give at least one address")]
    NoAddress,
    /// A name of [`Endpoints::Dns`] did not resolve.
    #[error("cannot resolve {name}: {reason}")]
    Resolve {
        /// The name.
        name: String,
        /// What the resolver said.
        reason: String,
    },
    /// A name of [`Endpoints::Dns`] resolved to no address.
    #[error("{name} resolves to no address")]
    ResolvesToNothing {
        /// The name.
        name: String,
    },
    /// The daemon answered the hello with a refusal (a wrong or missing token, its maximum
    /// of connections, a version it does not speak).
    #[error("the daemon refused the connection: {message}")]
    Refused {
        /// The kind of the daemon's error frame.
        kind: codemode_protocol::wire::ProtocolErrorKind,
        /// Its message.
        message: String,
    },
    /// The daemon could not be reached, or broke off before its hello.
    #[error("{0}")]
    Unreachable(String),
    /// No daemon of a fleet could be reached: why, for each.
    #[error("no daemon could be reached: {}", join(.0))]
    NoneReachable(Vec<ConnectError>),
}

fn join(problems: &[ConnectError]) -> String {
    problems.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ")
}

/// Where a client's daemons are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Endpoints {
    /// These addresses, each `unix:/path/to.sock` or `tcp:HOST:PORT`.
    Static(Vec<String>),
    /// Every address `name` resolves to, at `port`, resolved again every `every`. A
    /// Kubernetes headless Service resolves to every ready pod. With TLS, every daemon's
    /// certificate must carry the configured server name.
    Dns {
        /// The name to resolve.
        name: String,
        /// The daemons' port.
        port: u16,
        /// How often to resolve it again.
        every: Duration,
    },
}

/// One daemon of the fleet, as [`RemoteExecutor::endpoints`] reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EndpointStatus {
    /// Its address.
    pub address: String,
    /// Executions this client has in flight there.
    pub in_flight: usize,
    /// Executes this client has sent there, refused ones included.
    pub sent: u64,
    /// It said it drains.
    pub draining: bool,
    /// A connection is open.
    pub connected: bool,
}

/// One daemon: its connection (made again when lost) and the work sent to it.
struct Remote {
    target: Target,
    current: Mutex<Option<Arc<Session>>>,
    /// Held while connecting; the last failure, so executes that waited share it.
    reconnecting: tokio::sync::Mutex<Option<(Instant, ConnectError)>>,
    next_execution: AtomicU64,
    in_flight: AtomicUsize,
    sent: AtomicU64,
    /// When connecting last failed.
    unreachable_at: Mutex<Option<Instant>>,
    /// No longer among the names' addresses: takes no new work.
    removed: AtomicBool,
}

impl Remote {
    fn new(target: Target, connection: Option<Arc<Session>>) -> Arc<Remote> {
        Arc::new(Remote {
            target,
            current: Mutex::new(connection),
            reconnecting: tokio::sync::Mutex::new(None),
            next_execution: AtomicU64::new(1),
            in_flight: AtomicUsize::new(0),
            sent: AtomicU64::new(0),
            unreachable_at: Mutex::new(None),
            removed: AtomicBool::new(false),
        })
    }

    /// Whether new work should go here: not drained away, not unreachable a moment ago.
    fn takes_work(&self) -> bool {
        let draining = lock(&self.current).as_ref().is_some_and(|c| c.is_draining());
        let paused = lock(&self.unreachable_at).is_some_and(|at| at.elapsed() < UNREACHABLE_PAUSE);
        !draining && !paused && !self.removed.load(Ordering::Acquire)
    }

    /// The open connection, made again if it was lost or drained. Executes waiting while
    /// another makes it share that attempt, its failure included.
    async fn connection(&self) -> Result<Arc<Session>, ConnectError> {
        let usable = |c: &Option<Arc<Session>>| c.as_ref().filter(|c| c.is_usable()).cloned();
        if let Some(connection) = usable(&lock(&self.current)) {
            return Ok(connection);
        }
        let asked = Instant::now();
        let mut failure = self.reconnecting.lock().await;
        if let Some(connection) = usable(&lock(&self.current)) {
            return Ok(connection);
        }
        if let Some((at, problem)) = &*failure
            && *at >= asked
        {
            return Err(problem.clone());
        }
        match self.target.open().await {
            Ok(fresh) => {
                *lock(&self.current) = Some(fresh.clone());
                *lock(&self.unreachable_at) = None;
                *failure = None;
                Ok(fresh)
            }
            Err(problem) => {
                *lock(&self.unreachable_at) = Some(Instant::now());
                *failure = Some((Instant::now(), problem.clone()));
                Err(problem)
            }
        }
    }

    fn status(&self) -> EndpointStatus {
        let current = lock(&self.current);
        EndpointStatus {
            address: self.target.address.to_string(),
            in_flight: self.in_flight.load(Ordering::Acquire),
            sent: self.sent.load(Ordering::Acquire),
            draining: current.as_ref().is_some_and(|c| c.is_draining()),
            connected: current.as_ref().is_some_and(|c| !c.is_closed()),
        }
    }
}

impl Drop for Remote {
    fn drop(&mut self) {
        if let Some(connection) = lock(&self.current).as_ref() {
            connection.shut();
        }
    }
}

/// Counts an execute in flight on a daemon while it lives.
struct InFlight(Arc<Remote>);

impl InFlight {
    fn new(remote: &Arc<Remote>) -> InFlight {
        remote.in_flight.fetch_add(1, Ordering::AcqRel);
        InFlight(remote.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The daemons a client sends work to.
struct Fleet {
    remotes: Mutex<Vec<Arc<Remote>>>,
    token: Option<String>,
    tls: Option<Connector>,
    options: RemoteOptions,
}

impl Fleet {
    fn target(&self, address: Address) -> Target {
        Target::new(address, self.token.clone(), self.tls.clone(), &self.options)
    }

    /// A daemon for new work, not one in `tried`: two at random among those taking work,
    /// the one with fewer executions in flight. When none takes work, any not tried.
    fn pick(&self, tried: &[Arc<Remote>]) -> Option<Arc<Remote>> {
        let remotes = lock(&self.remotes);
        let untried = |r: &&Arc<Remote>| !tried.iter().any(|t| Arc::ptr_eq(t, r));
        let mut candidates: Vec<&Arc<Remote>> =
            remotes.iter().filter(untried).filter(|r| r.takes_work()).collect();
        if candidates.is_empty() {
            candidates =
                remotes.iter().filter(untried).filter(|r| !r.removed.load(Ordering::Acquire)).collect();
        }
        let chosen = match candidates.len() {
            0 => return None,
            1 => candidates[0],
            n => {
                let first = fastrand::usize(..n);
                let second = (first + 1 + fastrand::usize(..n - 1)) % n;
                let load = |r: &Arc<Remote>| r.in_flight.load(Ordering::Acquire);
                if load(candidates[second]) < load(candidates[first]) {
                    candidates[second]
                } else {
                    candidates[first]
                }
            }
        };
        Some(chosen.clone())
    }

    /// The set after a new resolution: new addresses join, vanished ones take no new
    /// work and leave once idle.
    fn resolved(&self, addresses: &[Address]) {
        let mut remotes = lock(&self.remotes);
        for remote in remotes.iter() {
            let present = addresses.contains(&remote.target.address);
            remote.removed.store(!present, Ordering::Release);
        }
        remotes.retain(|r| !r.removed.load(Ordering::Acquire) || r.in_flight.load(Ordering::Acquire) > 0);
        for address in addresses {
            if !remotes.iter().any(|r| r.target.address == *address) {
                remotes.push(Remote::new(self.target(address.clone()), None));
            }
        }
    }
}

/// An executor in another process or on other machines: one daemon, or a fleet of them
/// that it balances over and fails over between. Each daemon is reached over one
/// connection that carries many executions at once, made again when it is lost.
#[derive(Clone)]
pub struct RemoteExecutor {
    fleet: Arc<Fleet>,
}

impl RemoteExecutor {
    /// Connect to a daemon at `unix:/path` or `tcp:HOST:PORT` (plain TCP: loopback only),
    /// presenting `token` in the hello.
    pub async fn connect(address: &str, token: Option<&str>) -> Result<RemoteExecutor, ConnectError> {
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
    ) -> Result<RemoteExecutor, ConnectError> {
        let tls = RemoteTls { ca: ca.to_owned(), server_name: server_name.to_owned() };
        let options =
            RemoteOptions { token: token.map(str::to_owned), tls: Some(tls), ..RemoteOptions::default() };
        RemoteExecutor::connect_with(address, options).await
    }

    /// Connect to one daemon as `options` say; the same settings serve every later
    /// connection. Fails if this first connection does.
    pub async fn connect_with(address: &str, options: RemoteOptions) -> Result<RemoteExecutor, ConnectError> {
        let address = address.parse::<Address>()?;
        let fleet = fleet(options, std::slice::from_ref(&address))?;
        let target = fleet.target(address);
        let connection = target.open().await?;
        *lock(&fleet.remotes) = vec![Remote::new(target, Some(connection))];
        Ok(RemoteExecutor { fleet: Arc::new(fleet) })
    }

    /// Connect to a fleet of daemons. Fails only if no daemon can be reached (or a name
    /// does not resolve); the others are tried again as work comes.
    pub async fn connect_fleet(
        endpoints: Endpoints,
        options: RemoteOptions,
    ) -> Result<RemoteExecutor, ConnectError> {
        let (addresses, resolver) = match &endpoints {
            Endpoints::Static(list) => {
                let addresses = list.iter().map(|a| a.parse::<Address>()).collect::<Result<Vec<_>, _>>()?;
                (addresses, None)
            }
            Endpoints::Dns { name, port, every } => {
                (resolve(name, *port).await?, Some((name.clone(), *port, *every)))
            }
        };
        if addresses.is_empty() {
            return Err(ConnectError::NoAddress);
        }
        let fleet = Arc::new(fleet(options, &addresses)?);
        fleet.resolved(&addresses);
        let remotes = lock(&fleet.remotes).clone();
        let mut connecting = tokio::task::JoinSet::new();
        for remote in &remotes {
            let remote = remote.clone();
            connecting.spawn(async move { remote.connection().await.err() });
        }
        let problems: Vec<ConnectError> = connecting.join_all().await.into_iter().flatten().collect();
        if problems.len() == remotes.len() {
            return Err(ConnectError::NoneReachable(problems));
        }
        if let Some((name, port, every)) = resolver {
            tokio::spawn(resolve_again(Arc::downgrade(&fleet), name, port, every));
        }
        Ok(RemoteExecutor { fleet })
    }

    /// Each daemon, with this client's executions in flight there.
    pub fn endpoints(&self) -> Vec<EndpointStatus> {
        lock(&self.fleet.remotes).iter().map(|r| r.status()).collect()
    }

    /// Run one program on a daemon. Calls come back here to the request's dispatch.
    /// Never panics; a lost connection is an error outcome, and the next execute connects
    /// again. Dropping the future cancels the execution on the daemon.
    pub async fn execute(&self, request: Request) -> Outcome {
        self.run(request, false).await.0
    }

    /// Run one program and keep its engine on the daemon after the run ends
    /// (`retainHandles`), as [`crate::Executor::execute_retained`] does; the engine goes
    /// when the handle is released or dropped. It never moves to another daemon.
    pub async fn execute_retained(&self, request: Request) -> (Outcome, RetainedExecution) {
        let (outcome, on) = self.run(request, true).await;
        let release = on.map(|(connection, execution)| ReleaseOnDrop { session: connection, execution });
        (outcome, RetainedExecution::holding(release))
    }

    /// The outcome, and the connection and id the run had there.
    async fn run(&self, request: Request, retain: bool) -> (Outcome, Option<(Arc<Session>, u64)>) {
        // The toolbox's execution ends with this run, however it ends (even dropped).
        let (request, _end) = request.open();
        // Calls are watched as they reach this host; the logs as the daemon sends them
        // (version 3), or with the outcome.
        let (request, delivery) = request.watch_host_side();
        let run = self.run_watched(request, retain);
        let (outcome, on, _) = watch::delivered(run, delivery, |(outcome, _, logs)| (outcome, *logs)).await;
        (outcome, on)
    }

    async fn run_watched(
        &self,
        request: Request,
        retain: bool,
    ) -> (Outcome, Option<(Arc<Session>, u64)>, Logs) {
        let mut wire = request.to_wire();
        wire.retain_handles = retain;
        let max = self.fleet.options.max_frame_bytes;
        let timeout = request.timeout.unwrap_or(DEFAULT_TIMEOUT);
        // Paused, like the daemon's own, while a call is held for a person's decision.
        let deadline =
            Deadline::new(std::time::Instant::now(), timeout + ANSWER_GRACE, request.clock.clone());
        // Daemons this execute may not go to again, and what the last one said.
        let mut tried: Vec<Arc<Remote>> = Vec::new();
        let mut failure = None;
        let mut again = true;
        loop {
            let Some(remote) = self.fleet.pick(&tried) else {
                let text = texts::DAEMON_UNREACHABLE.fill(&["no daemon is known"]);
                let outcome =
                    failure.unwrap_or_else(|| Outcome::failure(OutcomeKind::Lost, text, Vec::new()));
                return (outcome, None, Logs::Live);
            };
            let _busy = InFlight::new(&remote);
            let connection = match remote.connection().await {
                Ok(connection) => connection,
                Err(problem) => {
                    let text = texts::DAEMON_UNREACHABLE.fill(&[&problem.to_string()]);
                    failure = Some(Outcome::failure(OutcomeKind::Lost, text, Vec::new()));
                    tried.push(remote);
                    continue;
                }
            };
            if let Some(refusal) = unknown_limit(&wire, connection.version()) {
                return (Outcome::failure(OutcomeKind::Invalid, refusal, Vec::new()), None, Logs::Live);
            }
            let execution = remote.next_execution.fetch_add(1, Ordering::Relaxed);
            // Only a daemon of version 3 or newer knows `events`; an older one refuses it.
            let events = request.watcher.clone().filter(|_| connection.version() >= 3).map(WireEvents::new);
            wire.events = events.is_some();
            let logs = if wire.events { Logs::Live } else { Logs::WithOutcome };
            let message = ClientMessage::Execute { execution, request: wire.clone() };
            let Some(frame) = encode_frame(&message, max) else {
                let text = texts::REQUEST_TOO_LARGE.fill(&[&max.to_string()]);
                return (Outcome::failure(OutcomeKind::Invalid, text, Vec::new()), None, Logs::Live);
            };
            let handlers = Handlers {
                dispatch: request.dispatch.clone(),
                outbound: request.outbound.clone(),
                admission: admission(&request),
                events,
                clock: request.clock.clone(),
            };
            let mut submitted = connection.submit(execution, frame, handlers);
            let ended = if submitted.sent {
                remote.sent.fetch_add(1, Ordering::AcqRel);
                within(&deadline, &mut submitted.ended).await.ok_or(())
            } else {
                Ok(Ok(Ended::NotStarted))
            };
            let reached_host = submitted.reached_host();
            let outcome = match ended {
                Ok(Ok(Ended::Outcome(outcome))) => outcome,
                Ok(Ok(Ended::NotStarted)) if again => {
                    again = false;
                    continue;
                }
                Ok(Ok(Ended::Refused(text))) => {
                    failure = Some(Outcome::failure(OutcomeKind::Lost, text, Vec::new()));
                    tried.push(remote);
                    continue;
                }
                // Nothing of it reached this host: it runs elsewhere, or fails as lost.
                Ok(Ok(Ended::Lost | Ended::NotStarted) | Err(_)) if !reached_host => {
                    failure = Some(connection_lost());
                    tried.push(remote);
                    continue;
                }
                Ok(Ok(Ended::Lost | Ended::NotStarted) | Err(_)) => connection_lost(),
                Err(_) => Outcome::failure(
                    OutcomeKind::Timeout,
                    texts::TIMEOUT.fill(&[&timeout.as_millis().to_string()]),
                    Vec::new(),
                ),
            };
            drop(submitted);
            return (outcome, Some((connection, execution)), logs);
        }
    }
}

impl Execute for RemoteExecutor {
    fn execute(&self, request: Request) -> ExecuteFuture<'_> {
        Box::pin(RemoteExecutor::execute(self, request))
    }

    fn execute_retained(&self, request: Request) -> RetainFuture<'_> {
        Box::pin(async move { Ok(RemoteExecutor::execute_retained(self, request).await) })
    }
}

fn fleet(options: RemoteOptions, addresses: &[Address]) -> Result<Fleet, ConnectError> {
    let tls = match &options.tls {
        None => None,
        Some(_) if addresses.iter().any(|a| matches!(a, Address::Unix(_))) => {
            return Err(ConnectError::TlsOnUnix);
        }
        Some(tls) => Some(Connector::new(tls).map_err(|e| ConnectError::Tls(e.to_string()))?),
    };
    Ok(Fleet { remotes: Mutex::new(Vec::new()), token: options.token.clone(), tls, options })
}

/// Every address of `name` at `port`, as `tcp:` addresses.
async fn resolve(name: &str, port: u16) -> Result<Vec<Address>, ConnectError> {
    let found = tokio::net::lookup_host((name, port))
        .await
        .map_err(|e| ConnectError::Resolve { name: name.to_owned(), reason: e.to_string() })?;
    let mut addresses: Vec<Address> = found.map(|a| Address::Tcp(a.to_string())).collect();
    addresses.dedup();
    if addresses.is_empty() {
        return Err(ConnectError::ResolvesToNothing { name: name.to_owned() });
    }
    Ok(addresses)
}

/// Resolves `name` again every `every` for as long as the client lives; a failed
/// resolution keeps the set it had.
async fn resolve_again(fleet: Weak<Fleet>, name: String, port: u16, every: Duration) {
    loop {
        tokio::time::sleep(every).await;
        let resolved = resolve(&name, port).await;
        let Some(fleet) = fleet.upgrade() else { return };
        match resolved {
            Ok(addresses) => fleet.resolved(&addresses),
            Err(problem) => tracing::warn!(error = %problem, "resolving the daemons again failed"),
        }
    }
}

/// The bounds a daemon's calls for `request` are held to: what the request set, or else
/// the most any daemon allows by default (the daemon's own defaults are not known here),
/// so that a daemon sending calls without end cannot grow the host without end.
fn admission(request: &Request) -> Admission {
    let limits = request.limits_over(&Limits::default_ceilings());
    Admission::new(limits.max_payload_bytes, limits.max_calls_in_flight)
}

/// The outcome of an execute whose connection to the daemon is gone.
fn connection_lost() -> Outcome {
    Outcome::failure(OutcomeKind::Lost, texts::DAEMON_CONNECTION_LOST, Vec::new())
}

/// The refusal of a request carrying a limit a daemon of `version` does not know: sent,
/// the daemon would refuse the field; the text says which limit and what to do.
fn unknown_limit(wire: &ExecuteRequest, version: u32) -> Option<String> {
    if version >= CPU_AND_CALL_LIMITS_VERSION {
        return None;
    }
    let limit = if wire.cpu_time_limit_ms.is_some() {
        "cpuTimeLimitMs"
    } else if wire.max_calls.is_some() {
        "maxCalls"
    } else {
        return None;
    };
    let (version, needed) = (version.to_string(), CPU_AND_CALL_LIMITS_VERSION.to_string());
    Some(texts::LIMIT_NEEDS_VERSION.fill(&[&version, limit, &needed]))
}
