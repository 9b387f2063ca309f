//! The client side of the wire over any byte stream, one implementation for every host
//! that sends executes: process isolation's workers and the daemons of `RemoteExecutor`.
//!
//! A [`Session`] is one connection: the hello and its version, the reader that answers
//! each call and fetch from the host's handlers the moment it is read, the bounded writer,
//! the keepalive, and one `Pending` record per execute until its outcome. What differs
//! between transports (how the stream is made, what a lost connection means for a run)
//! stays with the caller; how a frame is handled is decided here, once.
//!
//! A peer is a hostile client (docs/security.md): every call and fetch is admitted against
//! its execution's bounds ([`admit`]) before it reaches the host; while a peer leaves
//! [`SessionOptions::max_queued_bytes`] of answers unread, its calls wait, admitted, and
//! reach the host once it reads (the session reads on, so neither side's output backs up
//! into a stall of both); a frame past the bound ends only its own execution (or refuses
//! its call). A call for a run with no dispatch is answered as in-process (the tool is not
//! found), a fetch for a run with no outbound handler with the closed network's text;
//! neither counts as reaching the host.

pub(crate) mod admit;

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use codemode_protocol::wire::{
    ClientMessage, FetchAnswer, FetchRequest, HOLD_VERSION, Hello, ProtocolErrorKind, ServerMessage,
};
use codemode_protocol::{Dispatch, Outcome, ToolCall, ToolNotFoundError, error_envelope, texts};
use tokio::io::{AsyncBufRead, AsyncRead, AsyncWrite, BufReader};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use self::admit::{Admission, InFlight};
use crate::api::clock::RunClock;
use crate::api::execute::RetainedEngine;
use crate::api::outbound::{Outbound, to_fetch_answer};
use crate::api::watch::WireEvents;
use crate::in_process::host::{answer_in_order, dispatch_panicked, fetch_panicked};
use crate::sync::lock;
use crate::wire::framing::{
    BoundedWriter, FrameError, FrameHead, FrameReader, FrameWriter, too_large_outcome, write_message,
};

/// Bytes of answers waiting for a peer that does not read, past which a session reads
/// nothing more from it until it does: a frame (at most the frame bound) more at most.
pub(crate) const MAX_QUEUED_BYTES: usize = 4 << 20;

/// How long a session whose hello could not be written looks for the peer's refusal.
const REFUSAL_WAIT: Duration = Duration::from_millis(200);

/// The bounds of one session.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SessionOptions {
    /// The longest frame read or written.
    pub(crate) max_frame_bytes: usize,
    /// Bytes of answers waiting for a peer that does not read, past which the session
    /// reads nothing more from it until it does.
    pub(crate) max_queued_bytes: usize,
    /// From version 2, a ping at half of it, and the connection taken for lost when
    /// nothing arrived for a whole one.
    pub(crate) keepalive: Option<Duration>,
}

/// How an execute ended on a session.
#[derive(Debug)]
pub(crate) enum Ended {
    Outcome(Outcome),
    /// The connection went; the run may have started.
    Lost,
    /// The peer closed the connection as idle: it read nothing, so the run never started.
    NotStarted,
    /// The peer refused it (version 2): it did not start; the text says why.
    Refused(String),
}

/// An execute awaiting its outcome: the host's handlers for its calls and the bounds
/// they are held to.
struct Pending {
    handlers: Handlers,
    done: oneshot::Sender<Ended>,
    /// Set before any of its calls or fetches reaches the host: from then on the run
    /// has had effects outside the peer and must never run again elsewhere.
    dispatched: Arc<AtomicBool>,
}

/// Why a session could not be opened.
#[derive(Debug)]
pub(crate) enum HelloError {
    /// The peer answered the hello with a protocol error.
    Refused { kind: ProtocolErrorKind, message: String },
    /// The hello could not be written.
    Write(std::io::Error),
    /// The stream ended before the peer's hello.
    Closed,
    /// The peer's first frame was not a hello.
    Unexpected(Box<ServerMessage>),
    /// The peer's first frame could not be read.
    Frame(FrameError),
    /// The peer did not answer in the time its host allows (the caller's own bound).
    Silent,
}

/// One connection to a peer that runs executions.
pub(crate) struct Session {
    out: Outgoing,
    pending: Mutex<HashMap<u64, Pending>>,
    closed: CancellationToken,
    /// The peer said it drains: it refuses new executes.
    draining: CancellationToken,
    /// The version this session speaks.
    version: u32,
    opened: Instant,
    /// Milliseconds from `opened` to the last frame read.
    heard: AtomicU64,
}

impl Session {
    /// Say `hello` over `stream`, read the peer's, and start the reader, the writer and
    /// the keepalive. A peer at its maximum of connections writes its refusal and closes
    /// at once, maybe before the hello arrives: the refusal is still read.
    pub(crate) async fn start<R, W>(
        read: R,
        mut write: W,
        hello: Hello,
        options: SessionOptions,
    ) -> Result<Arc<Session>, HelloError>
    where
        R: AsyncRead + Send + Unpin + 'static,
        W: AsyncWrite + Send + Unpin + 'static,
    {
        let asked = hello.version;
        let mut read = BufReader::new(read);
        let mut frames = FrameReader::new(options.max_frame_bytes);
        let wrote = write_message(&mut write, &ClientMessage::Hello(hello)).await;
        // A hello that could not be written gets no answer, but a refusal the peer wrote
        // before it closed may be there to read: looked for a moment, not waited for.
        let first = match &wrote {
            Ok(()) => frames.next::<_, ServerMessage>(&mut read).await,
            Err(_) => tokio::time::timeout(REFUSAL_WAIT, frames.next::<_, ServerMessage>(&mut read))
                .await
                .unwrap_or(Ok(None)),
        };
        let version = match first {
            Ok(Some(ServerMessage::Error(problem))) => {
                return Err(HelloError::Refused { kind: problem.kind, message: problem.message });
            }
            _ if wrote.is_err() => return Err(HelloError::Write(wrote.err().unwrap_or_else(broken))),
            Ok(Some(ServerMessage::Hello(answer))) => answer.version.min(asked),
            Ok(Some(other)) => return Err(HelloError::Unexpected(Box::new(other))),
            Ok(None) => return Err(HelloError::Closed),
            Err(problem) => return Err(HelloError::Frame(problem)),
        };
        let (writer, written) = FrameWriter::start(write);
        let session = Arc::new(Session {
            out: Outgoing(BoundedWriter::new(writer, options.max_frame_bytes, options.max_queued_bytes)),
            pending: Mutex::new(HashMap::new()),
            closed: CancellationToken::new(),
            draining: CancellationToken::new(),
            version,
            opened: Instant::now(),
            heard: AtomicU64::new(0),
        });
        let writing = session.clone();
        tokio::spawn(async move {
            tokio::select! {
                _ = written => {}
                () = writing.closed.cancelled() => {}
            }
            writing.out.0.writer().close();
            writing.close(|| Ended::Lost);
        });
        if let (Some(keepalive), true) = (options.keepalive, version >= 2) {
            tokio::spawn(keep_alive(Arc::downgrade(&session), keepalive));
        }
        tokio::spawn(read_frames(session.clone(), frames, read));
        Ok(session)
    }

    /// The version this session speaks.
    pub(crate) fn version(&self) -> u32 {
        self.version
    }

    /// Open, and the peer has not said it drains.
    pub(crate) fn is_usable(&self) -> bool {
        !self.closed.is_cancelled() && !self.draining.is_cancelled()
    }

    /// The connection is gone (or was closed by this side).
    pub(crate) fn is_closed(&self) -> bool {
        self.closed.is_cancelled()
    }

    /// The peer said it drains.
    pub(crate) fn is_draining(&self) -> bool {
        self.draining.is_cancelled()
    }

    /// Close the connection: every pending execute ends [`Ended::Lost`].
    pub(crate) fn shut(&self) {
        self.closed.cancel();
    }

    /// No more frames will be sent: what is queued is written, then the stream shuts down
    /// (a worker reading stdin exits).
    pub(crate) fn finish(&self) {
        self.out.0.writer().finish();
    }

    /// Send `frame` (an `execute` already encoded within the bound) for `execution`, with
    /// the handlers its calls meet. The run ends as the returned [`Submitted`] says; dropping
    /// it before the outcome cancels the execution on the peer.
    pub(crate) fn submit(self: &Arc<Self>, execution: u64, frame: Vec<u8>, handlers: Handlers) -> Submitted {
        if let Some(clock) = handlers.clock.as_ref().filter(|_| self.version >= HOLD_VERSION) {
            let session = Arc::downgrade(self);
            clock.on_change(Box::new(move |held| {
                let message = if held {
                    ClientMessage::Hold { execution }
                } else {
                    ClientMessage::Unhold { execution }
                };
                if let Some(session) = session.upgrade() {
                    session.out.send(&message);
                }
            }));
        }
        let (done, ended) = oneshot::channel();
        let dispatched = Arc::new(AtomicBool::new(false));
        let pending = Pending { handlers, done, dispatched: dispatched.clone() };
        lock(&self.pending).insert(execution, pending);
        let cancel = CancelOnDrop { session: self.clone(), execution };
        // Closed before the record was there: its close did not see it, and it never left.
        let sent = !self.closed.is_cancelled() && self.out.0.writer().send(frame);
        if !sent {
            // A writer that stopped is a session gone: no later execute may pick it.
            lock(&self.pending).remove(&execution);
            self.shut();
        }
        Submitted { ended, dispatched, sent, _cancel: cancel }
    }

    /// Every pending execute resolves as `ended` says, and nothing more is read.
    fn close(&self, ended: fn() -> Ended) {
        self.closed.cancel();
        for (_, pending) in lock(&self.pending).drain() {
            let _ = pending.done.send(ended());
        }
    }

    fn heard_now(&self) {
        self.heard.store(self.opened.elapsed().as_millis() as u64, Ordering::Release);
    }

    fn silent_for(&self) -> Duration {
        self.opened.elapsed().saturating_sub(Duration::from_millis(self.heard.load(Ordering::Acquire)))
    }
}

fn broken() -> std::io::Error {
    std::io::Error::other("the stream failed")
}

/// What one execute's calls meet on the host.
#[derive(Clone, Default)]
pub(crate) struct Handlers {
    pub(crate) dispatch: Option<Arc<dyn Dispatch>>,
    pub(crate) outbound: Option<Arc<dyn Outbound>>,
    pub(crate) admission: Admission,
    pub(crate) events: Option<WireEvents>,
    /// The run's clock, held while a call waits for a person: the peer hears each hold
    /// and release (version 6), so its deadline pauses too.
    pub(crate) clock: Option<Arc<RunClock>>,
}

/// An execute sent on a session.
pub(crate) struct Submitted {
    /// How it ended; an error when the session went without saying (it ended `Lost`).
    pub(crate) ended: oneshot::Receiver<Ended>,
    dispatched: Arc<AtomicBool>,
    /// Whether its frame was handed to the writer (`false`: the session was closed).
    pub(crate) sent: bool,
    _cancel: CancelOnDrop,
}

impl Submitted {
    /// Whether any of its calls or fetches reached the host.
    pub(crate) fn reached_host(&self) -> bool {
        self.dispatched.load(Ordering::Acquire)
    }
}

/// Cancels an execution on the peer when its execute goes before the outcome.
struct CancelOnDrop {
    session: Arc<Session>,
    execution: u64,
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if lock(&self.session.pending).remove(&self.execution).is_some() {
            self.session.out.send(&ClientMessage::Cancel { execution: self.execution });
        }
    }
}

/// Releases a peer's retained engine when dropped.
pub(crate) struct ReleaseOnDrop {
    pub(crate) session: Arc<Session>,
    pub(crate) execution: u64,
}

impl RetainedEngine for ReleaseOnDrop {}

impl Drop for ReleaseOnDrop {
    fn drop(&mut self) {
        self.session.out.send(&ClientMessage::Release { execution: self.execution });
    }
}

/// Frames for the peer, each checked against the bound before it is sent: written by the
/// thread that makes it when nothing else waits (an answer, by the reader that read its
/// call), queued otherwise.
#[derive(Clone)]
struct Outgoing(BoundedWriter);

impl Outgoing {
    fn send(&self, message: &ClientMessage) -> bool {
        self.0.send(message)
    }

    /// An answer, or the refusal that stands in for one longer than the bound.
    fn answer(&self, execution: u64, call: u64, answer: String) {
        if !self.send(&ClientMessage::Answer { execution, call, answer }) && !self.0.writer().is_closed() {
            let answer =
                error_envelope(&texts::ANSWER_TOO_LARGE.fill(&[&self.0.max_frame_bytes().to_string()]));
            self.send(&ClientMessage::Answer { execution, call, answer });
        }
    }

    /// A fetch's answer, or the refusal that stands in for one longer than the bound.
    fn fetch_answer(&self, execution: u64, call: u64, answer: FetchAnswer) {
        if !self.send(&ClientMessage::FetchAnswer { execution, call, answer }) && !self.0.writer().is_closed()
        {
            let error = texts::ANSWER_TOO_LARGE.fill(&[&self.0.max_frame_bytes().to_string()]);
            let answer = FetchAnswer::Refused { error };
            self.send(&ClientMessage::FetchAnswer { execution, call, answer });
        }
    }
}

/// Pings at half the keepalive; a session that heard nothing for a whole keepalive is
/// closed as lost.
async fn keep_alive(session: std::sync::Weak<Session>, keepalive: Duration) {
    let mut id = 0;
    loop {
        tokio::time::sleep(keepalive / 2).await;
        let Some(session) = session.upgrade() else { return };
        if session.closed.is_cancelled() {
            return;
        }
        if session.silent_for() >= keepalive {
            tracing::warn!(
                keepalive_ms = keepalive.as_millis() as u64,
                "the peer went silent; connection lost"
            );
            session.closed.cancel();
            return;
        }
        id += 1;
        session.out.send(&ClientMessage::Ping { id });
    }
}

/// The session's reader: answers calls and fetches from the host's handlers, reports
/// events, delivers outcomes.
///
/// It reads on while the peer's answers hold the queue's bound, so the peer's own output
/// never backs up into a stall of both sides; what it holds back is the host: calls and
/// fetches that arrive then wait here, admitted (so bounded by their runs' calls in
/// flight), and reach the host in the order they came once the peer has read.
async fn read_frames<R>(session: Arc<Session>, mut frames: FrameReader, mut read: R)
where
    R: AsyncBufRead + Unpin,
{
    let mut parked: VecDeque<Work> = VecDeque::new();
    let ended = loop {
        while !session.out.0.is_full() {
            let Some(work) = parked.pop_front() else { break };
            work.start(&session.out);
        }
        let frame = tokio::select! {
            frame = frames.next::<_, ServerMessage>(&mut read) => frame,
            () = session.out.0.room(None), if !parked.is_empty() => continue,
            () = session.closed.cancelled() => break Ended::Lost,
        };
        session.heard_now();
        let message = match frame {
            Ok(Some(message)) => message,
            Err(FrameError::TooLarge { max, head }) => {
                if oversized(&session, &FrameHead::read(&head), max) {
                    continue;
                }
                break Ended::Lost;
            }
            Ok(None) | Err(_) => break Ended::Lost,
        };
        if let Some(ended) = handle(&session, message, &mut parked) {
            break ended;
        }
    };
    session.close(match ended {
        Ended::NotStarted => || Ended::NotStarted,
        _ => || Ended::Lost,
    });
}

/// A call or fetch admitted for the host: started at once, or parked while the peer's
/// answers hold the queue's bound (and after anything parked before it, so calls reach
/// the host in the order the program made them).
enum Work {
    Call {
        execution: u64,
        call: u64,
        tool_call: ToolCall,
        dispatch: Arc<dyn Dispatch>,
        in_flight: InFlight,
    },
    Fetch {
        execution: u64,
        call: u64,
        request: FetchRequest,
        outbound: Arc<dyn Outbound>,
        in_flight: InFlight,
    },
}

impl Work {
    fn start(self, out: &Outgoing) {
        let out = out.clone();
        match self {
            Work::Call { execution, call, tool_call, dispatch, in_flight } => answer_in_order(
                Box::pin(async move { dispatch.dispatch(tool_call).await }),
                dispatch_panicked,
                move |answer| {
                    drop(in_flight);
                    out.answer(execution, call, answer);
                },
            ),
            Work::Fetch { execution, call, request, outbound, in_flight } => answer_in_order(
                Box::pin(async move { outbound.fetch(request.into()).await }),
                fetch_panicked,
                move |answer| {
                    drop(in_flight);
                    out.fetch_answer(execution, call, to_fetch_answer(answer));
                },
            ),
        }
    }

    fn park_or_start(self, session: &Session, parked: &mut VecDeque<Work>) {
        if parked.is_empty() && !session.out.0.is_full() {
            self.start(&session.out);
        } else {
            parked.push_back(self);
        }
    }
}

/// One message from the peer; `Some` when it ends the session, as what.
fn handle(session: &Session, message: ServerMessage, parked: &mut VecDeque<Work>) -> Option<Ended> {
    match message {
        ServerMessage::Call { execution, call, tool_call } => {
            let (handlers, reached) = session.handlers(execution)?;
            let Some(dispatch) = handlers.dispatch else {
                // As in-process: a run with no dispatch finds no tool.
                let text = ToolNotFoundError::new(tool_call.tool.clone()).to_string();
                session.out.answer(execution, call, error_envelope(&text));
                return None;
            };
            match handlers.admission.call(&tool_call) {
                Err(refusal) => session.out.answer(execution, call, error_envelope(&refusal)),
                Ok(in_flight) => {
                    // Set before the call can reach the host: the run never runs again elsewhere.
                    reached.store(true, Ordering::Release);
                    Work::Call { execution, call, tool_call, dispatch, in_flight }
                        .park_or_start(session, parked);
                }
            }
        }
        ServerMessage::Fetch { execution, call, request } => {
            let (handlers, reached) = session.handlers(execution)?;
            let admitted = match handlers.outbound {
                None => Err(texts::NETWORK_CLOSED.to_owned()),
                Some(outbound) => handlers.admission.fetch().map(|in_flight| (outbound, in_flight)),
            };
            match admitted {
                Err(refusal) => session.out.fetch_answer(execution, call, to_fetch_answer(Err(refusal))),
                Ok((outbound, in_flight)) => {
                    reached.store(true, Ordering::Release);
                    Work::Fetch { execution, call, request, outbound, in_flight }
                        .park_or_start(session, parked);
                }
            }
        }
        ServerMessage::Outcome { execution, outcome } => {
            if let Some(pending) = lock(&session.pending).remove(&execution) {
                if let Some(events) = &pending.handlers.events {
                    events.ended(&outcome);
                }
                let _ = pending.done.send(Ended::Outcome(outcome));
            }
        }
        // Reported by this reader, which dispatches the calls: so in order with them.
        ServerMessage::Log { execution, level, line } => {
            if let Some(events) = session.events(execution) {
                events.log(level, line);
            }
        }
        ServerMessage::Waiting { execution, calls, timers } => {
            if let Some(events) = session.events(execution) {
                events.waiting(calls, timers);
            }
        }
        ServerMessage::Refused { execution, message, .. } => {
            if let Some(pending) = lock(&session.pending).remove(&execution) {
                let _ = pending.done.send(Ended::Refused(message));
            }
        }
        ServerMessage::Draining {} => session.draining.cancel(),
        ServerMessage::Error(problem) if problem.kind == ProtocolErrorKind::Idle => {
            return Some(Ended::NotStarted);
        }
        ServerMessage::Error(_) => return Some(Ended::Lost),
        ServerMessage::Hello(_) | ServerMessage::Pong { .. } => {}
    }
    None
}

impl Session {
    /// `execution`'s handlers and the flag that says one of its calls reached the host;
    /// `None` for an execution that is not pending (ended, cancelled, never sent).
    fn handlers(&self, execution: u64) -> Option<(Handlers, Arc<AtomicBool>)> {
        let pending = lock(&self.pending);
        let record = pending.get(&execution)?;
        Some((record.handlers.clone(), record.dispatched.clone()))
    }

    fn events(&self, execution: u64) -> Option<WireEvents> {
        lock(&self.pending).get(&execution).and_then(|p| p.handlers.events.clone())
    }
}

/// A frame longer than the bound, skipped: the execution it belongs to ends (or its call
/// is refused) and the others go on. `false` when the head does not tell whose it was.
fn oversized(session: &Session, head: &FrameHead, max: usize) -> bool {
    match *head {
        FrameHead::Outcome { execution } => {
            if let Some(pending) = lock(&session.pending).remove(&execution) {
                let _ = pending.done.send(Ended::Outcome(too_large_outcome(execution, &[], max)));
            }
            true
        }
        FrameHead::Call { execution, call } => {
            let text = texts::CALL_TOO_LARGE.fill(&[&max.to_string()]);
            session.out.send(&ClientMessage::Answer { execution, call, answer: error_envelope(&text) });
            true
        }
        FrameHead::Fetch { execution, call } => {
            let answer = FetchAnswer::Refused { error: texts::CALL_TOO_LARGE.fill(&[&max.to_string()]) };
            session.out.send(&ClientMessage::FetchAnswer { execution, call, answer });
            true
        }
        FrameHead::Unknown => false,
    }
}
