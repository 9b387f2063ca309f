//! TLS for the daemon and its client (rustls on ring), behind the cargo feature `tls`.
//!
//! Without the feature the same names exist with no value: a configuration asking for TLS
//! is refused with [`TLS_NOT_BUILT`] at bind or connect, and the rest of the code needs no
//! `cfg` of its own.

use std::path::PathBuf;

/// The certificate and key a TCP daemon serves TLS with (PEM files). Made with
/// [`TlsFiles::new`] (it is `#[non_exhaustive]`: client certificates may come).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct TlsFiles {
    /// The certificate chain.
    pub cert: PathBuf,
    /// The private key.
    pub key: PathBuf,
}

impl TlsFiles {
    /// The certificate chain `cert` and the private key `key`, both PEM.
    pub fn new(cert: impl Into<PathBuf>, key: impl Into<PathBuf>) -> TlsFiles {
        TlsFiles { cert: cert.into(), key: key.into() }
    }
}

/// The daemon's TLS as the client verifies it. Made with [`RemoteTls::new`] (it is
/// `#[non_exhaustive]`: a client certificate may come).
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct RemoteTls {
    /// The CA the daemon's certificate must chain to (PEM).
    pub ca: PathBuf,
    /// The name the certificate must carry.
    pub server_name: String,
}

impl RemoteTls {
    /// Trust the CA in the PEM file `ca`, and require `server_name` on the certificate.
    pub fn new(ca: impl Into<PathBuf>, server_name: impl Into<String>) -> RemoteTls {
        RemoteTls { ca: ca.into(), server_name: server_name.into() }
    }
}

/// What binding or connecting with TLS says when the feature is not built in.
pub const TLS_NOT_BUILT: &str =
    "TLS is not built in: enable the `tls` feature of codemode-executor (the codemode command has it)";

/// Why a TLS configuration could not be made from its files. The variants are the same
/// in every build; without the `tls` feature only [`TlsError::NotBuilt`] occurs.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TlsError {
    /// The `tls` feature is not built in: [`TLS_NOT_BUILT`].
    #[error("{}", TLS_NOT_BUILT)]
    NotBuilt,
    /// The certificate chain could not be read.
    #[error("cannot read the certificate {}: {source}", path.display())]
    Certificate {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The private key could not be read.
    #[error("cannot read the private key {}: {source}", path.display())]
    PrivateKey {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The certificate and key do not make a server configuration (a key of another
    /// certificate, say).
    #[error("the certificate and key do not make a TLS configuration: {0}")]
    Mismatch(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The CA could not be read.
    #[error("cannot read the CA {}: {source}", path.display())]
    Ca {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The server name is not a DNS name or an IP address.
    #[error("{name:?}: {source}")]
    ServerName {
        /// The name given.
        name: String,
        /// Why.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// rustls refused the configuration in its own words (a CA certificate it cannot
    /// take, no protocol version in common with the crypto provider).
    #[error("{0}")]
    Rustls(#[source] Box<dyn std::error::Error + Send + Sync>),
}

#[cfg(feature = "tls")]
mod rustls_on_ring {
    use std::io;
    use std::sync::Arc;

    use tokio::net::TcpStream;
    use tokio_rustls::rustls;
    use tokio_rustls::rustls::pki_types::pem::PemObject;
    use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};

    use super::{RemoteTls, TlsError, TlsFiles};

    /// A daemon's TLS: the certificate and key, ready to accept.
    #[derive(Clone)]
    pub(crate) struct Acceptor(tokio_rustls::TlsAcceptor);

    impl Acceptor {
        pub(crate) fn new(files: &TlsFiles) -> Result<Acceptor, TlsError> {
            let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&files.cert)
                .and_then(|certs| certs.collect())
                .map_err(|e| TlsError::Certificate { path: files.cert.clone(), source: e.into() })?;
            let key = PrivateKeyDer::from_pem_file(&files.key)
                .map_err(|e| TlsError::PrivateKey { path: files.key.clone(), source: e.into() })?;
            let config = rustls::ServerConfig::builder_with_provider(Arc::new(
                rustls::crypto::ring::default_provider(),
            ))
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::Rustls(e.into()))?
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .map_err(|e| TlsError::Mismatch(e.into()))?;
            Ok(Acceptor(tokio_rustls::TlsAcceptor::from(Arc::new(config))))
        }

        pub(crate) async fn accept(
            &self,
            stream: TcpStream,
        ) -> io::Result<tokio_rustls::server::TlsStream<TcpStream>> {
            self.0.accept(stream).await
        }
    }

    /// A client's TLS: the CA it trusts and the name the daemon's certificate must carry.
    #[derive(Clone)]
    pub(crate) struct Connector(tokio_rustls::TlsConnector, ServerName<'static>);

    impl Connector {
        pub(crate) fn new(tls: &RemoteTls) -> Result<Connector, TlsError> {
            let mut roots = rustls::RootCertStore::empty();
            for cert in CertificateDer::pem_file_iter(&tls.ca)
                .map_err(|e| TlsError::Ca { path: tls.ca.clone(), source: e.into() })?
            {
                roots
                    .add(cert.map_err(|e| TlsError::Rustls(e.into()))?)
                    .map_err(|e| TlsError::Rustls(e.into()))?;
            }
            let config = rustls::ClientConfig::builder_with_provider(Arc::new(
                rustls::crypto::ring::default_provider(),
            ))
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::Rustls(e.into()))?
            .with_root_certificates(roots)
            .with_no_client_auth();
            let name = ServerName::try_from(tls.server_name.clone())
                .map_err(|e| TlsError::ServerName { name: tls.server_name.clone(), source: e.into() })?;
            Ok(Connector(tokio_rustls::TlsConnector::from(Arc::new(config)), name))
        }

        pub(crate) async fn connect(
            &self,
            stream: TcpStream,
        ) -> io::Result<tokio_rustls::client::TlsStream<TcpStream>> {
            self.0.connect(self.1.clone(), stream).await
        }
    }
}

#[cfg(feature = "tls")]
pub(crate) use rustls_on_ring::{Acceptor, Connector};

#[cfg(not(feature = "tls"))]
pub(crate) use not_built::{Acceptor, Connector};

#[cfg(not(feature = "tls"))]
mod not_built {
    use std::io;

    use tokio::net::TcpStream;

    use super::{RemoteTls, TlsError, TlsFiles};

    /// No TLS built in: there is never an acceptor.
    #[derive(Clone)]
    pub(crate) enum Acceptor {}

    impl Acceptor {
        pub(crate) fn new(_: &TlsFiles) -> Result<Acceptor, TlsError> {
            Err(TlsError::NotBuilt)
        }

        pub(crate) async fn accept(&self, _: TcpStream) -> io::Result<TcpStream> {
            match *self {}
        }
    }

    /// No TLS built in: there is never a connector.
    #[derive(Clone)]
    pub(crate) enum Connector {}

    impl Connector {
        pub(crate) fn new(_: &RemoteTls) -> Result<Connector, TlsError> {
            Err(TlsError::NotBuilt)
        }

        pub(crate) async fn connect(&self, _: TcpStream) -> io::Result<TcpStream> {
            match *self {}
        }
    }
}
