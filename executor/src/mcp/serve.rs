//! Code mode served to any MCP client: one tool, `execute`, whose description carries the declarations.
//!
//! [`CodeModeServer`] is an rmcp [`ServerHandler`]. `tools/list` answers the toolbox's
//! [`code_tool`](Toolbox::code_tool); `tools/call` runs the program in a fresh engine with
//! the toolbox's providers and answers its outcome as a `CallToolResult`:
//!
//! - `structuredContent` is the outcome in the codec's form, as `codemode run` prints it:
//!   `{"result": v, "logs": [...]}`, or `{"error": text, "kind": kind, "location": {"line":
//!   l, "column": c}, "logs": [...]}` (`location` when known).
//!   MCP before 2026-07-28 (what clients negotiate today) requires an object there, and
//!   wrapping every result, objects too, keeps one shape for every result and every
//!   protocol version: a program's own `{"result": 1}` cannot pass for a wrapped `1`, an
//!   undefined result has no `result` key, and a failure carries its `kind`, by which a
//!   client decides (a program can throw any text).
//! - `content` is what a model reads: a text with the result's JSON (`undefined` for an
//!   undefined result) or the error's text with its place in the program when known
//!   (`boom (at line 3, column 14)`), then, when the program logged, one text with the log
//!   lines joined by newlines.
//! - `isError` is true for every error outcome (thrown, timeout, memory, syntax, ...).
//!
//! Arguments that do not fit `{"code": string}` are a tool execution error of kind
//! `invalid`, so the model reads what to fix (MCP 2025-11-25, SEP-1303); an unknown tool
//! name is a JSON-RPC error (`-32602`). Each call is its own execution on its own engine:
//! sessions share the executor's idle threads and the providers, never an engine. At most
//! [`ServeLimits::max_executions`] run at once; a call the client cancels (or whose
//! session closes) ends its execution.

use std::sync::Arc;
use std::time::Duration;

use codemode_protocol::{Outcome, OutcomeKind};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation, JsonObject,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};
use serde_json::Value as Json;

use crate::{Execute, Limits, Request, Toolbox};

/// The path the streamable HTTP endpoint answers on.
pub const HTTP_PATH: &str = "/mcp";

/// What the server tells a client in `initialize`.
const INSTRUCTIONS: &str = "One tool, `execute`: it runs a JavaScript program in a sandbox. The providers \
     declared in its description are the program's only way to reach data; write one program that calls \
     them, computes, and returns the answer.";

/// The limits of a server: each execution's, over the executor's defaults, and how many
/// run at once. It is `#[non_exhaustive]`: start from [`ServeLimits::default`] and set
/// fields, or chain the setters of the same names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ServeLimits {
    /// The wall-clock limit of one execution.
    pub timeout: Option<Duration>,
    /// The engine's memory limit of one execution, in bytes.
    pub memory_limit_bytes: Option<usize>,
    /// Executions running at once, over every session; a call beyond it is refused
    /// (kind `invalid`, [`TOO_MANY_EXECUTIONS`]) rather than queued behind the others.
    pub max_executions: usize,
}

impl Default for ServeLimits {
    fn default() -> ServeLimits {
        ServeLimits { timeout: None, memory_limit_bytes: None, max_executions: DEFAULT_MAX_EXECUTIONS }
    }
}

crate::api::config::setters!(ServeLimits {
    /// With this wall-clock limit for each execution.
    timeout: Option<Duration>,
    /// With this memory limit for each execution.
    memory_limit_bytes: Option<usize>,
    /// With this bound on executions at once.
    max_executions: usize,
});

/// Why a [`CodeModeServer`] could not be made, or stopped serving.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum McpServeError {
    /// A limit of [`ServeLimits`] is out of the executor's bounds.
    #[error("{0}")]
    Limit(#[source] crate::LimitError),
    /// [`ServeLimits::max_executions`] is 0.
    #[error("the server's maximum of executions at once must be at least 1")]
    NoExecutions,
    /// The client's MCP initialization failed (stdio). Boxed: rmcp's error is large.
    #[error("the MCP client's initialization failed: {0}")]
    Initialize(#[source] Box<rmcp::service::ServerInitializeError>),
    /// The session's task ended abnormally (stdio).
    #[error("the MCP session ended abnormally: {0}")]
    Session(#[source] tokio::task::JoinError),
    /// The listener's address could not be read (HTTP).
    #[error("cannot read the bound address: {0}")]
    LocalAddress(#[source] std::io::Error),
    /// The HTTP server failed.
    #[error("the HTTP server on {address} failed: {source}")]
    Http {
        /// The address served.
        address: std::net::SocketAddr,
        /// The system's error.
        #[source]
        source: std::io::Error,
    },
}

/// [`ServeLimits::max_executions`] unless set: each execution is a thread and an engine
/// of its own, and a client must not be able to start them without end.
pub const DEFAULT_MAX_EXECUTIONS: usize = 64;

/// A call beyond [`ServeLimits::max_executions`]. Hole: the limit.
pub const TOO_MANY_EXECUTIONS: &str =
    "This server is running its maximum of {limit} executions at once. Wait for one to end, then call again.";

/// Code mode as an MCP server: one tool, `execute`, running programs against a toolbox.
/// Cheap to clone; a clone serves another session with the same executor and toolbox.
#[derive(Clone)]
pub struct CodeModeServer {
    inner: Arc<Inner>,
}

struct Inner {
    executor: Arc<dyn Execute>,
    toolbox: Toolbox,
    tool: Tool,
    limits: ServeLimits,
    /// One permit per execution running.
    running: Arc<tokio::sync::Semaphore>,
}

impl CodeModeServer {
    /// A server running each call on `executor` with `toolbox`'s providers. `Err` says which
    /// limit is out of the executor's bounds, found now rather than at every call.
    pub fn new(
        executor: impl Execute + 'static,
        toolbox: Toolbox,
        limits: ServeLimits,
    ) -> Result<CodeModeServer, McpServeError> {
        let profile = executor.profile();
        let effective = Limits {
            timeout: limits.timeout.unwrap_or(profile.limits.timeout),
            memory_limit_bytes: limits.memory_limit_bytes.unwrap_or(profile.limits.memory_limit_bytes),
            ..profile.limits.clone()
        };
        effective.check(&profile.ceilings).map_err(McpServeError::Limit)?;
        let executor: Arc<dyn Execute> = Arc::new(executor);
        if limits.max_executions == 0 {
            return Err(McpServeError::NoExecutions);
        }
        let running = Arc::new(tokio::sync::Semaphore::new(
            limits.max_executions.min(tokio::sync::Semaphore::MAX_PERMITS),
        ));
        let code_tool = toolbox.code_tool();
        let schema = match code_tool.input_schema {
            Json::Object(schema) => schema,
            _ => JsonObject::new(),
        };
        let tool = Tool::new(code_tool.name, code_tool.description, schema);
        Ok(CodeModeServer { inner: Arc::new(Inner { executor, toolbox, tool, limits, running }) })
    }

    /// The one tool: the toolbox's code tool.
    pub fn tool(&self) -> &Tool {
        &self.inner.tool
    }

    /// Run one call's arguments (`{"code": string}`) as a program and answer its outcome.
    pub async fn execute(&self, arguments: Option<&JsonObject>) -> CallToolResult {
        let code = match code_argument(arguments) {
            Ok(code) => code,
            Err(text) => return call_tool_result(&Outcome::failure(OutcomeKind::Invalid, text, Vec::new())),
        };
        let Ok(_running) = self.inner.running.clone().try_acquire_owned() else {
            let text = TOO_MANY_EXECUTIONS.replace("{limit}", &self.inner.limits.max_executions.to_string());
            return call_tool_result(&Outcome::failure(OutcomeKind::Invalid, text, Vec::new()));
        };
        let mut request = Request::new(code).toolbox(&self.inner.toolbox);
        if let Some(timeout) = self.inner.limits.timeout {
            request = request.timeout(timeout);
        }
        if let Some(bytes) = self.inner.limits.memory_limit_bytes {
            request = request.memory_limit_bytes(bytes);
        }
        call_tool_result(&self.inner.executor.execute(request).await)
    }

    /// Serve one client on stdin and stdout until it closes them. Nothing else may write
    /// to stdout meanwhile: it carries the protocol.
    pub async fn serve_stdio(self) -> Result<(), McpServeError> {
        let running = rmcp::serve_server(self, rmcp::transport::io::stdio_pipes())
            .await
            .map_err(|e| McpServeError::Initialize(Box::new(e)))?;
        running.waiting().await.map(drop).map_err(McpServeError::Session)
    }

    /// Serve streamable HTTP on `listener` at [`HTTP_PATH`], each client in a session of
    /// its own, until the process ends.
    ///
    /// On a loopback address only requests whose `Host` is a loopback name are taken
    /// (rmcp's guard against DNS rebinding: a web page must not reach a local server
    /// through a name it controls). On any other address the caller has chosen to expose
    /// the server, and every `Host` is taken.
    pub async fn serve_http(self, listener: tokio::net::TcpListener) -> Result<(), McpServeError> {
        let local = listener.local_addr().map_err(McpServeError::LocalAddress)?;
        let mut config = StreamableHttpServerConfig::default();
        if !local.ip().is_loopback() {
            config = config.disable_allowed_hosts();
        }
        let service = StreamableHttpService::new(
            move || Ok(self.clone()),
            Arc::new(LocalSessionManager::default()),
            config,
        );
        let router = axum::Router::new().route_service(HTTP_PATH, service);
        axum::serve(listener, router).await.map_err(|source| McpServeError::Http { address: local, source })
    }
}

impl std::fmt::Debug for CodeModeServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CodeModeServer")
            .field("toolbox", &self.inner.toolbox)
            .field("limits", &self.inner.limits)
            .finish()
    }
}

/// The program in a call's arguments, or the text saying what to send instead.
fn code_argument(arguments: Option<&JsonObject>) -> Result<String, String> {
    let Some(arguments) = arguments else { return Err(CODE_MISSING.to_owned()) };
    if let Some(other) = arguments.keys().find(|key| *key != "code") {
        return Err(format!(
            "The tool `execute` takes one argument, `code`; `{other}` is not one of its arguments. \
             Send {{\"code\": \"async () => {{ ... }}\"}}."
        ));
    }
    match arguments.get("code") {
        None => Err(CODE_MISSING.to_owned()),
        Some(Json::String(code)) => Ok(code.clone()),
        Some(other) => Err(format!(
            "The argument `code` of the tool `execute` must be a string (the program's source), not {}.",
            json_type(other)
        )),
    }
}

const CODE_MISSING: &str = "The tool `execute` needs the argument `code`: the program's source as a \
     string, such as {\"code\": \"async () => { return 1 }\"}.";

/// A JSON value's type, as a sentence names it.
fn json_type(value: &Json) -> &'static str {
    match value {
        Json::Null => "null",
        Json::Bool(_) => "a boolean",
        Json::Number(_) => "a number",
        Json::String(_) => "a string",
        Json::Array(_) => "an array",
        Json::Object(_) => "an object",
    }
}

/// An outcome as a `CallToolResult` (the shape is in this module's documentation).
pub fn call_tool_result(outcome: &Outcome) -> CallToolResult {
    let (first, is_error) = match outcome {
        Outcome::Result { result: Some(value), .. } => {
            (serde_json::to_string(value).unwrap_or_else(|e| e.to_string()), false)
        }
        Outcome::Result { result: None, .. } => ("undefined".to_owned(), false),
        Outcome::Error { error, .. } => (outcome.error_display().unwrap_or_else(|| error.clone()), true),
    };
    let mut content = vec![ContentBlock::text(first)];
    if !outcome.logs().is_empty() {
        content.push(ContentBlock::text(outcome.logs().join("\n")));
    }
    let mut result = if is_error { CallToolResult::error(content) } else { CallToolResult::success(content) };
    // Outcomes hold JSON and the codec's binary tags only, so this cannot fail; if it
    // ever did, the text content still carries the outcome.
    result.structured_content = serde_json::to_value(outcome).ok();
    result
}

impl ServerHandler for CodeModeServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(
                Implementation::new("codemode", env!("CARGO_PKG_VERSION")).with_title("Code mode"),
            )
            .with_instructions(INSTRUCTIONS)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        Ok(ListToolsResult::with_all_items(vec![self.inner.tool.clone()]))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        if request.name != self.inner.tool.name {
            return Err(McpError::invalid_params(
                format!("Unknown tool: {:?}. This server has one tool, `execute`.", request.name),
                None,
            ));
        }
        // A cancelled request (or a closed session) drops the execution, which stops its engine.
        tokio::select! {
            result = self.execute(request.arguments.as_ref()) => Ok(result.into()),
            () = context.ct.cancelled() => Err(McpError::invalid_request("The request was cancelled.", None)),
        }
    }
}
