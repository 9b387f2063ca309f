//! codemode-executor: runs programs written by language models in a fresh sandboxed
//! engine, where the only way out is a tool call the host decides on.
//!
//! ```
//! use codemode_executor::{Executor, Request};
//! use codemode_protocol::{create_envelope_dispatch, Latch, ProviderDescriptor, ToolCall, ToolNotFoundError};
//!
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! let executor = Executor::default();
//! let latch = Latch::open();
//! let _closed = latch.close_on_drop();
//! let outcome = executor
//!     .execute(
//!         Request::new("async () => (await store.listUsers()).length")
//!             .provider(ProviderDescriptor::new("store", ["listUsers"]))
//!             .dispatch(create_envelope_dispatch(latch.clone(), |call: ToolCall| async move {
//!                 match call.tool.as_str() {
//!                     "listUsers" => Ok(serde_json::json!([{ "id": "ada" }])),
//!                     other => Err(ToolNotFoundError::new(other)),
//!                 }
//!             })),
//!     )
//!     .await;
//! assert_eq!(outcome.to_json_string(), r#"{"result":1,"logs":[]}"#);
//! # });
//! ```
//!
//! The guides in `docs/` (tools, network, failures, performance) say the rest.

// What is kept by hand, locked in: no unwrap or expect outside tests (an `#[expect]` with
// its reason where one is right), and every unsafe block says why it is sound.
#![warn(clippy::unwrap_used, clippy::expect_used, clippy::undocumented_unsafe_blocks)]
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

// The host API: the types a host names, and `Execute`, the contract every executor keeps.
mod api;
// Runs a caller resumes, over any `Execute`.
pub mod cells;
// The core: the in-process executor, over the runtime and its engines.
mod budget;
mod engine;
mod in_process;
mod runtime;
mod sync;
// The other executors: process isolation and daemons, over the wire's one client.
mod process;
mod remote;
pub mod wire;
// The service: the daemon, its config, TLS and metrics; confinement of workers; MCP.
pub mod confine;
#[cfg(feature = "mcp")]
pub mod mcp;
mod service;

pub use api::toolbox;
pub use service::{daemon, metrics, tls};

pub use api::approval::{
    Approval, ApprovalPolicy, Approvals, Ask, DEFAULT_APPROVAL_TIMEOUT, Decision, DecisionError, HeldCall,
    HeldId, PatternError, ToolPattern, Verdict,
};
pub use api::config::{
    DEFAULT_ANSWER_SPIN, EngineKind, ExecutorConfig, LimitError, Limits, ParseEngineError, WorkerCommand,
};
pub use api::execute::{
    Execute, ExecuteFuture, Profile, RETAIN_NEEDS_IN_PROCESS, RetainFuture, RetainRefused, RetainedExecution,
};
pub use api::outbound::{Outbound, OutboundFuture, OutboundRequest, OutboundResponse};
pub use api::request::Request;
pub use api::toolbox::{CallContext, ExecutionId, Provider, Toolbox, discovery_provider};
pub use api::watch::{
    ARGUMENTS_PREVIEW_BYTES, ConsoleLevel, Decided, EVENT_QUEUE, Event, FETCH_PROVIDER, TEXT_PREVIEW_BYTES,
};
pub use codemode_protocol::{Outcome, ProviderDescriptor, Value};
pub use confine::Confinement;
pub use in_process::executor::{Executor, NO_TOKIO_RUNTIME};
pub use in_process::stuck::STUCK_AFTER;
pub use process::ProcessExecutor;
pub use remote::{ConnectError, EndpointStatus, Endpoints, RemoteExecutor, RemoteOptions};
pub use service::serve_config::{
    ConfigError, ConnectionsSection, ExecutorSection, IN_PROCESS_V8_WARNING, IsolationKind, LimitsSection,
    LogFormat, LogLevel, ServeConfig,
};

/// The examples of `docs/tools.md` and `docs/network.md`, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../docs/tools.md")]
#[doc = include_str!("../../docs/network.md")]
#[doc = include_str!("../../docs/daemon.md")]
#[doc = include_str!("../../docs/watching.md")]
#[doc = include_str!("../../docs/approvals.md")]
#[doc = include_str!("../../README.md")]
pub struct Guides;

/// The examples of `docs/mcp.md`, compiled as doctests (they need live servers: not run).
#[cfg(all(doctest, feature = "mcp"))]
#[doc = include_str!("../../docs/mcp.md")]
pub struct McpGuide;
