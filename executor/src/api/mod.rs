//! The host API: what a host names to run programs (`Request`, `ExecutorConfig` and its
//! `Limits`, `Toolbox`, `Outbound`, the watch's `Event`s) and `Execute`, the one contract
//! every executor keeps. Types and traits only; what runs them is elsewhere.

pub(crate) mod approval;
pub(crate) mod clock;
pub(crate) mod config;
pub(crate) mod execute;
pub(crate) mod outbound;
pub(crate) mod request;
pub mod toolbox;
pub(crate) mod watch;
