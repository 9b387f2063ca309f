//! One daemon's address and how a session with it is opened: the stream (a Unix socket,
//! TCP, TLS), the token, and the version said in the hello, falling back to version 1
//! for an older daemon. The session itself (reader, writer, keepalive) is the wire's one
//! client, `wire::client`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use codemode_protocol::wire::{Hello, OLDEST_PROTOCOL_VERSION, PROTOCOL_VERSION, ProtocolErrorKind};
use tokio::io::{AsyncRead, AsyncWrite};

use super::ConnectError;
use crate::service::tls::Connector;
use crate::wire::address::Address;
use crate::wire::client::{HelloError, MAX_QUEUED_BYTES, Session, SessionOptions};
use crate::wire::framing::QuietStream;

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
    Version(ConnectError),
    Other(ConnectError),
}

impl Target {
    pub(super) fn new(
        address: Address,
        token: Option<String>,
        tls: Option<Connector>,
        options: &super::RemoteOptions,
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

    /// A new session, its hello answered. A daemon older than this client refuses the
    /// newest version's hello; the client then says the oldest, once, and remembers.
    pub(super) async fn open(&self) -> Result<Arc<Session>, ConnectError> {
        let version = self.version.load(Ordering::Relaxed);
        match self.open_as(version).await {
            Ok(session) => Ok(session),
            Err(OpenError::Version(_)) if version > OLDEST_PROTOCOL_VERSION => {
                self.version.store(OLDEST_PROTOCOL_VERSION, Ordering::Relaxed);
                self.open_as(OLDEST_PROTOCOL_VERSION).await.map_err(|e| match e {
                    OpenError::Version(problem) | OpenError::Other(problem) => problem,
                })
            }
            Err(OpenError::Version(problem) | OpenError::Other(problem)) => Err(problem),
        }
    }

    async fn open_as(&self, version: u32) -> Result<Arc<Session>, OpenError> {
        let connecting = async {
            match &self.address {
                Address::Unix(path) => {
                    let stream = tokio::net::UnixStream::connect(path)
                        .await
                        .and_then(QuietStream::unix)
                        .map_err(|e| {
                            OpenError::Other(unreachable(format!(
                                "cannot connect to {}: {e}",
                                path.display()
                            )))
                        })?;
                    self.start(stream, version).await
                }
                Address::Tcp(host) => {
                    let stream = tokio::net::TcpStream::connect(host).await.map_err(|e| {
                        OpenError::Other(unreachable(format!("cannot connect to {host}: {e}")))
                    })?;
                    let _ = stream.set_nodelay(true);
                    match &self.tls {
                        None => self.start(stream, version).await,
                        Some(connector) => {
                            let stream = connector.connect(stream).await.map_err(|e| {
                                OpenError::Other(unreachable(format!("TLS with {host} failed: {e}")))
                            })?;
                            self.start(stream, version).await
                        }
                    }
                }
            }
        };
        tokio::time::timeout(self.connect_timeout, connecting).await.unwrap_or_else(|_| {
            Err(OpenError::Other(unreachable(format!(
                "no answer from the daemon at {} within {} ms",
                self.address,
                self.connect_timeout.as_millis()
            ))))
        })
    }

    async fn start<S>(&self, stream: S, version: u32) -> Result<Arc<Session>, OpenError>
    where
        S: AsyncRead + AsyncWrite + Send + 'static,
    {
        let (read, write) = tokio::io::split(stream);
        let hello = Hello { token: self.token.clone(), ..Hello::version(version) };
        let options = SessionOptions {
            max_frame_bytes: self.max_frame_bytes,
            max_queued_bytes: MAX_QUEUED_BYTES,
            keepalive: self.keepalive,
        };
        Session::start(read, write, hello, options).await.map_err(|problem| match problem {
            HelloError::Refused { kind, message } => {
                let refused = ConnectError::Refused { kind, message };
                if kind == ProtocolErrorKind::Hello {
                    OpenError::Version(refused)
                } else {
                    OpenError::Other(refused)
                }
            }
            HelloError::Write(problem) => {
                OpenError::Other(unreachable(format!("the hello failed: {problem}")))
            }
            HelloError::Closed | HelloError::Unexpected(_) => {
                OpenError::Other(unreachable("the daemon closed the connection without a hello".to_owned()))
            }
            HelloError::Frame(problem) => OpenError::Other(unreachable(problem.to_string())),
            // The connect timeout bounds the whole of it; a session never says this itself.
            HelloError::Silent => {
                OpenError::Other(unreachable("the daemon did not answer the hello".to_owned()))
            }
        })
    }
}

fn unreachable(text: String) -> ConnectError {
    ConnectError::Unreachable(text)
}
