//! Code mode served to any MCP client: the tool `execute`, whose description carries the
//! declarations, and `wait` and `terminate` for a run that yielded.
//!
//! [`CodeModeServer`] is an rmcp [`ServerHandler`]. `tools/list` answers the toolbox's
//! [`code_tool`](Toolbox::code_tool) taking `yieldAfterMs` beside `code`
//! ([`CodeTool::with_yield`](codemode_protocol::tools::CodeTool::with_yield)), then
//! `wait` and `terminate`; `tools/call` of `execute` runs the program in a fresh engine
//! with the toolbox's providers and answers its outcome as a `CallToolResult`:
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
//! With `yieldAfterMs`, a run still going after that many milliseconds answers (not as an
//! error) `structuredContent` `{"status": "running", "cell": ID, "logs": [...], "calls": n,
//! "timers": n}` with the lines written so far, and goes on in a cell ([`crate::cells`]);
//! `wait` (`{"cell": ID, "yieldAfterMs"?: n}`, default [`DEFAULT_WAIT_YIELD`]) answers the
//! same running shape with the next lines, or the outcome as above with the lines not yet
//! handed out, so the logs of every answer together are the run's logs, each once;
//! `terminate` (`{"cell": ID}`) ends it and answers its cancelled outcome. A cell belongs to
//! the session that started it: an id of another session, or one whose outcome was handed
//! out, ended or never existed, is an error of kind `invalid` (`texts::CELL_UNKNOWN`).
//! A run that yields holds its place among [`ServeLimits::max_executions`] until it ends;
//! [`ServeLimits::max_cells`] and [`ServeLimits::cell_time_to_live`] bound the cells kept.
//!
//! Arguments that do not fit `{"code": string}` are a tool execution error of kind
//! `invalid`, so the model reads what to fix (MCP 2025-11-25, SEP-1303); an unknown tool
//! name is a JSON-RPC error (`-32602`). Each call is its own execution on its own engine:
//! sessions share the executor's idle threads and the providers, never an engine. At most
//! [`ServeLimits::max_executions`] run at once; a call the client cancels (or whose
//! session closes) ends its execution, unless it was a `wait`: then only the wait ends.
//!
//! With an approval policy ([`CodeModeServer::with_approvals`]), and for the tools the
//! toolbox marks as needing approval, a call the policy asks about is held (the run's
//! wall clock paused) and asked of the person behind the client whose `execute` started
//! the run, by elicitation ([`crate::mcp::elicit`]); a client that cannot elicit gets
//! the call denied ([`texts::APPROVAL_NO_ELICITATION`]).

use std::sync::Arc;
use std::time::Duration;

use codemode_protocol::discovery::{
    CatalogIndex, SearchRequest, describe_tool, search_tool, wants_discovery,
};
use codemode_protocol::tools::{terminate_tool, wait_tool};
use codemode_protocol::{Outcome, OutcomeKind, texts};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation, JsonObject,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::{Peer, RequestContext};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};
use serde_json::Value as Json;

use crate::cells::{Cell, CellLimits, Cells, Waited};
use crate::mcp::elicit;
use crate::{ApprovalPolicy, Execute, ExecuteFuture, Limits, Profile, Request, Toolbox};

/// The path the streamable HTTP endpoint answers on.
pub const HTTP_PATH: &str = "/mcp";

/// What the server tells a client in `initialize`.
const INSTRUCTIONS: &str = "The tool `execute` runs a JavaScript program in a sandbox. The providers \
     declared in its description are the program's only way to reach data; write one program that calls \
     them, computes, and returns the answer. With `yieldAfterMs` a long program answers while it runs; \
     `wait` and `terminate` go on with it.";

/// How long `wait` waits when it is given no `yieldAfterMs`.
pub const DEFAULT_WAIT_YIELD: Duration = Duration::from_secs(10);

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
    /// The CPU time one execution's engine thread may spend (waiting not counted).
    pub cpu_time_limit: Option<Duration>,
    /// The calls (tool calls and fetches together) one execution may make.
    pub max_calls: Option<usize>,
    /// Executions running at once, over every session; a call beyond it is refused
    /// (kind `invalid`, [`TOO_MANY_EXECUTIONS`]) rather than queued behind the others.
    /// A run that yielded (`yieldAfterMs`) holds its place until it ends.
    pub max_executions: usize,
    /// A run that yielded and that nobody waits on for this long is ended
    /// ([`CellLimits::time_to_live`]).
    pub cell_time_to_live: Duration,
    /// Runs that yielded kept at once, over every session; one more ends the one waited
    /// on least recently ([`CellLimits::max_live`]).
    pub max_cells: usize,
}

impl Default for ServeLimits {
    fn default() -> ServeLimits {
        let cells = CellLimits::default();
        ServeLimits {
            timeout: None,
            memory_limit_bytes: None,
            cpu_time_limit: None,
            max_calls: None,
            max_executions: DEFAULT_MAX_EXECUTIONS,
            cell_time_to_live: cells.time_to_live,
            max_cells: cells.max_live,
        }
    }
}

crate::api::config::setters!(ServeLimits {
    /// With this wall-clock limit for each execution.
    timeout: Option<Duration>,
    /// With this memory limit for each execution.
    memory_limit_bytes: Option<usize>,
    /// With this CPU time budget for each execution.
    cpu_time_limit: Option<Duration>,
    /// With this bound on the calls of each execution.
    max_calls: Option<usize>,
    /// With this bound on executions at once.
    max_executions: usize,
    /// With this time to live of a run that yielded.
    cell_time_to_live: Duration,
    /// With this bound on runs that yielded kept at once.
    max_cells: usize,
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
    /// [`ServeLimits::max_cells`] is 0.
    #[error("the server's maximum of runs that yielded kept at once must be at least 1")]
    NoCells,
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

/// Code mode as an MCP server: `execute` running programs against a toolbox, and `wait`
/// and `terminate` for the runs that yielded. Cheap to clone; a clone is the same session
/// (over streamable HTTP each session gets one of its own, [`CodeModeServer::serve_http`]).
#[derive(Clone)]
pub struct CodeModeServer {
    inner: Arc<Inner>,
    /// The session this handler serves: the owner of the cells it starts.
    session: Arc<str>,
    /// Which calls a person decides ([`CodeModeServer::with_approvals`]); `None`: only
    /// the toolbox's marked tools, each asked with the default approval timeout.
    approval: Option<ApprovalPolicy>,
}

struct Inner {
    /// The executor behind the bound on executions at once.
    executor: Arc<Admitted>,
    cells: Cells,
    toolbox: Toolbox,
    tools: Vec<Tool>,
    limits: ServeLimits,
    /// With discovery: the index `search` and `describe` answer from.
    discovery: Option<CatalogIndex>,
    /// Whether the toolbox marks tools as needing approval: their calls are always asked.
    marked: bool,
}

/// Whether `execute` carries every declaration or the summary layer with `search` and
/// `describe` beside it (docs/discovery.md).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Discovery {
    /// On above a size ([`codemode_protocol::discovery::wants_discovery`]: more than 100
    /// tools, or declarations over 40,000 bytes).
    #[default]
    Auto,
    /// Always.
    On,
    /// Never: every declaration in `execute`'s description.
    Off,
}

/// An executor whose runs each hold a permit while they run (in a cell or not), and are
/// refused ([`TOO_MANY_EXECUTIONS`]) when none is left.
struct Admitted {
    inner: Arc<dyn Execute>,
    running: Arc<tokio::sync::Semaphore>,
    max: usize,
}

impl Execute for Admitted {
    fn execute(&self, request: Request) -> ExecuteFuture<'_> {
        let permit = self.running.clone().try_acquire_owned();
        Box::pin(async move {
            let Ok(_running) = permit else {
                let text = TOO_MANY_EXECUTIONS.replace("{limit}", &self.max.to_string());
                return Outcome::failure(OutcomeKind::Invalid, text, Vec::new());
            };
            self.inner.execute(request).await
        })
    }

    fn profile(&self) -> Profile {
        self.inner.profile()
    }

    fn live_engines(&self) -> Option<usize> {
        self.inner.live_engines()
    }

    fn stuck_engines(&self) -> Option<usize> {
        self.inner.stuck_engines()
    }
}

/// A key no other session of this process has.
fn new_session() -> Arc<str> {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    Arc::from(format!("session {}", NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)))
}

impl CodeModeServer {
    /// A server running each call on `executor` with `toolbox`'s providers. `Err` says which
    /// limit is out of the executor's bounds, found now rather than at every call.
    pub fn new(
        executor: impl Execute + 'static,
        toolbox: Toolbox,
        limits: ServeLimits,
    ) -> Result<CodeModeServer, McpServeError> {
        CodeModeServer::with_discovery(executor, toolbox, limits, Discovery::Auto)
    }

    /// As [`CodeModeServer::new`], saying whether `execute` carries the summary layer and
    /// `search` and `describe` are listed ([`Discovery`]).
    pub fn with_discovery(
        executor: impl Execute + 'static,
        toolbox: Toolbox,
        limits: ServeLimits,
        discovery: Discovery,
    ) -> Result<CodeModeServer, McpServeError> {
        let profile = executor.profile();
        let effective = Limits {
            timeout: limits.timeout.unwrap_or(profile.limits.timeout),
            memory_limit_bytes: limits.memory_limit_bytes.unwrap_or(profile.limits.memory_limit_bytes),
            cpu_time_limit: limits.cpu_time_limit.or(profile.limits.cpu_time_limit),
            max_calls: limits.max_calls.or(profile.limits.max_calls),
            ..profile.limits.clone()
        };
        effective.check(&profile.ceilings).map_err(McpServeError::Limit)?;
        if limits.max_executions == 0 {
            return Err(McpServeError::NoExecutions);
        }
        if limits.max_cells == 0 {
            return Err(McpServeError::NoCells);
        }
        let running = Arc::new(tokio::sync::Semaphore::new(
            limits.max_executions.min(tokio::sync::Semaphore::MAX_PERMITS),
        ));
        let executor = Arc::new(Admitted { inner: Arc::new(executor), running, max: limits.max_executions });
        let cell_limits =
            CellLimits::default().time_to_live(limits.cell_time_to_live).max_live(limits.max_cells);
        let cells = Cells::new(executor.clone(), cell_limits);
        let on = match discovery {
            Discovery::On => true,
            Discovery::Off => false,
            Discovery::Auto => wants_discovery(toolbox.table()),
        };
        let discovery = on.then(|| CatalogIndex::new(toolbox.catalog()));
        let code_tool = match &discovery {
            Some(index) => index.code_tool(),
            None => toolbox.code_tool(),
        };
        let mut tools =
            vec![mcp_tool(code_tool.with_yield()), mcp_tool(wait_tool()), mcp_tool(terminate_tool())];
        if discovery.is_some() {
            tools.extend([mcp_tool(search_tool()), mcp_tool(describe_tool())]);
        }
        let marked = !toolbox.needing_approval().is_empty();
        let inner = Inner { executor, cells, toolbox, tools, limits, discovery, marked };
        Ok(CodeModeServer { inner: Arc::new(inner), session: new_session(), approval: None })
    }

    /// The same server holding the calls `policy` asks about (after the toolbox's marked
    /// tools, always asked) until the person behind the MCP client that started the run
    /// decides, asked by elicitation; its denials refuse calls nobody is asked about. A
    /// held call waits at most the policy's approval timeout, the run's wall clock paused
    /// meanwhile. It applies to the sessions this server value serves and makes from now on.
    pub fn with_approvals(mut self, policy: ApprovalPolicy) -> CodeModeServer {
        self.approval = Some(policy);
        self
    }

    /// The code tool: the toolbox's, taking `yieldAfterMs` beside `code`.
    pub fn tool(&self) -> &Tool {
        &self.inner.tools[0]
    }

    /// Every tool listed: `execute`, `wait`, `terminate`, and with discovery `search` and
    /// `describe`.
    pub fn tools(&self) -> &[Tool] {
        &self.inner.tools
    }

    /// The same server serving another session, whose cells are its own.
    pub fn new_session(&self) -> CodeModeServer {
        CodeModeServer { inner: self.inner.clone(), session: new_session(), approval: self.approval.clone() }
    }

    /// The request of one program, with the server's limits, and its approvals asked of
    /// the person behind `peer` (the client whose `execute` starts it).
    fn request(&self, code: String, peer: Option<Peer<RoleServer>>) -> Request {
        let mut request = Request::new(code).toolbox(&self.inner.toolbox);
        if let Some(timeout) = self.inner.limits.timeout {
            request = request.timeout(timeout);
        }
        if let Some(bytes) = self.inner.limits.memory_limit_bytes {
            request = request.memory_limit_bytes(bytes);
        }
        if let Some(limit) = self.inner.limits.cpu_time_limit {
            request = request.cpu_time_limit(limit);
        }
        if let Some(calls) = self.inner.limits.max_calls {
            request = request.max_calls(calls);
        }
        if self.approval.is_some() || self.inner.marked {
            let policy = self.approval.clone().unwrap_or_default();
            let approvals = elicit::approvals(peer, policy.approval_timeout());
            request = request.approvals(policy, &approvals);
        }
        request
    }

    /// Run one call's arguments (`{"code": string, "yieldAfterMs"?: n}`) as a program and
    /// answer its outcome, or, past `yieldAfterMs`, that it is still running. Called
    /// outside a session, nobody can be asked: a call needing approval is denied.
    pub async fn execute(&self, arguments: Option<&JsonObject>) -> CallToolResult {
        self.execute_for(arguments, None).await
    }

    /// [`CodeModeServer::execute`] for the client behind `peer`, who is asked about the
    /// run's held calls.
    async fn execute_for(
        &self,
        arguments: Option<&JsonObject>,
        peer: Option<Peer<RoleServer>>,
    ) -> CallToolResult {
        let (code, yield_after) = match code_argument(arguments) {
            Ok(found) => found,
            Err(text) => return invalid(text),
        };
        let request = self.request(code, peer);
        let Some(yield_after) = yield_after else {
            return call_tool_result(&self.inner.executor.execute(request).await);
        };
        let cell = self.inner.cells.start_owned(Some(self.session.to_string()), request);
        // A call cancelled before it answers ends its run: nobody else knows the cell.
        let mut unanswered = EndUnanswered(Some(cell.clone()));
        let answer = waited(&cell, yield_after).await;
        unanswered.0 = None;
        answer
    }

    /// `wait`: the next lines of the cell `{"cell": ID}` of this session, or its outcome.
    pub async fn wait(&self, arguments: Option<&JsonObject>) -> CallToolResult {
        let (id, yield_after) = match cell_arguments(texts::CELL_WAIT_TOOL_NAME, arguments) {
            Ok(found) => found,
            Err(text) => return invalid(text),
        };
        match self.inner.cells.find_owned(Some(&self.session), &id) {
            Ok(cell) => waited(&cell, yield_after.unwrap_or(DEFAULT_WAIT_YIELD)).await,
            Err(unknown) => invalid(unknown.to_string()),
        }
    }

    /// `terminate`: end the cell `{"cell": ID}` of this session and answer its outcome.
    pub async fn terminate(&self, arguments: Option<&JsonObject>) -> CallToolResult {
        let id = match cell_arguments(texts::CELL_TERMINATE_TOOL_NAME, arguments) {
            Ok((id, None)) => id,
            Ok((_, Some(_))) => {
                return invalid(not_an_argument(texts::CELL_TERMINATE_TOOL_NAME, "yieldAfterMs"));
            }
            Err(text) => return invalid(text),
        };
        let ended = match self.inner.cells.find_owned(Some(&self.session), &id) {
            Ok(cell) => cell.terminate().await,
            Err(unknown) => Err(unknown),
        };
        match ended {
            Ok(outcome) => call_tool_result(&outcome),
            Err(unknown) => invalid(unknown.to_string()),
        }
    }

    /// `search` or `describe` (`tool`), with discovery on: `structuredContent` the JSON
    /// answer, `content` its readable text; a refusal is an error of kind `invalid`.
    pub fn discover(&self, tool: &str, arguments: Option<&JsonObject>) -> Option<CallToolResult> {
        let index = self.inner.discovery.as_ref()?;
        let arguments = Json::Object(arguments.cloned().unwrap_or_default());
        let answer = if tool == texts::SEARCH_TOOL_NAME {
            serde_json::from_value::<SearchRequest>(arguments)
                .map_err(|e| {
                    format!("The arguments of `search` do not fit {{query, provider?, limit?, offset?}}: {e}")
                })
                .and_then(|request| index.search(&request).map_err(|e| e.to_string()))
                .map(|answer| (answer.text(), serde_json::to_value(&answer)))
        } else {
            match arguments.get("path").and_then(Json::as_str) {
                None => Err("The tool `describe` needs the argument `path`, a string such as \"github.create_issue\".".to_owned()),
                Some(path) => index.describe(path).map_err(|e| e.to_string()).map(|d| (d.text(), serde_json::to_value(&d))),
            }
        };
        Some(match answer {
            Ok((text, json)) => {
                let mut result = CallToolResult::success(vec![ContentBlock::text(text)]);
                result.structured_content = json.ok();
                result
            }
            Err(text) => invalid(text),
        })
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
            move || Ok(self.new_session()),
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
            .field("approval", &self.approval)
            .finish()
    }
}

/// The program in a call's arguments and its `yieldAfterMs`, or the text saying what to
/// send instead.
fn code_argument(arguments: Option<&JsonObject>) -> Result<(String, Option<Duration>), String> {
    let Some(arguments) = arguments else { return Err(CODE_MISSING.to_owned()) };
    if let Some(other) = arguments.keys().find(|key| *key != "code" && *key != "yieldAfterMs") {
        return Err(format!(
            "The tool `execute` takes the argument `code` (and, optionally, `yieldAfterMs`); `{other}` is not \
             one of its arguments. Send {{\"code\": \"async () => {{ ... }}\"}}."
        ));
    }
    let yield_after = yield_argument(texts::CODE_TOOL_NAME, arguments)?;
    match arguments.get("code") {
        None => Err(CODE_MISSING.to_owned()),
        Some(Json::String(code)) => Ok((code.clone(), yield_after)),
        Some(other) => Err(format!(
            "The argument `code` of the tool `execute` must be a string (the program's source), not {}.",
            json_type(other)
        )),
    }
}

/// The `cell` and `yieldAfterMs` of a call of `tool` (`wait` or `terminate`).
fn cell_arguments(tool: &str, arguments: Option<&JsonObject>) -> Result<(String, Option<Duration>), String> {
    let missing = || texts::CELL_ARGUMENT_MISSING.fill(&[tool]);
    let Some(arguments) = arguments else { return Err(missing()) };
    if let Some(other) = arguments.keys().find(|key| *key != "cell" && *key != "yieldAfterMs") {
        return Err(not_an_argument(tool, other));
    }
    let yield_after = yield_argument(tool, arguments)?;
    match arguments.get("cell") {
        Some(Json::String(id)) => Ok((id.clone(), yield_after)),
        _ => Err(missing()),
    }
}

fn not_an_argument(tool: &str, other: &str) -> String {
    let takes = if tool == texts::CELL_WAIT_TOOL_NAME { "`cell` and `yieldAfterMs`" } else { "`cell`" };
    format!("The tool `{tool}` takes {takes}; `{other}` is not one of its arguments.")
}

/// `yieldAfterMs`, when given: a non-negative integer of milliseconds.
fn yield_argument(tool: &str, arguments: &JsonObject) -> Result<Option<Duration>, String> {
    match arguments.get("yieldAfterMs") {
        None => Ok(None),
        Some(value) => match value.as_u64() {
            Some(ms) => Ok(Some(Duration::from_millis(ms))),
            None => {
                let found = match value {
                    Json::Number(n) => format!("{n}"),
                    other => json_type(other).to_owned(),
                };
                Err(texts::CELL_YIELD_NOT_MILLISECONDS.fill(&[tool, &found]))
            }
        },
    }
}

/// A call's arguments refused: an error outcome of kind `invalid` with `text`.
fn invalid(text: impl Into<String>) -> CallToolResult {
    call_tool_result(&Outcome::failure(OutcomeKind::Invalid, text, Vec::new()))
}

/// Wait on `cell` for `yield_after`: its outcome, or that it is still running.
async fn waited(cell: &Cell, yield_after: Duration) -> CallToolResult {
    match cell.wait(yield_after).await {
        Ok(Waited::Settled(outcome)) => call_tool_result(&outcome),
        Ok(Waited::Running { logs, calls_in_flight, timers }) => {
            running_result(cell.id().as_str(), logs, calls_in_flight, timers)
        }
        Err(unknown) => invalid(unknown.to_string()),
    }
}

/// A run still going: `{"status": "running", "cell", "logs", "calls", "timers"}`, and the
/// text telling the model to call `wait`, then the lines as an outcome's are.
pub fn running_result(cell: &str, logs: Vec<String>, calls: usize, timers: usize) -> CallToolResult {
    let mut content = vec![ContentBlock::text(texts::CELL_RUNNING.fill(&[cell]))];
    if !logs.is_empty() {
        content.push(ContentBlock::text(logs.join("\n")));
    }
    let mut result = CallToolResult::success(content);
    result.structured_content = Some(serde_json::json!({
        "status": "running", "cell": cell, "logs": logs, "calls": calls, "timers": timers
    }));
    result
}

/// Ends a cell whose `execute` call went before it answered (cancelled by the client).
struct EndUnanswered(Option<Cell>);

impl Drop for EndUnanswered {
    fn drop(&mut self) {
        let (Some(cell), Ok(runtime)) = (self.0.take(), tokio::runtime::Handle::try_current()) else {
            return;
        };
        runtime.spawn(async move {
            let _ = cell.terminate().await;
        });
    }
}

/// A tool as rmcp lists it.
fn mcp_tool(tool: codemode_protocol::tools::CodeTool) -> Tool {
    let schema = match tool.input_schema {
        Json::Object(schema) => schema,
        _ => JsonObject::new(),
    };
    Tool::new(tool.name, tool.description, schema)
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
        Ok(ListToolsResult::with_all_items(self.inner.tools.to_vec()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let arguments = request.arguments.as_ref();
        let answer = match request.name.as_ref() {
            texts::CODE_TOOL_NAME => {
                let peer = Some(context.peer.clone());
                self.execute_for(arguments, peer).await_or_cancelled(&context).await
            }
            texts::CELL_WAIT_TOOL_NAME => self.wait(arguments).await_or_cancelled(&context).await,
            texts::CELL_TERMINATE_TOOL_NAME => self.terminate(arguments).await_or_cancelled(&context).await,
            name @ (texts::SEARCH_TOOL_NAME | texts::DESCRIBE_TOOL_NAME)
                if self.inner.discovery.is_some() =>
            {
                Ok(self.discover(name, arguments).unwrap_or_else(|| invalid("Discovery is off.")))
            }
            _ => {
                return Err(McpError::invalid_params(
                    format!(
                        "Unknown tool: {:?}. This server's tools are `execute`, `wait` and `terminate`.",
                        request.name
                    ),
                    None,
                ));
            }
        };
        answer.map(Into::into)
    }
}

/// A call's answer unless the client cancels it first (or its session closes): dropping
/// the call's future ends an execution, and only the wait of a `wait`.
trait CancelledBy: std::future::Future<Output = CallToolResult> + Sized {
    async fn await_or_cancelled(
        self,
        context: &RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        tokio::select! {
            result = self => Ok(result),
            () = context.ct.cancelled() => Err(McpError::invalid_request("The request was cancelled.", None)),
        }
    }
}

impl<F: std::future::Future<Output = CallToolResult>> CancelledBy for F {}
