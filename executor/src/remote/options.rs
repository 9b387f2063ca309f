//! `RemoteOptions`: how a `RemoteExecutor` reaches its daemons, kept to connect again.

use std::time::Duration;

use crate::service::tls::RemoteTls;

/// How long a client's connecting may take by default: the socket, TLS and the hello.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// How a [`crate::RemoteExecutor`] reaches its daemons, kept to connect again. It is
/// `#[non_exhaustive]`: start from [`RemoteOptions::default`] and set fields, or chain the
/// setters of the same names (`RemoteOptions::default().token(Some(token))`).
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct RemoteOptions {
    /// The token the hello carries (a TCP daemon requires one).
    pub token: Option<String>,
    /// TLS, for `tcp:` addresses.
    pub tls: Option<RemoteTls>,
    /// The largest frame read or written, its JSON without the newline: set it to the
    /// daemon's. Default [`crate::wire::MAX_FRAME_BYTES`].
    pub max_frame_bytes: usize,
    /// How long connecting may take (the socket, TLS and the hello). Default
    /// [`CONNECT_TIMEOUT`].
    pub connect_timeout: Duration,
    /// From version 2 on, the client pings at half this and takes a connection
    /// that heard nothing for this long for lost, so a daemon cut off without closing is
    /// found. `None` never pings. Default [`KEEPALIVE`].
    pub keepalive: Option<Duration>,
}

/// How soon a client finds a silent daemon by default.
pub const KEEPALIVE: Duration = Duration::from_secs(30);

impl Default for RemoteOptions {
    fn default() -> RemoteOptions {
        RemoteOptions {
            token: None,
            tls: None,
            max_frame_bytes: crate::wire::MAX_FRAME_BYTES,
            connect_timeout: CONNECT_TIMEOUT,
            keepalive: Some(KEEPALIVE),
        }
    }
}

crate::api::config::setters!(RemoteOptions {
    /// With this token in the hello.
    token: Option<String>,
    /// With this TLS (for `tcp:` addresses).
    tls: Option<RemoteTls>,
    /// With this largest frame.
    max_frame_bytes: usize,
    /// With this time to connect.
    connect_timeout: Duration,
    /// With this keepalive, or none.
    keepalive: Option<Duration>,
});
