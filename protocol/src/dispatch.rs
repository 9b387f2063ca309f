//! Dispatch: what a host implements, and `create_envelope_dispatch` with its latch.
//!
//! A call leaves the sandbox as three strings ([`ToolCall`]) and comes back as one
//! (the envelope). [`Dispatch`] is that function. Most hosts write a responder that
//! returns a value or fails, and let [`create_envelope_dispatch`] build the envelope,
//! turn failures into `{"error": message}` and refuse calls once the [`Latch`] closes.
//!
//! Only std futures here: the crate names no runtime.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use serde::{Deserialize, Serialize};

use crate::envelope::{error_envelope, result_envelope};
use crate::texts;

/// One tool call as it leaves the sandbox: provider, tool and the arguments as one JSON string.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ToolCall {
    /// The provider name, as the program wrote it (declared or not).
    pub provider: String,
    /// The tool name, as the program wrote it (declared or not).
    pub tool: String,
    /// The arguments in the codec's JSON: an array, or one object with `positionalArgs: false`.
    pub args_json: String,
}

impl ToolCall {
    /// A call of `provider.tool` with `args_json`.
    pub fn new(
        provider: impl Into<String>,
        tool: impl Into<String>,
        args_json: impl Into<String>,
    ) -> ToolCall {
        ToolCall { provider: provider.into(), tool: tool.into(), args_json: args_json.into() }
    }
}

/// The future a [`Dispatch`] returns: the envelope as one JSON string.
pub type DispatchFuture = Pin<Box<dyn Future<Output = String> + Send + 'static>>;

/// The host's side of every tool call: it decides what a call gets.
///
/// Any `Fn(ToolCall) -> impl Future<Output = String>` is a `Dispatch`. The answer is
/// the envelope; anything else reaches the program as the outside-envelope text.
pub trait Dispatch: Send + Sync + 'static {
    /// Answer one call with the envelope string.
    fn dispatch(&self, call: ToolCall) -> DispatchFuture;
}

impl<F, Fut> Dispatch for F
where
    F: Fn(ToolCall) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = String> + Send + 'static,
{
    fn dispatch(&self, call: ToolCall) -> DispatchFuture {
        Box::pin(self(call))
    }
}

/// The refusal of a tool nobody routes; its Display is `Tool "<tool>" not found`.
///
/// Every site that refuses a call composes the sentence from this type, so a model
/// reads one sentence wherever the refusal came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolNotFoundError {
    tool: String,
}

impl ToolNotFoundError {
    /// The refusal of `tool`.
    pub fn new(tool: impl Into<String>) -> ToolNotFoundError {
        ToolNotFoundError { tool: tool.into() }
    }

    /// The tool that was refused.
    pub fn tool(&self) -> &str {
        &self.tool
    }
}

impl fmt::Display for ToolNotFoundError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&texts::TOOL_NOT_FOUND.fill(&[&self.tool]))
    }
}

impl std::error::Error for ToolNotFoundError {}

/// The state latch of one execution: open while the host will serve its calls.
///
/// Clones share one latch. Close it when the execution is over (in a `finally`, or
/// by holding [`Latch::close_on_drop`]), and no call made on its behalf reaches the
/// responder again.
#[derive(Clone, Debug)]
pub struct Latch {
    open: Arc<AtomicBool>,
}

impl Latch {
    /// A new, open latch.
    pub fn open() -> Latch {
        Latch { open: Arc::new(AtomicBool::new(true)) }
    }

    /// Close it; every later call meets the completion text.
    pub fn close(&self) {
        self.open.store(false, Ordering::Release);
    }

    /// Whether calls still reach the responder.
    pub fn is_open(&self) -> bool {
        self.open.load(Ordering::Acquire)
    }

    /// A guard that closes this latch when dropped: the `finally` of the guide's sample.
    pub fn close_on_drop(&self) -> LatchGuard {
        LatchGuard { latch: self.clone() }
    }
}

impl Default for Latch {
    fn default() -> Latch {
        Latch::open()
    }
}

/// Closes its latch when dropped.
#[derive(Debug)]
#[must_use = "the latch closes when the guard is dropped"]
pub struct LatchGuard {
    latch: Latch,
}

impl Drop for LatchGuard {
    fn drop(&mut self) {
        self.latch.close();
    }
}

/// The dispatch [`create_envelope_dispatch`] builds.
pub struct EnvelopeDispatch<R> {
    latch: Latch,
    responder: R,
}

/// Build the envelope around a responder.
///
/// - What the responder returns is serialized into `{"result": value}`, binary included.
/// - A failure becomes `{"error": message}`, the message as its Display writes it, so a
///   throw inside a tool is a catchable error in the program, not a fault of the host.
/// - With the latch closed, a call is answered with `{"error": "Execution has already
///   completed."}` and never reaches the responder.
pub fn create_envelope_dispatch<R, Fut, T, E>(latch: Latch, responder: R) -> EnvelopeDispatch<R>
where
    R: Fn(ToolCall) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<T, E>> + Send + 'static,
    T: Serialize,
    E: fmt::Display,
{
    EnvelopeDispatch { latch, responder }
}

impl<R, Fut, T, E> Dispatch for EnvelopeDispatch<R>
where
    R: Fn(ToolCall) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<T, E>> + Send + 'static,
    T: Serialize,
    E: fmt::Display,
{
    fn dispatch(&self, call: ToolCall) -> DispatchFuture {
        if !self.latch.is_open() {
            return Box::pin(std::future::ready(error_envelope(texts::EXECUTION_COMPLETED)));
        }
        let answer = (self.responder)(call);
        Box::pin(async move {
            match answer.await {
                Ok(value) => result_envelope(&value).unwrap_or_else(|error| error_envelope(error.message())),
                Err(failure) => error_envelope(&failure.to_string()),
            }
        })
    }
}
