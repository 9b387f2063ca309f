//! The daemon: the executor as a service on a Unix socket or TCP (token, TLS), every
//! call travelling back over the connection to the host that holds the data.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::io::{AsyncRead, AsyncWrite, BufReader};
use tokio::net::{TcpListener, UnixListener};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};

use crate::Executor;
use crate::wire::server::{ServeEvent, ServeOptions, serve_with};

/// Where a daemon listens, or a client connects: `unix:/path/to.sock` or `tcp:HOST:PORT`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Address {
    /// A Unix socket at this path.
    Unix(PathBuf),
    /// A TCP address, `HOST:PORT`.
    Tcp(String),
}

impl std::str::FromStr for Address {
    type Err = String;

    fn from_str(text: &str) -> Result<Address, String> {
        if let Some(path) = text.strip_prefix("unix:") {
            return Ok(Address::Unix(PathBuf::from(path)));
        }
        if let Some(host) = text.strip_prefix("tcp:") {
            return Ok(Address::Tcp(host.to_owned()));
        }
        Err(format!("{text:?} is not an address: write unix:/path/to.sock or tcp:HOST:PORT"))
    }
}

impl std::fmt::Display for Address {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Address::Unix(path) => write!(f, "unix:{}", path.display()),
            Address::Tcp(host) => write!(f, "tcp:{host}"),
        }
    }
}

/// The certificate and key a TCP daemon serves TLS with (PEM files).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsFiles {
    /// The certificate chain.
    pub cert: PathBuf,
    /// The private key.
    pub key: PathBuf,
}

/// How a daemon runs.
#[derive(Clone, Debug)]
pub struct DaemonConfig {
    /// Where it listens.
    pub listen: Address,
    /// The token every client's hello must carry; required on TCP.
    pub token: Option<String>,
    /// TLS for TCP; plain TCP is accepted only on a loopback address.
    pub tls: Option<TlsFiles>,
    /// Executions live at once per connection.
    pub max_executions: usize,
    /// The largest frame read.
    pub max_frame_bytes: usize,
    /// Log JSON lines instead of text lines (stderr).
    pub json_logs: bool,
}

impl DaemonConfig {
    /// Listen on `listen` with no token, no TLS and the default bounds.
    pub fn new(listen: Address) -> DaemonConfig {
        DaemonConfig {
            listen,
            token: None,
            tls: None,
            max_executions: 1024,
            max_frame_bytes: crate::wire::MAX_FRAME_BYTES,
            json_logs: false,
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
    address: Address,
}

impl Daemon {
    /// Bind the address; refuse a configuration that would expose the executor unprotected.
    pub async fn bind(config: DaemonConfig) -> Result<Daemon, String> {
        let (listener, address) = match &config.listen {
            Address::Unix(path) => {
                let listener = bind_owner_only(path)?;
                (Listener::Unix(listener, path.clone()), config.listen.clone())
            }
            Address::Tcp(host) => {
                if config.token.is_none() {
                    return Err("a TCP daemon requires a token: give --token-file".to_owned());
                }
                let tls = match &config.tls {
                    Some(files) => Some(acceptor(files)?),
                    None => None,
                };
                let listener =
                    TcpListener::bind(host).await.map_err(|e| format!("cannot listen on {host}: {e}"))?;
                let local = listener.local_addr().map_err(|e| e.to_string())?;
                if tls.is_none() && !local.ip().is_loopback() {
                    return Err(format!(
                        "plain TCP is accepted only on a loopback address, and {local} is not one: give --tls-cert and --tls-key"
                    ));
                }
                (Listener::Tcp(listener, tls), Address::Tcp(local.to_string()))
            }
        };
        Ok(Daemon { listener, config, address })
    }

    /// The address it listens on (a TCP port 0 resolved).
    pub fn address(&self) -> &Address {
        &self.address
    }

    /// Accept connections until the process ends, serving `executor` on each.
    pub async fn serve(self, executor: Executor) -> Result<(), String> {
        let connections = AtomicU64::new(0);
        let log = Arc::new(Log { json: self.config.json_logs });
        log.line("listening", &[("address", self.address.to_string())]);
        loop {
            let connection = connections.fetch_add(1, Ordering::Relaxed) + 1;
            let options = ServeOptions {
                token: self.config.token.clone(),
                max_frame_bytes: self.config.max_frame_bytes,
                max_executions: self.config.max_executions,
                on_event: Some(log.events(connection)),
            };
            match &self.listener {
                Listener::Unix(listener, _) => {
                    let (stream, _) = listener.accept().await.map_err(|e| e.to_string())?;
                    spawn_connection(
                        executor.clone(),
                        stream,
                        options,
                        log.clone(),
                        connection,
                        "unix".to_owned(),
                    );
                }
                Listener::Tcp(listener, tls) => {
                    let (stream, peer) = listener.accept().await.map_err(|e| e.to_string())?;
                    let _ = stream.set_nodelay(true);
                    match tls {
                        None => spawn_connection(
                            executor.clone(),
                            stream,
                            options,
                            log.clone(),
                            connection,
                            peer.to_string(),
                        ),
                        Some(acceptor) => {
                            let (acceptor, executor, log) = (acceptor.clone(), executor.clone(), log.clone());
                            tokio::spawn(async move {
                                match acceptor.accept(stream).await {
                                    Ok(stream) => spawn_connection(
                                        executor,
                                        stream,
                                        options,
                                        log,
                                        connection,
                                        tls_peer(peer),
                                    ),
                                    Err(e) => log.line(
                                        "refused",
                                        &[
                                            ("connection", connection.to_string()),
                                            ("reason", format!("TLS: {e}")),
                                        ],
                                    ),
                                }
                            });
                        }
                    }
                }
            }
        }
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
    executor: Executor,
    stream: S,
    options: ServeOptions,
    log: Arc<Log>,
    connection: u64,
    peer: String,
) where
    S: AsyncRead + AsyncWrite + Send + 'static,
{
    tokio::spawn(async move {
        log.line("connection opened", &[("connection", connection.to_string()), ("peer", peer)]);
        let (read, write) = tokio::io::split(stream);
        let ended = serve_with(executor, BufReader::new(read), write, options).await;
        let mut fields = vec![("connection", connection.to_string())];
        if let Err(problem) = ended {
            fields.push(("error", problem));
        }
        log.line("connection closed", &fields);
    });
}

/// Bind a Unix socket only its owner may connect to: bound under a temporary name,
/// restricted, then renamed into place, so it is never reachable with wider permissions.
fn bind_owner_only(path: &Path) -> Result<UnixListener, String> {
    use std::os::unix::fs::PermissionsExt;
    let staging = path.with_extension(format!("binding-{}", std::process::id()));
    let _ = std::fs::remove_file(&staging);
    let listener =
        UnixListener::bind(&staging).map_err(|e| format!("cannot bind {}: {e}", staging.display()))?;
    std::fs::set_permissions(&staging, std::fs::Permissions::from_mode(0o600))
        .map_err(|e| format!("cannot restrict {}: {e}", staging.display()))?;
    std::fs::rename(&staging, path)
        .map_err(|e| format!("cannot move the socket to {}: {e}", path.display()))?;
    Ok(listener)
}

fn acceptor(files: &TlsFiles) -> Result<TlsAcceptor, String> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&files.cert)
        .and_then(|certs| certs.collect())
        .map_err(|e| format!("cannot read the certificate {}: {e}", files.cert.display()))?;
    let key = PrivateKeyDer::from_pem_file(&files.key)
        .map_err(|e| format!("cannot read the private key {}: {e}", files.key.display()))?;
    let config =
        rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .map_err(|e| format!("the certificate and key do not make a TLS configuration: {e}"))?;
    Ok(TlsAcceptor::from(Arc::new(config)))
}

/// One line per connection and per execution, to stderr.
struct Log {
    json: bool,
}

impl Log {
    fn line(&self, event: &str, fields: &[(&str, String)]) {
        if self.json {
            let mut object = serde_json::Map::new();
            object.insert("event".to_owned(), event.into());
            for (key, value) in fields {
                object.insert((*key).to_owned(), value.clone().into());
            }
            eprintln!("{}", serde_json::Value::Object(object));
        } else {
            let rest: Vec<String> = fields.iter().map(|(k, v)| format!("{k}={v}")).collect();
            eprintln!("codemode serve: {event} {}", rest.join(" "));
        }
    }

    fn events(self: &Arc<Log>, connection: u64) -> Arc<dyn Fn(ServeEvent) + Send + Sync> {
        let log = self.clone();
        Arc::new(move |event| match event {
            ServeEvent::Started { execution } => log.line(
                "execution started",
                &[("connection", connection.to_string()), ("execution", execution.to_string())],
            ),
            ServeEvent::Ended { execution, duration, outcome } => log.line(
                "execution ended",
                &[
                    ("connection", connection.to_string()),
                    ("execution", execution.to_string()),
                    ("duration_ms", format!("{:.1}", duration.as_secs_f64() * 1000.0)),
                    ("outcome", outcome.to_owned()),
                ],
            ),
        })
    }
}
