//! `FrameWriter`: frames written to one stream in the order they are sent, from any
//! thread, and `BoundedWriter`, the same held to a bound on what waits for a peer that
//! does not read (both sides of the wire use it).

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use serde::Serialize;
use tokio::io::AsyncWrite;
use tokio::sync::Notify;

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
        crate::sync::lock(&self.state)
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

/// A [`FrameWriter`] held to two bounds: no frame longer than `max_frame_bytes` is sent,
/// and a side that keeps reading only while under `max_queued_bytes` holds at most that
/// (plus a frame) for a peer that does not read.
#[derive(Clone)]
pub(crate) struct BoundedWriter {
    writer: FrameWriter,
    max_frame_bytes: usize,
    max_queued_bytes: usize,
}

impl BoundedWriter {
    pub(crate) fn new(writer: FrameWriter, max_frame_bytes: usize, max_queued_bytes: usize) -> BoundedWriter {
        BoundedWriter { writer, max_frame_bytes, max_queued_bytes: max_queued_bytes.max(1) }
    }

    /// The writer under the bounds.
    pub(crate) fn writer(&self) -> &FrameWriter {
        &self.writer
    }

    pub(crate) fn max_frame_bytes(&self) -> usize {
        self.max_frame_bytes
    }

    pub(crate) fn max_queued_bytes(&self) -> usize {
        self.max_queued_bytes
    }

    /// Send `message` now; `false` when its frame is longer than the bound (nothing is
    /// sent) or the writer has stopped.
    pub(crate) fn send<M: Serialize>(&self, message: &M) -> bool {
        match super::encode_frame(message, self.max_frame_bytes) {
            Some(frame) => self.writer.send(frame),
            None => false,
        }
    }

    /// Whether what waits for the peer holds the queue's bound or more.
    pub(crate) fn is_full(&self) -> bool {
        self.writer.queued().load(Ordering::Acquire) >= self.max_queued_bytes
    }

    /// Once the queue is under its bound or the writer has stopped, or at `until`.
    pub(crate) async fn room(&self, until: Option<tokio::time::Instant>) {
        let drained = self.writer.drained();
        tokio::pin!(drained);
        // Registered before the check, so a drain between the two is not missed.
        drained.as_mut().enable();
        if !self.is_full() || self.writer.is_closed() {
            return;
        }
        match until {
            Some(until) => drop(tokio::time::timeout_at(until, drained).await),
            None => drained.await,
        }
    }
}
