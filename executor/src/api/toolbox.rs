//! The toolbox: typed tools registered per provider. One definition gives the provider
//! descriptors, the dispatch, the declarations the model reads and the code tool.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use codemode_protocol::discovery::{Catalog, CatalogIndex, SearchRequest};
use codemode_protocol::tools::{CodeTool, ProviderSpec, Route, ToolSpec, ToolTable, ToolTableError};
use codemode_protocol::{
    Dispatch, DispatchFuture, ProviderDescriptor, ToolCall, ToolNotFoundError, error_envelope,
    result_envelope, texts,
};
use schemars::JsonSchema;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value as Json;
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

/// The id of one execution, unique in this process: what a tool's [`CallContext`] names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ExecutionId(u64);

impl ExecutionId {
    /// A new id, never given before in this process.
    pub fn next() -> ExecutionId {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        ExecutionId(NEXT.fetch_add(1, Ordering::Relaxed))
    }

    /// The id as a number.
    pub fn get(self) -> u64 {
        self.0
    }
}

impl fmt::Display for ExecutionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "execution {}", self.0)
    }
}

/// What a tool's handler knows about the call: which execution made it, and a signal
/// that fires when that execution ends.
///
/// The executor does not drop a handler's future when the execution ends: a handler
/// with long work awaits [`CallContext::cancelled`] beside it and stops (and cleans up)
/// when it fires. Its answer, if any, is dropped.
#[derive(Clone, Debug)]
pub struct CallContext {
    execution: ExecutionId,
    ended: CancellationToken,
}

impl CallContext {
    /// A context for a new execution, and the handle that ends it.
    pub fn new() -> (CallContext, ExecutionEnd) {
        let context = CallContext { execution: ExecutionId::next(), ended: CancellationToken::new() };
        let end = ExecutionEnd { ended: context.ended.clone() };
        (context, end)
    }

    /// The execution that made the call.
    pub fn execution_id(&self) -> ExecutionId {
        self.execution
    }

    /// Whether the execution has ended.
    pub fn is_cancelled(&self) -> bool {
        self.ended.is_cancelled()
    }

    /// Resolves when the execution ends (at once if it has).
    pub fn cancelled(&self) -> WaitForCancellationFutureOwned {
        self.ended.clone().cancelled_owned()
    }
}

/// Ends an execution's [`CallContext`] when dropped (or by [`ExecutionEnd::end`]): its
/// signal fires and the toolbox refuses its later calls with `Execution has already completed.`
#[derive(Debug)]
#[must_use = "the execution ends when this is dropped"]
pub struct ExecutionEnd {
    ended: CancellationToken,
}

impl ExecutionEnd {
    /// End the execution now.
    pub fn end(self) {}
}

impl Drop for ExecutionEnd {
    fn drop(&mut self) {
        self.ended.cancel();
    }
}

/// One registered handler: the call's arguments (as `argsJson`) in, the envelope out.
type Handler = Arc<dyn Fn(&ToolTable, Route, &str, CallContext) -> DispatchFuture + Send + Sync>;

/// One provider being registered: a name in the sandbox and typed tools.
pub struct Provider {
    spec: ProviderSpec,
    handlers: Vec<Handler>,
}

impl Provider {
    /// A provider `name` whose tools take positional arguments.
    pub fn new(name: impl Into<String>) -> Provider {
        Provider { spec: ProviderSpec::new(name), handlers: Vec::new() }
    }

    /// The provider as the model is told about it, so far.
    pub fn spec(&self) -> &ProviderSpec {
        &self.spec
    }

    /// What the provider is, for the model.
    pub fn description(mut self, description: impl Into<String>) -> Provider {
        self.spec.description = description.into();
        self
    }

    /// Calls send one options object (`store.find({ id: 7 })`), not positional arguments.
    /// Every tool's argument type must then be an object (a struct) or `()`.
    pub fn options_object(mut self) -> Provider {
        self.spec.positional_args = false;
        self
    }

    /// Register an async tool.
    ///
    /// `A` is what it takes: with positional arguments a struct's fields are its
    /// parameters in order (`find(id, limit)`), a tuple's items are, `()` is none and any
    /// other type is one parameter; with [`Provider::options_object`], a struct is the
    /// object. `T` is what it returns ([`codemode_protocol::Bytes`] reaches the program as
    /// a `Uint8Array`); an `Err` is thrown at the call site with its Display as the message.
    pub fn tool<A, T, E, F, Fut>(
        self,
        name: impl Into<String>,
        description: impl Into<String>,
        handler: F,
    ) -> Provider
    where
        A: DeserializeOwned + JsonSchema + Send + 'static,
        T: Serialize + JsonSchema + 'static,
        E: fmt::Display + 'static,
        F: Fn(A, CallContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<T, E>> + Send + 'static,
    {
        let spec =
            ToolSpec::new(name, description).input_schema(schema_of::<A>()).output_schema(schema_of::<T>());
        self.spec_tool(spec, handler)
    }

    /// Register a plain (not async) tool, as [`Provider::tool`]. It runs where the call is
    /// answered, at the moment the program makes it: it must not block.
    ///
    /// What the program passes follows the argument type `A`, one form each:
    ///
    /// ```
    /// use codemode_executor::{Executor, Provider, Request, Toolbox};
    /// use serde::Deserialize;
    ///
    /// #[derive(Deserialize, schemars::JsonSchema)]
    /// struct Range { from: f64, to: f64 }
    ///
    /// let toolbox = Toolbox::new([Provider::new("math")
    ///     // Any type that is not a tuple or a struct is one parameter: `math.double(4)`.
    ///     .sync_tool("double", "Twice n.", |n: f64, _| Ok::<_, String>(n * 2.0))
    ///     // A tuple's items are the parameters, in order: `math.add(1, 2)`.
    ///     .sync_tool("add", "a + b.", |(a, b): (f64, f64), _| Ok::<_, String>(a + b))
    ///     // A one-item tuple is one parameter too: `math.negate(5)`.
    ///     .sync_tool("negate", "-n.", |(n,): (f64,), _| Ok::<_, String>(-n))
    ///     // A struct's fields are the parameters, in order: `math.span(1, 4)`.
    ///     .sync_tool("span", "to - from.", |r: Range, _| Ok::<_, String>(r.to - r.from))
    ///     // `()` is none: `math.pi()`.
    ///     .sync_tool("pi", "π.", |(): (), _| Ok::<_, String>(std::f64::consts::PI.floor()))])
    /// .unwrap();
    /// let code = "async () => [await math.double(4), await math.add(1, 2), await math.negate(5), \
    ///             await math.span(1, 4), await math.pi()]";
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// let outcome = Executor::default().execute(Request::new(code).toolbox(&toolbox)).await;
    /// assert_eq!(outcome.to_json_string(), r#"{"result":[8,3,-5,3,3],"logs":[]}"#);
    /// # });
    /// ```
    ///
    /// With [`Provider::options_object`] a struct is one object instead:
    /// `math.span({ from: 1, to: 4 })`.
    pub fn sync_tool<A, T, E, F>(
        self,
        name: impl Into<String>,
        description: impl Into<String>,
        handler: F,
    ) -> Provider
    where
        A: DeserializeOwned + JsonSchema + Send + 'static,
        T: Serialize + JsonSchema + Send + 'static,
        E: fmt::Display + Send + 'static,
        F: Fn(A, CallContext) -> Result<T, E> + Send + Sync + 'static,
    {
        self.tool(name, description, move |args: A, context| std::future::ready(handler(args, context)))
    }

    /// Mark the tool `tool` (registered already) as needing a person's approval for each
    /// call: the declarations say so, and a request serving this toolbox holds its calls
    /// for [`crate::Approvals`] (or refuses them where the request has none).
    pub fn needs_approval(mut self, tool: &str) -> Provider {
        for spec in self.spec.tools.iter_mut().filter(|spec| spec.name == tool) {
            spec.needs_approval = true;
        }
        self
    }

    /// Register a tool described by `spec` (its schemas written as data: a spec file, an
    /// MCP server) whose arguments are read as any `A`, such as `serde_json::Value`.
    pub fn spec_tool<A, T, E, F, Fut>(mut self, spec: ToolSpec, handler: F) -> Provider
    where
        A: DeserializeOwned + Send + 'static,
        T: Serialize + 'static,
        E: fmt::Display + 'static,
        F: Fn(A, CallContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<T, E>> + Send + 'static,
    {
        let handler: Handler = Arc::new(move |table: &ToolTable, route, args_json: &str, context| {
            let args = match table.arguments::<A>(route, args_json) {
                Ok(args) => args,
                Err(error) => return Box::pin(std::future::ready(error_envelope(error.message()))),
            };
            let answer = handler(args, context);
            Box::pin(async move {
                match answer.await {
                    Ok(value) => {
                        result_envelope(&value).unwrap_or_else(|error| error_envelope(error.message()))
                    }
                    Err(failure) => error_envelope(&failure.to_string()),
                }
            })
        });
        self.spec.tools.push(spec);
        self.handlers.push(handler);
        self
    }
}

/// The JSON Schema of `T`, as a tool's input or output schema.
fn schema_of<T: JsonSchema>() -> Json {
    let mut schema = schemars::SchemaGenerator::default().into_root_schema_for::<T>().to_value();
    // The draft's URI tells a model nothing; the schema is draft 2020-12 all the same.
    if let Some(object) = schema.as_object_mut() {
        object.remove("$schema");
    }
    schema
}

/// Typed tools per provider. Cheap to clone.
///
/// ```
/// use codemode_executor::{Executor, Request};
/// use codemode_executor::toolbox::{Provider, Toolbox};
///
/// #[derive(serde::Deserialize, schemars::JsonSchema)]
/// struct FindUser {
///     /// The user's id.
///     id: String,
/// }
///
/// #[derive(serde::Serialize, schemars::JsonSchema)]
/// struct User {
///     id: String,
///     email: String,
/// }
///
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// let toolbox = Toolbox::new([Provider::new("store").description("The shop's users.").tool(
///     "findUser",
///     "Find a user by id.",
///     |FindUser { id }: FindUser, _| async move {
///         Ok::<_, String>(User { email: format!("{id}@example.com"), id })
///     },
/// )])
/// .unwrap();
/// assert!(toolbox.declarations().contains("findUser(id: string): Promise<User>;"));
///
/// let outcome = Executor::default()
///     .execute(Request::new("async () => (await store.findUser('ada')).email").toolbox(&toolbox))
///     .await;
/// assert_eq!(outcome.to_json_string(), r#"{"result":"ada@example.com","logs":[]}"#);
/// # });
/// ```
#[derive(Clone)]
pub struct Toolbox {
    inner: Arc<Inner>,
}

struct Inner {
    table: ToolTable,
    /// Per provider, per tool, as the table's routes index them.
    handlers: Vec<Vec<Handler>>,
    /// With discovery required: the tools each live execution described, the only ones
    /// (beside `catalog`'s) it may call.
    described: Option<Arc<Described>>,
}

/// The tools each live execution has described (`catalog.describe`), by path; an
/// execution's set goes when it ends.
#[derive(Default)]
struct Described(std::sync::Mutex<std::collections::HashMap<ExecutionId, std::collections::HashSet<String>>>);

impl Described {
    /// `path` is described in `context`'s execution from now on.
    fn record(self: &Arc<Described>, context: &CallContext, path: String) {
        let first = {
            let mut executions = crate::sync::lock(&self.0);
            let paths = executions.entry(context.execution_id()).or_default();
            let first = paths.is_empty();
            paths.insert(path);
            first
        };
        // The set lives as long as its execution.
        if first && let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let (described, ended, execution) = (self.clone(), context.cancelled(), context.execution_id());
            runtime.spawn(async move {
                ended.await;
                crate::sync::lock(&described.0).remove(&execution);
            });
        }
    }

    fn has(&self, execution: ExecutionId, path: &str) -> bool {
        crate::sync::lock(&self.0).get(&execution).is_some_and(|paths| paths.contains(path))
    }
}

impl Toolbox {
    /// Check the providers (the guide's name rules, tool names that meet in the sandbox,
    /// argument types that fit the convention) and hold them.
    pub fn new(providers: impl IntoIterator<Item = Provider>) -> Result<Toolbox, ToolTableError> {
        let (specs, handlers): (Vec<ProviderSpec>, Vec<Vec<Handler>>) =
            providers.into_iter().map(|p| (p.spec, p.handlers)).unzip();
        let table = ToolTable::new(specs)?;
        Ok(Toolbox { inner: Arc::new(Inner { table, handlers, described: None }) })
    }

    /// The checked table: specs, sandbox names, routes.
    pub fn table(&self) -> &ToolTable {
        &self.inner.table
    }

    /// The provider descriptors a request declares.
    pub fn descriptors(&self) -> Vec<ProviderDescriptor> {
        self.inner.table.descriptors()
    }

    /// The TypeScript declarations of every provider, for the model.
    pub fn declarations(&self) -> String {
        self.inner.table.declarations()
    }

    /// Every provider with its tools' JSON Schemas, for a model that reads schemas.
    pub fn json_schemas(&self) -> Json {
        self.inner.table.json_schemas()
    }

    /// The tools marked as needing approval, as (provider, tool): each by the name it was
    /// registered under and by its name in the sandbox.
    pub(crate) fn needing_approval(&self) -> Vec<(String, String)> {
        let table = &self.inner.table;
        let mut patterns = Vec::new();
        for (p, provider) in table.providers().iter().enumerate() {
            for (t, tool) in provider.tools.iter().enumerate().filter(|(_, tool)| tool.needs_approval) {
                let sandbox = table.sandbox_name(codemode_protocol::tools::Route { provider: p, tool: t });
                for name in [tool.name.as_str(), sandbox] {
                    patterns.push((provider.name.clone(), name.to_owned()));
                }
            }
        }
        patterns
    }

    /// The tool an agent offers the model, with the declarations in its description.
    pub fn code_tool(&self) -> CodeTool {
        self.inner.table.code_tool()
    }

    /// The dispatch of one execution: registered tools only (by sandbox name or their
    /// own), in the envelope, refusing calls once `context`'s execution has ended.
    /// [`crate::Request::toolbox`] does this for you.
    pub fn dispatch(&self, context: CallContext) -> ToolboxDispatch {
        ToolboxDispatch { toolbox: self.clone(), context, fallback: None }
    }
}

impl fmt::Debug for Toolbox {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Toolbox").field("providers", &self.inner.table.providers()).finish()
    }
}

/// The dispatch [`Toolbox::dispatch`] builds.
pub struct ToolboxDispatch {
    toolbox: Toolbox,
    context: CallContext,
    fallback: Option<Arc<dyn Dispatch>>,
}

impl ToolboxDispatch {
    /// Send calls no tool of the toolbox takes to `dispatch` instead of refusing them.
    pub fn or_else(mut self, dispatch: Arc<dyn Dispatch>) -> ToolboxDispatch {
        self.fallback = Some(dispatch);
        self
    }
}

impl ToolboxDispatch {
    /// With discovery required, the refusal of a tool this execution has not described.
    fn undescribed(&self, route: Route) -> Option<String> {
        let described = self.toolbox.inner.described.as_ref()?;
        let table = &self.toolbox.inner.table;
        let provider = &table.providers()[route.provider].name;
        if provider == texts::DISCOVERY_PROVIDER_NAME {
            return None;
        }
        let path = format!("{provider}.{}", table.sandbox_name(route));
        (!described.has(self.context.execution_id(), &path)).then(|| texts::NOT_DESCRIBED.fill(&[&path]))
    }
}

impl Dispatch for ToolboxDispatch {
    fn dispatch(&self, call: ToolCall) -> DispatchFuture {
        if self.context.is_cancelled() {
            return Box::pin(std::future::ready(error_envelope(texts::EXECUTION_COMPLETED)));
        }
        let inner = &self.toolbox.inner;
        match inner.table.route(&call.provider, &call.tool) {
            Some(route) => {
                if let Some(refusal) = self.undescribed(route) {
                    return Box::pin(std::future::ready(error_envelope(&refusal)));
                }
                let handler = &inner.handlers[route.provider][route.tool];
                handler(&inner.table, route, &call.args_json, self.context.clone())
            }
            None => match &self.fallback {
                Some(fallback) => fallback.dispatch(call),
                None => Box::pin(std::future::ready(error_envelope(
                    &ToolNotFoundError::new(call.tool).to_string(),
                ))),
            },
        }
    }
}

impl Toolbox {
    /// Every provider and tool as a discovery catalog
    /// ([`codemode_protocol::discovery::Catalog`]), for search and describe.
    pub fn catalog(&self) -> Catalog {
        Catalog::from(&self.inner.table)
    }

    /// The same providers and one more, `catalog` ([`discovery_provider`]), whose
    /// `search` and `describe` answer over this toolbox's other tools. Its calls are
    /// ordinary tool calls (watched and budgeted like any other); every tool stays
    /// callable whether or not it was described.
    pub fn with_discovery(&self) -> Result<Toolbox, ToolTableError> {
        self.discovering(None)
    }

    /// [`Toolbox::with_discovery`], and a run may call only the tools it has described
    /// (`catalog.describe(path)`) first: any other call is refused at its call site with
    /// `texts::NOT_DESCRIBED`, never reaching the tool. So the model reads a tool's
    /// declaration before it calls it.
    pub fn with_required_discovery(&self) -> Result<Toolbox, ToolTableError> {
        self.discovering(Some(Arc::default()))
    }

    fn discovering(&self, described: Option<Arc<Described>>) -> Result<Toolbox, ToolTableError> {
        let index = Arc::new(CatalogIndex::new(self.catalog()));
        let provider = discovery_provider_recording(index, described.clone());
        let mut specs = self.inner.table.providers().to_vec();
        specs.push(provider.spec);
        let mut handlers = self.inner.handlers.clone();
        handlers.push(provider.handlers);
        let table = ToolTable::new(specs)?;
        Ok(Toolbox { inner: Arc::new(Inner { table, handlers, described }) })
    }
}

/// The provider `catalog` ([`texts::DISCOVERY_PROVIDER_NAME`]): `search(request)` answers
/// a [`codemode_protocol::discovery::SearchAnswer`] and `describe(path)` a
/// [`codemode_protocol::discovery::Description`] over `index`; a refusal (an unknown
/// provider or path) is thrown with its pinned text.
pub fn discovery_provider(index: Arc<CatalogIndex>) -> Provider {
    discovery_provider_recording(index, None)
}

/// [`discovery_provider`] whose `describe` records what each execution described.
fn discovery_provider_recording(index: Arc<CatalogIndex>, described: Option<Arc<Described>>) -> Provider {
    let searched = index.clone();
    Provider::new(texts::DISCOVERY_PROVIDER_NAME)
        .description(texts::DISCOVERY_PROVIDER_DESCRIPTION)
        .sync_tool(
            texts::SEARCH_TOOL_NAME,
            texts::SEARCH_TOOL_DESCRIPTION,
            move |(request,): (SearchRequest,), _| searched.search(&request),
        )
        .sync_tool(
            texts::DESCRIBE_TOOL_NAME,
            texts::DESCRIBE_TOOL_DESCRIPTION,
            move |(path,): (String,), context: CallContext| {
                let description = index.describe(&path)?;
                if let Some(described) = &described {
                    described.record(&context, description.path.clone());
                }
                Ok::<_, codemode_protocol::discovery::DescribeError>(description)
            },
        )
}
