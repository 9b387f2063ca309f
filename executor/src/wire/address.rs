//! `Address`: where a daemon listens, or a client connects (`unix:/path/to.sock`,
//! `tcp:HOST:PORT`); the server side and the client side of the wire both read it.

use std::path::PathBuf;

/// Where a daemon listens, or a client connects: `unix:/path/to.sock` or `tcp:HOST:PORT`.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Address {
    /// A Unix socket at this path.
    Unix(PathBuf),
    /// A TCP address, `HOST:PORT`.
    Tcp(String),
}

impl std::str::FromStr for Address {
    type Err = ParseAddressError;

    fn from_str(text: &str) -> Result<Address, ParseAddressError> {
        if let Some(path) = text.strip_prefix("unix:") {
            return Ok(Address::Unix(PathBuf::from(path)));
        }
        if let Some(host) = text.strip_prefix("tcp:") {
            return Ok(Address::Tcp(host.to_owned()));
        }
        Err(ParseAddressError { text: text.to_owned() })
    }
}

/// A text that is not an [`Address`]: neither `unix:` nor `tcp:` begins it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{text:?} is not an address: write unix:/path/to.sock or tcp:HOST:PORT")]
#[non_exhaustive]
pub struct ParseAddressError {
    /// The text given.
    pub text: String,
}

impl std::fmt::Display for Address {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Address::Unix(path) => write!(f, "unix:{}", path.display()),
            Address::Tcp(host) => write!(f, "tcp:{host}"),
        }
    }
}
