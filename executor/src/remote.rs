//! `RemoteExecutor`: the host side of the daemon arrangement, with the same execute API
//! as the in-process executor. The dispatch stays in this process; only the three
//! strings of each call and its answer cross the connection.
//!
//! Outcomes arrive with the kind the daemon gave them. The two this side makes: a lost
//! connection ends every pending execute `internal`, and a daemon silent past the run's
//! timeout plus a grace ends it `timeout`.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use codemode_protocol::wire::{ClientMessage, Hello, ServerMessage};
use codemode_protocol::{Dispatch, Outcome, OutcomeKind, texts};
use tokio::io::{AsyncRead, AsyncWrite, BufReader};
use tokio::sync::{mpsc, oneshot};
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName};

use crate::daemon::Address;
use crate::host::{answer_in_order, dispatch_panicked, fetch_panicked};
use crate::request::Request;
use crate::wire::{MAX_FRAME_BYTES, read_frame, write_message};

/// How long past a run's own timeout the client waits before it gives the run up.
const ANSWER_GRACE: Duration = Duration::from_secs(2);

/// The default timeout the client assumes when a request sets none (the daemon's default).
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

struct Pending {
    dispatch: Option<Arc<dyn Dispatch>>,
    outbound: Option<Arc<dyn crate::Outbound>>,
    done: oneshot::Sender<Outcome>,
}

struct Connection {
    out: mpsc::UnboundedSender<ClientMessage>,
    pending: Mutex<HashMap<u64, Pending>>,
    next_execution: AtomicU64,
    closed: AtomicBool,
}

impl Connection {
    fn pending(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Pending>> {
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The connection is gone: every pending execute resolves with the lost text.
    fn close(&self) {
        self.closed.store(true, Ordering::Release);
        for (_, pending) in self.pending().drain() {
            let _ = pending.done.send(connection_lost());
        }
    }
}

/// An executor in another process or on another machine, reached over one connection
/// that carries many executions at once.
#[derive(Clone)]
pub struct RemoteExecutor {
    connection: Arc<Connection>,
}

impl RemoteExecutor {
    /// Connect to a daemon at `unix:/path` or `tcp:HOST:PORT` (plain TCP: loopback only),
    /// presenting `token` in the hello.
    pub async fn connect(address: &str, token: Option<&str>) -> Result<RemoteExecutor, String> {
        match address.parse::<Address>()? {
            Address::Unix(path) => {
                let stream = tokio::net::UnixStream::connect(&path)
                    .await
                    .map_err(|e| format!("cannot connect to {}: {e}", path.display()))?;
                start(stream, token).await
            }
            Address::Tcp(host) => {
                let stream = tokio::net::TcpStream::connect(&host)
                    .await
                    .map_err(|e| format!("cannot connect to {host}: {e}"))?;
                let _ = stream.set_nodelay(true);
                start(stream, token).await
            }
        }
    }

    /// Connect to a TLS daemon at `tcp:HOST:PORT`, verifying it against the CA in `ca`
    /// (PEM) under the name `server_name`.
    pub async fn connect_tls(
        address: &str,
        token: Option<&str>,
        ca: &Path,
        server_name: &str,
    ) -> Result<RemoteExecutor, String> {
        let Address::Tcp(host) = address.parse::<Address>()? else {
            return Err("TLS is for tcp:HOST:PORT addresses".to_owned());
        };
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_file_iter(ca)
            .map_err(|e| format!("cannot read the CA {}: {e}", ca.display()))?
        {
            roots.add(cert.map_err(|e| e.to_string())?).map_err(|e| e.to_string())?;
        }
        let config =
            rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
                .with_safe_default_protocol_versions()
                .map_err(|e| e.to_string())?
                .with_root_certificates(roots)
                .with_no_client_auth();
        let name =
            ServerName::try_from(server_name.to_owned()).map_err(|e| format!("{server_name:?}: {e}"))?;
        let stream = tokio::net::TcpStream::connect(&host)
            .await
            .map_err(|e| format!("cannot connect to {host}: {e}"))?;
        let stream = tokio_rustls::TlsConnector::from(Arc::new(config))
            .connect(name, stream)
            .await
            .map_err(|e| format!("TLS with {host} failed: {e}"))?;
        start(stream, token).await
    }

    /// Run one program on the daemon. Calls come back here to the request's dispatch.
    /// Never panics; a lost connection is an error outcome. Dropping the future cancels
    /// the execution on the daemon.
    pub async fn execute(&self, request: Request) -> Outcome {
        self.run(request, false).await.0
    }

    /// Run one program and keep its engine on the daemon after the run ends
    /// (`retainHandles`), as [`crate::Executor::execute_retained`] does; the engine goes
    /// when the handle is released or dropped.
    pub async fn execute_retained(&self, request: Request) -> (Outcome, crate::RetainedExecution) {
        let (outcome, execution) = self.run(request, true).await;
        let release = ReleaseOnDrop { connection: self.connection.clone(), execution };
        (outcome, crate::RetainedExecution::remote(release))
    }

    async fn run(&self, request: Request, retain: bool) -> (Outcome, u64) {
        // The toolbox's execution ends with this run, however it ends (even dropped).
        let (request, _end) = request.open();
        let connection = &self.connection;
        let execution = connection.next_execution.fetch_add(1, Ordering::Relaxed);
        if connection.closed.load(Ordering::Acquire) {
            return (connection_lost(), execution);
        }
        let mut wire = request.to_wire();
        wire.retain_handles = retain;
        let (done, outcome) = oneshot::channel();
        let pending =
            Pending { dispatch: request.dispatch.clone(), outbound: request.outbound.clone(), done };
        connection.pending().insert(execution, pending);
        let guard = CancelOnDrop { connection: connection.clone(), execution };
        if connection.out.send(ClientMessage::Execute { execution, request: wire }).is_err() {
            connection.close();
        }
        let patience = request.timeout.unwrap_or(DEFAULT_TIMEOUT) + ANSWER_GRACE;
        let outcome = match tokio::time::timeout(patience, outcome).await {
            Ok(Ok(outcome)) => outcome,
            Ok(Err(_)) => connection_lost(),
            Err(_) => Outcome::failure(
                OutcomeKind::Timeout,
                texts::TIMEOUT.fill(&[&request.timeout.unwrap_or(DEFAULT_TIMEOUT).as_millis().to_string()]),
                Vec::new(),
            ),
        };
        drop(guard);
        (outcome, execution)
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
        let _ = self.connection.out.send(ClientMessage::Release { execution: self.execution });
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
            let _ = self.connection.out.send(ClientMessage::Cancel { execution: self.execution });
        }
    }
}

async fn start<S>(stream: S, token: Option<&str>) -> Result<RemoteExecutor, String>
where
    S: AsyncRead + AsyncWrite + Send + 'static,
{
    let (read, mut write) = tokio::io::split(stream);
    let mut read = BufReader::new(read);
    let hello = Hello { token: token.map(str::to_owned), ..Hello::current() };
    write_message(&mut write, &ClientMessage::Hello(hello))
        .await
        .map_err(|e| format!("the hello failed: {e}"))?;
    match read_frame::<_, ServerMessage>(&mut read, MAX_FRAME_BYTES).await {
        Ok(Some(ServerMessage::Hello(_))) => {}
        Ok(Some(ServerMessage::Error(problem))) => {
            return Err(format!("the daemon refused the connection: {}", problem.message));
        }
        Ok(_) => return Err("the daemon closed the connection without a hello".to_owned()),
        Err(problem) => return Err(problem.to_string()),
    }
    let (out, mut outgoing) = mpsc::unbounded_channel::<ClientMessage>();
    let connection = Arc::new(Connection {
        out,
        pending: Mutex::new(HashMap::new()),
        next_execution: AtomicU64::new(1),
        closed: AtomicBool::new(false),
    });
    let writer_connection = connection.clone();
    tokio::spawn(async move {
        while let Some(message) = outgoing.recv().await {
            if write_message(&mut write, &message).await.is_err() {
                break;
            }
        }
        writer_connection.close();
    });
    let reader_connection = connection.clone();
    tokio::spawn(async move {
        let connection = reader_connection;
        while let Ok(Some(message)) = read_frame::<_, ServerMessage>(&mut read, MAX_FRAME_BYTES).await {
            match message {
                ServerMessage::Call { execution, call, tool_call } => {
                    let dispatch = connection.pending().get(&execution).and_then(|p| p.dispatch.clone());
                    let Some(dispatch) = dispatch else { continue };
                    let out = connection.out.clone();
                    answer_in_order(
                        Box::pin(async move { dispatch.dispatch(tool_call).await }),
                        dispatch_panicked,
                        move |answer| drop(out.send(ClientMessage::Answer { execution, call, answer })),
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
                            let answer = crate::outbound::to_fetch_answer(answer);
                            drop(out.send(ClientMessage::FetchAnswer { execution, call, answer }));
                        },
                    );
                }
                ServerMessage::Outcome { execution, outcome } => {
                    if let Some(pending) = connection.pending().remove(&execution) {
                        let _ = pending.done.send(outcome);
                    }
                }
                ServerMessage::Error(_) => break,
                ServerMessage::Hello(_) => {}
            }
        }
        connection.close();
    });
    Ok(RemoteExecutor { connection })
}
