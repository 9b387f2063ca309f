//! Watching a run: the events an execution reports as it happens ([`crate::Request::on_event`]).
//!
//! The runtime (or, for a daemon and a worker process, the host side of the wire) only
//! ever `try_send`s an event into a bounded queue; the host's callback runs in the task
//! that awaits `execute`, never on the engine's thread. So a slow or blocking callback
//! cannot hold an engine, a panicking one cannot unwind into it, and a program that
//! makes events faster than the host reads them costs at most the queue: the overflow
//! is counted and reported as [`Event::Dropped`].
//!
//! The one exception is the wire server's own forwarder ([`forwarding`]), crate code
//! that never blocks: it runs on the engine's thread so that a log line leaves in
//! program order with the calls that thread sends.

use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use codemode_protocol::wire::LogLevel;
use codemode_protocol::{Answer, Dispatch, DispatchFuture, Outcome, ToolCall, read_answer};
use tokio::sync::mpsc;

use crate::api::outbound::{Outbound, OutboundFuture, OutboundRequest};
use crate::sync::lock;

/// Events waiting for the host at most; past it they are counted as dropped.
pub const EVENT_QUEUE: usize = 1024;

/// An event's arguments are cut to this many bytes (the cut ends with `…`).
pub const ARGUMENTS_PREVIEW_BYTES: usize = 256;

/// A provider's or tool's name and an error text in an event are cut to this many bytes.
pub const TEXT_PREVIEW_BYTES: usize = 1024;

/// The provider name a `fetch` is reported under; its tool is the method.
pub const FETCH_PROVIDER: &str = "fetch";

/// What a running execution reports, in the order it happens.
///
/// Every text in an event is bounded ([`ARGUMENTS_PREVIEW_BYTES`],
/// [`TEXT_PREVIEW_BYTES`]); log lines are the ones the outcome keeps, so they are bounded
/// by the run's log limit.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Event {
    /// A call left the sandbox (or was refused on the way out: a [`Event::CallEnded`]
    /// with the refusal follows at once). `call` numbers the calls of one run from 1; a
    /// `fetch` is reported under the provider [`FETCH_PROVIDER`] with its method as the tool.
    CallStarted {
        call: u64,
        provider: String,
        tool: String,
        /// The arguments' JSON (the codec's form, an array for positional arguments), cut
        /// to [`ARGUMENTS_PREVIEW_BYTES`].
        arguments: String,
    },
    /// The call's answer reached the run, after `duration`. `error` is the text the call
    /// rejects with (its envelope's `error`, a refusal by a bound, or the outside-envelope
    /// text), `None` when it answered with a result.
    CallEnded { call: u64, provider: String, tool: String, duration: Duration, error: Option<String> },
    /// One line of the logs, as the outcome keeps it (`console.warn` with its `[warn] `
    /// prefix). The log limit's marker line is reported too, as a [`ConsoleLevel::Warn`].
    Log { level: ConsoleLevel, line: String },
    /// The program has nothing to run until a call answers or a timer falls due: `calls`
    /// in flight and `timers` pending. Both zero means it waits on a promise nothing will
    /// settle, and the run ends at its timeout. Across a wire, reported when the peer
    /// speaks wire protocol version 3 or newer.
    Waiting { calls: usize, timers: usize },
    /// A call was held for a person's decision before its dispatch (an approval policy
    /// asked): `held` is its id in the host's `Approvals`; the arguments are cut to
    /// [`ARGUMENTS_PREVIEW_BYTES`]. The run's wall clock is paused while any is held.
    CallHeld { held: u64, provider: String, tool: String, arguments: String },
    /// The held call `held` was decided (or timed out): an approved one goes on to the
    /// dispatch, a denied or timed-out one rejects at its call site.
    CallDecided { held: u64, decided: Decided },
    /// This many events did not fit the queue ([`EVENT_QUEUE`]) because the host read
    /// them slower than the program made them; they are lost to the watcher (the
    /// outcome still has every kept log line).
    Dropped { events: u64 },
}

/// How a held call ended, as the watch reports it ([`crate::Event::CallDecided`]).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Decided {
    /// Approved as made.
    Approved,
    /// Approved with edited arguments.
    Edited,
    /// Denied, with the reason.
    Denied(String),
    /// Nobody decided within the approval timeout.
    TimedOut,
}

/// Which console method wrote a log line: the wire's own type, so a line crosses a
/// daemon or worker with no conversion.
pub use codemode_protocol::wire::LogLevel as ConsoleLevel;

/// The level the prelude's console passes with each line (the same numbers there).
pub(crate) fn level_from_number(n: f64) -> LogLevel {
    match n as u8 {
        1 => LogLevel::Info,
        2 => LogLevel::Debug,
        3 => LogLevel::Warn,
        4 => LogLevel::Error,
        _ => LogLevel::Log,
    }
}

/// The level of a line read back from an outcome's logs (by its prefix).
fn level_of_line(line: &str) -> LogLevel {
    if line.starts_with("[warn] ") || line.starts_with("[codemode] ") {
        LogLevel::Warn
    } else if line.starts_with("[error] ") {
        LogLevel::Error
    } else {
        LogLevel::Log
    }
}

/// What the host gave [`crate::Request::on_event`].
pub(crate) type Callback = Arc<dyn Fn(&Event) + Send + Sync>;

/// `text` cut to at most `max` bytes on a character boundary, ending with `…` when cut.
pub(crate) fn preview(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut end = max.saturating_sub('…'.len_utf8());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

/// The error a call's answer carries, read without building its result.
pub(crate) fn answer_error(answer: &str) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Envelope {
        #[serde(default)]
        error: Option<serde_json::Value>,
    }
    // serde would read an array as the struct's fields: only an object is an envelope.
    let object = answer.trim_start().starts_with('{');
    match serde_json::from_str::<Envelope>(answer) {
        Ok(Envelope { error: None | Some(serde_json::Value::Null) }) if object => None,
        Ok(Envelope { error: Some(serde_json::Value::String(text)) }) if object => {
            Some(preview(&text, TEXT_PREVIEW_BYTES))
        }
        Ok(Envelope { error: Some(other) }) if object => {
            Some(preview(&other.to_string(), TEXT_PREVIEW_BYTES))
        }
        // The rare rest (outside the envelope, a lone surrogate) read as the program reads it.
        _ => match read_answer(answer) {
            Ok(Answer::Result(_)) => None,
            Ok(Answer::Error(text)) => Some(preview(&text, TEXT_PREVIEW_BYTES)),
            Err(error) => Some(preview(&error.to_string(), TEXT_PREVIEW_BYTES)),
        },
    }
}

struct Shared {
    dropped: AtomicU64,
    /// The last event sent, when it was a `Waiting`: the same one is not sent twice.
    last_waiting: Mutex<Option<(usize, usize)>>,
    /// Numbers the calls a host-side watcher sees.
    next_call: AtomicU64,
}

/// The sending end: the runtime (or a wire's host side) reports through it and never waits.
#[derive(Clone)]
pub(crate) struct Watcher {
    sink: Sink,
    shared: Arc<Shared>,
}

/// Where a watcher's events go.
#[derive(Clone)]
enum Sink {
    /// The bounded queue the host's callback is handed events from.
    Queue(mpsc::Sender<Event>),
    /// Crate code run at once, on the reporting thread ([`forwarding`]).
    Direct(Callback),
}

impl Watcher {
    pub(crate) fn emit(&self, event: Event) {
        *lock(&self.shared.last_waiting) = None;
        self.send(event);
    }

    fn send(&self, event: Event) {
        let sender = match &self.sink {
            Sink::Queue(sender) => sender,
            Sink::Direct(forward) => {
                // Crate code that does not panic; caught all the same, the engine's thread
                // must never unwind.
                let _ = catch_unwind(AssertUnwindSafe(|| forward(&event)));
                return;
            }
        };
        let dropped = self.shared.dropped.load(Ordering::Acquire);
        if dropped > 0 {
            match sender.try_send(Event::Dropped { events: dropped }) {
                Ok(()) => {
                    self.shared.dropped.fetch_sub(dropped, Ordering::AcqRel);
                }
                Err(_) => {
                    self.shared.dropped.fetch_add(1, Ordering::AcqRel);
                    return;
                }
            }
        }
        if sender.try_send(event).is_err() {
            self.shared.dropped.fetch_add(1, Ordering::AcqRel);
        }
    }

    /// The run waits: reported unless it is what the last event already said.
    pub(crate) fn waiting(&self, calls: usize, timers: usize) {
        {
            let mut last = lock(&self.shared.last_waiting);
            if *last == Some((calls, timers)) {
                return;
            }
            *last = Some((calls, timers));
        }
        self.send(Event::Waiting { calls, timers });
    }

    pub(crate) fn call_started(&self, call: u64, provider: &str, tool: &str, arguments: &str) {
        self.emit(Event::CallStarted {
            call,
            provider: preview(provider, TEXT_PREVIEW_BYTES),
            tool: preview(tool, TEXT_PREVIEW_BYTES),
            arguments: preview(arguments, ARGUMENTS_PREVIEW_BYTES),
        });
    }

    pub(crate) fn call_ended(&self, started: &StartedCall, error: Option<String>) {
        self.emit(Event::CallEnded {
            call: started.call,
            provider: started.provider.clone(),
            tool: started.tool.clone(),
            duration: started.at.elapsed(),
            error,
        });
    }
}

/// What a call's end event repeats of its start.
pub(crate) struct StartedCall {
    pub(crate) call: u64,
    pub(crate) provider: String,
    pub(crate) tool: String,
    pub(crate) at: Instant,
}

impl StartedCall {
    pub(crate) fn new(call: u64, provider: &str, tool: &str) -> StartedCall {
        StartedCall {
            call,
            provider: preview(provider, TEXT_PREVIEW_BYTES),
            tool: preview(tool, TEXT_PREVIEW_BYTES),
            at: Instant::now(),
        }
    }
}

/// The receiving end, with the host's callback.
pub(crate) struct Delivery {
    receiver: mpsc::Receiver<Event>,
    callback: Option<Callback>,
    shared: Arc<Shared>,
}

/// A watcher and its delivery for `callback`.
pub(crate) fn channel(callback: Callback) -> (Watcher, Delivery) {
    let (sender, receiver) = mpsc::channel(EVENT_QUEUE);
    let shared = new_shared();
    (
        Watcher { sink: Sink::Queue(sender), shared: shared.clone() },
        Delivery { receiver, callback: Some(callback), shared },
    )
}

/// A watcher that runs `forward` at once on the thread reporting each event, with no
/// queue and no delivery: for the wire server, whose `forward` only queues a frame for
/// its client (bounded, never waiting), so that log lines leave in order with calls.
pub(crate) fn forwarding(forward: Callback) -> Watcher {
    Watcher { sink: Sink::Direct(forward), shared: new_shared() }
}

fn new_shared() -> Arc<Shared> {
    Arc::new(Shared {
        dropped: AtomicU64::new(0),
        last_waiting: Mutex::new(None),
        next_call: AtomicU64::new(0),
    })
}

impl Delivery {
    /// Call the callback; a panicking one is dropped and never called again (the run goes on).
    fn deliver(&mut self, event: &Event) {
        let Some(callback) = &self.callback else { return };
        if catch_unwind(AssertUnwindSafe(|| callback(event))).is_err() {
            self.callback = None;
        }
    }

    /// Every event already sent, then the count of those that did not fit.
    fn drain(&mut self) {
        while let Ok(event) = self.receiver.try_recv() {
            self.deliver(&event);
        }
        let dropped = self.shared.dropped.swap(0, Ordering::AcqRel);
        if dropped > 0 {
            self.deliver(&Event::Dropped { events: dropped });
        }
    }
}

/// Whether the logs reached the watcher live, or only with the outcome (a daemon or a
/// worker process speaking wire protocol version 2 or older).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Logs {
    Live,
    WithOutcome,
}

/// Run `run`, handing each event to the callback as it arrives; every event is handed
/// over before the outcome is returned, and the outcome's logs after them when they did
/// not come live. Dropping this future drops the run.
pub(crate) async fn delivered<T>(
    run: impl Future<Output = T>,
    delivery: Option<Delivery>,
    outcome: impl Fn(&T) -> (&Outcome, Logs),
) -> T {
    let Some(mut delivery) = delivery else { return run.await };
    let mut run = std::pin::pin!(run);
    let mut open = true;
    let ended = loop {
        tokio::select! {
            biased;
            ended = &mut run => break ended,
            event = delivery.receiver.recv(), if open => match event {
                Some(event) => delivery.deliver(&event),
                None => open = false,
            },
        }
    };
    delivery.drain();
    let (outcome, logs) = outcome(&ended);
    if logs == Logs::WithOutcome {
        for line in outcome.logs() {
            delivery.deliver(&Event::Log { level: level_of_line(line), line: line.clone() });
        }
    }
    ended
}

/// What the host side of a wire reports of one run from the peer's `log` and `waiting`
/// messages (wire protocol version 3), and the lines the peer dropped: the outcome keeps
/// every line, so those it has beyond the ones heard are reported as [`Event::Dropped`].
#[derive(Clone)]
pub(crate) struct WireEvents {
    watcher: Watcher,
    heard: Arc<AtomicU64>,
}

impl WireEvents {
    pub(crate) fn new(watcher: Watcher) -> WireEvents {
        WireEvents { watcher, heard: Arc::default() }
    }

    pub(crate) fn log(&self, level: LogLevel, line: String) {
        self.heard.fetch_add(1, Ordering::AcqRel);
        self.watcher.emit(Event::Log { level, line });
    }

    pub(crate) fn waiting(&self, calls: u64, timers: u64) {
        let count = |n: u64| usize::try_from(n).unwrap_or(usize::MAX);
        self.watcher.waiting(count(calls), count(timers));
    }

    /// The run's outcome arrived: the lines it keeps that were not heard were dropped.
    pub(crate) fn ended(&self, outcome: &Outcome) {
        let dropped = (outcome.logs().len() as u64).saturating_sub(self.heard.load(Ordering::Acquire));
        if dropped > 0 {
            self.watcher.emit(Event::Dropped { events: dropped });
        }
    }
}

/// A dispatch that reports each call of a run that crosses a wire as the host receives
/// it and when its answer is ready (the engine's own events stay on its side).
pub(crate) fn watched_dispatch(inner: Arc<dyn Dispatch>, watcher: &Watcher) -> Arc<dyn Dispatch> {
    Arc::new(WatchedDispatch { inner, watcher: watcher.clone() })
}

/// [`watched_dispatch`] for the outbound handler.
pub(crate) fn watched_outbound(inner: Arc<dyn Outbound>, watcher: &Watcher) -> Arc<dyn Outbound> {
    Arc::new(WatchedOutbound { inner, watcher: watcher.clone() })
}

impl Watcher {
    fn next_call(&self) -> u64 {
        self.shared.next_call.fetch_add(1, Ordering::AcqRel) + 1
    }
}

struct WatchedDispatch {
    inner: Arc<dyn Dispatch>,
    watcher: Watcher,
}

impl Dispatch for WatchedDispatch {
    fn dispatch(&self, call: ToolCall) -> DispatchFuture {
        let watcher = self.watcher.clone();
        let started = StartedCall::new(watcher.next_call(), &call.provider, &call.tool);
        watcher.call_started(started.call, &call.provider, &call.tool, &call.args_json);
        let answer = self.inner.dispatch(call);
        Box::pin(async move {
            let answer = answer.await;
            watcher.call_ended(&started, answer_error(&answer));
            answer
        })
    }
}

struct WatchedOutbound {
    inner: Arc<dyn Outbound>,
    watcher: Watcher,
}

impl Outbound for WatchedOutbound {
    fn fetch(&self, request: OutboundRequest) -> OutboundFuture {
        let watcher = self.watcher.clone();
        let started = StartedCall::new(watcher.next_call(), FETCH_PROVIDER, &request.method);
        watcher.call_started(started.call, FETCH_PROVIDER, &request.method, &fetch_arguments(&request.url));
        let answer = self.inner.fetch(request);
        Box::pin(async move {
            let answer = answer.await;
            watcher.call_ended(&started, answer.as_ref().err().map(|e| preview(e, TEXT_PREVIEW_BYTES)));
            answer
        })
    }
}

/// A fetch's arguments as an event shows them: its URL, as a JSON array.
pub(crate) fn fetch_arguments(url: &str) -> String {
    serde_json::to_string(&[preview(url, ARGUMENTS_PREVIEW_BYTES)]).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_preview_is_cut_on_a_character_boundary_and_says_so() {
        assert_eq!(preview("short", 8), "short");
        assert_eq!(preview("abcdefghij", 8), "abcde…");
        // `é` is two bytes: the cut never splits it.
        assert_eq!(preview("ééééé", 8), "éé…");
        assert!(preview(&"x".repeat(10_000), ARGUMENTS_PREVIEW_BYTES).len() <= ARGUMENTS_PREVIEW_BYTES);
    }

    #[test]
    fn an_answers_error_is_read_from_its_envelope() {
        assert_eq!(answer_error(r#"{"result":[1,2]}"#), None);
        assert_eq!(answer_error(r#"{"error":null,"result":1}"#), None);
        assert_eq!(answer_error(r#"{ "error": "no such order" }"#).as_deref(), Some("no such order"));
        assert_eq!(answer_error(r#"{"error":{"code":7}}"#).as_deref(), Some(r#"{"code":7}"#));
        assert_eq!(answer_error("[1]").as_deref(), Some(codemode_protocol::texts::OUTSIDE_ENVELOPE));
        assert_eq!(answer_error("not json").as_deref(), Some(codemode_protocol::texts::OUTSIDE_ENVELOPE));
    }

    #[tokio::test]
    async fn events_past_the_queue_are_counted_and_reported_after_the_rest() {
        let heard = Arc::new(Mutex::new(Vec::new()));
        let sink = heard.clone();
        let (watcher, delivery) =
            channel(Arc::new(move |event: &Event| sink.lock().unwrap().push(event.clone())));
        for n in 0..EVENT_QUEUE + 10 {
            watcher.emit(Event::Waiting { calls: n, timers: 0 });
        }
        delivered(async { Outcome::result(None, Vec::new()) }, Some(delivery), |outcome| {
            (outcome, Logs::Live)
        })
        .await;
        let heard = heard.lock().unwrap();
        assert_eq!(heard.len(), EVENT_QUEUE + 1);
        assert_eq!(heard.last(), Some(&Event::Dropped { events: 10 }));
    }
}
