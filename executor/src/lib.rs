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

mod budget;
mod config;
pub mod confine;
pub mod daemon;
mod engine;
mod execute;
mod executor;
mod host;
#[cfg(feature = "mcp")]
pub mod mcp;
pub mod metrics;
mod outbound;
mod pool;
mod remote;
mod request;
mod runtime;
mod serve_config;
pub mod tls;
pub mod toolbox;
mod watch;
mod watchdog;
pub mod wire;

pub use codemode_protocol::{Outcome, ProviderDescriptor, Value};
pub use config::{
    DEFAULT_ANSWER_SPIN, EngineKind, ExecutorConfig, Isolation, LimitError, Limits, ParseEngineError,
    WorkerCommand,
};
pub use confine::Confinement;
pub use execute::{Execute, ExecuteFuture};
pub use executor::{Executor, NO_TOKIO_RUNTIME, RETAIN_NEEDS_IN_PROCESS, RetainedExecution};
pub use outbound::{Outbound, OutboundFuture, OutboundRequest, OutboundResponse};
pub use remote::{EndpointStatus, Endpoints, RemoteExecutor};
pub use request::Request;
pub use serve_config::{
    ConfigError, ConnectionsSection, ExecutorSection, IsolationKind, LimitsSection, LogFormat, LogLevel,
    ServeConfig,
};
pub use toolbox::{CallContext, ExecutionId, Provider, Toolbox};
pub use watch::{
    ARGUMENTS_PREVIEW_BYTES, ConsoleLevel, EVENT_QUEUE, Event, FETCH_PROVIDER, TEXT_PREVIEW_BYTES,
};

/// The examples of `docs/tools.md` and `docs/network.md`, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../docs/tools.md")]
#[doc = include_str!("../../docs/network.md")]
#[doc = include_str!("../../docs/daemon.md")]
#[doc = include_str!("../../docs/watching.md")]
#[doc = include_str!("../../README.md")]
pub struct Guides;

/// The examples of `docs/mcp.md`, compiled as doctests (they need live servers: not run).
#[cfg(all(doctest, feature = "mcp"))]
#[doc = include_str!("../../docs/mcp.md")]
pub struct McpGuide;
