//! TLS for the daemon and its client (rustls on ring), behind the cargo feature `tls`.
//!
//! Without the feature the same names exist with no value: a configuration asking for TLS
//! is refused with [`TLS_NOT_BUILT`] at bind or connect, and the rest of the code needs no
//! `cfg` of its own.

use std::path::PathBuf;

/// The certificate and key a TCP daemon serves TLS with (PEM files).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsFiles {
    /// The certificate chain.
    pub cert: PathBuf,
    /// The private key.
    pub key: PathBuf,
}

/// The daemon's TLS as the client verifies it.
#[derive(Clone, Debug)]
pub struct RemoteTls {
    /// The CA the daemon's certificate must chain to (PEM).
    pub ca: PathBuf,
    /// The name the certificate must carry.
    pub server_name: String,
}

/// What binding or connecting with TLS says when the feature is not built in.
pub const TLS_NOT_BUILT: &str =
    "TLS is not built in: enable the `tls` feature of codemode-executor (the codemode command has it)";

#[cfg(feature = "tls")]
mod rustls_on_ring {
    use std::io;
    use std::sync::Arc;

    use tokio::net::TcpStream;
    use tokio_rustls::rustls;
    use tokio_rustls::rustls::pki_types::pem::PemObject;
    use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};

    use super::{RemoteTls, TlsFiles};

    /// A daemon's TLS: the certificate and key, ready to accept.
    #[derive(Clone)]
    pub(crate) struct Acceptor(tokio_rustls::TlsAcceptor);

    impl Acceptor {
        pub(crate) fn new(files: &TlsFiles) -> Result<Acceptor, String> {
            let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&files.cert)
                .and_then(|certs| certs.collect())
                .map_err(|e| format!("cannot read the certificate {}: {e}", files.cert.display()))?;
            let key = PrivateKeyDer::from_pem_file(&files.key)
                .map_err(|e| format!("cannot read the private key {}: {e}", files.key.display()))?;
            let config = rustls::ServerConfig::builder_with_provider(Arc::new(
                rustls::crypto::ring::default_provider(),
            ))
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .map_err(|e| format!("the certificate and key do not make a TLS configuration: {e}"))?;
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
        pub(crate) fn new(tls: &RemoteTls) -> Result<Connector, String> {
            let mut roots = rustls::RootCertStore::empty();
            for cert in CertificateDer::pem_file_iter(&tls.ca)
                .map_err(|e| format!("cannot read the CA {}: {e}", tls.ca.display()))?
            {
                roots.add(cert.map_err(|e| e.to_string())?).map_err(|e| e.to_string())?;
            }
            let config = rustls::ClientConfig::builder_with_provider(Arc::new(
                rustls::crypto::ring::default_provider(),
            ))
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_root_certificates(roots)
            .with_no_client_auth();
            let name = ServerName::try_from(tls.server_name.clone())
                .map_err(|e| format!("{:?}: {e}", tls.server_name))?;
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

    use super::TLS_NOT_BUILT;
    use super::{RemoteTls, TlsFiles};

    /// No TLS built in: there is never an acceptor.
    #[derive(Clone)]
    pub(crate) enum Acceptor {}

    impl Acceptor {
        pub(crate) fn new(_: &TlsFiles) -> Result<Acceptor, String> {
            Err(TLS_NOT_BUILT.to_owned())
        }

        pub(crate) async fn accept(&self, _: TcpStream) -> io::Result<TcpStream> {
            match *self {}
        }
    }

    /// No TLS built in: there is never a connector.
    #[derive(Clone)]
    pub(crate) enum Connector {}

    impl Connector {
        pub(crate) fn new(_: &RemoteTls) -> Result<Connector, String> {
            Err(TLS_NOT_BUILT.to_owned())
        }

        pub(crate) async fn connect(&self, _: TcpStream) -> io::Result<TcpStream> {
            match *self {}
        }
    }
}
