//! The wire protocol spoken over a byte stream: one JSON message per line, the
//! protocol crate's `ClientMessage` and `ServerMessage`.
//!
//! `server` serves any executor behind it (`codemode stdio`, `codemode serve`); `client`
//! is the host side (process isolation's workers, `RemoteExecutor`'s daemons), and
//! `worker` the worker side of process isolation.
//!
//! Every frame is bounded by one rule on both sides: a frame is its JSON without the
//! newline, and a side neither writes ([`encode_frame`]) nor reads ([`FrameReader`]) one
//! longer than its bound.

pub(crate) mod client;
pub(crate) mod lend;
pub mod server;
pub mod worker;

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use codemode_protocol::wire::{ProtocolErrorKind, ServerMessage};
use codemode_protocol::{Outcome, OutcomeKind, texts};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::Notify;

/// The largest message read from the wire by default, so a peer cannot grow memory
/// without bound.
pub const MAX_FRAME_BYTES: usize = 64 << 20;

/// What a worker process's host tells it in its environment: the host's
/// [`crate::ExecutorConfig::answer_spin`] in microseconds (absent: the default).
pub(crate) const ANSWER_SPIN_VAR: &str = "CODEMODE_ANSWER_SPIN_US";

/// How many bytes of an oversized frame are kept to tell what it was.
const HEAD_BYTES: usize = 96;

/// A reader's line buffer grown past this is given back after its frame.
const KEEP_LINE_CAPACITY: usize = 64 << 10;

/// Write one message and a newline, flushed.
pub(crate) async fn write_message<W: AsyncWrite + Unpin, M: Serialize>(
    out: &mut W,
    message: &M,
) -> std::io::Result<()> {
    let mut line = serde_json::to_vec(message).map_err(std::io::Error::other)?;
    line.push(b'\n');
    out.write_all(&line).await?;
    out.flush().await
}

/// `message` as one frame, its newline included; `None` when its JSON is longer than
/// `max_bytes`. Serializing stops at the bound, so an oversized message costs no more
/// than the bound.
pub(crate) fn encode_frame<M: Serialize>(message: &M, max_bytes: usize) -> Option<Vec<u8>> {
    struct Bounded {
        bytes: Vec<u8>,
        max: usize,
    }
    impl std::io::Write for Bounded {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            if self.bytes.len() + buf.len() > self.max {
                return Err(std::io::Error::other("over the frame bound"));
            }
            self.bytes.extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut out = Bounded { bytes: Vec::new(), max: max_bytes };
    serde_json::to_writer(&mut out, message).ok()?;
    out.bytes.push(b'\n');
    Some(out.bytes)
}

/// The length of `message`'s frame, its newline included, counted without holding it;
/// `None` when its JSON is longer than `max_bytes` (counting stops there).
pub(crate) fn frame_length<M: Serialize>(message: &M, max_bytes: usize) -> Option<usize> {
    struct Counted {
        length: usize,
        max: usize,
    }
    impl std::io::Write for Counted {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.length += buf.len();
            if self.length > self.max {
                return Err(std::io::Error::other("over the frame bound"));
            }
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut counted = Counted { length: 0, max: max_bytes };
    serde_json::to_writer(&mut counted, message).ok()?;
    Some(counted.length + 1)
}

/// Frames are written in pieces of at most this size, each one progress.
const WRITE_PIECE: usize = 64 << 10;

/// Writes frames to one stream in the order they are sent, from any thread.
///
/// A frame sent while nothing waits to be written is written at once by its sender, with
/// one non-blocking write: no thread hand-off, which is most of what a frame costs (each
/// wake of another thread is several microseconds, more than the write). The part a
/// stream does not take at once, and every frame sent while others wait, goes to a queue
/// that [`FrameWriter::start`]'s future writes. Every write happens under one lock, so
/// frames never interleave; a sender only writes while the future waits for frames, so
/// it never takes over a wake the future registered with the stream.
///
/// A sender that is not inside a Tokio runtime only queues: some streams (Tokio's stdout)
/// need the runtime to write.
#[derive(Clone)]
pub(crate) struct FrameWriter {
    shared: Arc<WriterShared>,
}

struct WriterShared {
    state: Mutex<WriterState>,
    /// Bytes sent and not yet written.
    queued: AtomicUsize,
    /// The writer has stopped (failed, finished, or dropped); frames sent now are dropped.
    closed: AtomicBool,
    /// Told whenever queued bytes were written, and when the writer stops.
    drained: Notify,
    opened: Instant,
    /// Milliseconds from `opened` to the last bytes written.
    progress: AtomicU64,
    /// Milliseconds from `opened` to the last frame written whole.
    written: AtomicU64,
    /// The runtime it was started in, entered to write from a thread outside it.
    runtime: Option<tokio::runtime::Handle>,
}

struct WriterState {
    output: Pin<Box<dyn AsyncWrite + Send>>,
    /// Frames waiting, each with the bytes it counts in `queued`; the first may be part
    /// written.
    queue: VecDeque<(Vec<u8>, usize)>,
    /// Bytes of the first frame already written.
    at: usize,
    unflushed: bool,
    finishing: bool,
    failed: bool,
    /// The future's waker while it waits for frames.
    idle: Option<Waker>,
}

impl WriterState {
    /// Whether a sender may write now: nothing waits, and the future is not waiting on
    /// the stream.
    fn free(&self) -> bool {
        self.queue.is_empty() && !self.unflushed && !self.finishing && !self.failed
    }
}

impl FrameWriter {
    /// A writer for `output`, and the future that writes what waits (run it as a task).
    /// The future ends when the stream fails or, after [`FrameWriter::finish`], once
    /// everything sent is written, flushed and the stream shut down.
    pub(crate) fn start<W>(output: W) -> (FrameWriter, impl Future<Output = std::io::Result<()>> + Send)
    where
        W: AsyncWrite + Send + 'static,
    {
        let shared = Arc::new(WriterShared {
            state: Mutex::new(WriterState {
                output: Box::pin(output),
                queue: VecDeque::new(),
                at: 0,
                unflushed: false,
                finishing: false,
                failed: false,
                idle: None,
            }),
            queued: AtomicUsize::new(0),
            closed: AtomicBool::new(false),
            drained: Notify::new(),
            opened: Instant::now(),
            progress: AtomicU64::new(0),
            written: AtomicU64::new(0),
            runtime: tokio::runtime::Handle::try_current().ok(),
        });
        let writer = FrameWriter { shared: shared.clone() };
        let task = async move {
            let _stopped = Stopped(shared.clone());
            std::future::poll_fn(|cx| shared.poll_write_queue(cx)).await
        };
        (writer, task)
    }

    /// Write `frame` now if the stream takes it, or queue it. `false` when the writer
    /// has stopped (the frame is dropped).
    pub(crate) fn send(&self, frame: Vec<u8>) -> bool {
        let counted = frame.len();
        self.shared.queued.fetch_add(counted, Ordering::AcqRel);
        self.send_counted(frame, counted)
    }

    /// [`FrameWriter::send`] for a frame whose `counted` bytes the caller already added
    /// to [`FrameWriter::queued`] (admitting it against a bound).
    pub(crate) fn send_counted(&self, frame: Vec<u8>, counted: usize) -> bool {
        let shared = &self.shared;
        let mut state = shared.lock();
        if shared.closed.load(Ordering::Acquire) || state.failed {
            drop(state);
            shared.uncount(counted);
            return false;
        }
        let mut at = 0;
        // A frame sent from a thread outside the runtime (an execution's log line or
        // wait) is written in the runtime's context, as a call is: some streams need
        // one (Tokio's stdout), and queueing it would wake the writer's task instead.
        let outside = tokio::runtime::Handle::try_current().is_err();
        let entered = outside.then(|| shared.runtime.as_ref().map(tokio::runtime::Handle::enter)).flatten();
        if state.free() && (!outside || entered.is_some()) {
            let mut cx = Context::from_waker(Waker::noop());
            while at < frame.len() {
                let piece = &frame[at..frame.len().min(at + WRITE_PIECE)];
                match state.output.as_mut().poll_write(&mut cx, piece) {
                    Poll::Ready(Ok(0)) | Poll::Ready(Err(_)) => {
                        state.failed = true;
                        break;
                    }
                    Poll::Ready(Ok(n)) => {
                        at += n;
                        shared.stamp(&shared.progress);
                    }
                    Poll::Pending => break,
                }
            }
            if at == frame.len() && !state.failed {
                match state.output.as_mut().poll_flush(&mut cx) {
                    Poll::Ready(Ok(())) => {}
                    Poll::Ready(Err(_)) => state.failed = true,
                    Poll::Pending => state.unflushed = true,
                }
                if !state.failed {
                    let idle = if state.unflushed { state.idle.take() } else { None };
                    drop(state);
                    shared.stamp(&shared.written);
                    shared.uncount(counted);
                    if let Some(idle) = idle {
                        idle.wake();
                    }
                    return true;
                }
            }
            if state.failed {
                // Stopped for senders now; the future sees the failure and ends.
                shared.closed.store(true, Ordering::Release);
                let idle = state.idle.take();
                drop(state);
                shared.queued.fetch_sub(counted, Ordering::AcqRel);
                shared.drained.notify_waiters();
                if let Some(idle) = idle {
                    idle.wake();
                }
                return false;
            }
        }
        state.queue.push_back((frame, counted));
        if state.queue.len() == 1 {
            state.at = at;
        }
        let idle = state.idle.take();
        drop(state);
        if let Some(idle) = idle {
            idle.wake();
        }
        true
    }

    /// Bytes sent and not yet written.
    pub(crate) fn queued(&self) -> &AtomicUsize {
        &self.shared.queued
    }

    /// Whether the writer has stopped.
    pub(crate) fn is_closed(&self) -> bool {
        self.shared.closed.load(Ordering::Acquire)
    }

    /// A future told when queued bytes are written or the writer stops; create it before
    /// checking, so a change between the check and the wait is not missed.
    pub(crate) fn drained(&self) -> tokio::sync::futures::Notified<'_> {
        self.shared.drained.notified()
    }

    /// When bytes were last written (the writer's start if none were).
    pub(crate) fn last_progress(&self) -> Instant {
        self.shared.at(&self.shared.progress)
    }

    /// When a frame was last written whole (the writer's start if none was).
    pub(crate) fn last_written(&self) -> Instant {
        self.shared.at(&self.shared.written)
    }

    /// Nothing more will be sent: the future writes what waits, flushes, shuts the stream
    /// down and ends.
    pub(crate) fn finish(&self) {
        let idle = {
            let mut state = self.shared.lock();
            state.finishing = true;
            state.idle.take()
        };
        if let Some(idle) = idle {
            idle.wake();
        }
    }

    /// The writer has stopped (its future is gone): frames sent from now on are dropped.
    pub(crate) fn close(&self) {
        self.shared.closed.store(true, Ordering::Release);
        self.shared.drained.notify_waiters();
    }
}

impl WriterShared {
    fn lock(&self) -> MutexGuard<'_, WriterState> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn uncount(&self, counted: usize) {
        if counted > 0 {
            self.queued.fetch_sub(counted, Ordering::AcqRel);
            self.drained.notify_waiters();
        }
    }

    fn stamp(&self, stamp: &AtomicU64) {
        let now = u64::try_from(self.opened.elapsed().as_millis()).unwrap_or(u64::MAX);
        stamp.fetch_max(now, Ordering::AcqRel);
    }

    fn at(&self, stamp: &AtomicU64) -> Instant {
        self.opened + Duration::from_millis(stamp.load(Ordering::Acquire))
    }

    /// Write what waits; `Pending` when the stream is not ready or nothing waits.
    fn poll_write_queue(&self, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let mut state = self.lock();
        let mut written = 0;
        let polled = loop {
            if state.failed {
                break Poll::Ready(Err(std::io::Error::other("a write failed")));
            }
            let at = state.at;
            if let Some((frame, counted)) = state.queue.front() {
                let (length, counted) = (frame.len(), *counted);
                let piece = at..length.min(at + WRITE_PIECE);
                let WriterState { output, queue, .. } = &mut *state;
                match output.as_mut().poll_write(cx, &queue[0].0[piece]) {
                    Poll::Ready(Ok(0)) => break Poll::Ready(Err(std::io::ErrorKind::WriteZero.into())),
                    Poll::Ready(Ok(n)) => {
                        self.stamp(&self.progress);
                        state.at += n;
                        if state.at == length {
                            state.queue.pop_front();
                            state.at = 0;
                            state.unflushed = true;
                            written += counted;
                            self.stamp(&self.written);
                        }
                    }
                    Poll::Ready(Err(e)) => break Poll::Ready(Err(e)),
                    Poll::Pending => break Poll::Pending,
                }
                continue;
            }
            if state.unflushed {
                match state.output.as_mut().poll_flush(cx) {
                    Poll::Ready(Ok(())) => state.unflushed = false,
                    Poll::Ready(Err(e)) => break Poll::Ready(Err(e)),
                    Poll::Pending => break Poll::Pending,
                }
                continue;
            }
            if state.finishing {
                break state.output.as_mut().poll_shutdown(cx);
            }
            state.idle = Some(cx.waker().clone());
            break Poll::Pending;
        };
        if polled.is_ready() {
            state.failed = true;
        }
        drop(state);
        if written > 0 {
            self.uncount(written);
        }
        polled
    }
}

/// Marks the writer stopped when its future ends or is dropped.
struct Stopped(Arc<WriterShared>);

impl Drop for Stopped {
    fn drop(&mut self) {
        let mut state = self.0.lock();
        state.failed = true;
        // The stream goes now (closing it, or its half), not when the last sender goes.
        state.output = Box::pin(tokio::io::sink());
        state.queue.clear();
        drop(state);
        self.0.closed.store(true, Ordering::Release);
        self.0.drained.notify_waiters();
    }
}

/// A Unix stream or a pair of pipes read and written directly, without the wakes Tokio's
/// own types cost here.
///
/// Tokio watches a Unix stream for reading and for writing at once, and Linux signals a
/// Unix stream writable each time its peer reads (the bytes read were charged to the
/// writer's socket): a thread woken for nothing for every frame the other side reads,
/// several microseconds each and sometimes in the way of the thread with work. This one
/// watches for room only while a write waits for it. Tokio's stdin and stdout read and
/// write on a blocking thread, two thread hand-offs per read or write; this one reads and
/// writes the descriptors, made non-blocking, from the task (or thread) at hand.
pub(crate) struct QuietStream {
    /// The runtime it was made in, which watches it (a write may come from another).
    runtime: tokio::runtime::Handle,
    /// Watched for reading only.
    input: Option<tokio::io::unix::AsyncFd<std::fs::File>>,
    /// Written directly.
    output: Option<std::fs::File>,
    /// `output` watched for room, only while writes find none; dropped before `output`.
    room: Option<tokio::io::unix::AsyncFd<Descriptor>>,
    /// Whether `output` is a socket (shut down for writing at the end; a pipe just closes).
    socket: bool,
    /// Written with `send(MSG_NOSIGNAL)`, so a peer gone is an error and not a `SIGPIPE`
    /// for a host that does not ignore it: a connection's socket. Stdio is written with
    /// `write`, the call a confined worker's allowlist has for it.
    send: bool,
    /// Status flags to put back on descriptors this process shares (stdin, stdout).
    restore: Vec<(std::fs::File, libc::c_int)>,
}

impl QuietStream {
    /// A Unix stream, both ways.
    pub(crate) fn unix(stream: tokio::net::UnixStream) -> std::io::Result<QuietStream> {
        let input = std::fs::File::from(std::os::fd::OwnedFd::from(stream.into_std()?));
        let output = input.try_clone()?;
        Ok(QuietStream {
            runtime: tokio::runtime::Handle::try_current().map_err(std::io::Error::other)?,
            input: Some(watched(input, tokio::io::Interest::READABLE)?),
            output: Some(output),
            room: None,
            socket: true,
            send: true,
            restore: Vec::new(),
        })
    }

    /// This reading stream as an input that an execution waiting awake for its answer
    /// reads too ([`lend`]); a frame past `max_frame_bytes` is the reader's, to refuse.
    pub(crate) fn lend(
        mut self,
        max_frame_bytes: usize,
    ) -> std::io::Result<(Arc<lend::Input>, lend::Reader)> {
        let file = self.input.take().ok_or_else(not_this_way)?.into_inner();
        lend::Input::new(file, max_frame_bytes, Some(self))
    }

    /// This process's stdin lent and its stdout, when both are pipes or sockets
    /// ([`QuietStream::stdio`]); `Err` if the lent input cannot be watched.
    pub(crate) fn lend_stdio(max_frame_bytes: usize) -> Option<std::io::Result<Lent>> {
        let (reading, writing) = QuietStream::stdio()?;
        Some(reading.lend(max_frame_bytes).map(|(input, reader)| (input, reader, writing)))
    }

    /// A connected socket (Unix or TCP, non-blocking) as a lent input ([`lend`]) and the
    /// stream writing to it: the socket's descriptor writes, a copy of it is read. The
    /// socket comes back with the error when the copy cannot be made (out of descriptors).
    pub(crate) fn lend_socket(
        socket: std::os::fd::OwnedFd,
        max_frame_bytes: usize,
    ) -> Result<Lent, (std::io::Error, std::os::fd::OwnedFd)> {
        let runtime = match tokio::runtime::Handle::try_current() {
            Ok(runtime) => runtime,
            Err(e) => return Err((std::io::Error::other(e), socket)),
        };
        let input = match socket.try_clone() {
            Ok(input) => std::fs::File::from(input),
            Err(e) => return Err((e, socket)),
        };
        match lend::Input::new(input, max_frame_bytes, None) {
            Ok((input, reader)) => {
                let output = Some(std::fs::File::from(socket));
                let writing = QuietStream {
                    runtime,
                    input: None,
                    output,
                    room: None,
                    socket: true,
                    send: true,
                    restore: Vec::new(),
                };
                Ok((input, reader, writing))
            }
            Err(e) => Err((e, socket)),
        }
    }

    /// This process's stdin and stdout, when both are pipes or sockets (a terminal or a
    /// file is shared with others and left as it is: `None`). Their flags are put back
    /// when the streams are dropped.
    pub(crate) fn stdio() -> Option<(QuietStream, QuietStream)> {
        use std::os::fd::AsFd;
        fn streamable(fd: std::os::fd::BorrowedFd<'_>) -> Option<(std::fs::File, bool)> {
            let copy = std::fs::File::from(fd.try_clone_to_owned().ok()?);
            let kind = copy.metadata().ok()?.file_type();
            use std::os::unix::fs::FileTypeExt;
            (kind.is_fifo() || kind.is_socket()).then_some((copy, kind.is_socket()))
        }
        /// `file` made non-blocking, and what puts its flags back.
        fn non_blocking(file: &std::fs::File) -> Option<(std::fs::File, libc::c_int)> {
            use std::os::fd::AsRawFd;
            let copy = file.try_clone().ok()?;
            // SAFETY: fcntl on a descriptor owned here, no pointers.
            let flags = unsafe { libc::fcntl(copy.as_raw_fd(), libc::F_GETFL) };
            // SAFETY: as above.
            if flags < 0
                || unsafe { libc::fcntl(copy.as_raw_fd(), libc::F_SETFL, flags | libc::O_NONBLOCK) } < 0
            {
                return None;
            }
            Some((copy, flags))
        }
        let (input, _) = streamable(std::io::stdin().as_fd())?;
        let (output, socket) = streamable(std::io::stdout().as_fd())?;
        // Each made non-blocking is put back when its stream drops, an early return's too.
        let runtime = tokio::runtime::Handle::try_current().ok()?;
        let mut reading = QuietStream {
            runtime: runtime.clone(),
            input: None,
            output: None,
            room: None,
            socket: false,
            send: false,
            restore: vec![non_blocking(&input)?],
        };
        let restore = vec![non_blocking(&output)?];
        let writing = QuietStream {
            runtime,
            input: None,
            output: Some(output),
            room: None,
            socket,
            send: false,
            restore,
        };
        reading.input = Some(watched(input, tokio::io::Interest::READABLE).ok()?);
        Some((reading, writing))
    }
}

impl Drop for QuietStream {
    fn drop(&mut self) {
        use std::os::fd::AsRawFd;
        // No longer watched before its descriptor closes (fields drop after this).
        self.room = None;
        for (file, flags) in &self.restore {
            // SAFETY: fcntl on a descriptor owned here, no pointers.
            unsafe { libc::fcntl(file.as_raw_fd(), libc::F_SETFL, *flags) };
        }
    }
}

/// `file` registered with the current runtime for `interest` only.
fn watched(
    file: std::fs::File,
    interest: tokio::io::Interest,
) -> std::io::Result<tokio::io::unix::AsyncFd<std::fs::File>> {
    // SAFETY: a `File` owns its descriptor: it stays open, the same, and reports the
    // same number until it is dropped with the `AsyncFd`.
    Ok(unsafe { tokio::io::unix::AsyncFd::register_with_interest(file, interest) }?)
}

/// A connection whose input is lent ([`QuietStream::lend_socket`],
/// [`QuietStream::lend_stdio`]): the input, the connection's reader of it, and the stream
/// writing the other way.
pub(crate) type Lent = (Arc<lend::Input>, lend::Reader, QuietStream);

/// A descriptor owned elsewhere (a stream's output, a lent input's file), as the runtime
/// watches it: its owner keeps it open while it is watched.
struct Descriptor(std::os::fd::RawFd);

impl std::os::fd::AsRawFd for Descriptor {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.0
    }
}

fn not_this_way() -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::Unsupported, "this stream goes the other way")
}

impl tokio::io::AsyncRead for QuietStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        use std::io::Read;
        let Some(input) = &self.input else { return Poll::Ready(Err(not_this_way())) };
        loop {
            let mut ready = std::task::ready!(input.poll_read_ready(cx))?;
            let unfilled = buf.initialize_unfilled();
            let wanted = unfilled.len();
            match ready.try_io(|file| file.get_ref().read(unfilled)) {
                Ok(Ok(n)) => {
                    // A short read emptied it: the next read waits for more without first
                    // trying (as Tokio's own streams do).
                    if n > 0 && n < wanted {
                        ready.clear_ready();
                    }
                    buf.advance(n);
                    return Poll::Ready(Ok(()));
                }
                Ok(Err(e)) => return Poll::Ready(Err(e)),
                Err(_would_block) => continue,
            }
        }
    }
}

impl AsyncWrite for QuietStream {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        use std::io::Write;
        let this = self.get_mut();
        let Some(output) = &this.output else { return Poll::Ready(Err(not_this_way())) };
        loop {
            let written = if this.send {
                use std::os::fd::AsRawFd;
                // SAFETY: `buf` is valid for its length; the descriptor is this stream's own.
                let n = unsafe {
                    libc::send(output.as_raw_fd(), buf.as_ptr().cast(), buf.len(), libc::MSG_NOSIGNAL)
                };
                usize::try_from(n).map_err(|_| std::io::Error::last_os_error())
            } else {
                (&*output).write(buf)
            };
            match written {
                Ok(n) => {
                    if n == buf.len() {
                        this.room = None;
                    }
                    return Poll::Ready(Ok(n));
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Poll::Ready(Err(e)),
            }
            let room = match &mut this.room {
                Some(room) => room,
                None => {
                    use std::os::fd::AsRawFd;
                    let _runtime = this.runtime.enter();
                    let output = Descriptor(output.as_raw_fd());
                    // SAFETY: `output` is this stream's own, open until the stream is
                    // dropped, and `room` is dropped first (`Drop`), so the number is this
                    // descriptor's for as long as the runtime watches it.
                    let room = unsafe {
                        tokio::io::unix::AsyncFd::register_with_interest(
                            output,
                            tokio::io::Interest::WRITABLE,
                        )
                    }?;
                    this.room.insert(room)
                }
            };
            // Cleared before the next try, so room made after it is not missed.
            std::task::ready!(room.poll_write_ready(cx))?.clear_ready();
        }
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        use std::os::fd::AsRawFd;
        if let (Some(output), true) = (&self.output, self.socket) {
            // SAFETY: shutdown on a descriptor owned here, no pointers.
            if unsafe { libc::shutdown(output.as_raw_fd(), libc::SHUT_WR) } < 0 {
                return Poll::Ready(Err(std::io::Error::last_os_error()));
            }
        }
        Poll::Ready(Ok(()))
    }
}

/// Why a frame could not be read.
#[derive(Debug)]
pub(crate) enum FrameError {
    /// Longer than the bound; `head` is its first bytes, to tell whose it was.
    TooLarge {
        max: usize,
        head: Vec<u8>,
    },
    Malformed(String),
    Broken(std::io::Error),
}

impl FrameError {
    pub(crate) fn kind(&self) -> ProtocolErrorKind {
        match self {
            FrameError::TooLarge { .. } => ProtocolErrorKind::FrameTooLarge,
            FrameError::Malformed(_) | FrameError::Broken(_) => ProtocolErrorKind::MalformedFrame,
        }
    }
}

impl std::fmt::Display for FrameError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FrameError::TooLarge { max, .. } => {
                write!(f, "a frame is longer than the maximum of {max} bytes")
            }
            FrameError::Malformed(problem) => {
                write!(f, "a frame is not a message of this protocol: {problem}")
            }
            FrameError::Broken(problem) => write!(f, "the stream failed: {problem}"),
        }
    }
}

/// Reads frames of at most a bound from one stream.
///
/// Cancellation-safe: the bytes of a frame read so far stay here, so a read dropped
/// inside `select!` loses nothing and the next read goes on where it stopped. After an
/// oversized frame the next read first skips the rest of it, holding none of it.
pub(crate) struct FrameReader {
    max_bytes: usize,
    line: Vec<u8>,
    skipping: bool,
}

impl FrameReader {
    pub(crate) fn new(max_bytes: usize) -> FrameReader {
        FrameReader { max_bytes, line: Vec::new(), skipping: false }
    }

    /// Change the bound, as when a connection is authenticated.
    pub(crate) fn set_max_bytes(&mut self, max_bytes: usize) {
        self.max_bytes = max_bytes;
    }

    /// Read one message; `Ok(None)` at the end of the stream.
    pub(crate) async fn next<R: AsyncBufRead + Unpin, M: DeserializeOwned>(
        &mut self,
        input: &mut R,
    ) -> Result<Option<M>, FrameError> {
        loop {
            let available = input.fill_buf().await.map_err(FrameError::Broken)?;
            if available.is_empty() {
                self.skipping = false;
                if self.line.is_empty() {
                    return Ok(None);
                }
                // The last frame may end without its newline.
                return self.parse().map(Some);
            }
            let newline = available.iter().position(|&b| b == b'\n');
            let chunk = newline.unwrap_or(available.len());
            let used = newline.map_or(chunk, |n| n + 1);
            if self.skipping {
                input.consume(used);
                self.skipping = newline.is_none();
                continue;
            }
            if self.line.len() + chunk > self.max_bytes {
                let mut head = std::mem::take(&mut self.line);
                head.truncate(HEAD_BYTES);
                let more = HEAD_BYTES.saturating_sub(head.len()).min(chunk);
                head.extend_from_slice(&available[..more]);
                input.consume(used);
                self.skipping = newline.is_none();
                return Err(FrameError::TooLarge { max: self.max_bytes, head });
            }
            self.line.extend_from_slice(&available[..chunk]);
            input.consume(used);
            if newline.is_some() {
                return self.parse().map(Some);
            }
        }
    }

    fn parse<M: DeserializeOwned>(&mut self) -> Result<M, FrameError> {
        // Any depth (a result may nest far past serde_json's limit of 128), and a lone
        // surrogate a JavaScript peer escaped reads as U+FFFD, as the codec reads it.
        let parsed = std::str::from_utf8(&self.line)
            .map_err(|e| FrameError::Malformed(e.to_string()))
            .and_then(|text| {
                codemode_protocol::from_json_str(text).map_err(|e| FrameError::Malformed(e.to_string()))
            });
        self.line.clear();
        if self.line.capacity() > KEEP_LINE_CAPACITY {
            self.line = Vec::new();
        }
        parsed
    }
}

/// The outcome that stands in for one longer than `max_bytes` in its frame: kind
/// `resultTooLarge`, its text pinned, and the first of `logs` that fit beside it.
pub(crate) fn too_large_outcome(execution: u64, logs: &[String], max_bytes: usize) -> Outcome {
    let text = texts::OUTCOME_TOO_LARGE.fill(&[&max_bytes.to_string()]);
    let bare = ServerMessage::Outcome {
        execution,
        outcome: Outcome::failure(OutcomeKind::ResultTooLarge, text.clone(), Vec::new()),
    };
    let mut room = max_bytes.saturating_sub(serde_json::to_vec(&bare).map_or(usize::MAX, |b| b.len()));
    let mut kept = Vec::new();
    for line in logs {
        // Its JSON string and a comma.
        let cost = serde_json::to_string(line).map_or(usize::MAX, |s| s.len()).saturating_add(1);
        if cost > room {
            break;
        }
        room -= cost;
        kept.push(line.clone());
    }
    Outcome::failure(OutcomeKind::ResultTooLarge, text, kept)
}

/// What an oversized frame was, told from its head as this crate writes it (the type,
/// then the execution, then the call).
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum FrameHead {
    Outcome { execution: u64 },
    Call { execution: u64, call: u64 },
    Fetch { execution: u64, call: u64 },
    Unknown,
}

impl FrameHead {
    pub(crate) fn read(head: &[u8]) -> FrameHead {
        fn number(text: &[u8]) -> Option<(u64, &[u8])> {
            let digits = text.iter().take_while(|b| b.is_ascii_digit()).count();
            let value = std::str::from_utf8(&text[..digits]).ok()?.parse().ok()?;
            Some((value, &text[digits..]))
        }
        let ids = |rest: &[u8]| -> Option<(u64, u64)> {
            let (execution, rest) = number(rest)?;
            let (call, _) = number(rest.strip_prefix(br#","call":"#)?)?;
            Some((execution, call))
        };
        if let Some(rest) = head.strip_prefix(br#"{"type":"outcome","execution":"#) {
            if let Some((execution, rest)) = number(rest)
                && rest.starts_with(b",")
            {
                return FrameHead::Outcome { execution };
            }
        } else if let Some(rest) = head.strip_prefix(br#"{"type":"call","execution":"#) {
            if let Some((execution, call)) = ids(rest) {
                return FrameHead::Call { execution, call };
            }
        } else if let Some(rest) = head.strip_prefix(br#"{"type":"fetch","execution":"#)
            && let Some((execution, call)) = ids(rest)
        {
            return FrameHead::Fetch { execution, call };
        }
        FrameHead::Unknown
    }
}

/// Return freed memory to the operating system soon, at most once a second: glibc's
/// allocator otherwise keeps the freed pages of large frames and outcomes, and a server
/// that once held much for one client would stay that large.
pub(crate) fn give_back_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        static SCHEDULED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
        static LAST: std::sync::Mutex<Option<tokio::time::Instant>> = std::sync::Mutex::new(None);
        if SCHEDULED.swap(true, std::sync::atomic::Ordering::AcqRel) {
            return;
        }
        tokio::spawn(async {
            let last = *LAST.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(last) = last {
                tokio::time::sleep_until(last + std::time::Duration::from_secs(1)).await;
            }
            SCHEDULED.store(false, std::sync::atomic::Ordering::Release);
            // SAFETY: malloc_trim takes no pointers and is safe to call from any thread.
            let _ = tokio::task::spawn_blocking(|| unsafe { libc::malloc_trim(0) }).await;
            *LAST.lock().unwrap_or_else(|p| p.into_inner()) = Some(tokio::time::Instant::now());
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_oversized_frame_is_skipped_and_the_next_one_read() {
        let big = format!(
            "{{\"type\":\"outcome\",\"execution\":7,\"outcome\":{{\"result\":\"{}\",\"logs\":[]}}}}\n",
            "x".repeat(500)
        );
        let small = "{\"type\":\"outcome\",\"execution\":8,\"outcome\":{\"result\":1,\"logs\":[]}}\n";
        let bytes = format!("{big}{small}");
        let mut input = tokio::io::BufReader::with_capacity(16, bytes.as_bytes());
        let mut frames = FrameReader::new(100);
        let Err(FrameError::TooLarge { max: 100, head }) = frames.next::<_, ServerMessage>(&mut input).await
        else {
            panic!("the big frame is too large")
        };
        assert_eq!(FrameHead::read(&head), FrameHead::Outcome { execution: 7 });
        let Ok(Some(ServerMessage::Outcome { execution: 8, .. })) = frames.next(&mut input).await else {
            panic!("the small frame after it is read")
        };
        assert!(matches!(frames.next::<_, ServerMessage>(&mut input).await, Ok(None)));
    }

    #[test]
    fn a_frame_is_bounded_by_its_json_without_the_newline() {
        let message = ServerMessage::Error(codemode_protocol::wire::ProtocolError {
            kind: ProtocolErrorKind::Hello,
            message: "m".to_owned(),
        });
        let length = serde_json::to_vec(&message).unwrap().len();
        assert_eq!(encode_frame(&message, length).map(|f| f.len()), Some(length + 1));
        assert_eq!(encode_frame(&message, length - 1), None);
        assert_eq!(frame_length(&message, length), Some(length + 1));
        assert_eq!(frame_length(&message, length - 1), None);
    }

    /// Frames sent from several threads, in the runtime's context or not (an execution's
    /// thread), while the stream takes them at once, and while it does not (a peer that
    /// reads late), arrive whole and each sender's in order.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn frames_arrive_whole_and_in_order_written_at_once_or_queued() {
        use tokio::io::AsyncBufReadExt;
        let (near, far) = tokio::net::UnixStream::pair().unwrap();
        let (writer, written) = FrameWriter::start(QuietStream::unix(near).unwrap());
        let task = tokio::spawn(written);
        let senders: Vec<_> = (0..3u8)
            .map(|sender| {
                let (writer, runtime) = (writer.clone(), tokio::runtime::Handle::current());
                std::thread::spawn(move || {
                    let _runtime = (sender != 2).then(|| runtime.enter());
                    for n in 0..300 {
                        // Some frames past a socket's buffer, so writes find no room.
                        let size = if n % 50 == 0 { 300_000 } else { 20 };
                        let mut frame = format!("{sender} {n} {}", "x".repeat(size)).into_bytes();
                        frame.push(b'\n');
                        assert!(writer.send(frame));
                    }
                })
            })
            .collect();
        let mut lines = tokio::io::BufReader::new(far).lines();
        let mut next = [0usize; 3];
        for _ in 0..900 {
            let line = lines.next_line().await.unwrap().unwrap();
            let mut words = line.split(' ');
            let sender: usize = words.next().unwrap().parse().unwrap();
            let n: usize = words.next().unwrap().parse().unwrap();
            assert_eq!(n, next[sender], "sender {sender}'s frames in order");
            assert_eq!(words.next().unwrap().len(), if n.is_multiple_of(50) { 300_000 } else { 20 });
            next[sender] += 1;
        }
        senders.into_iter().for_each(|sender| sender.join().unwrap());
        assert_eq!(writer.queued().load(Ordering::Acquire), 0);
        writer.finish();
        task.await.unwrap().unwrap();
        assert!(writer.is_closed());
        assert!(lines.next_line().await.unwrap().is_none(), "finished: the stream is shut down");
        assert!(!writer.send(b"late\n".to_vec()), "a stopped writer takes nothing");
    }

    #[test]
    fn a_call_head_names_its_execution_and_call() {
        assert_eq!(
            FrameHead::read(br#"{"type":"call","execution":3,"call":12,"provider":"s"#),
            FrameHead::Call { execution: 3, call: 12 }
        );
        assert_eq!(FrameHead::read(br#"{"type":"call","execution":3"#), FrameHead::Unknown);
        assert_eq!(FrameHead::read(br#"{"execution":3,"type":"outcome""#), FrameHead::Unknown);
    }
}
