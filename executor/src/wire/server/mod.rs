//! The built-in executor behind the wire protocol: `codemode stdio`, `codemode serve`,
//! and any stream.
//!
//! One connection carries many executions, multiplexed by the client's execution ids.
//! Each call a program makes goes out as a `call` message and waits for the matching
//! `answer`; an answer for an execution or call that does not exist has no effect.
//!
//! A call costs as few thread hand-offs as the arrangement allows: the execution's thread
//! writes its `call` frame itself when nothing waits to be written (`FrameWriter`),
//! and the connection's reader hands the `answer` straight to the execution's inbox
//! (a claimed call), so the execution's thread is the only one woken.
//!
//! Outcomes pass through with the kind the executor gave them, as the connection's version
//! knows it (`lost` and `cancelled` are `internal` below version 4). The ones this layer
//! makes: an execute beyond [`ServeOptions::max_executions`] ends `invalid` (refused
//! before it ran), an execution the client cancels ends `cancelled`, one still running at
//! the drain timeout `lost`, and
//! an outcome longer than [`ServeOptions::max_frame_bytes`] is sent as kind
//! `resultTooLarge` instead ([`texts::OUTCOME_TOO_LARGE`]), so no frame past the bound
//! ever leaves.
//!
//! Bounds, so that nothing a client does grows the server without limit: before it is
//! authenticated a connection may send only a hello of [`ServeOptions::max_hello_bytes`]
//! within [`ServeOptions::hello_timeout`]; an idle one is closed after
//! [`ServeOptions::idle_timeout`]; and messages wait for the client in a queue. While it
//! holds [`ServeOptions::max_queued_bytes`] the connection reads nothing (so starts
//! nothing; an execution waiting awake on a lent input, `framing::lend`, reads nothing
//! either) and outcomes wait for room; one that waited while the client read nothing
//! for [`ServeOptions::send_timeout`] is dropped for a short one
//! ([`texts::CLIENT_NOT_READING`]). A run's `log` and `waiting` messages (version 3, for
//! an execute that asked) are queued only while the queue holds less than half its bound
//! and dropped otherwise: progress never holds a run or the daemon's memory.

pub mod worker;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use codemode_protocol::texts;
use codemode_protocol::wire::{
    ClientMessage, FetchAnswer, HOLD_VERSION, Hello, OLDEST_PROTOCOL_VERSION, PROTOCOL_NAME,
    PROTOCOL_VERSION, ProtocolError, ProtocolErrorKind, RefusalReason, ServerMessage, negotiate,
};
use codemode_protocol::{Dispatch, ExecuteRequest, Outcome, OutcomeKind, ToolCall, error_envelope};
use tokio::io::{AsyncBufRead, AsyncWrite};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::api::clock::{Hold, RunClock};
use crate::api::outbound::{Outbound, OutboundFuture, OutboundRequest, from_fetch_answer};
use crate::api::watch::{self, Event};
use crate::in_process::host::{CallAnswer, Claim, claim_call};
use crate::sync::lock;
use crate::wire::framing::{
    self, BoundedWriter, FrameError, FrameReader, FrameWriter, Lent, QuietStream, encode_frame, frame_length,
    lend, too_large_outcome, write_message,
};
use crate::{Execute, Request, RetainedExecution};

type Waiting = Arc<Mutex<HashMap<(u64, u64), Pending<String>>>>;
type FetchWaiting = Arc<Mutex<HashMap<(u64, u64), Pending<FetchAnswer>>>>;
/// Retained engines by execution id; each keeps its place among a daemon's executions
/// until released.
type Retained = Arc<Mutex<HashMap<u64, (RetainedExecution, Option<ExecutionSlot>)>>>;

/// A call on its way to the client: who gets the answer, and the span that times it.
struct Pending<T> {
    waiter: Waiter<T>,
    span: tracing::Span,
    sent: Instant,
}

impl<T> Pending<T> {
    fn new(waiter: Waiter<T>, span: tracing::Span) -> Pending<T> {
        Pending { waiter, span, sent: Instant::now() }
    }

    /// The call's end as an event of its span, as its answer arrives (before it is delivered).
    fn answered(span: tracing::Span, sent: Instant, error: bool) {
        crate::service::metrics::call_duration(sent.elapsed());
        span.in_scope(|| tracing::debug!(duration_ms = millis(sent.elapsed()), error, "call answered"));
    }
}

fn millis(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}

/// Who gets a call's answer when its frame arrives.
enum Waiter<T> {
    /// The execution itself: the reader delivers the answer to its inbox (the usual way).
    Claimed(Claim),
    /// A future awaiting it (a dispatch polled other than by an execution's first poll).
    Future(oneshot::Sender<T>),
}

impl<T> Waiter<T> {
    /// Who gets the answer of the call being made now: the execution whose first poll of
    /// its dispatch this is (claimed), or else a future, with its receiver.
    fn start() -> (Waiter<T>, Option<oneshot::Receiver<T>>) {
        match claim_call() {
            Some(claim) => (Waiter::Claimed(claim), None),
            None => {
                let (answer, answered) = oneshot::channel();
                (Waiter::Future(answer), Some(answered))
            }
        }
    }
}

impl Waiter<String> {
    fn answer(self, answer: String) {
        match self {
            Waiter::Claimed(claim) => claim.answer(CallAnswer::Tool(answer)),
            Waiter::Future(sender) => drop(sender.send(answer)),
        }
    }

    /// The connection is gone: the call fails (a future learns it from its closed channel).
    fn abandon(self) {
        if let Waiter::Claimed(claim) = self {
            claim.answer(CallAnswer::Tool(error_envelope(texts::CONNECTION_CLOSED)));
        }
    }
}

impl Waiter<FetchAnswer> {
    fn answer(self, answer: FetchAnswer) {
        match self {
            Waiter::Claimed(claim) => claim.answer(CallAnswer::Fetch(from_fetch_answer(answer))),
            Waiter::Future(sender) => drop(sender.send(answer)),
        }
    }

    fn abandon(self) {
        if let Waiter::Claimed(claim) = self {
            claim.answer(CallAnswer::Fetch(Err(texts::CONNECTION_CLOSED.to_owned())));
        }
    }
}

/// Executions live at once on one connection, by default.
pub const MAX_EXECUTIONS: usize = 1024;

/// The largest hello by default: all a connection may send before it is authenticated.
pub const MAX_HELLO_BYTES: usize = 4 << 10;

/// How long a new connection has for its hello by default (a daemon's TLS handshake
/// included).
pub const HELLO_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a connection may be idle by default: no message either way and no
/// execution live (retained engines count as live).
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(300);

/// Bytes of messages waiting for the client by default before the connection pauses.
pub const MAX_QUEUED_BYTES: usize = 4 << 20;

/// How long the client may read nothing, by default, while an outcome waits for room.
pub const SEND_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a closing connection keeps writing what is queued (its error frame) to a
/// client that may not be reading.
const CLOSE_GRACE: Duration = Duration::from_secs(1);

/// Why a connection ended other than by the client closing it. Its Display is the text
/// the connection's log line carries (for a refusal, the error frame's message).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConnectionError {
    /// The server closed the connection with an error frame of this kind and message
    /// (a bad or late hello, a wrong token, a malformed frame, an idle connection).
    #[error("{message}")]
    Refused {
        /// The error frame's kind.
        kind: ProtocolErrorKind,
        /// The error frame's message.
        message: String,
    },
    /// Writing to the client failed: it went away, or its stream broke.
    #[error("the connection failed while writing to the client")]
    Write,
    /// Stdin could not be set up for reading (`serve` on Tokio's stdio).
    #[error("cannot read stdin: {0}")]
    Stdin(#[source] std::io::Error),
}

/// What one connection is allowed. It is `#[non_exhaustive]`: start from
/// [`ServeOptions::default`] and set the fields you change.
#[derive(Clone)]
#[non_exhaustive]
pub struct ServeOptions {
    /// The token a client's hello must carry; `None` accepts any hello.
    pub token: Option<String>,
    /// The largest frame read or written (its JSON, without the newline). A longer one
    /// read closes the connection with an error frame; a longer outcome is sent as kind
    /// `resultTooLarge`, a longer call fails that call. Default [`crate::wire::MAX_FRAME_BYTES`].
    pub max_frame_bytes: usize,
    /// Executions live at once on one connection; an execute beyond it gets an error
    /// outcome of kind `invalid`. Default [`MAX_EXECUTIONS`].
    pub max_executions: usize,
    /// The largest hello; a longer one closes the connection with an error frame. Default
    /// [`MAX_HELLO_BYTES`].
    pub max_hello_bytes: usize,
    /// How long the hello may take; past it the connection is closed with an error frame.
    /// `None` waits for ever (stdio, where the peer is the parent). Default
    /// [`HELLO_TIMEOUT`].
    pub hello_timeout: Option<Duration>,
    /// How long a connection may be idle before it is closed with an error frame of kind
    /// `idle`; `None` never closes it. Default [`IDLE_TIMEOUT`].
    pub idle_timeout: Option<Duration>,
    /// Bytes of messages waiting for the client past which the connection starts no
    /// execution and reads nothing more until the client has read. Running executions
    /// carry on; their calls wait in the queue for answers that need the client to read.
    /// Default [`MAX_QUEUED_BYTES`].
    pub max_queued_bytes: usize,
    /// How long the client may read nothing while an outcome waits for room in the
    /// queue; past it that outcome is dropped for a short one of kind `internal`
    /// ([`texts::CLIENT_NOT_READING`]). `None` waits for ever. Default [`SEND_TIMEOUT`].
    pub send_timeout: Option<Duration>,
    /// Executions counted with other connections' (a daemon's, across all of them); an
    /// execute past its most gets an error outcome of kind `invalid`
    /// ([`texts::DAEMON_EXECUTIONS_FULL`]). `None` counts only this connection's.
    pub shared_executions: Option<Arc<SharedExecutions>>,
    /// The daemon's drain; `None` never drains.
    pub drain: Option<Drain>,
}

/// Executions live across many connections (a daemon's), the most it runs at once (each
/// holds a thread and an engine, so the bound is on the daemon's memory), and whether it
/// drains. Admitting an execution and starting the drain change one atomic word, so an
/// execute is either admitted before the drain (and runs to its outcome) or refused.
#[derive(Debug)]
pub struct SharedExecutions {
    /// Live executions, and [`DRAINING_BIT`] once draining.
    state: AtomicUsize,
    max: usize,
}

/// The bit of [`SharedExecutions::state`] that says the daemon drains.
const DRAINING_BIT: usize = 1 << (usize::BITS - 1);

impl SharedExecutions {
    /// At most `max` live at once.
    pub fn new(max: usize) -> Arc<SharedExecutions> {
        Arc::new(SharedExecutions { state: AtomicUsize::new(0), max: max.min(DRAINING_BIT - 1) })
    }

    /// Executions live now (running, retained, or with an outcome waiting to be sent).
    pub fn live(&self) -> usize {
        self.state.load(Ordering::Acquire) & !DRAINING_BIT
    }

    /// Admit no more executions; those admitted carry on.
    pub fn drain(&self) {
        self.state.fetch_or(DRAINING_BIT, Ordering::AcqRel);
    }

    /// Whether [`SharedExecutions::drain`] was called.
    pub fn is_draining(&self) -> bool {
        self.state.load(Ordering::Acquire) & DRAINING_BIT != 0
    }

    fn take(self: &Arc<Self>) -> Result<ExecutionSlot, RefusalReason> {
        let max = self.max;
        let taken = self.state.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
            (n & DRAINING_BIT == 0 && n < max).then_some(n + 1)
        });
        match taken {
            Ok(n) => {
                crate::service::metrics::in_flight(n + 1);
                Ok(ExecutionSlot(self.clone()))
            }
            Err(n) if n & DRAINING_BIT != 0 => Err(RefusalReason::Draining),
            Err(_) => Err(RefusalReason::Full),
        }
    }
}

/// A daemon's drain as each of its connections sees it.
#[derive(Clone, Debug, Default)]
pub struct Drain {
    /// Fired when the drain starts: version 2 clients are told, and a connection with
    /// nothing live closes.
    pub draining: CancellationToken,
    /// Fired when the drain timeout passes: what still runs ends with
    /// [`texts::DAEMON_SHUT_DOWN`].
    pub shut_down: CancellationToken,
    /// The drain timeout, for the text.
    pub timeout: Duration,
}

/// How often a draining connection looks whether it is done.
const DRAIN_POLL: Duration = Duration::from_millis(20);

/// How long a draining connection with nothing live stays open after its last message:
/// what the client sent as the drain began is answered, not cut off.
const DRAIN_QUIET: Duration = Duration::from_millis(250);

/// One execution's place among a daemon's; given back when dropped.
struct ExecutionSlot(Arc<SharedExecutions>);

impl Drop for ExecutionSlot {
    fn drop(&mut self) {
        let before = self.0.state.fetch_sub(1, Ordering::AcqRel);
        crate::service::metrics::in_flight((before & !DRAINING_BIT) - 1);
    }
}

impl Default for ServeOptions {
    fn default() -> ServeOptions {
        ServeOptions {
            token: None,
            max_frame_bytes: framing::MAX_FRAME_BYTES,
            max_executions: MAX_EXECUTIONS,
            max_hello_bytes: MAX_HELLO_BYTES,
            hello_timeout: Some(HELLO_TIMEOUT),
            idle_timeout: Some(IDLE_TIMEOUT),
            max_queued_bytes: MAX_QUEUED_BYTES,
            send_timeout: Some(SEND_TIMEOUT),
            shared_executions: None,
            drain: None,
        }
    }
}

/// Serve `executor` on one connection until the client closes it, accepting any hello,
/// with no deadline on the hello, no idle close and no send timeout: for stdio, where the
/// peer is the parent process (a pooled worker process waits idle for as long as its pool
/// keeps it).
///
/// Handed Tokio's own stdin (in a `BufReader` that has read nothing yet) and stdout, as
/// `codemode stdio` does, and both are pipes or sockets, it reads and writes the two
/// descriptors itself, non-blocking, instead: Tokio's stdio does each read and write on a
/// blocking thread, which costs two thread hand-offs per frame each way (their flags are
/// put back when it returns). Anything else it serves as given.
pub async fn serve<E, R, W>(executor: E, input: R, output: W) -> Result<(), ConnectionError>
where
    E: Execute + 'static,
    R: AsyncBufRead + Unpin + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let options = stdio_options();
    if is_tokio_stdio(&input, &output)
        && let Some(lent) = QuietStream::lend_stdio(options.max_frame_bytes)
    {
        drop((input, output));
        let lent = lent.map_err(ConnectionError::Stdin)?;
        return serve_lent(Arc::new(executor), lent, options).await;
    }
    serve_with(executor, input, output, options).await
}

/// What stdio is allowed: no deadline on the hello, no idle close, no send timeout (the
/// peer is the parent process).
pub(crate) fn stdio_options() -> ServeOptions {
    ServeOptions { hello_timeout: None, idle_timeout: None, send_timeout: None, ..ServeOptions::default() }
}

/// Serve a connection whose input is lent ([`framing::lend`]).
pub(crate) async fn serve_lent(
    executor: Arc<dyn Execute>,
    lent: Lent,
    options: ServeOptions,
) -> Result<(), ConnectionError> {
    let (input, reader, writing) = lent;
    serve_connection(executor, reader, writing, options, Some(input)).await
}

/// The engine's name in metrics: the one the executor runs on, or `remote`.
pub(crate) fn engine_name(executor: &dyn Execute) -> &'static str {
    executor.profile().engine.map_or("remote", |engine| engine.name())
}

/// Whether `input` and `output` are Tokio's stdin, unread, and stdout.
fn is_tokio_stdio<R: 'static, W: 'static>(input: &R, output: &W) -> bool {
    use std::any::Any;
    let input = (input as &dyn Any).downcast_ref::<tokio::io::BufReader<tokio::io::Stdin>>();
    let output = (output as &dyn Any).downcast_ref::<tokio::io::Stdout>();
    input.is_some_and(|input| input.buffer().is_empty()) && output.is_some()
}

/// Whether `given` is `expected`, in time that does not depend on where they differ.
fn token_matches(given: Option<&str>, expected: &str) -> bool {
    use subtle::ConstantTimeEq;
    given.is_some_and(|given| bool::from(given.as_bytes().ct_eq(expected.as_bytes())))
}

fn refusal(kind: ProtocolErrorKind, message: String) -> ServerMessage {
    ServerMessage::Error(ProtocolError { kind, message })
}

/// Write a refusal before the connection is authenticated, giving up on a client that
/// does not read; the problem comes back as the connection's ending.
async fn refuse<W: AsyncWrite + Unpin>(
    output: &mut W,
    kind: ProtocolErrorKind,
    message: String,
) -> Result<(), ConnectionError> {
    let _ = tokio::time::timeout(CLOSE_GRACE, write_message(output, &refusal(kind, message.clone()))).await;
    Err(ConnectionError::Refused { kind, message })
}

/// Serve `executor` on one connection with `options`. Executions still running when the
/// client goes are dropped, their engines disposed.
pub async fn serve_with<E, R, W>(
    executor: E,
    input: R,
    output: W,
    options: ServeOptions,
) -> Result<(), ConnectionError>
where
    E: Execute + 'static,
    R: AsyncBufRead + Unpin,
    W: AsyncWrite + Unpin + Send + 'static,
{
    serve_shared(Arc::new(executor), input, output, options).await
}

/// [`serve_with`] for an executor already shared between connections.
pub(crate) async fn serve_shared<R, W>(
    executor: Arc<dyn Execute>,
    input: R,
    output: W,
    options: ServeOptions,
) -> Result<(), ConnectionError>
where
    R: AsyncBufRead + Unpin,
    W: AsyncWrite + Unpin + Send + 'static,
{
    serve_connection(executor, input, output, options, None).await
}

/// [`serve_with`], and with `lent` (the connection's input, which `input` reads) each
/// execution waiting awake for an answer reads the answers at the input's head itself.
async fn serve_connection<R, W>(
    executor: Arc<dyn Execute>,
    mut input: R,
    mut output: W,
    options: ServeOptions,
    lent: Option<Arc<lend::Input>>,
) -> Result<(), ConnectionError>
where
    R: AsyncBufRead + Unpin,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let mut frames = FrameReader::new(options.max_hello_bytes);
    let version = match greet(&mut frames, &mut input, &options).await {
        Ok(Some(version)) => version,
        Ok(None) => return Ok(()),
        Err((kind, message)) => return refuse(&mut output, kind, message).await,
    };
    frames.set_max_bytes(options.max_frame_bytes);
    let (out, mut writer) = Outgoing::start(output, &options, version);
    let executions = Executions {
        executor,
        out: out.clone(),
        version,
        lent,
        waiting: Arc::default(),
        fetch_waiting: Arc::default(),
        running: Arc::default(),
        retained: Arc::default(),
        unsent: Arc::default(),
        clocks: Arc::default(),
    };
    let drain = options.drain.clone().unwrap_or_default();
    let mut told_draining = false;
    // One clock for the whole connection: a client sending without pause cannot keep
    // resetting it and so hold off the drain's end.
    let mut drain_tick = tokio::time::interval_at(tokio::time::Instant::now() + DRAIN_POLL, DRAIN_POLL);
    drain_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut writer_done = false;
    let result = loop {
        // The idle clock runs only while nothing is live.
        let idle_at = options.idle_timeout.map(|limit| {
            let since = if executions.live() { Instant::now() } else { out.last_activity() };
            tokio::time::Instant::from_std(since + limit)
        });
        // A client that does not read stops being read: nothing new starts for it, and its
        // own writes wait. Every branch is safe to drop: `frames` keeps a partial frame.
        let full = out.is_full();
        let frame = tokio::select! {
            () = drain.draining.cancelled(), if !told_draining => {
                told_draining = true;
                if version >= 2 {
                    let _ = out.push(ServerMessage::Draining {});
                }
                continue;
            }
            _ = drain_tick.tick(), if told_draining => {
                if drain.shut_down.is_cancelled() {
                    // The drain timeout passed: what still runs ends now, with its outcome.
                    executions.shut_down(drain.timeout);
                    break Ok(());
                }
                // Drained: nothing of this connection's is left to finish, and the client has
                // been quiet a while (an execute it sent as the drain began was read, and
                // refused or run).
                if !executions.live() && out.last_activity().elapsed() >= DRAIN_QUIET {
                    break Ok(());
                }
                continue;
            }
            frame = frames.next::<_, ClientMessage>(&mut input), if !full => frame,
            () = out.room(None), if full => {
                if out.is_closed() {
                    writer_done = true;
                    let _ = (&mut writer).await;
                    break Err(ConnectionError::Write);
                }
                continue;
            }
            _ = &mut writer, if !writer_done => {
                writer_done = true;
                break Err(ConnectionError::Write);
            }
            () = sleep_until(idle_at) => {
                let limit = options.idle_timeout.unwrap_or_default();
                if executions.live() || out.last_activity().elapsed() < limit {
                    continue;
                }
                let message = texts::CONNECTION_IDLE.fill(&[&limit.as_millis().to_string()]);
                let _ = out.push(refusal(ProtocolErrorKind::Idle, message.clone()));
                break Err(ConnectionError::Refused { kind: ProtocolErrorKind::Idle, message });
            }
        };
        let message = match frame {
            Ok(Some(message)) => message,
            Ok(None) => break Ok(()),
            Err(problem) => {
                let _ = out.push(refusal(problem.kind(), problem.to_string()));
                break Err(ConnectionError::Refused { kind: problem.kind(), message: problem.to_string() });
            }
        };
        out.touch();
        if let Err(problem) = executions.handle(message, &options) {
            break Err(problem);
        }
    };
    executions.end();
    // What is queued (an error frame) goes out if the client reads it within the grace.
    out.finish();
    if !writer_done && tokio::time::timeout(CLOSE_GRACE, &mut writer).await.is_err() {
        writer.abort();
    }
    // Outcomes still waiting for room learn that none will come.
    out.close();
    framing::give_back_memory();
    result
}

/// Read the client's hello within the bounds: the version agreed, `None` when the client
/// closed first, or the refusal (its kind and text) to write before closing.
async fn greet<R: AsyncBufRead + Unpin>(
    frames: &mut FrameReader,
    input: &mut R,
    options: &ServeOptions,
) -> Result<Option<u32>, (ProtocolErrorKind, String)> {
    let first = match options.hello_timeout {
        None => frames.next::<_, ClientMessage>(input).await,
        Some(limit) => match tokio::time::timeout(limit, frames.next(input)).await {
            Ok(first) => first,
            Err(_) => {
                let message = texts::HELLO_TIMEOUT.fill(&[&limit.as_millis().to_string()]);
                return Err((ProtocolErrorKind::Hello, message));
            }
        },
    };
    match first {
        Ok(Some(ClientMessage::Hello(hello)))
            if hello.protocol == PROTOCOL_NAME && negotiate(hello.version).is_some() =>
        {
            if let Some(expected) = &options.token
                && !token_matches(hello.token.as_deref(), expected)
            {
                let message = if hello.token.is_none() {
                    "this daemon requires a token and the hello carried none; pass the token the daemon was started with"
                } else {
                    "the hello's token is not this daemon's token"
                };
                return Err((ProtocolErrorKind::Unauthorized, message.to_owned()));
            }
            Ok(Some(negotiate(hello.version).unwrap_or(OLDEST_PROTOCOL_VERSION)))
        }
        Ok(Some(ClientMessage::Hello(hello))) => {
            let message = format!(
                "this server speaks {PROTOCOL_NAME} versions {OLDEST_PROTOCOL_VERSION} to {PROTOCOL_VERSION}; the client said {} version {}",
                hello.protocol, hello.version
            );
            Err((ProtocolErrorKind::Hello, message))
        }
        Ok(Some(_)) => Err((ProtocolErrorKind::Hello, "the first message must be a hello".to_owned())),
        Ok(None) => Ok(None),
        Err(FrameError::TooLarge { max, .. }) => {
            Err((ProtocolErrorKind::FrameTooLarge, texts::HELLO_TOO_LARGE.fill(&[&max.to_string()])))
        }
        Err(problem) => Err((problem.kind(), problem.to_string())),
    }
}

/// The most held time a client's holds ([`ClientMessage::Hold`]) take off one execution's
/// deadline: past it the clock runs again, so a client cannot keep an engine here forever.
pub const MAX_HELD: Duration = Duration::from_secs(3600);

/// One connection's executions: the executor they run on, what runs, what waits for the
/// client's answer, what is retained, and what waits to send its outcome.
struct Executions {
    executor: Arc<dyn Execute>,
    out: Outgoing,
    version: u32,
    /// The connection's input, lent to an execution waiting awake for an answer.
    lent: Option<Arc<lend::Input>>,
    waiting: Waiting,
    fetch_waiting: FetchWaiting,
    running: Arc<Mutex<HashMap<u64, JoinHandle<()>>>>,
    retained: Retained,
    /// Executions whose outcome waits to be queued.
    unsent: Arc<Mutex<HashSet<u64>>>,
    /// Version 6: the wall clocks of running executions, which the client holds while a
    /// call waits for a person's decision.
    clocks: Arc<Mutex<HashMap<u64, HeldClock>>>,
}

/// A running execution's clock and the holds its client has on it.
struct HeldClock {
    clock: Arc<RunClock>,
    /// Holds the client sent less those it ended: a count, so any number costs nothing.
    holds: u64,
    hold: Option<Hold>,
}

impl Executions {
    /// Executions live on the connection: running, retained, or with an outcome unsent.
    fn count(&self) -> usize {
        lock(&self.running).len() + lock(&self.retained).len() + lock(&self.unsent).len()
    }

    fn live(&self) -> bool {
        self.count() > 0
    }

    /// One message from the client after its hello; `Err` ends the connection.
    fn handle(&self, message: ClientMessage, options: &ServeOptions) -> Result<(), ConnectionError> {
        match message {
            ClientMessage::Hello(_) => {}
            ClientMessage::Ping { id } => {
                let _ = self.out.push(ServerMessage::Pong { id });
            }
            ClientMessage::Execute { execution, request } => self.execute(execution, request, options)?,
            ClientMessage::Answer { execution, call, answer } => {
                answer_call(&self.waiting, execution, call, answer)
            }
            ClientMessage::FetchAnswer { execution, call, answer } => {
                answer_fetch(&self.fetch_waiting, execution, call, answer);
            }
            ClientMessage::Cancel { execution } => self.cancel(execution),
            ClientMessage::Release { execution } => {
                lock(&self.retained).remove(&execution);
            }
            ClientMessage::Hold { execution } => {
                if let Some(held) = lock(&self.clocks).get_mut(&execution) {
                    held.holds = held.holds.saturating_add(1);
                    if held.hold.is_none() {
                        held.hold = Some(held.clock.hold());
                    }
                }
            }
            ClientMessage::Unhold { execution } => {
                if let Some(held) = lock(&self.clocks).get_mut(&execution) {
                    held.holds = held.holds.saturating_sub(1);
                    if held.holds == 0 {
                        held.hold = None;
                    }
                }
            }
        }
        Ok(())
    }

    /// Start an execute, or refuse it with an outcome; `Err` (an id still live) ends the
    /// connection.
    fn execute(
        &self,
        execution: u64,
        request: ExecuteRequest,
        options: &ServeOptions,
    ) -> Result<(), ConnectionError> {
        if lock(&self.running).contains_key(&execution)
            || lock(&self.retained).contains_key(&execution)
            || lock(&self.unsent).contains(&execution)
        {
            let problem = format!("execution {execution} is still live; give each execution its own id");
            let _ = self.out.push(refusal(ProtocolErrorKind::DuplicateExecution, problem.clone()));
            return Err(ConnectionError::Refused {
                kind: ProtocolErrorKind::DuplicateExecution,
                message: problem,
            });
        }
        if self.count() >= options.max_executions {
            let text = texts::TOO_MANY_EXECUTIONS.fill(&[&options.max_executions.to_string()]);
            let outcome = Outcome::failure(OutcomeKind::Invalid, text, Vec::new());
            let _ = self.out.push(ServerMessage::Outcome { execution, outcome });
            return Ok(());
        }
        let Some(slot) = self.slot(execution, options) else { return Ok(()) };
        let retain = request.retain_handles;
        // A child of the connection's span (the daemon's), which this task is in.
        let span = tracing::info_span!("execution", id = execution);
        let (request, forwarder) = self.request(execution, request, &span);
        span.in_scope(|| tracing::info!("execution started"));
        // The task waits until its id is recorded as running: a run that ends at once
        // must not remove its id before the id is there (which left a stale entry that
        // refused the id's next use).
        let (recorded, gate) = oneshot::channel::<()>();
        let run = Run { execution, retain, slot, forwarder, started: Instant::now() };
        let task = tokio::spawn(self.run(run, request, gate).instrument(span));
        lock(&self.running).insert(execution, task);
        let _ = recorded.send(());
        Ok(())
    }

    /// The execution's place among the daemon's (`Some(None)` outside a daemon), or `None`
    /// when the daemon refused it (its refusal sent).
    fn slot(&self, execution: u64, options: &ServeOptions) -> Option<Option<ExecutionSlot>> {
        let Some(shared) = &options.shared_executions else { return Some(None) };
        let reason = match shared.take() {
            Ok(slot) => return Some(Some(slot)),
            Err(reason) => reason,
        };
        let (message, kind) = match reason {
            RefusalReason::Draining => (texts::DAEMON_DRAINING.to_owned(), OutcomeKind::Internal),
            RefusalReason::Full => {
                (texts::DAEMON_EXECUTIONS_FULL.fill(&[&shared.max.to_string()]), OutcomeKind::Invalid)
            }
        };
        tracing::warn!(execution, ?reason, "execution refused");
        crate::service::metrics::ended("refused");
        // A version 1 client knows no refusal: for it, an outcome.
        let _ = self.out.push(if self.version >= 2 {
            ServerMessage::Refused { execution, reason, message }
        } else {
            let outcome = Outcome::failure(kind, message, Vec::new());
            ServerMessage::Outcome { execution, outcome }
        });
        None
    }

    /// The request as the executor runs it: its calls and fetches sent to the client, its
    /// answers read from the lent input while it waits awake, and (version 3, asked for)
    /// its log lines and waits forwarded as they happen.
    fn request(
        &self,
        execution: u64,
        request: ExecuteRequest,
        span: &tracing::Span,
    ) -> (Request, Option<Arc<EventForwarder>>) {
        let next_call = Arc::new(AtomicU64::new(1));
        let dispatch: Arc<dyn Dispatch> = Arc::new(WireDispatch {
            execution,
            span: span.clone(),
            next_call: next_call.clone(),
            out: self.out.clone(),
            waiting: self.waiting.clone(),
        });
        let outbound: Arc<dyn Outbound> = Arc::new(WireOutbound {
            execution,
            span: span.clone(),
            next_call,
            out: self.out.clone(),
            waiting: self.fetch_waiting.clone(),
        });
        let forwarder = (request.events && self.version >= 3)
            .then(|| Arc::new(EventForwarder::new(execution, self.out.clone())));
        let mut request = Request::from_wire_with(request, Some(dispatch), Some(outbound));
        if let Some(lent) = &self.lent {
            let (lent, waiting, fetch_waiting, out) =
                (lent.clone(), self.waiting.clone(), self.fetch_waiting.clone(), self.out.clone());
            request = request.read_answers_with(Arc::new(move || {
                // A client that does not read is not read from (the loop's `full`): its
                // answers wait in the input, and the execution's next call with them.
                if !out.is_full() {
                    lent.read_answers(|frame| {
                        !out.is_full() && deliver_answer(frame, &waiting, &fetch_waiting, &out)
                    });
                }
            }));
        }
        if let Some(forwarder) = &forwarder {
            let forwarder = forwarder.clone();
            let forward = watch::forwarding(Arc::new(move |event: &Event| forwarder.forward(event)));
            request = request.forward_events(forward);
        }
        if self.version >= HOLD_VERSION {
            // Held time past MAX_HELD counts against the deadline again: a client cannot
            // keep an engine here forever by holding its clock.
            let clock = RunClock::capped(MAX_HELD);
            lock(&self.clocks).insert(execution, HeldClock { clock: clock.clone(), holds: 0, hold: None });
            request = request.with_clock(clock);
        }
        (request, forwarder)
    }

    /// The task of one execution: it runs once `gate` says its id is recorded, then queues
    /// its outcome (unless cancelled meanwhile) and gives back its places.
    fn run(
        &self,
        run: Run,
        request: Request,
        gate: oneshot::Receiver<()>,
    ) -> impl std::future::Future<Output = ()> + Send + 'static {
        let (executor, out) = (self.executor.clone(), self.out.clone());
        let (running, retained, unsent) = (self.running.clone(), self.retained.clone(), self.unsent.clone());
        let (waiting, fetch_waiting, clocks) =
            (self.waiting.clone(), self.fetch_waiting.clone(), self.clocks.clone());
        async move {
            let Run { execution, retain, mut slot, forwarder, started } = run;
            let _ = gate.await;
            let outcome = if retain {
                match executor.execute_retained(request).await {
                    Ok((outcome, handle)) => {
                        // Held until released: the retained engine keeps its place.
                        lock(&retained).insert(execution, (handle, slot.take()));
                        outcome
                    }
                    Err(refused) => Outcome::failure(OutcomeKind::Invalid, refused.to_string(), Vec::new()),
                }
            } else {
                executor.execute(request).await
            };
            lock(&clocks).remove(&execution);
            // Nothing after the outcome: a retained engine's late lines stay there.
            if let Some(forwarder) = &forwarder {
                forwarder.close();
            }
            lock(&waiting).retain(|(owner, _), _| *owner != execution);
            lock(&fetch_waiting).retain(|(owner, _), _| *owner != execution);
            let frame = out.outcome_frame(execution, outcome);
            // Counted live until its outcome is queued, so a client that does not read holds
            // its executions' places; no longer cancellable, so a cancel now cannot make a
            // second outcome.
            let unsent = Unsent::record(&unsent, execution);
            if lock(&running).remove(&execution).is_none() {
                return;
            }
            // Its places (on the connection and in the daemon) are given back as the outcome
            // is queued, before the client can read it and send the next execute, and before
            // it is counted as ended, so a scrape that sees the end sees it out of flight too.
            let kind = out
                .push_outcome(execution, frame, || {
                    drop(unsent);
                    drop(slot.take());
                })
                .await;
            let engine = engine_name(&*executor);
            crate::service::metrics::ended(kind.as_str());
            crate::service::metrics::execution_duration(engine, started.elapsed());
            if let Some(live) = executor.live_engines() {
                crate::service::metrics::engines_live(engine, live);
            }
            tracing::info!(
                duration_ms = millis(started.elapsed()),
                outcome = kind.as_str(),
                "execution ended"
            );
        }
    }

    /// The client cancels `execution`: a running one ends `cancelled` with its text; a
    /// retained one is released.
    fn cancel(&self, execution: u64) {
        lock(&self.clocks).remove(&execution);
        if let Some(task) = lock(&self.running).remove(&execution) {
            task.abort();
            lock(&self.waiting).retain(|(owner, _), _| *owner != execution);
            lock(&self.fetch_waiting).retain(|(owner, _), _| *owner != execution);
            tracing::info!(execution, outcome = "cancelled", "execution ended");
            crate::service::metrics::ended(OutcomeKind::Cancelled.as_str());
            let outcome = Outcome::failure(OutcomeKind::Cancelled, texts::CANCELLED, Vec::new());
            let _ = self.out.push(ServerMessage::Outcome { execution, outcome });
        }
        lock(&self.retained).remove(&execution);
    }

    /// The drain timeout passed: what still runs ends now, each with its outcome.
    fn shut_down(&self, timeout: Duration) {
        let text = texts::DAEMON_SHUT_DOWN.fill(&[&timeout.as_millis().to_string()]);
        for (execution, task) in lock(&self.running).drain() {
            task.abort();
            let outcome = Outcome::failure(OutcomeKind::Lost, text.clone(), Vec::new());
            let _ = self.out.push(ServerMessage::Outcome { execution, outcome });
            tracing::info!(execution, outcome = "shutdown", "execution ended");
            crate::service::metrics::ended("shutdown");
        }
    }

    /// The connection ends: every execution with it, and every call waiting for an answer
    /// fails.
    fn end(&self) {
        for (_, task) in lock(&self.running).drain() {
            task.abort();
        }
        lock(&self.retained).clear();
        let abandoned: Vec<_> = lock(&self.waiting).drain().map(|(_, pending)| pending.waiter).collect();
        abandoned.into_iter().for_each(Waiter::<String>::abandon);
        let abandoned: Vec<_> =
            lock(&self.fetch_waiting).drain().map(|(_, pending)| pending.waiter).collect();
        abandoned.into_iter().for_each(Waiter::<FetchAnswer>::abandon);
    }
}

/// What one execution's task carries besides its request.
struct Run {
    execution: u64,
    retain: bool,
    /// Its place among the daemon's executions, held until its outcome is queued (or,
    /// retained, until released).
    slot: Option<ExecutionSlot>,
    forwarder: Option<Arc<EventForwarder>>,
    started: Instant,
}

/// Deliver a call's answer to whoever waits for it (nobody, once its execution ended).
fn answer_call(waiting: &Waiting, execution: u64, call: u64, answer: String) {
    let pending = lock(waiting).remove(&(execution, call));
    if let Some(Pending { waiter, span, sent }) = pending {
        // The envelope's kind as its first key says (logged, never its value).
        let error = answer.trim_start().starts_with("{\"error\"");
        // Counted before the run can go on with it, so a scrape that sees the run's end
        // sees its calls too.
        Pending::<String>::answered(span, sent, error);
        waiter.answer(answer);
    }
}

fn answer_fetch(waiting: &FetchWaiting, execution: u64, call: u64, answer: FetchAnswer) {
    let pending = lock(waiting).remove(&(execution, call));
    if let Some(Pending { waiter, span, sent }) = pending {
        let error = matches!(answer, FetchAnswer::Refused { .. });
        Pending::<FetchAnswer>::answered(span, sent, error);
        waiter.answer(answer);
    }
}

/// Whether `frame` says first that it is an answer or a fetch's answer (`{"type":"answer",`,
/// whitespace allowed between the tokens): only such a frame is parsed on an execution's
/// thread. A frame with its keys in another order is the reader's, which parses any.
fn says_answer(frame: &[u8]) -> bool {
    fn then<'a>(rest: &'a [u8], token: &[u8]) -> Option<&'a [u8]> {
        rest.trim_ascii_start().strip_prefix(token)
    }
    let Some(kind) = then(frame, b"{").and_then(|r| then(r, br#""type""#)).and_then(|r| then(r, b":")) else {
        return false;
    };
    [&br#""answer""#[..], br#""fetchAnswer""#]
        .iter()
        .any(|name| then(kind, name).and_then(|r| then(r, b",")).is_some())
}

/// A frame an execution read from a lent input ([`framing::lend`]): delivered if it is an
/// answer (`true`); anything else, a frame that does not parse included, is the
/// connection's to read (`false`).
fn deliver_answer(frame: &[u8], waiting: &Waiting, fetch_waiting: &FetchWaiting, out: &Outgoing) -> bool {
    if !says_answer(frame) {
        return false;
    }
    let Some(message) = std::str::from_utf8(frame)
        .ok()
        .and_then(|text| codemode_protocol::from_json_str::<ClientMessage>(text).ok())
    else {
        return false;
    };
    match message {
        ClientMessage::Answer { execution, call, answer } => answer_call(waiting, execution, call, answer),
        ClientMessage::FetchAnswer { execution, call, answer } => {
            answer_fetch(fetch_waiting, execution, call, answer);
        }
        _ => return false,
    }
    out.touch();
    true
}

async fn sleep_until(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// An outcome ready to queue: its message, its frame's length, and its kind. It is
/// encoded only once the queue takes it, so an outcome waiting holds only itself.
struct OutcomeFrame {
    message: ServerMessage,
    length: usize,
    kind: OutcomeKind,
}

/// The messages waiting for one client, and the bound on their bytes.
///
/// Calls, fetches and this layer's own messages are sent at once, so they leave in the
/// order they were made (a program's calls in program order): written by the thread that
/// made them when nothing waits (a call, by its execution's thread), queued otherwise;
/// each is bounded by its execution's own limits or by what the reader read. An outcome
/// waits for the queue to be under its bound, and the reader reads nothing while it is
/// not: so a client that does not read holds the bound, the executions it started, and
/// small outcomes.
#[derive(Clone)]
struct Outgoing {
    state: Arc<OutgoingState>,
}

struct OutgoingState {
    out: BoundedWriter,
    /// The connection's version: an outcome's kind is sent as that version knows it.
    version: u32,
    send_timeout: Option<Duration>,
    opened: Instant,
    /// Milliseconds from `opened` to the last message read.
    activity: AtomicU64,
}

impl Outgoing {
    /// The queue, and the task writing what waits in it (the server's hello first).
    fn start<W>(output: W, options: &ServeOptions, version: u32) -> (Outgoing, JoinHandle<()>)
    where
        W: AsyncWrite + Send + 'static,
    {
        let (writer, written) = FrameWriter::start(output);
        if let Some(hello) = encode_frame(&ServerMessage::Hello(Hello::version(version)), usize::MAX) {
            writer.send(hello);
        }
        let state = Arc::new(OutgoingState {
            out: BoundedWriter::new(writer, options.max_frame_bytes, options.max_queued_bytes),
            version,
            send_timeout: options.send_timeout,
            opened: Instant::now(),
            activity: AtomicU64::new(0),
        });
        let writer = tokio::spawn(async move {
            let _ = written.await;
        });
        (Outgoing { state }, writer)
    }

    fn writer(&self) -> &FrameWriter {
        self.state.out.writer()
    }

    /// Send `message` now; `Err` gives it back when it is longer than the frame bound.
    fn push(&self, message: ServerMessage) -> Result<(), ServerMessage> {
        let message = match message {
            ServerMessage::Outcome { execution, outcome } => {
                ServerMessage::Outcome { execution, outcome: outcome.for_version(self.state.version) }
            }
            other => other,
        };
        match encode_frame(&message, self.limit()) {
            Some(frame) => {
                self.writer().send(frame);
                Ok(())
            }
            None => Err(message),
        }
    }

    fn is_closed(&self) -> bool {
        self.writer().is_closed()
    }

    /// Send a call's or a fetch's frame; the text its call site meets when it could not
    /// leave (the connection closed, or the frame past the bound).
    fn send_call(&self, message: ServerMessage) -> Option<String> {
        match self.push(message) {
            _ if self.is_closed() => Some(texts::CONNECTION_CLOSED.to_owned()),
            Err(_) => Some(texts::CALL_TOO_LARGE.fill(&[&self.limit().to_string()])),
            Ok(()) => None,
        }
    }

    /// Whether the queue holds its bound of bytes or more.
    fn is_full(&self) -> bool {
        self.state.out.is_full()
    }

    /// Wait until the queue is under its bound or the writer has stopped, or until `until`.
    async fn room(&self, until: Option<tokio::time::Instant>) {
        self.state.out.room(until).await
    }

    /// Queue an event's message (a log line, a wait) if it fits in half the queue's
    /// bound, so events never pause the connection nor crowd out calls and outcomes;
    /// `false` when it was dropped instead (a client reading slowly, or past the frame
    /// bound). Never waits: it runs on the engine's thread.
    fn push_event(&self, message: &ServerMessage) -> bool {
        let Some(frame) = encode_frame(message, self.limit()) else { return false };
        let length = frame.len();
        let room = self.state.out.max_queued_bytes() / 2;
        let queued = self.writer().queued();
        let admitted = queued.fetch_update(Ordering::AcqRel, Ordering::Acquire, |queued| {
            (queued.saturating_add(length) <= room).then_some(queued + length)
        });
        admitted.is_ok() && self.writer().send_counted(frame, length)
    }

    /// Queue an outcome once the queue is under its bound. One that waited while the
    /// client read nothing for the send timeout is dropped for a short failure, so a
    /// client that does not read holds only short outcomes. `queued` runs once the outcome
    /// has its place in the queue and before the client can read it, so what it gives back
    /// (the execution's places) is free by the time the client sends its next execute.
    async fn push_outcome(&self, execution: u64, frame: OutcomeFrame, queued: impl FnOnce()) -> OutcomeKind {
        let OutcomeFrame { message, length, kind } = frame;
        let mut release = Some(queued);
        let mut release = move || {
            if let Some(release) = release.take() {
                release();
            }
        };
        let waiting_since = Instant::now();
        loop {
            if self.is_closed() {
                release();
                return kind;
            }
            let queued = self.writer().queued();
            let bound = self.state.out.max_queued_bytes();
            let admitted = queued.fetch_update(Ordering::AcqRel, Ordering::Acquire, |queued| {
                (queued < bound).then_some(queued + length)
            });
            if admitted.is_ok() {
                release();
                match encode_frame(&message, usize::MAX) {
                    Some(bytes) => drop(self.writer().send_counted(bytes, length)),
                    None => drop(queued.fetch_sub(length, Ordering::AcqRel)),
                }
                return kind;
            }
            let Some(limit) = self.state.send_timeout else {
                self.room(None).await;
                continue;
            };
            let stalled_at = self.writer().last_progress().max(waiting_since) + limit;
            if Instant::now() >= stalled_at {
                drop(message);
                framing::give_back_memory();
                let text = texts::CLIENT_NOT_READING.fill(&[&limit.as_millis().to_string()]);
                let outcome = Outcome::failure(OutcomeKind::Internal, text, Vec::new());
                release();
                let _ = self.push(ServerMessage::Outcome { execution, outcome });
                return OutcomeKind::Internal;
            }
            self.room(Some(tokio::time::Instant::from_std(stalled_at))).await;
        }
    }

    /// `outcome` ready to queue; one longer than the bound becomes the `resultTooLarge`
    /// outcome.
    fn outcome_frame(&self, execution: u64, outcome: Outcome) -> OutcomeFrame {
        let kind = outcome.kind();
        let outcome = outcome.for_version(self.state.version);
        let max = self.limit();
        let message = ServerMessage::Outcome { execution, outcome };
        if let Some(length) = frame_length(&message, max) {
            return OutcomeFrame { message, length, kind };
        }
        let logs = match &message {
            ServerMessage::Outcome { outcome, .. } => outcome.logs(),
            _ => &[],
        };
        let replacement =
            ServerMessage::Outcome { execution, outcome: too_large_outcome(execution, logs, max) };
        drop(message);
        // The replacement fits any bound a daemon accepts; past a smaller one it goes
        // anyway, as the only way the client learns how the run ended.
        let length = frame_length(&replacement, usize::MAX).unwrap_or(0);
        OutcomeFrame { message: replacement, length, kind: OutcomeKind::ResultTooLarge }
    }

    fn limit(&self) -> usize {
        self.state.out.max_frame_bytes()
    }

    fn touch(&self) {
        OutgoingState::stamp(&self.state.opened, &self.state.activity);
    }

    /// The last message either way: read, or written whole.
    fn last_activity(&self) -> Instant {
        let read = self.state.opened + Duration::from_millis(self.state.activity.load(Ordering::Acquire));
        read.max(self.writer().last_written())
    }

    /// No more messages will be made: the writer sends what is queued and stops.
    fn finish(&self) {
        self.writer().finish();
    }

    /// The writer has stopped.
    fn close(&self) {
        self.writer().close();
    }
}

/// Records an execution whose outcome is not yet queued, while it lives.
struct Unsent(Arc<Mutex<HashSet<u64>>>, u64);

impl Unsent {
    fn record(unsent: &Arc<Mutex<HashSet<u64>>>, execution: u64) -> Unsent {
        lock(unsent).insert(execution);
        Unsent(unsent.clone(), execution)
    }
}

impl Drop for Unsent {
    fn drop(&mut self) {
        lock(&self.0).remove(&self.1);
    }
}

impl OutgoingState {
    fn stamp(opened: &Instant, stamp: &AtomicU64) {
        let now = u64::try_from(opened.elapsed().as_millis()).unwrap_or(u64::MAX);
        stamp.fetch_max(now, Ordering::AcqRel);
    }
}

/// Sends one execution's log lines and waits to a client that asked for them (version
/// 3). Called on the engine's thread as they happen, so they leave in program order with
/// the calls that thread sends; what does not fit is dropped and counted, never waited
/// for. The client reports calls itself, so call events are not sent.
struct EventForwarder {
    execution: u64,
    out: Outgoing,
    /// Until the outcome: nothing of the execution goes after it.
    open: std::sync::atomic::AtomicBool,
    dropped: AtomicU64,
}

impl EventForwarder {
    fn new(execution: u64, out: Outgoing) -> EventForwarder {
        EventForwarder { execution, out, open: true.into(), dropped: AtomicU64::new(0) }
    }

    fn forward(&self, event: &Event) {
        if !self.open.load(Ordering::Acquire) {
            return;
        }
        let execution = self.execution;
        let message = match event {
            Event::Log { level, line } => ServerMessage::Log { execution, level: *level, line: line.clone() },
            Event::Waiting { calls, timers } => {
                ServerMessage::Waiting { execution, calls: *calls as u64, timers: *timers as u64 }
            }
            _ => return,
        };
        if !self.out.push_event(&message) {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The run is over; what was dropped is logged (the client learns it from the outcome).
    fn close(&self) {
        self.open.store(false, Ordering::Release);
        let dropped = self.dropped.load(Ordering::Relaxed);
        if dropped > 0 {
            tracing::debug!(dropped, "events dropped for a client reading slowly");
        }
    }
}

/// A program's calls, sent to the client and answered by it.
struct WireDispatch {
    execution: u64,
    /// The execution's span, parent of each call's.
    span: tracing::Span,
    next_call: Arc<AtomicU64>,
    out: Outgoing,
    waiting: Waiting,
}

impl Dispatch for WireDispatch {
    fn dispatch(&self, tool_call: ToolCall) -> codemode_protocol::DispatchFuture {
        let call = self.next_call.fetch_add(1, Ordering::Relaxed);
        // Waiting before the call leaves: its answer may come back before `push` returns.
        let (waiter, answered) = Waiter::start();
        let span = tracing::debug_span!(parent: &self.span, "call", call, provider = %tool_call.provider, tool = %tool_call.tool);
        lock(&self.waiting).insert((self.execution, call), Pending::new(waiter, span));
        let refused = self.out.send_call(ServerMessage::Call { execution: self.execution, call, tool_call });
        if let Some(text) = refused {
            lock(&self.waiting).remove(&(self.execution, call));
            return Box::pin(std::future::ready(error_envelope(&text)));
        }
        match answered {
            // The reader delivers the answer to the execution itself.
            None => Box::pin(std::future::pending()),
            Some(answered) => Box::pin(async move {
                answered.await.unwrap_or_else(|_| error_envelope(texts::CONNECTION_CLOSED))
            }),
        }
    }
}

/// A program's fetches, sent to the client whose outbound handler decides them.
struct WireOutbound {
    execution: u64,
    span: tracing::Span,
    next_call: Arc<AtomicU64>,
    out: Outgoing,
    waiting: FetchWaiting,
}

impl Outbound for WireOutbound {
    fn fetch(&self, request: OutboundRequest) -> OutboundFuture {
        let call = self.next_call.fetch_add(1, Ordering::Relaxed);
        let (waiter, answered) = Waiter::start();
        let span = tracing::debug_span!(parent: &self.span, "fetch", call);
        lock(&self.waiting).insert((self.execution, call), Pending::new(waiter, span));
        let refused = self.out.send_call(ServerMessage::Fetch {
            execution: self.execution,
            call,
            request: request.into(),
        });
        if let Some(text) = refused {
            lock(&self.waiting).remove(&(self.execution, call));
            return Box::pin(std::future::ready(Err(text)));
        }
        match answered {
            None => Box::pin(std::future::pending()),
            Some(answered) => Box::pin(async move {
                match answered.await {
                    Ok(answer) => from_fetch_answer(answer),
                    Err(_) => Err(texts::CONNECTION_CLOSED.to_owned()),
                }
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use codemode_protocol::wire::{ClientMessage, FetchAnswer};

    use super::says_answer;

    /// An execution reading a lent input parses only the frames that say first they are
    /// answers: as the protocol writes them, and as a peer that spaces its JSON does.
    #[test]
    fn an_answer_is_told_by_its_first_key() {
        let answer = ClientMessage::Answer { execution: 1, call: 2, answer: "{}".to_owned() };
        let written = serde_json::to_vec(&answer).unwrap();
        assert!(says_answer(&written), "{}", String::from_utf8_lossy(&written));
        let refused = FetchAnswer::Refused { error: "no".to_owned() };
        let fetch = ClientMessage::FetchAnswer { execution: 1, call: 2, answer: refused };
        let written = serde_json::to_vec(&fetch).unwrap();
        assert!(says_answer(&written), "{}", String::from_utf8_lossy(&written));
        assert!(says_answer(br#" { "type" : "answer" , "execution": 1, "call": 2, "answer": "{}"}"#));
        for other in [
            &br#"{"type":"cancel","execution":1}"#[..],
            br#"{"type":"answerX","execution":1}"#,
            br#"{"execution":1,"type":"answer","call":2,"answer":"{}"}"#,
            br#"{"type":"answer"}"#,
            b"",
        ] {
            assert!(!says_answer(other), "{}", String::from_utf8_lossy(other));
        }
    }
}
