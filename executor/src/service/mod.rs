//! The service: the daemon (`codemode serve`) with its config file, TLS and metrics.
//! It serves any `Execute` over the wire's server.

pub mod daemon;
pub mod metrics;
pub(crate) mod serve_config;
pub mod tls;
