//! The request `execute` takes: the wire's execute request plus what cannot cross a wire
//! (the dispatch and the outbound handler).

use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use codemode_protocol::{Dispatch, ExecuteRequest, ProviderDescriptor};

use crate::api::approval::{Approval, ApprovalPolicy, Approvals, Holding, ToolPattern};
use crate::api::clock::RunClock;
use crate::api::config::{ExecutorConfig, Limits};
use crate::api::outbound::Outbound;
use crate::api::toolbox::{CallContext, ExecutionEnd, ExecutionId, Toolbox};
use crate::api::watch::{self, Callback, Delivery, Event, Watcher};

/// One execution: code, providers, the host's dispatch and network policy, and overrides.
#[derive(Clone)]
pub struct Request {
    pub(crate) code: String,
    pub(crate) providers: Vec<ProviderDescriptor>,
    pub(crate) dispatch: Option<Arc<dyn Dispatch>>,
    /// The toolbox whose dispatch this request's execution opens ([`Request::open`]).
    pub(crate) toolbox: Option<Toolbox>,
    pub(crate) outbound: Option<Arc<dyn Outbound>>,
    pub(crate) timeout: Option<Duration>,
    pub(crate) memory_limit_bytes: Option<usize>,
    pub(crate) max_payload_bytes: Option<usize>,
    /// Overrides of the stack, result, log volume and calls in flight.
    pub(crate) local: LocalOverrides,
    /// Whether `WebAssembly` is on the global; `None` takes the executor's setting.
    pub(crate) web_assembly: Option<bool>,
    /// The host's watch on the run ([`Request::on_event`]).
    pub(crate) on_event: Option<Callback>,
    /// A watcher made already: the wire server's forwarder to its client, or (after
    /// [`Request::watch_host_side`]) the one a wire's log and waiting messages reach.
    pub(crate) watcher: Option<Watcher>,
    /// Reads the answers waiting on the connection, when the execution's thread may
    /// (a connection's lent input: `wire::lend`).
    pub(crate) answers: Option<ReadAnswers>,
    /// The toolbox's tools marked as needing approval, once it is opened.
    toolbox_marks: Option<Vec<ToolPattern>>,
    /// Which calls a person decides, and where they are held ([`Request::approvals`]).
    pub(crate) approval: Option<(ApprovalPolicy, Option<Approvals>)>,
    /// The run's wall clock, paused while a call is held; made when the request is
    /// opened with an approval policy that can hold, or by a wire server for its client.
    pub(crate) clock: Option<Arc<RunClock>>,
}

/// What an execution's thread calls while it waits awake for an answer.
pub(crate) type ReadAnswers = Arc<dyn Fn() + Send + Sync>;

#[derive(Clone, Copy, Default)]
pub(crate) struct LocalOverrides {
    stack_limit_bytes: Option<usize>,
    max_result_bytes: Option<usize>,
    max_log_bytes: Option<usize>,
    max_calls_in_flight: Option<usize>,
    cpu_time_limit: Option<Duration>,
    max_calls: Option<usize>,
}

impl Request {
    /// Run `code` with no providers, no dispatch and the network closed.
    pub fn new(code: impl Into<String>) -> Request {
        Request {
            code: code.into(),
            providers: Vec::new(),
            dispatch: None,
            toolbox: None,
            outbound: None,
            timeout: None,
            memory_limit_bytes: None,
            max_payload_bytes: None,
            local: LocalOverrides::default(),
            web_assembly: None,
            on_event: None,
            watcher: None,
            answers: None,
            toolbox_marks: None,
            approval: None,
            clock: None,
        }
    }

    /// The wire's request, with the dispatch it says it carries (`dispatch: true`).
    ///
    /// `retainHandles` is the caller's choice of [`crate::Executor::execute_retained`].
    pub fn from_wire(wire: ExecuteRequest, dispatch: Option<Arc<dyn Dispatch>>) -> Request {
        Request::from_wire_with(wire, dispatch, None)
    }

    /// [`Request::from_wire`] with the outbound handler it says it carries (`outbound: true`).
    pub fn from_wire_with(
        wire: ExecuteRequest,
        dispatch: Option<Arc<dyn Dispatch>>,
        outbound: Option<Arc<dyn Outbound>>,
    ) -> Request {
        let bytes = |n: Option<u64>| n.map(|n| usize::try_from(n).unwrap_or(usize::MAX));
        Request {
            code: wire.code,
            providers: wire.providers,
            dispatch: if wire.dispatch { dispatch } else { None },
            toolbox: None,
            outbound: if wire.outbound { outbound } else { None },
            timeout: wire.timeout_ms.map(Duration::from_millis),
            memory_limit_bytes: bytes(wire.memory_limit_bytes),
            max_payload_bytes: bytes(wire.max_payload_bytes),
            local: LocalOverrides {
                stack_limit_bytes: bytes(wire.stack_limit_bytes),
                max_result_bytes: bytes(wire.max_result_bytes),
                max_log_bytes: bytes(wire.max_log_bytes),
                max_calls_in_flight: bytes(wire.max_calls_in_flight),
                cpu_time_limit: wire.cpu_time_limit_ms.map(Duration::from_millis),
                max_calls: bytes(wire.max_calls),
            },
            web_assembly: wire.web_assembly.then_some(true),
            on_event: None,
            watcher: None,
            answers: None,
            toolbox_marks: None,
            approval: None,
            clock: None,
        }
    }

    /// Declare a provider.
    pub fn provider(mut self, provider: ProviderDescriptor) -> Request {
        self.providers.push(provider);
        self
    }

    /// Declare providers.
    pub fn providers(mut self, providers: impl IntoIterator<Item = ProviderDescriptor>) -> Request {
        self.providers.extend(providers);
        self
    }

    /// The host's dispatch; without one every call meets `Tool "<tool>" not found`.
    pub fn dispatch(mut self, dispatch: impl Dispatch) -> Request {
        self.dispatch = Some(Arc::new(dispatch));
        self
    }

    /// Serve the toolbox's providers: declare them, and answer their calls with its
    /// handlers, each given the execution's [`CallContext`]. Calls to anything else go
    /// to the dispatch when the request has one, and are refused otherwise.
    pub fn toolbox(mut self, toolbox: &Toolbox) -> Request {
        self.providers.extend(toolbox.descriptors());
        self.toolbox = Some(toolbox.clone());
        self
    }

    /// Hold the calls `policy` asks about in `approvals` until a person decides them, the
    /// run's wall clock paused meanwhile (its deadline moves by the time held; a CPU
    /// budget never counts waiting). A tool the toolbox marks as needing approval is
    /// always asked. Deny and the policy's approval timeout reject at the call site
    /// (`texts::APPROVAL_DENIED`, `texts::APPROVAL_TIMED_OUT`); the watch reports each
    /// held and decided call. The same under every executor: the policy and the decisions
    /// stay in this process.
    ///
    /// ```
    /// use codemode_executor::{ApprovalPolicy, Approvals, Decision, Executor, Request};
    /// use codemode_protocol::{ProviderDescriptor, ToolCall};
    ///
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// let approvals = Approvals::new();
    /// let policy = ApprovalPolicy::new().ask("store.delete".parse().unwrap());
    /// let request = Request::new("async () => await store.delete(7)")
    ///     .provider(ProviderDescriptor::new("store", ["delete"]))
    ///     .dispatch(|_: ToolCall| async { r#"{"result":"deleted"}"#.to_owned() })
    ///     .approvals(policy, &approvals);
    /// let run = tokio::spawn(async move { Executor::default().execute(request).await });
    /// while approvals.held().is_empty() {
    ///     tokio::task::yield_now().await;
    /// }
    /// let held = &approvals.held()[0];
    /// assert_eq!((held.provider.as_str(), held.tool.as_str(), held.arguments.as_str()), ("store", "delete", "[7]"));
    /// approvals.decide(held.id, Decision::Approve).unwrap();
    /// assert_eq!(run.await.unwrap().to_json_string(), r#"{"result":"deleted","logs":[]}"#);
    /// # });
    /// ```
    pub fn approvals(mut self, policy: ApprovalPolicy, approvals: &Approvals) -> Request {
        self.approval = Some((policy, Some(approvals.clone())));
        self
    }

    /// An approval policy with nobody to ask: calls it asks about are refused at the call
    /// site (`texts::APPROVAL_UNAVAILABLE`); its denials and passes hold as written.
    pub fn approval_policy(mut self, policy: ApprovalPolicy) -> Request {
        self.approval = Some((policy, None));
        self
    }

    /// The request's dispatch with its approval policy in front (and the toolbox's marked
    /// tools always asked), its run's clock made for the holds; `watcher` hears them.
    fn hold_asked_calls(&mut self, watcher: Option<&Watcher>) {
        let marked = self.toolbox_marks.take().unwrap_or_default();
        if self.approval.is_none() && marked.is_empty() {
            return;
        }
        let (policy, approvals) = self.approval.take().unwrap_or_else(|| (ApprovalPolicy::new(), None));
        let policy =
            marked.into_iter().rev().fold(policy, |policy, pattern| policy.first(pattern, Approval::Always));
        let clock = self.clock.get_or_insert_with(RunClock::new).clone();
        self.dispatch = Some(Arc::new(Holding {
            inner: self.dispatch.take(),
            policy,
            approvals,
            execution: ExecutionId::next(),
            calls: AtomicU64::new(0),
            clock,
            watcher: watcher.cloned(),
        }));
    }

    /// The request one execution runs: its toolbox opened for this execution (a fresh
    /// [`CallContext`]), and the guard that ends that context when the run ends.
    pub(crate) fn open(mut self) -> (Request, Option<ExecutionEnd>) {
        let Some(toolbox) = self.toolbox.take() else { return (self, None) };
        let marked = toolbox.needing_approval().into_iter();
        self.toolbox_marks =
            Some(marked.map(|(provider, tool)| ToolPattern::exact(&provider, &tool)).collect());
        let (context, end) = CallContext::new();
        let mut dispatch = toolbox.dispatch(context);
        if let Some(fallback) = self.dispatch.take() {
            dispatch = dispatch.or_else(fallback);
        }
        self.dispatch = Some(Arc::new(dispatch));
        (self, Some(end))
    }

    /// Watch the run: `callback` hears each [`Event`] as it happens (a call started or
    /// ended, a log line, what the run waits on), every one before `execute` returns.
    ///
    /// The engine never runs the callback and never waits for it: events go through a
    /// bounded queue ([`crate::EVENT_QUEUE`]), and the callback runs in the task that
    /// awaits `execute`. Keep it quick (it holds that task, not the engine); events it
    /// is too slow for are counted as [`Event::Dropped`]. A callback that panics is not
    /// called again; the run and its outcome are unaffected. A second `on_event` replaces
    /// the first.
    ///
    /// A callback rather than a channel: the events are over when `execute` returns, so
    /// a host needs no task of its own to read them and cannot forget to. With
    /// [`crate::RemoteExecutor`] and process isolation, calls are reported as they reach
    /// this host, and log lines and waits as the daemon or worker sends them (wire
    /// protocol version 3); a peer of version 2 or older sends log lines only with the
    /// outcome, and no waits.
    ///
    /// ```
    /// use std::sync::{Arc, Mutex};
    /// use codemode_executor::{Event, Executor, Request};
    ///
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// let seen = Arc::new(Mutex::new(Vec::new()));
    /// let lines = seen.clone();
    /// let request = Request::new("async () => { console.log('hi'); return 1 }").on_event(move |event| {
    ///     if let Event::Log { line, .. } = event {
    ///         lines.lock().unwrap().push(line.clone());
    ///     }
    /// });
    /// Executor::default().execute(request).await;
    /// assert_eq!(*seen.lock().unwrap(), ["hi"]);
    /// # });
    /// ```
    pub fn on_event(mut self, callback: impl Fn(&Event) + Send + Sync + 'static) -> Request {
        self.on_event = Some(std::sync::Arc::new(callback));
        self
    }

    /// The watcher the run reports through and the delivery to the host's callback,
    /// when the request is watched.
    pub(crate) fn watch(&mut self) -> (Option<Watcher>, Option<Delivery>) {
        let watched = self.watcher_and_delivery();
        self.hold_asked_calls(watched.0.as_ref());
        watched
    }

    fn watcher_and_delivery(&mut self) -> (Option<Watcher>, Option<Delivery>) {
        if let Some(watcher) = self.watcher.take() {
            return (Some(watcher), None);
        }
        match self.on_event.take() {
            Some(callback) => {
                let (watcher, delivery) = watch::channel(callback);
                (Some(watcher), Some(delivery))
            }
            None => (None, None),
        }
    }

    /// [`Request::watch`] for a run across a wire: calls are watched as they reach this
    /// host (the request's dispatch and outbound handler report them); the watcher stays
    /// in the request for the wire's log and waiting messages.
    pub(crate) fn watch_host_side(mut self) -> (Request, Option<Delivery>) {
        let (watcher, delivery) = self.watcher_and_delivery();
        self.hold_asked_calls(watcher.as_ref());
        if let Some(watcher) = &watcher {
            self.dispatch = self.dispatch.take().map(|inner| watch::watched_dispatch(inner, watcher));
            self.outbound = self.outbound.take().map(|inner| watch::watched_outbound(inner, watcher));
        }
        self.watcher = watcher;
        (self, delivery)
    }

    /// Run with `clock` as its wall clock (a wire server's, held by its client).
    pub(crate) fn with_clock(mut self, clock: Arc<RunClock>) -> Request {
        self.clock = Some(clock);
        self
    }

    /// Watch the run with `watcher` (the wire server's forwarder).
    pub(crate) fn forward_events(mut self, watcher: Watcher) -> Request {
        self.watcher = Some(watcher);
        self
    }

    /// Let the execution's thread read its answers itself while it waits awake for one.
    pub(crate) fn read_answers_with(mut self, answers: ReadAnswers) -> Request {
        self.answers = Some(answers);
        self
    }

    /// The host's `fetch` handler; without one `fetch` rejects and the network stays closed.
    pub fn outbound(mut self, outbound: impl Outbound) -> Request {
        self.outbound = Some(Arc::new(outbound));
        self
    }

    /// Override the wall-clock limit.
    pub fn timeout(mut self, timeout: Duration) -> Request {
        self.timeout = Some(timeout);
        self
    }

    /// Override the memory limit.
    pub fn memory_limit_bytes(mut self, bytes: usize) -> Request {
        self.memory_limit_bytes = Some(bytes);
        self
    }

    /// Override the payload bound on calls.
    pub fn max_payload_bytes(mut self, bytes: usize) -> Request {
        self.max_payload_bytes = Some(bytes);
        self
    }

    /// Override the engine's stack limit.
    pub fn stack_limit_bytes(mut self, bytes: usize) -> Request {
        self.local.stack_limit_bytes = Some(bytes);
        self
    }

    /// Override the bound on the result in the codec's JSON form.
    pub fn max_result_bytes(mut self, bytes: usize) -> Request {
        self.local.max_result_bytes = Some(bytes);
        self
    }

    /// Override the bound on the bytes of all log lines.
    pub fn max_log_bytes(mut self, bytes: usize) -> Request {
        self.local.max_log_bytes = Some(bytes);
        self
    }

    /// Override the bound on calls awaiting an answer at once.
    pub fn max_calls_in_flight(mut self, calls: usize) -> Request {
        self.local.max_calls_in_flight = Some(calls);
        self
    }

    /// Give the run a CPU time budget: the time its engine thread spends on it, read from
    /// that thread's own clock. Waiting on a call, a fetch or a timer is not counted, nor
    /// is any other thread's work, so a loaded host does not fail the program. Past it the
    /// engine is stopped and the run ends with kind `cpuTime` (`texts::CPU_TIME_LIMIT`);
    /// the wall clock ([`Request::timeout`]) still holds beside it.
    ///
    /// ```
    /// use std::time::Duration;
    /// use codemode_executor::{Executor, Request};
    /// use codemode_protocol::OutcomeKind;
    ///
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// let spin = Request::new("async () => { for (;;) {} }").cpu_time_limit(Duration::from_millis(50));
    /// let outcome = Executor::default().execute(spin).await;
    /// assert_eq!(outcome.kind(), OutcomeKind::CpuTime);
    /// assert_eq!(outcome.error_text(), Some("Execution used its CPU time limit of 50 ms."));
    /// let wait = "async () => { await new Promise(r => setTimeout(r, 200)); return 'waited' }";
    /// let outcome = Executor::default().execute(Request::new(wait).cpu_time_limit(Duration::from_millis(50))).await;
    /// assert_eq!(outcome.to_json_string(), r#"{"result":"waited","logs":[]}"#);
    /// # });
    /// ```
    pub fn cpu_time_limit(mut self, limit: Duration) -> Request {
        self.local.cpu_time_limit = Some(limit);
        self
    }

    /// Bound the calls the run may make, tool calls and fetches together. The call over it
    /// never reaches the dispatch, and the run ends with kind `callLimit`
    /// (`texts::CALL_LIMIT`): the program cannot catch its way past it.
    pub fn max_calls(mut self, calls: usize) -> Request {
        self.local.max_calls = Some(calls);
        self
    }

    /// Put `WebAssembly` on the program's global (V8 only; absent by default). Every byte
    /// it uses is charged to the memory limit before it is made: a module's bytes eightfold
    /// for its compiled code, and each memory's maximum, whole, per instance (a memory
    /// declaring none gets its initial size as its maximum). On QuickJS the run is refused
    /// with kind `invalid` and `texts::WEB_ASSEMBLY_NEEDS_V8`. Overrides
    /// [`ExecutorConfig::web_assembly`].
    ///
    /// ```
    /// use codemode_executor::{Executor, Request};
    /// use codemode_protocol::{OutcomeKind, texts::WEB_ASSEMBLY_NEEDS_V8};
    ///
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// let quickjs = Executor::default();
    /// let outcome = quickjs.execute(Request::new("async () => typeof WebAssembly").web_assembly(true)).await;
    /// assert_eq!((outcome.kind(), outcome.error_text()), (OutcomeKind::Invalid, Some(WEB_ASSEMBLY_NEEDS_V8)));
    /// let outcome = quickjs.execute(Request::new("async () => typeof WebAssembly")).await;
    /// assert_eq!(outcome.to_json_string(), r#"{"result":"undefined","logs":[]}"#);
    /// # });
    /// ```
    pub fn web_assembly(mut self, on: bool) -> Request {
        self.web_assembly = Some(on);
        self
    }

    /// Whether this request's run has `WebAssembly`, on an executor configured so.
    pub(crate) fn web_assembly_on(&self, config: &ExecutorConfig) -> bool {
        self.web_assembly.unwrap_or(config.web_assembly)
    }

    /// The refusal of a request for `WebAssembly` on an engine without it.
    pub(crate) fn web_assembly_refusal(&self, config: &ExecutorConfig) -> Option<&'static str> {
        (self.web_assembly_on(config) && !config.engine.has_web_assembly())
            .then_some(codemode_protocol::texts::WEB_ASSEMBLY_NEEDS_V8)
    }

    /// The wire's form of this request (what crosses to a worker process or a daemon).
    /// A watched request asks for `events` (wire version 3); a sender speaking to an older
    /// peer clears it.
    pub fn to_wire(&self) -> ExecuteRequest {
        ExecuteRequest {
            code: self.code.clone(),
            providers: self.providers.clone(),
            dispatch: self.dispatch.is_some() || self.toolbox.is_some(),
            outbound: self.outbound.is_some(),
            retain_handles: false,
            timeout_ms: self.timeout.map(|t| u64::try_from(t.as_millis()).unwrap_or(u64::MAX)),
            memory_limit_bytes: self.memory_limit_bytes.map(|b| b as u64),
            max_payload_bytes: self.max_payload_bytes.map(|b| b as u64),
            stack_limit_bytes: self.local.stack_limit_bytes.map(|b| b as u64),
            max_result_bytes: self.local.max_result_bytes.map(|b| b as u64),
            max_log_bytes: self.local.max_log_bytes.map(|b| b as u64),
            max_calls_in_flight: self.local.max_calls_in_flight.map(|b| b as u64),
            // A sender speaking below version 3 clears it (such a peer refuses the field).
            events: self.on_event.is_some() || self.watcher.is_some(),
            web_assembly: self.web_assembly == Some(true),
            cpu_time_limit_ms: self
                .local
                .cpu_time_limit
                .map(|t| u64::try_from(t.as_millis()).unwrap_or(u64::MAX)),
            max_calls: self.local.max_calls.map(|n| n as u64),
        }
    }

    /// The limits this request runs with: its overrides over the config's defaults,
    /// each within its minimum and the config's ceiling (`Err` is the refusal's text).
    pub(crate) fn limits(&self, config: &ExecutorConfig) -> Result<Limits, String> {
        let limits = self.limits_over(&config.limits);
        limits.check(&config.ceilings).map_err(|e| e.to_string())?;
        Ok(limits)
    }

    /// This request with every limit written out, so a worker process or daemon runs it
    /// with this executor's limits rather than its own defaults.
    pub(crate) fn with_limits(mut self, limits: &Limits, config: &ExecutorConfig) -> Request {
        self.web_assembly = Some(self.web_assembly_on(config));
        self.timeout = Some(limits.timeout);
        self.memory_limit_bytes = Some(limits.memory_limit_bytes);
        self.max_payload_bytes = Some(limits.max_payload_bytes);
        self.local = LocalOverrides {
            stack_limit_bytes: Some(limits.stack_limit_bytes),
            max_result_bytes: Some(limits.max_result_bytes),
            max_log_bytes: Some(limits.max_log_bytes),
            max_calls_in_flight: Some(limits.max_calls_in_flight),
            cpu_time_limit: limits.cpu_time_limit,
            max_calls: limits.max_calls,
        };
        self
    }

    pub(crate) fn limits_over(&self, defaults: &Limits) -> Limits {
        Limits {
            timeout: self.timeout.unwrap_or(defaults.timeout),
            memory_limit_bytes: self.memory_limit_bytes.unwrap_or(defaults.memory_limit_bytes),
            max_payload_bytes: self.max_payload_bytes.unwrap_or(defaults.max_payload_bytes),
            stack_limit_bytes: self.local.stack_limit_bytes.unwrap_or(defaults.stack_limit_bytes),
            max_result_bytes: self.local.max_result_bytes.unwrap_or(defaults.max_result_bytes),
            max_log_bytes: self.local.max_log_bytes.unwrap_or(defaults.max_log_bytes),
            max_calls_in_flight: self.local.max_calls_in_flight.unwrap_or(defaults.max_calls_in_flight),
            cpu_time_limit: self.local.cpu_time_limit.or(defaults.cpu_time_limit),
            max_calls: self.local.max_calls.or(defaults.max_calls),
        }
    }
}
