//! The host side of a call, run from the worker: the first poll happens at the moment the
//! program makes the call; a call that is not ready at once finishes on the caller's runtime,
//! unless the wire claimed it ([`claim_call`]: a daemon or worker process delivers the
//! answer it reads straight to the execution).
//!
//! Answering a ready call on the worker saves two thread hand-offs per call. A dispatch
//! must therefore not block its first poll (do blocking work in `spawn_blocking`), as
//! any async code must not.

use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use codemode_protocol::{Dispatch, ToolCall, error_envelope};
use tokio::runtime::Handle;

use crate::api::outbound::{Outbound, OutboundRequest, OutboundResponse};

/// The host's answer to a tool call or a fetch.
#[derive(Debug)]
pub(crate) enum CallAnswer {
    Tool(String),
    Fetch(Result<OutboundResponse, String>),
}

const DISPATCH_PANICKED: &str = "The host's dispatch failed (it panicked) while answering this call.";
const OUTBOUND_PANICKED: &str =
    "The host's outbound handler failed (it panicked) while answering this fetch.";

type AnswerFuture = Pin<Box<dyn Future<Output = CallAnswer> + Send>>;

/// Where an answer that arrives later is delivered: the execution's inbox.
pub(crate) type Deliver = Arc<dyn Fn(u64, CallAnswer) + Send + Sync>;

/// What the host gave one execution to answer its calls with.
pub(crate) struct Host {
    pub(crate) dispatch: Option<Arc<dyn Dispatch>>,
    pub(crate) outbound: Option<Arc<dyn Outbound>>,
    pub(crate) runtime: Handle,
    pub(crate) deliver: Deliver,
    /// The request's [`crate::api::request::ReadAnswers`], called while the execution waits awake.
    pub(crate) answers: Option<crate::api::request::ReadAnswers>,
}

impl Host {
    /// Start a tool call: `Some` when it answered at once, `None` when it goes on (its
    /// answer is delivered later under `id`). Requires a dispatch.
    pub(crate) fn tool_call(&self, id: u64, call: ToolCall) -> Option<CallAnswer> {
        let dispatch = self.dispatch.clone()?;
        let future: AnswerFuture = Box::pin(async move { CallAnswer::Tool(dispatch.dispatch(call).await) });
        self.start(id, future, || CallAnswer::Tool(error_envelope(DISPATCH_PANICKED)))
    }

    /// Start a fetch through the outbound handler, as [`Host::tool_call`].
    pub(crate) fn fetch(&self, id: u64, request: OutboundRequest) -> Option<CallAnswer> {
        let outbound = self.outbound.clone()?;
        let future: AnswerFuture = Box::pin(async move { CallAnswer::Fetch(outbound.fetch(request).await) });
        self.start(id, future, || CallAnswer::Fetch(Err(OUTBOUND_PANICKED.to_owned())))
    }

    fn start(&self, id: u64, future: AnswerFuture, panicked: fn() -> CallAnswer) -> Option<CallAnswer> {
        let _context = self.runtime.enter();
        let previous = STARTING.replace(Some(Claim { id, deliver: self.deliver.clone() }));
        let polled = poll_once(future, panicked);
        let claimed = STARTING.replace(previous).is_none();
        match polled {
            Ok(answer) => Some(answer),
            // The wire delivers the answer itself: nothing is left to poll.
            Err(_) if claimed => None,
            Err(pending) => {
                let deliver = self.deliver.clone();
                self.runtime.spawn(async move { deliver(id, pending.await) });
                None
            }
        }
    }
}

thread_local! {
    /// The call whose dispatch is being polled for the first time on this thread.
    static STARTING: std::cell::RefCell<Option<Claim>> = const { std::cell::RefCell::new(None) };
}

/// The right to answer one call by delivering it to its execution's inbox directly.
///
/// A call that crosses a connection is answered by a frame the connection's reader
/// reads. Handing that answer to a future that a task then polls costs two thread
/// hand-offs (the reader wakes the task, the task wakes the execution); with the claim
/// the reader delivers it itself, and the execution's thread is the only one woken.
pub(crate) struct Claim {
    id: u64,
    deliver: Deliver,
}

impl Claim {
    /// Deliver the call's answer; an answer for a call the execution no longer waits for
    /// (ended, timed out, cancelled) has no effect.
    pub(crate) fn answer(self, answer: CallAnswer) {
        (self.deliver)(self.id, answer)
    }
}

/// Claim the call whose dispatch (or outbound handler) is making its first poll on this
/// thread, if there is one and nobody claimed it. A dispatch that claims promises that
/// its future never becomes ready: the answer comes through the claim alone (a future
/// that is ready anyway wins, and the claim's later answer has no effect).
pub(crate) fn claim_call() -> Option<Claim> {
    STARTING.with(|starting| starting.borrow_mut().take())
}

/// Start a call's answer where the call arrived, in arrival order: poll it once now (so
/// the host sees calls in the order the program made them), then hand `finish` the
/// answer, at once or from a task on the current runtime. A panic becomes `panicked()`.
///
/// Every transport that answers calls (process isolation, the remote client) goes
/// through here, as the in-process [`Host`] does, so call order is the same on each.
pub(crate) fn answer_in_order<T: Send + 'static>(
    future: Pin<Box<dyn Future<Output = T> + Send>>,
    panicked: fn() -> T,
    finish: impl FnOnce(T) + Send + 'static,
) {
    match poll_once(future, panicked) {
        Ok(answer) => finish(answer),
        Err(pending) => {
            tokio::spawn(async move { finish(pending.await) });
        }
    }
}

/// The dispatch panicked: the text a call of `answer_in_order` settles with.
pub(crate) fn dispatch_panicked() -> String {
    error_envelope(DISPATCH_PANICKED)
}

/// The outbound handler panicked: the answer a fetch of `answer_in_order` settles with.
pub(crate) fn fetch_panicked() -> Result<crate::api::outbound::OutboundResponse, String> {
    Err(OUTBOUND_PANICKED.to_owned())
}

/// Poll once with a no-op waker (a spawned task polls again at once with its own).
fn poll_once<T>(
    future: Pin<Box<dyn Future<Output = T> + Send>>,
    panicked: fn() -> T,
) -> Result<T, Guarded<T>> {
    let mut guarded = Guarded { future, panicked };
    match Pin::new(&mut guarded).poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(answer) => Ok(answer),
        Poll::Pending => Err(guarded),
    }
}

/// An answer future whose panic becomes an answer, so a call always settles.
struct Guarded<T> {
    future: Pin<Box<dyn Future<Output = T> + Send>>,
    panicked: fn() -> T,
}

impl<T> Future for Guarded<T> {
    type Output = T;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
        let panicked = self.panicked;
        match catch_unwind(AssertUnwindSafe(|| self.future.as_mut().poll(cx))) {
            Ok(poll) => poll,
            Err(_) => Poll::Ready(panicked()),
        }
    }
}
