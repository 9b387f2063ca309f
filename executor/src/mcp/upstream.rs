//! An upstream MCP server (a child process over stdio, or streamable HTTP) as a provider.
//!
//! [`Upstream`] is one connection to an MCP server, made through rmcp's client.
//! [`Upstream::provider`] lists the server's tools (every page) and registers each as a
//! [`Provider::spec_tool`]: its MCP name, description, input schema and output schema
//! are the [`ToolSpec`], the toolbox gives it its sandbox name (`get-sum` is
//! `everything.get_sum`), and the call goes out under the MCP name.
//!
//! ```no_run
//! use codemode_executor::mcp::upstream::Upstream;
//! use codemode_executor::{Executor, Request, Toolbox};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let everything = Upstream::spawn("npx", ["-y", "@modelcontextprotocol/server-everything"]).await?;
//! let github = Upstream::connect_http("https://api.example.com/mcp", Some("token".into())).await?;
//! let toolbox = Toolbox::new([
//!     everything.provider("everything").await?,
//!     github.provider("github").allow(["search_issues"]).await?,
//! ])?;
//! let outcome = Executor::default()
//!     .execute(Request::new("async () => everything.echo({ message: 'hi' })").toolbox(&toolbox))
//!     .await;
//! assert_eq!(outcome.to_json_string(), r#"{"result":"Echo: hi","logs":[]}"#);
//! # Ok(())
//! # }
//! ```
//!
//! What a call returns to the program, from the server's `CallToolResult`:
//!
//! - `isError: true`: the call throws an `Error` whose message is the result's text
//!   content, items joined with `"\n"` ([`TOOL_FAILED_WITHOUT_TEXT`] when there is none);
//! - else `structuredContent`, when present;
//! - else, when every content item is text: no item is `null`, one is its string, several
//!   are their strings joined with `"\n"` (what a reader of the text would see);
//! - else the content list as the server wrote it (`type`, `annotations`, `_meta`…),
//!   except that base64 payloads become bytes (a `Uint8Array` in the program): an image's
//!   or audio's `data`, and an embedded resource's `blob`.
//!
//! Every failure of a call is an error the program catches, with one of the texts below;
//! none is a panic or a fault of the host.

use std::borrow::Cow;
use std::ffi::OsStr;
use std::fmt;
use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use base64::Engine as _;
use codemode_protocol::tools::{ToolSpec, ToolTable, ToolTableError};
use codemode_protocol::{Binary, Value, texts};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ClientCapabilities, ClientConfig, ContentBlock,
    Implementation, JsonObject, Tool,
};
use rmcp::service::{ClientInitializeError, RunningService};
use rmcp::transport::streamable_http_client::{StreamableHttpClientTransportConfig, StreamableHttpError};
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{RoleClient, ServiceError, ServiceExt};
use serde_json::Value as Json;

use crate::api::toolbox::{CallContext, Provider};

/// The call reached a server whose connection has closed: its process exited or was
/// killed, its HTTP session ended, or [`Upstream::close`] was called. Holes: the
/// provider's name, the tool's MCP name.
pub const SERVER_DISCONNECTED: &str =
    "MCP server \"{server}\" is no longer connected: the call of {tool} was not answered.";

/// The call could not be sent to an HTTP server, the session still open (the server is
/// down, it refused the bearer token). Holes: the provider's name, the tool's MCP name, the
/// transport's own words.
pub const SERVER_UNREACHABLE: &str =
    "MCP server \"{server}\" could not be reached for the call of {tool}: {reason}";

/// The server answered with a JSON-RPC error instead of a result: a tool it does not know
/// (removed since it was listed), arguments its protocol layer refused. Holes: the
/// provider's name, the tool's MCP name, the server's message, the JSON-RPC error code.
pub const SERVER_REFUSED: &str =
    "MCP server \"{server}\" refused the call of {tool}: {message} (error {code})";

/// The server answered with something that is not a tool result. Holes: the provider's
/// name, the tool's MCP name.
pub const NOT_A_TOOL_RESULT: &str =
    "MCP server \"{server}\" answered the call of {tool} with something that is not a tool result.";

/// A base64 payload of the result (an image's or audio's `data`, a resource's `blob`) is
/// not base64. Holes: the provider's name, the tool's MCP name, the field (`image data`,
/// `audio data`, `resource blob`).
pub const NOT_BASE64: &str =
    "MCP server \"{server}\" answered the call of {tool} with {field} that is not base64.";

/// The result holds a value the sandbox cannot take (an object shaped like the
/// executor's binary tag, but malformed). Holes: the provider's name, the tool's MCP
/// name, the codec's words.
pub const UNREADABLE_RESULT: &str =
    "MCP server \"{server}\" answered the call of {tool} with a value the program cannot receive: {reason}";

/// The server asked for input or started a task instead of answering; this client takes
/// complete results only. Holes: the provider's name, the tool's MCP name.
pub const NOT_COMPLETE: &str = "MCP server \"{server}\" answered the call of {tool} by asking for input or starting a task; only complete results are taken.";

/// `isError: true` with no text content to carry. Holes: the provider's name, the tool's MCP name.
pub const TOOL_FAILED_WITHOUT_TEXT: &str =
    "MCP server \"{server}\" reported that {tool} failed, without a message.";

/// No answer within [`UpstreamProvider::call_timeout`]; the server is told the call is
/// cancelled. Holes: the provider's name, the tool's MCP name, the timeout in milliseconds.
pub const CALL_TIMED_OUT: &str = "MCP server \"{server}\" did not answer the call of {tool} within {ms} ms.";

/// Any other failure of the client (the server cancelled the call, …). Holes: the
/// provider's name, the tool's MCP name, rmcp's words.
pub const CALL_FAILED: &str = "MCP server \"{server}\" failed the call of {tool}: {reason}";

/// [`UpstreamError::Spawn`]: the server's program did not start. Holes: the command line,
/// the operating system's words.
pub const SPAWN_FAILED: &str = "Could not start the MCP server `{command}`: {reason}";

/// [`UpstreamError::Http`]: no HTTP client could be built. Holes: the URL, reqwest's words.
pub const HTTP_CLIENT_FAILED: &str = "Could not build the HTTP client for the MCP server {url}: {reason}";

/// [`UpstreamError::Handshake`]: the server did not complete MCP's initialization (it is
/// not an MCP server, it exited, it did not answer within [`STARTUP_TIMEOUT`]). Holes:
/// the server (command line or URL), rmcp's words.
pub const HANDSHAKE_FAILED: &str = "MCP server {origin} did not complete the MCP handshake: {reason}";

/// [`UpstreamError::List`]: `tools/list` failed. Holes: the server, rmcp's words.
pub const LIST_FAILED: &str = "MCP server {origin} did not list its tools: {reason}";

/// [`UpstreamError::UnknownTools`]: the allowlist names tools the server does not list.
/// Holes: the provider's name, the server, the unknown names (quoted, comma-separated),
/// the names the server lists.
pub const UNKNOWN_TOOLS: &str = "The allowlist of provider \"{provider}\" names tools MCP server {origin} does not list: {unknown}. It lists: {listed}.";

/// How long connecting (the MCP handshake) and listing tools may take before they fail.
pub const STARTUP_TIMEOUT: Duration = Duration::from_secs(30);

/// `template` with each `{name}` hole replaced by its value, in one pass (a value that
/// contains a hole's name stays as it is).
fn fill(template: &str, values: &[(&str, &str)]) -> String {
    let mut out = String::with_capacity(template.len() + 32);
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        let hole = after.find('}').map(|close| &after[..close]);
        match hole.and_then(|name| values.iter().find(|(n, _)| *n == name)) {
            Some((name, value)) => {
                out.push_str(value);
                rest = &after[name.len() + 1..];
            }
            None => {
                out.push('{');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// Why an upstream server could not be started, reached or turned into a provider. Its
/// Display is the whole message (the texts above).
#[derive(Debug)]
#[non_exhaustive]
pub enum UpstreamError {
    /// The server's program did not start ([`SPAWN_FAILED`]).
    Spawn(String),
    /// No HTTP client could be built ([`HTTP_CLIENT_FAILED`]).
    Http(String),
    /// The MCP handshake failed ([`HANDSHAKE_FAILED`]).
    Handshake(String),
    /// Listing the tools failed ([`LIST_FAILED`]).
    List(String),
    /// The allowlist names tools the server does not list ([`UNKNOWN_TOOLS`]).
    UnknownTools(String),
    /// The tools cannot be one provider: the provider's name breaks the guide's rules, or
    /// two tool names become the same sandbox name (the toolbox's texts).
    Table(ToolTableError),
}

impl fmt::Display for UpstreamError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            UpstreamError::Spawn(text)
            | UpstreamError::Http(text)
            | UpstreamError::Handshake(text)
            | UpstreamError::List(text)
            | UpstreamError::UnknownTools(text) => f.write_str(text),
            UpstreamError::Table(error) => error.fmt(f),
        }
    }
}

impl std::error::Error for UpstreamError {}

/// An error and its sources, as one line.
fn chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = String::new();
    let mut next = Some(error);
    while let Some(mut current) = next {
        // rmcp's HTTP transport holds reqwest's error without naming it as the source.
        if let Some(StreamableHttpError::Client(inner)) =
            current.downcast_ref::<StreamableHttpError<reqwest::Error>>()
        {
            current = inner;
        }
        let words = current.to_string();
        // Wrappers often repeat their source's words.
        if !text.contains(&words) {
            if !text.is_empty() {
                text.push_str(": ");
            }
            text.push_str(&words);
        }
        next = current.source();
    }
    text.trim_end_matches([':', ' ']).to_owned()
}

/// Why the handshake failed: a transport's failure in its own words, without rmcp's
/// wrapper (which names the transport's Rust type).
fn handshake_words(error: &ClientInitializeError) -> String {
    match error {
        ClientInitializeError::TransportError { error, .. } => chain(error.error.as_ref()),
        other => chain(other),
    }
}

/// One connection to an MCP server. Cheap to clone; the connection closes when the last
/// clone and the last provider built from it are dropped, or at [`Upstream::close`].
#[derive(Clone)]
pub struct Upstream {
    connection: Arc<Connection>,
}

struct Connection {
    client: RunningService<RoleClient, ClientConfig>,
    /// The command line or URL, for the host's errors.
    origin: String,
    process_id: Option<u32>,
    in_flight: AtomicUsize,
}

impl fmt::Debug for Upstream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Upstream")
            .field("origin", &self.connection.origin)
            .field("connected", &self.is_connected())
            .finish()
    }
}

/// What this client tells servers about itself: no roots, sampling or elicitation, so
/// servers do not ask for them.
fn client_config() -> ClientConfig {
    ClientConfig::new(
        ClientCapabilities::default(),
        Implementation::new("codemode", env!("CARGO_PKG_VERSION")),
    )
}

impl Upstream {
    /// Start `program` with `args` and speak MCP over its stdin and stdout.
    ///
    /// The server's stderr goes to null: the host's stderr is the host's (the CLI's
    /// diagnostics, a daemon's log) and a server's log lines there would read as the
    /// host's; and unlike a pipe nobody drains, null never stalls a chatty server. Use
    /// [`Upstream::spawn_command`] to keep it (inherit it, or a file). The process is
    /// killed when the connection closes.
    pub async fn spawn<I, S>(program: impl AsRef<OsStr>, args: I) -> Result<Upstream, UpstreamError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let mut command = tokio::process::Command::new(program);
        command.args(args);
        Upstream::spawn_command(command, Stdio::null()).await
    }

    /// [`Upstream::spawn`] with a command you built (environment, working directory) and
    /// where its stderr goes. Its stdin and stdout are the protocol's.
    pub async fn spawn_command(
        mut command: tokio::process::Command,
        stderr: Stdio,
    ) -> Result<Upstream, UpstreamError> {
        let origin = command_line(&command);
        // Also when the connection's task is dropped with its runtime, before rmcp's own cleanup.
        command.kill_on_drop(true);
        let (process, _stderr) =
            TokioChildProcess::builder(command).stderr(stderr).spawn().map_err(|error| {
                UpstreamError::Spawn(fill(
                    SPAWN_FAILED,
                    &[("command", &origin), ("reason", &error.to_string())],
                ))
            })?;
        let process_id = process.id();
        Upstream::serve(process, origin, process_id).await
    }

    /// Connect to the streamable HTTP endpoint at `url`, sending `bearer_token` (without
    /// `Bearer `) in the `Authorization` header of every request.
    ///
    /// TLS is rustls on ring, installed as the process's default provider unless one is
    /// installed already. Redirects are not followed: a redirect fails the request.
    pub async fn connect_http(
        url: impl Into<String>,
        bearer_token: Option<String>,
    ) -> Result<Upstream, UpstreamError> {
        let url = url.into();
        // reqwest built without a provider takes the process default; an Err here means
        // one is installed already, which serves as well.
        let _ = tokio_rustls::rustls::crypto::ring::default_provider().install_default();
        let client = reqwest::Client::builder()
            // rmcp's own client does the same: an idle pooled connection can stall ~40 ms.
            .pool_max_idle_per_host(0)
            // A redirect would replay the session and the token to wherever it points.
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|error| {
                UpstreamError::Http(fill(HTTP_CLIENT_FAILED, &[("url", &url), ("reason", &chain(&error))]))
            })?;
        let mut config = StreamableHttpClientTransportConfig::with_uri(url.as_str());
        if let Some(token) = bearer_token {
            config = config.auth_header(token);
        }
        let transport = StreamableHttpClientTransport::with_client(client, config);
        Upstream::serve(transport, url, None).await
    }

    async fn serve<T, E, A>(
        transport: T,
        origin: String,
        process_id: Option<u32>,
    ) -> Result<Upstream, UpstreamError>
    where
        T: rmcp::transport::IntoTransport<RoleClient, E, A>,
        E: std::error::Error + Send + Sync + 'static,
    {
        let handshake = |reason: String| {
            UpstreamError::Handshake(fill(HANDSHAKE_FAILED, &[("origin", &origin), ("reason", &reason)]))
        };
        let client = match tokio::time::timeout(STARTUP_TIMEOUT, client_config().serve(transport)).await {
            Ok(Ok(client)) => client,
            Ok(Err(error)) => return Err(handshake(handshake_words(&error))),
            Err(_) => return Err(handshake(format!("no answer within {} s", STARTUP_TIMEOUT.as_secs()))),
        };
        Ok(Upstream {
            connection: Arc::new(Connection { client, origin, process_id, in_flight: AtomicUsize::new(0) }),
        })
    }

    /// Every tool the server lists (all pages), as specs: name, description (the tool's
    /// title when it has no description), input and output schemas.
    pub async fn tools(&self) -> Result<Vec<ToolSpec>, UpstreamError> {
        Ok(self.list().await?.iter().map(spec_of).collect())
    }

    async fn list(&self) -> Result<Vec<Tool>, UpstreamError> {
        let origin = &self.connection.origin;
        let failed = |reason: String| {
            UpstreamError::List(fill(LIST_FAILED, &[("origin", origin), ("reason", &reason)]))
        };
        match tokio::time::timeout(STARTUP_TIMEOUT, self.connection.client.peer().list_all_tools()).await {
            Ok(Ok(tools)) => Ok(tools),
            Ok(Err(error)) => Err(failed(chain(&error))),
            Err(_) => Err(failed(format!("no answer within {} s", STARTUP_TIMEOUT.as_secs()))),
        }
    }

    /// A provider `name` of the server's tools, built when awaited (or at
    /// [`UpstreamProvider::build`]). The tools are those listed at that moment.
    pub fn provider(&self, name: impl Into<String>) -> UpstreamProvider {
        UpstreamProvider {
            upstream: self.clone(),
            name: name.into(),
            description: None,
            allow: None,
            positional: false,
            call_timeout: None,
        }
    }

    /// The server's name, as it gave it at the handshake.
    pub fn server_name(&self) -> Option<String> {
        let info = self.connection.client.peer().peer_info()?;
        info.server_info.as_ref().map(|server| server.name.clone())
    }

    /// The server's instructions for the model, if it gave any at the handshake.
    pub fn instructions(&self) -> Option<String> {
        self.connection.client.peer().peer_info()?.instructions.clone()
    }

    /// The id of the server's process, for a spawned server.
    pub fn process_id(&self) -> Option<u32> {
        self.connection.process_id
    }

    /// Whether the connection is still open.
    pub fn is_connected(&self) -> bool {
        !self.connection.client.is_closed() && !self.connection.client.peer().is_transport_closed()
    }

    /// Calls sent and not yet answered or abandoned (a call is abandoned when its
    /// execution ends, and the server is told with `notifications/cancelled`).
    pub fn calls_in_flight(&self) -> usize {
        self.connection.in_flight.load(Ordering::SeqCst)
    }

    /// Close the connection (a spawned server's stdin is closed, then it is terminated).
    /// Later calls fail with [`SERVER_DISCONNECTED`].
    pub fn close(&self) {
        self.connection.client.cancellation_token().cancel();
    }
}

/// `program arg…`, for texts.
fn command_line(command: &tokio::process::Command) -> String {
    let command = command.as_std();
    std::iter::once(command.get_program())
        .chain(command.get_args())
        .map(|part| part.to_string_lossy())
        .collect::<Vec<Cow<'_, str>>>()
        .join(" ")
}

fn spec_of(tool: &Tool) -> ToolSpec {
    let description = tool.description.as_deref().or(tool.title.as_deref()).unwrap_or_default();
    let mut spec = ToolSpec::new(tool.name.as_ref(), description)
        .input_schema(Json::Object(tool.input_schema.as_ref().clone()));
    if let Some(schema) = &tool.output_schema {
        spec = spec.output_schema(Json::Object(schema.as_ref().clone()));
    }
    spec
}

/// A provider of an [`Upstream`]'s tools, being configured. Await it (or call
/// [`UpstreamProvider::build`]) for the [`Provider`].
#[must_use = "a provider is built when awaited"]
pub struct UpstreamProvider {
    upstream: Upstream,
    name: String,
    description: Option<String>,
    allow: Option<Vec<String>>,
    positional: bool,
    call_timeout: Option<Duration>,
}

impl UpstreamProvider {
    /// What the provider is, for the model. By default the server's own description,
    /// else its title, as it gave them at the handshake.
    pub fn description(mut self, description: impl Into<String>) -> UpstreamProvider {
        self.description = Some(description.into());
        self
    }

    /// Declare and route only these tools (their MCP names). A name the server does not
    /// list fails the build ([`UNKNOWN_TOOLS`]).
    pub fn allow<I, S>(mut self, names: I) -> UpstreamProvider
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.allow = Some(names.into_iter().map(Into::into).collect());
        self
    }

    /// Calls take positional arguments, laid onto the input schema's properties in order
    /// (`everything.get_sum(1, 2)`), instead of the one arguments object MCP tools take
    /// (`everything.get_sum({ a: 1, b: 2 })`, the default).
    pub fn positional(mut self) -> UpstreamProvider {
        self.positional = true;
        self
    }

    /// Give up on a call unanswered after `timeout` ([`CALL_TIMED_OUT`]), telling the
    /// server it is cancelled. Without it a call waits until its execution ends.
    pub fn call_timeout(mut self, timeout: Duration) -> UpstreamProvider {
        self.call_timeout = Some(timeout);
        self
    }

    /// List the server's tools and register them.
    pub async fn build(self) -> Result<Provider, UpstreamError> {
        let connection = &self.upstream.connection;
        let listed = self.upstream.list().await?;
        let tools: Vec<&Tool> = match &self.allow {
            None => listed.iter().collect(),
            Some(allow) => {
                let mut unknown: Vec<String> = Vec::new();
                for name in allow {
                    let quoted = format!("\"{name}\"");
                    if !listed.iter().any(|tool| tool.name == name.as_str()) && !unknown.contains(&quoted) {
                        unknown.push(quoted);
                    }
                }
                if !unknown.is_empty() {
                    let names: Vec<&str> = listed.iter().map(|tool| tool.name.as_ref()).collect();
                    return Err(UpstreamError::UnknownTools(fill(
                        UNKNOWN_TOOLS,
                        &[
                            ("provider", &self.name),
                            ("origin", &connection.origin),
                            ("unknown", &unknown.join(", ")),
                            ("listed", &names.join(", ")),
                        ],
                    )));
                }
                // The server's order, which is the order the model reads.
                listed.iter().filter(|tool| allow.iter().any(|name| tool.name == name.as_str())).collect()
            }
        };
        let mut provider = Provider::new(&self.name);
        if !self.positional {
            provider = provider.options_object();
        }
        let description = self.description.or_else(|| {
            let info = connection.client.peer().peer_info()?;
            let server = info.server_info.as_ref()?;
            server.description.clone().or_else(|| server.title.clone())
        });
        if let Some(description) = description {
            provider = provider.description(description);
        }
        for tool in tools {
            let call = Arc::new(Call {
                connection: connection.clone(),
                server: self.name.clone(),
                tool: tool.name.to_string(),
                timeout: self.call_timeout,
            });
            provider = provider.spec_tool(spec_of(tool), move |arguments: Option<JsonObject>, context| {
                call.clone().run(arguments.unwrap_or_default(), context)
            });
        }
        // Refused now rather than when the toolbox is built, so the error names this server.
        ToolTable::new(vec![provider.spec().clone()]).map_err(UpstreamError::Table)?;
        Ok(provider)
    }
}

impl IntoFuture for UpstreamProvider {
    type Output = Result<Provider, UpstreamError>;
    type IntoFuture = Pin<Box<dyn Future<Output = Self::Output> + Send>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(self.build())
    }
}

/// One tool of one server, as its handler calls it.
struct Call {
    connection: Arc<Connection>,
    /// The provider's name, the server as the program knows it.
    server: String,
    /// The tool's MCP name, the one the call goes out under.
    tool: String,
    timeout: Option<Duration>,
}

/// Counts a call in flight until dropped (answered, failed, or abandoned with its execution).
struct InFlight(Arc<Connection>);

impl InFlight {
    fn enter(connection: &Arc<Connection>) -> InFlight {
        connection.in_flight.fetch_add(1, Ordering::SeqCst);
        InFlight(connection.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Call {
    fn text(&self, template: &str, more: &[(&str, &str)]) -> String {
        let mut values = vec![("server", self.server.as_str()), ("tool", self.tool.as_str())];
        values.extend_from_slice(more);
        fill(template, &values)
    }

    async fn run(self: Arc<Self>, arguments: JsonObject, context: CallContext) -> Result<Value, String> {
        let peer = self.connection.client.peer().clone();
        if peer.is_transport_closed() {
            return Err(self.text(SERVER_DISCONNECTED, &[]));
        }
        let _in_flight = InFlight::enter(&self.connection);
        let params = CallToolRequestParams::new(self.tool.clone()).with_arguments(arguments);
        // Dropping the call (the execution ended, the timeout passed) sends MCP's
        // `notifications/cancelled` for it: rmcp guards the request.
        let call = peer.call_tool_once(params);
        let answer = tokio::select! {
            answer = async {
                match self.timeout {
                    Some(timeout) => tokio::time::timeout(timeout, call).await.map_err(|_| {
                        self.text(CALL_TIMED_OUT, &[("ms", &timeout.as_millis().to_string())])
                    }),
                    None => Ok(call.await),
                }
            } => answer?,
            () = context.cancelled() => return Err(texts::EXECUTION_COMPLETED.to_owned()),
        };
        match answer {
            Ok(CallToolResponse::Complete(result)) => self.unwrap(result),
            Ok(_) => Err(self.text(NOT_COMPLETE, &[])),
            // A pipe that no longer takes writes is a process that is gone, even before
            // the connection's task has seen its stdout close.
            Err(error) => {
                let closed = peer.is_transport_closed() || self.connection.process_id.is_some();
                Err(self.failure(&error, closed))
            }
        }
    }

    fn failure(&self, error: &ServiceError, closed: bool) -> String {
        match error {
            ServiceError::TransportClosed => self.text(SERVER_DISCONNECTED, &[]),
            ServiceError::TransportSend(_) if closed => self.text(SERVER_DISCONNECTED, &[]),
            ServiceError::TransportSend(error) => {
                self.text(SERVER_UNREACHABLE, &[("reason", &chain(error.error.as_ref()))])
            }
            ServiceError::McpError(data) => {
                self.text(SERVER_REFUSED, &[("message", &data.message), ("code", &data.code.0.to_string())])
            }
            ServiceError::UnexpectedResponse => self.text(NOT_A_TOOL_RESULT, &[]),
            other => self.text(CALL_FAILED, &[("reason", &chain(other))]),
        }
    }

    /// The result as the program receives it (the module's rules).
    fn unwrap(&self, result: CallToolResult) -> Result<Value, String> {
        let all_text = || -> Option<Vec<&str>> {
            result.content.iter().map(|block| block.as_text().map(|text| text.text.as_str())).collect()
        };
        if result.is_error == Some(true) {
            let lines: Vec<&str> = result
                .content
                .iter()
                .filter_map(|block| block.as_text())
                .map(|text| text.text.as_str())
                .collect();
            return Err(if lines.is_empty() {
                self.text(TOOL_FAILED_WITHOUT_TEXT, &[])
            } else {
                lines.join("\n")
            });
        }
        if let Some(structured) = result.structured_content.clone() {
            return self.value(structured);
        }
        if let Some(lines) = all_text() {
            return Ok(match lines.as_slice() {
                [] => Value::Null,
                [one] => Value::String((*one).to_owned()),
                many => Value::String(many.join("\n")),
            });
        }
        let items =
            result.content.iter().map(|block| self.block(block)).collect::<Result<Vec<Value>, String>>()?;
        Ok(Value::Array(items))
    }

    fn value(&self, json: Json) -> Result<Value, String> {
        Value::from_json(json).map_err(|error| self.text(UNREADABLE_RESULT, &[("reason", error.message())]))
    }

    /// One content item as the server wrote it, base64 payloads as bytes.
    fn block(&self, block: &ContentBlock) -> Result<Value, String> {
        let mut json = serde_json::to_value(block).map_err(|_| self.text(NOT_A_TOOL_RESULT, &[]))?;
        let (field, pointer) = match block {
            ContentBlock::Image(_) => ("image data", "/data"),
            ContentBlock::Audio(_) => ("audio data", "/data"),
            ContentBlock::Resource(_) => ("resource blob", "/resource/blob"),
            _ => return self.value(json),
        };
        let Some(Json::String(base64)) = json.pointer_mut(pointer).map(Json::take) else {
            // A text resource has no blob.
            return self.value(json);
        };
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(base64.trim())
            .map_err(|_| self.text(NOT_BASE64, &[("field", field)]))?;
        let mut value = self.value(json)?;
        let mut slot = &mut value;
        for key in pointer.split('/').skip(1) {
            match slot {
                Value::Object(fields) => match fields.get_mut(key) {
                    Some(next) => slot = next,
                    None => return Err(self.text(NOT_A_TOOL_RESULT, &[])),
                },
                _ => return Err(self.text(NOT_A_TOOL_RESULT, &[])),
            }
        }
        *slot = Value::Binary(Binary::uint8_array(bytes));
        Ok(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holes_are_filled_once_each_in_one_pass() {
        assert_eq!(
            fill(SERVER_DISCONNECTED, &[("server", "everything"), ("tool", "{server}")]),
            "MCP server \"everything\" is no longer connected: the call of {server} was not answered."
        );
        assert_eq!(fill("{a} {unknown} {", &[("a", "1")]), "1 {unknown} {");
    }

    #[test]
    fn an_mcp_tool_becomes_a_spec_under_its_own_name() {
        let tool: Tool = serde_json::from_value(serde_json::json!({
            "name": "get-sum",
            "title": "Get Sum Tool",
            "inputSchema": { "type": "object", "properties": { "a": { "type": "number" } } },
            "outputSchema": { "type": "object" }
        }))
        .map_err(|e| e.to_string())
        .expect("a tool");
        let spec = spec_of(&tool);
        assert_eq!(spec.name, "get-sum");
        assert_eq!(spec.description, "Get Sum Tool");
        assert_eq!(spec.output_schema, Some(serde_json::json!({ "type": "object" })));
    }
}
