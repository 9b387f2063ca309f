//! Approvals: calls a person decides on, held on the host side before they reach the
//! dispatch.
//!
//! An [`ApprovalPolicy`] says, per provider and tool pattern, whether a call passes, is
//! denied, or is asked about; an asked call is held in an [`Approvals`] registry the host
//! keeps (listed by [`Approvals::held`], decided by [`Approvals::decide`], or by the
//! registry's [`Ask`] when it has one) while the run's wall clock is paused
//! ([`crate::api::clock`]). Invariants:
//! - A held call reaches no dispatch until it is approved, and at most once: a second
//!   decision of the same call is refused ([`DecisionError::NotHeld`]).
//! - What the dispatch gets is what the person saw, or the edited arguments they approved.
//! - Deny and the approval timeout reject at the call site with their pinned texts; the
//!   run's clock runs again as soon as no call of it is held.
//!
//! All of this wraps the request's dispatch, so it is the same in-process, under process
//! isolation and through a daemon: decisions never leave the host.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use codemode_protocol::{Dispatch, DispatchFuture, ToolCall, error_envelope, texts};
use tokio::sync::oneshot;

use crate::api::clock::RunClock;
use crate::api::toolbox::ExecutionId;
use crate::api::watch::{ARGUMENTS_PREVIEW_BYTES, Decided, Event as Watched, Watcher, preview};
use crate::sync::lock;

/// How long a held call waits for a decision unless the policy says otherwise.
pub const DEFAULT_APPROVAL_TIMEOUT: Duration = Duration::from_secs(15 * 60);

/// A provider and tool pattern: `provider.tool`, where either part may be `*`
/// (`db.*`, `*.delete`, `*`), or a provider name alone (all its tools).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolPattern {
    provider: Option<String>,
    tool: Option<String>,
}

/// Why a text is not a [`ToolPattern`]; its Display says what to write.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "{pattern:?} is not a tool pattern: write PROVIDER.TOOL, where either part may be *, such as db.exec or db.*"
)]
pub struct PatternError {
    /// The text given.
    pub pattern: String,
}

impl std::str::FromStr for ToolPattern {
    type Err = PatternError;

    fn from_str(text: &str) -> Result<ToolPattern, PatternError> {
        let part = |p: &str| (p != "*").then(|| p.to_owned());
        let refused = || PatternError { pattern: text.to_owned() };
        let (provider, tool) = match text.split_once('.') {
            Some((provider, tool)) => (provider, tool),
            None => (text, "*"),
        };
        if provider.is_empty() || tool.is_empty() {
            return Err(refused());
        }
        Ok(ToolPattern { provider: part(provider), tool: part(tool) })
    }
}

impl ToolPattern {
    /// The pattern of exactly `provider`.`tool`.
    pub fn exact(provider: &str, tool: &str) -> ToolPattern {
        ToolPattern { provider: Some(provider.to_owned()), tool: Some(tool.to_owned()) }
    }

    /// Whether a call to `provider`.`tool` matches.
    pub fn matches(&self, provider: &str, tool: &str) -> bool {
        self.provider.as_deref().is_none_or(|p| p == provider)
            && self.tool.as_deref().is_none_or(|t| t == tool)
    }
}

/// What a policy's function says of one call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// It goes to the dispatch.
    Approve,
    /// It is refused at the call site with this reason ([`texts::APPROVAL_DENIED`]).
    Deny(String),
    /// It is held until a person decides.
    Ask,
}

/// Whether calls matching a pattern need approval.
#[derive(Clone)]
pub enum Approval {
    /// They pass (the default for a call no rule names).
    Never,
    /// Each is held until a person decides.
    Always,
    /// Each is refused with this reason, nobody asked.
    Deny(String),
    /// A function of the call decides.
    Decide(Arc<dyn Fn(&ToolCall) -> Verdict + Send + Sync>),
}

impl std::fmt::Debug for Approval {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Approval::Never => f.write_str("Never"),
            Approval::Always => f.write_str("Always"),
            Approval::Deny(reason) => f.debug_tuple("Deny").field(reason).finish(),
            Approval::Decide(_) => f.write_str("Decide(..)"),
        }
    }
}

/// Which calls need approval, and how long a held call waits. The first rule whose
/// pattern matches decides; a call no rule matches passes.
#[derive(Clone, Debug)]
pub struct ApprovalPolicy {
    rules: Vec<(ToolPattern, Approval)>,
    timeout: Option<Duration>,
}

impl Default for ApprovalPolicy {
    fn default() -> ApprovalPolicy {
        ApprovalPolicy { rules: Vec::new(), timeout: Some(DEFAULT_APPROVAL_TIMEOUT) }
    }
}

impl ApprovalPolicy {
    /// No call needs approval yet; a held call waits [`DEFAULT_APPROVAL_TIMEOUT`].
    pub fn new() -> ApprovalPolicy {
        ApprovalPolicy::default()
    }

    /// Calls matching `pattern` are decided as `approval` says (after the rules before it).
    pub fn rule(mut self, pattern: ToolPattern, approval: Approval) -> ApprovalPolicy {
        self.rules.push((pattern, approval));
        self
    }

    /// `approval` for calls matching `pattern`, before every rule so far.
    pub(crate) fn first(mut self, pattern: ToolPattern, approval: Approval) -> ApprovalPolicy {
        self.rules.insert(0, (pattern, approval));
        self
    }

    /// Calls matching `pattern` are held for a person.
    pub fn ask(self, pattern: ToolPattern) -> ApprovalPolicy {
        self.rule(pattern, Approval::Always)
    }

    /// Calls matching `pattern` are refused with `reason`, nobody asked.
    pub fn deny(self, pattern: ToolPattern, reason: impl Into<String>) -> ApprovalPolicy {
        self.rule(pattern, Approval::Deny(reason.into()))
    }

    /// How long a held call waits for a decision; `None`: as long as it takes.
    pub fn timeout(mut self, timeout: Option<Duration>) -> ApprovalPolicy {
        self.timeout = timeout;
        self
    }

    /// How long a held call waits for a decision; `None`: as long as it takes.
    pub fn approval_timeout(&self) -> Option<Duration> {
        self.timeout
    }

    /// What this policy says of `call`.
    pub fn verdict(&self, call: &ToolCall) -> Verdict {
        let rule = self.rules.iter().find(|(pattern, _)| pattern.matches(&call.provider, &call.tool));
        match rule.map(|(_, approval)| approval) {
            None | Some(Approval::Never) => Verdict::Approve,
            Some(Approval::Always) => Verdict::Ask,
            Some(Approval::Deny(reason)) => Verdict::Deny(reason.clone()),
            Some(Approval::Decide(decide)) => decide(call),
        }
    }
}

/// The id of one held call, unique in its [`Approvals`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HeldId(pub u64);

impl std::fmt::Display for HeldId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A call waiting for a decision, as a person is shown it: its arguments exactly as the
/// dispatch will get them if approved unedited.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeldCall {
    /// Its id, for [`Approvals::decide`].
    pub id: HeldId,
    /// The execution that made it.
    pub execution: ExecutionId,
    /// Which call of that execution's dispatch it is, from 1.
    pub call: u64,
    /// The provider called.
    pub provider: String,
    /// The tool called.
    pub tool: String,
    /// The arguments' JSON (argsJson), whole.
    pub arguments: String,
    /// When it was held.
    pub since: SystemTime,
}

/// What a person decides of a held call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// The call goes to the dispatch as it was made.
    Approve,
    /// The call goes to the dispatch with these arguments (argsJson: an array for
    /// positional arguments, an object for an options object) instead.
    ApproveWith(String),
    /// The call is refused at the call site with this reason.
    Deny(String),
}

/// Why [`Approvals::decide`] refused a decision. Its Display is the pinned text.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecisionError {
    /// The call is not held: decided already, timed out, its run ended, or never held.
    #[error("{}", texts::APPROVAL_NOT_HELD.fill(&[&.0.to_string()]))]
    NotHeld(HeldId),
    /// [`Decision::ApproveWith`] arguments that are not JSON.
    #[error("{}", texts::APPROVAL_BAD_ARGUMENTS.fill(&[&.0.to_string(), .1]))]
    BadArguments(HeldId, String),
}

/// Who decides held calls as they come (the terminal, an MCP client's elicitation):
/// handed each held call, it answers a decision. A decision made meanwhile through
/// [`Approvals::decide`] wins; the asker's is then refused quietly.
pub trait Ask: Send + Sync + 'static {
    /// Decide `call`.
    fn ask(&self, call: HeldCall) -> Pin<Box<dyn Future<Output = Decision> + Send>>;
}

impl<F, Fut> Ask for F
where
    F: Fn(HeldCall) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Decision> + Send + 'static,
{
    fn ask(&self, call: HeldCall) -> Pin<Box<dyn Future<Output = Decision> + Send>> {
        Box::pin(self(call))
    }
}

/// The host's registry of held calls: cheap to clone (a clone is the same registry).
/// Give it to requests with [`crate::Request::approvals`]; list and decide from anywhere.
#[derive(Clone, Default)]
pub struct Approvals {
    inner: Arc<Registry>,
}

#[derive(Default)]
struct Registry {
    next: AtomicU64,
    held: Mutex<BTreeMap<HeldId, Waiting>>,
    asker: Option<Arc<dyn Ask>>,
}

struct Waiting {
    call: HeldCall,
    decide: oneshot::Sender<Decision>,
}

impl std::fmt::Debug for Approvals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Approvals").field("held", &self.held().len()).finish()
    }
}

impl Approvals {
    /// A registry whose held calls wait for [`Approvals::decide`].
    pub fn new() -> Approvals {
        Approvals::default()
    }

    /// A registry that hands each held call to `asker` as well.
    pub fn asking(asker: impl Ask) -> Approvals {
        Approvals { inner: Arc::new(Registry { asker: Some(Arc::new(asker)), ..Registry::default() }) }
    }

    /// The calls held now, by execution and then call: the calls one `Promise.all` made
    /// are listed together.
    pub fn held(&self) -> Vec<HeldCall> {
        let mut calls: Vec<HeldCall> = lock(&self.inner.held).values().map(|w| w.call.clone()).collect();
        calls.sort_by_key(|call| (call.execution, call.call));
        calls
    }

    /// Decide the held call `id`. Refused for a call not held; a call is decided once.
    pub fn decide(&self, id: HeldId, decision: Decision) -> Result<(), DecisionError> {
        if let Decision::ApproveWith(arguments) = &decision
            && let Err(problem) = serde_json::from_str::<serde_json::Value>(arguments)
        {
            return Err(DecisionError::BadArguments(id, problem.to_string()));
        }
        let waiting = lock(&self.inner.held).remove(&id).ok_or(DecisionError::NotHeld(id))?;
        // The run may have ended since: its call is gone, and so is the decision.
        let _ = waiting.decide.send(decision);
        Ok(())
    }

    /// Decide each of `ids` alike (the calls of one `Promise.all`, say): one result each.
    pub fn decide_all(&self, ids: &[HeldId], decision: &Decision) -> Vec<Result<(), DecisionError>> {
        ids.iter().map(|&id| self.decide(id, decision.clone())).collect()
    }

    /// Hold `call` until decided; the receiver hears the decision.
    fn hold(&self, call: HeldCall) -> (HeldId, oneshot::Receiver<Decision>) {
        let (decide, decided) = oneshot::channel();
        let id = call.id;
        lock(&self.inner.held).insert(id, Waiting { call: call.clone(), decide });
        if let Some(asker) = self.inner.asker.clone() {
            let registry = self.clone();
            tokio::spawn(async move {
                let decision = asker.ask(call).await;
                let _ = registry.decide(id, decision);
            });
        }
        (id, decided)
    }

    fn next_id(&self) -> HeldId {
        HeldId(self.inner.next.fetch_add(1, Ordering::Relaxed) + 1)
    }

    /// Forget `id` (its run ended, or it timed out): a later decision is refused.
    fn forget(&self, id: HeldId) {
        lock(&self.inner.held).remove(&id);
    }
}

/// A request's dispatch with its policy in front: what the executors run.
pub(crate) struct Holding {
    pub(crate) inner: Option<Arc<dyn Dispatch>>,
    pub(crate) policy: ApprovalPolicy,
    /// Where asked calls are held; `None`: nobody can decide, so they are refused.
    pub(crate) approvals: Option<Approvals>,
    pub(crate) execution: ExecutionId,
    pub(crate) calls: AtomicU64,
    pub(crate) clock: Arc<RunClock>,
    pub(crate) watcher: Option<Watcher>,
}

impl Dispatch for Holding {
    fn dispatch(&self, call: ToolCall) -> DispatchFuture {
        let number = self.calls.fetch_add(1, Ordering::Relaxed) + 1;
        let named =
            |template: texts::Template, more: &str| template.fill(&[&call.provider, &call.tool, more]);
        match self.policy.verdict(&call) {
            Verdict::Approve => pass(self.inner.as_ref(), call),
            Verdict::Deny(reason) => {
                Box::pin(std::future::ready(error_envelope(&named(texts::APPROVAL_DENIED, &reason))))
            }
            Verdict::Ask => match &self.approvals {
                None => Box::pin(std::future::ready(error_envelope(&named(texts::APPROVAL_UNAVAILABLE, "")))),
                Some(approvals) => self.held(approvals.clone(), call, number),
            },
        }
    }
}

/// `call` to the request's own dispatch, or refused as the executor refuses a call with none.
fn pass(inner: Option<&Arc<dyn Dispatch>>, call: ToolCall) -> DispatchFuture {
    match inner {
        Some(inner) => inner.dispatch(call),
        None => Box::pin(std::future::ready(error_envelope(
            &codemode_protocol::ToolNotFoundError::new(call.tool).to_string(),
        ))),
    }
}

impl Holding {
    /// Hold `call` until decided, its run's clock paused meanwhile.
    fn held(&self, approvals: Approvals, call: ToolCall, number: u64) -> DispatchFuture {
        let id = approvals.next_id();
        let held = HeldCall {
            id,
            execution: self.execution,
            call: number,
            provider: call.provider.clone(),
            tool: call.tool.clone(),
            arguments: call.args_json.clone(),
            since: SystemTime::now(),
        };
        if let Some(watcher) = &self.watcher {
            let arguments = preview(&call.args_json, ARGUMENTS_PREVIEW_BYTES);
            watcher.emit(Watched::CallHeld {
                held: id.0,
                provider: call.provider.clone(),
                tool: call.tool.clone(),
                arguments,
            });
        }
        let hold = self.clock.hold();
        let (_, decided) = approvals.hold(held);
        let forget = Forget { approvals, id };
        let (timeout, watcher, inner) = (self.policy.timeout, self.watcher.clone(), self.inner.clone());
        Box::pin(async move {
            let decision = match timeout {
                Some(timeout) => tokio::time::timeout(timeout, decided).await.ok().and_then(Result::ok),
                None => decided.await.ok(),
            };
            drop(hold);
            drop(forget);
            let ended = match &decision {
                Some(Decision::Approve) => Decided::Approved,
                Some(Decision::ApproveWith(_)) => Decided::Edited,
                Some(Decision::Deny(reason)) => Decided::Denied(reason.clone()),
                None => Decided::TimedOut,
            };
            if let Some(watcher) = &watcher {
                watcher.emit(Watched::CallDecided { held: id.0, decided: ended });
            }
            let refuse = |template: texts::Template, more: &str| {
                error_envelope(&template.fill(&[&call.provider, &call.tool, more]))
            };
            match decision {
                Some(Decision::Approve) => pass(inner.as_ref(), call).await,
                Some(Decision::ApproveWith(arguments)) => {
                    pass(inner.as_ref(), ToolCall { args_json: arguments, ..call }).await
                }
                Some(Decision::Deny(reason)) => refuse(texts::APPROVAL_DENIED, &reason),
                None => {
                    let ms = timeout.map_or(0, |t| t.as_millis());
                    refuse(texts::APPROVAL_TIMED_OUT, &ms.to_string())
                }
            }
        })
    }
}

/// Takes a held call off the registry when its wait ends, however it ends (its run's
/// future dropped included), so no decision reaches a call that is gone.
struct Forget {
    approvals: Approvals,
    id: HeldId,
}

impl Drop for Forget {
    fn drop(&mut self) {
        self.approvals.forget(self.id);
    }
}
