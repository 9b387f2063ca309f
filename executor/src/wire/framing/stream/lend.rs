//! A connection's input, lent to the execution waiting awake for its call's answer.
//!
//! A worker's or a daemon's answer used to reach the execution through the connection's
//! reader: a thread asleep in `epoll`, which the kernel wakes on an idle, halted CPU,
//! about 20 µs later on a VM (docs/performance.md, "The execution reads its own
//! answers"). So while an execution waits awake for an answer (`runtime::spin`), it reads
//! the input itself and takes the small answers at its head ([`Input::read_answers`]);
//! any other frame (an execute, a cancel, a ping, a large one), and all after it, is
//! left to the reader.
//!
//! One order for every frame: bytes go from the descriptor into one buffer under a lock.
//! The connection's reader ([`Reader`]) takes whole frames from it; the execution reads
//! only while the reader is parked holding nothing (no frame taken and still to be
//! handled, no part of one), so frames are handled in the order they came, by whoever
//! handles them.

use std::io::{ErrorKind, Read};
use std::os::fd::AsRawFd;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncBufRead, AsyncRead, ReadBuf};

/// The buffer's first size, and the least room a read is given: a connection that is
/// idle or sends small frames holds no more.
const FIRST_ROOM: usize = 8 << 10;

/// The longest frame an execution takes (a larger one is the reader's), and the size
/// past which the buffer is given back once emptied.
const SMALL_FRAME_BYTES: usize = 64 << 10;

/// The input both sides read: a non-blocking descriptor and what was read of it.
pub(crate) struct Input {
    file: std::fs::File,
    /// A frame is its JSON without the newline; one longer is left to the reader, which
    /// refuses it.
    max_frame_bytes: usize,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Read and not yet taken: `bytes[start..filled]`; the rest is room for the next read.
    bytes: Vec<u8>,
    start: usize,
    filled: usize,
    /// Where the last whole frame read ends (at most `start`: none).
    whole: usize,
    /// The reader found nothing and waits for the descriptor (or for `waker`).
    parked: bool,
    /// The reader took part of a frame: the rest is its to read.
    partial: bool,
    waker: Option<Waker>,
    /// The descriptor read its end.
    end: bool,
    /// The reader is gone, and the descriptor may be blocking again: nobody reads it.
    closed: bool,
    failed: Option<std::io::Error>,
}

impl State {
    fn unread(&self) -> &[u8] {
        &self.bytes[self.start..self.filled]
    }

    /// With nothing unread, start the buffer over, giving back a large frame's room.
    fn reset_if_read(&mut self) {
        if self.start == self.filled {
            (self.start, self.filled, self.whole) = (0, 0, 0);
            if self.bytes.len() > SMALL_FRAME_BYTES {
                self.bytes = Vec::new();
            }
        }
    }

    /// Read once from `file` into the room after what is unread (its end sets `end`); the
    /// buffer doubles while a frame outgrows it.
    fn fill(&mut self, mut file: &std::fs::File) -> std::io::Result<()> {
        self.reset_if_read();
        if self.start > 0 && self.bytes.len() - self.filled < FIRST_ROOM {
            self.bytes.copy_within(self.start..self.filled, 0);
            self.filled -= self.start;
            self.whole = self.whole.saturating_sub(self.start);
            self.start = 0;
        }
        if self.bytes.len() - self.filled < FIRST_ROOM {
            let size = (self.filled + FIRST_ROOM).max(2 * self.bytes.len());
            self.bytes.resize(size, 0);
        }
        let n = file.read(&mut self.bytes[self.filled..])?;
        if n == 0 {
            self.end = true;
        } else if let Some(last) = self.bytes[self.filled..self.filled + n].iter().rposition(|&b| b == b'\n')
        {
            self.whole = self.filled + last + 1;
        }
        self.filled += n;
        Ok(())
    }

    /// The frame at the head, its newline included, if it is whole.
    fn head(&self) -> Option<&[u8]> {
        if self.whole <= self.start {
            return None;
        }
        let unread = &self.bytes[self.start..self.whole];
        let end = unread.iter().position(|&b| b == b'\n')?;
        Some(&unread[..=end])
    }

    /// Leave what is unread to the reader, and wake it.
    fn hand_back(&mut self) {
        self.parked = false;
        if let Some(waker) = self.waker.take() {
            waker.wake();
        }
    }
}

fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    crate::sync::lock(state)
}

impl Input {
    /// `file`, non-blocking, read by the returned [`Reader`] (which registers it with the
    /// current runtime) and by whoever calls [`Input::read_answers`]; `stream` is what it
    /// came from, held until the reader is dropped (it puts the descriptor's flags back).
    pub(crate) fn new(
        file: std::fs::File,
        max_frame_bytes: usize,
        stream: Option<super::QuietStream>,
    ) -> std::io::Result<(Arc<Input>, Reader)> {
        let descriptor = super::Descriptor(file.as_raw_fd());
        let input = Arc::new(Input { file, max_frame_bytes, state: Mutex::default() });
        // SAFETY: the input owns the descriptor, and the reader holds the input and drops
        // `watched` first, so the descriptor stays open, the same, and reports the same
        // number while the runtime watches it.
        let watched = unsafe { AsyncFd::register_with_interest(descriptor, tokio::io::Interest::READABLE) }?;
        Ok((input.clone(), Reader { watched, input, taken: Vec::new(), at: 0, _stream: stream }))
    }

    /// While the reader is parked, give each whole frame at the input's head to `answer`,
    /// read once from the descriptor, and give it those that read completed. `answer`
    /// returns `false` for a frame it does not take (anything but an answer), which is left
    /// with all after it to the reader, as is a frame longer than [`SMALL_FRAME_BYTES`] (or
    /// than the frame bound): so a turn's work is bounded. Never waits: if the reader holds
    /// the lock, it returns.
    pub(crate) fn read_answers(&self, mut answer: impl FnMut(&[u8]) -> bool) {
        let Ok(mut state) = self.state.try_lock() else { return };
        if state.closed || !state.parked || state.partial {
            return;
        }
        let most = self.max_frame_bytes.min(SMALL_FRAME_BYTES);
        for read in [true, false] {
            while let Some(frame) = state.head() {
                let length = frame.len();
                if length - 1 > most || !answer(frame) {
                    state.hand_back();
                    return;
                }
                state.start += length;
            }
            if !read {
                return;
            }
            if state.end || state.failed.is_some() || state.unread().len() > most {
                state.hand_back();
                return;
            }
            match state.fill(&self.file) {
                Ok(()) if state.end => {
                    state.hand_back();
                    return;
                }
                Ok(()) => {}
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted) => return,
                Err(e) => {
                    state.failed = Some(e);
                    state.hand_back();
                    return;
                }
            }
        }
    }
}

/// The connection's side: whole frames from the shared buffer, read from the descriptor
/// when it has none.
pub(crate) struct Reader {
    /// The input's descriptor, registered with the async runtime for readiness; dropped
    /// before `input` (fields drop in order), which may hold its last reference.
    watched: AsyncFd<super::Descriptor>,
    input: Arc<Input>,
    /// Frames taken and not yet consumed: `taken[at..]`.
    taken: Vec<u8>,
    at: usize,
    /// Dropped after `watched` (fields drop in order).
    _stream: Option<super::QuietStream>,
}

impl Reader {
    /// Move into `taken` what the reader may have of `state`: its whole frames, or if there
    /// are none the part of one read so far, so the frame reader holds each frame to its
    /// bound as it arrives (a hello's is smaller than a frame's).
    fn take(state: &mut State, taken: &mut Vec<u8>) -> bool {
        let to = if state.whole > state.start {
            state.whole
        } else if state.filled > state.start {
            state.filled
        } else {
            return false;
        };
        taken.extend_from_slice(&state.bytes[state.start..to]);
        state.start = to;
        state.partial = taken.last() != Some(&b'\n');
        state.reset_if_read();
        true
    }
}

impl AsyncBufRead for Reader {
    fn poll_fill_buf(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<&[u8]>> {
        let this = self.get_mut();
        if this.at < this.taken.len() {
            return Poll::Ready(Ok(&this.taken[this.at..]));
        }
        this.taken.clear();
        if this.taken.capacity() > crate::wire::framing::KEEP_LINE_CAPACITY {
            this.taken = Vec::new();
        }
        this.at = 0;
        let mut state = lock(&this.input.state);
        state.parked = false;
        loop {
            if Reader::take(&mut state, &mut this.taken) {
                return Poll::Ready(Ok(&this.taken));
            }
            if let Some(failed) = state.failed.take() {
                return Poll::Ready(Err(failed));
            }
            if state.end {
                return Poll::Ready(Ok(&[]));
            }
            let mut ready = match this.watched.poll_read_ready(cx) {
                Poll::Ready(ready) => ready?,
                Poll::Pending => {
                    // Parked: the execution may read until the descriptor wakes this.
                    state.parked = true;
                    state.waker = Some(cx.waker().clone());
                    return Poll::Pending;
                }
            };
            match ready.try_io(|_| state.fill(&this.input.file)) {
                Ok(Ok(())) => {}
                Ok(Err(e)) if e.kind() == ErrorKind::Interrupted => {}
                Ok(Err(e)) => return Poll::Ready(Err(e)),
                // Readiness cleared: the next turn registers for the next.
                Err(_would_block) => {}
            }
        }
    }

    fn consume(self: Pin<&mut Self>, amount: usize) {
        let this = self.get_mut();
        this.at = (this.at + amount).min(this.taken.len());
    }
}

impl Drop for Reader {
    fn drop(&mut self) {
        // Before `_stream` puts the descriptor's flags back: a read then could block.
        lock(&self.input.state).closed = true;
    }
}

impl AsyncRead for Reader {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let available = std::task::ready!(self.as_mut().poll_fill_buf(cx))?;
        let n = available.len().min(buf.remaining());
        buf.put_slice(&available[..n]);
        self.consume(n);
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
    use tokio::net::UnixStream;

    use super::{Input, Reader};
    use crate::wire::framing::{FrameError, FrameReader, QuietStream};

    /// A lent input over one end of a socket pair, and the other end to write to.
    fn lent(max_frame_bytes: usize) -> (Arc<Input>, Reader, UnixStream) {
        let (near, far) = UnixStream::pair().unwrap();
        let (input, reader) = QuietStream::unix(near).unwrap().lend(max_frame_bytes).unwrap();
        (input, reader, far)
    }

    /// Let the reader find nothing and park, as a connection's reader between frames.
    async fn park(reader: &mut Reader) {
        let found = tokio::time::timeout(Duration::from_millis(20), reader.fill_buf()).await;
        assert!(
            found.is_err(),
            "the reader found something to read: {:?}",
            found.map(|r| r.map(<[u8]>::to_vec))
        );
    }

    /// What `read_answers` takes, answers being the frames that start with `A`.
    fn read_answers(input: &Input) -> Vec<String> {
        let mut taken = Vec::new();
        input.read_answers(|frame| {
            let answer = frame.starts_with(b"A");
            if answer {
                taken.push(String::from_utf8(frame.to_vec()).unwrap());
            }
            answer
        });
        taken
    }

    /// Written to the far end, and given time to arrive at the near one.
    async fn send(far: &mut UnixStream, bytes: &str) {
        far.write_all(bytes.as_bytes()).await.unwrap();
        tokio::time::sleep(Duration::from_millis(5)).await;
    }

    async fn read_line(reader: &mut Reader) -> String {
        let mut line = String::new();
        tokio::time::timeout(Duration::from_secs(10), reader.read_line(&mut line)).await.unwrap().unwrap();
        line
    }

    #[tokio::test]
    async fn the_answers_at_the_head_are_taken_and_the_rest_left_to_the_reader_in_order() {
        let (input, mut reader, mut far) = lent(1024);
        park(&mut reader).await;
        send(&mut far, "A1\nA2\nX3\nA4\n").await;
        assert_eq!(read_answers(&input), ["A1\n", "A2\n"]);
        // The frame that is not an answer stops it: it and the answer after it are the reader's.
        assert_eq!(read_answers(&input), Vec::<String>::new());
        assert_eq!(read_line(&mut reader).await, "X3\n");
        // The reader holds A4, not yet handled: an answer after it waits its turn.
        send(&mut far, "A5\n").await;
        assert_eq!(read_answers(&input), Vec::<String>::new(), "the reader holds a frame: nothing is taken");
        assert_eq!(read_line(&mut reader).await, "A4\n");
        assert_eq!(read_line(&mut reader).await, "A5\n");
    }

    /// While the reader holds the start of a frame, the rest of it is the reader's: an
    /// execution reading on would take the tail as a frame of its own.
    #[tokio::test]
    async fn the_rest_of_a_frame_the_reader_began_is_the_readers() {
        let (input, mut reader, mut far) = lent(1024);
        send(&mut far, "X").await;
        let begun = reader.fill_buf().await.unwrap().len();
        assert_eq!(begun, 1);
        reader.consume(begun);
        park(&mut reader).await;
        send(&mut far, "A-tail\nA1\n").await;
        assert_eq!(read_answers(&input), Vec::<String>::new());
        assert_eq!(read_line(&mut reader).await, "A-tail\n");
        assert_eq!(read_line(&mut reader).await, "A1\n");
    }

    /// A large frame is the reader's, with all after it; what the execution took before it,
    /// the buffer's growth for it and its reuse after it keep every frame whole and in order.
    #[tokio::test]
    async fn a_large_frame_is_left_to_the_reader() {
        let (input, mut reader, mut far) = lent(1 << 20);
        let big = format!("A{}\n", "x".repeat(100 << 10));
        for round in 0..3 {
            park(&mut reader).await;
            let (before, after) = (format!("A{round}-before\n"), format!("A{round}-after\n"));
            // Written by a task: it may not fit in the socket's buffer until the reader reads.
            let bytes = format!("{before}{big}{after}");
            let (mut writing, written) = (far, tokio::sync::oneshot::channel());
            tokio::spawn(async move {
                writing.write_all(bytes.as_bytes()).await.unwrap();
                let _ = written.0.send(writing);
            });
            tokio::time::sleep(Duration::from_millis(5)).await;
            // As many turns as reading the whole of it would take.
            let taken: Vec<String> = (0..50).flat_map(|_| read_answers(&input)).collect();
            assert_eq!(taken.as_slice(), std::slice::from_ref(&before), "round {round}");
            assert_eq!(read_line(&mut reader).await, big);
            assert_eq!(read_line(&mut reader).await, after);
            far = written.1.await.unwrap();
        }
    }

    #[tokio::test]
    async fn nothing_is_taken_while_the_reader_reads() {
        let (input, mut reader, mut far) = lent(1024);
        send(&mut far, "A1\n").await;
        assert_eq!(read_answers(&input), Vec::<String>::new(), "the reader has not parked yet");
        assert_eq!(read_line(&mut reader).await, "A1\n");
    }

    #[tokio::test]
    async fn a_frame_split_across_reads_is_taken_whole() {
        let (input, mut reader, mut far) = lent(1024);
        park(&mut reader).await;
        send(&mut far, "A-first-").await;
        assert_eq!(read_answers(&input), Vec::<String>::new());
        send(&mut far, "half\nA-next\n").await;
        assert_eq!(read_answers(&input), ["A-first-half\n", "A-next\n"]);
        send(&mut far, "X-for-the-").await;
        assert_eq!(read_answers(&input), Vec::<String>::new());
        send(&mut far, "reader\n").await;
        assert_eq!(read_answers(&input), Vec::<String>::new());
        assert_eq!(read_line(&mut reader).await, "X-for-the-reader\n");
    }

    #[tokio::test]
    async fn the_end_read_while_the_reader_is_parked_reaches_it() {
        let (input, mut reader, mut far) = lent(1024);
        park(&mut reader).await;
        send(&mut far, "A1\nX-last-without-newline").await;
        drop(far);
        tokio::time::sleep(Duration::from_millis(5)).await;
        assert_eq!(read_answers(&input), ["A1\n"]);
        assert_eq!(read_answers(&input), Vec::<String>::new());
        assert_eq!(read_line(&mut reader).await, "X-last-without-newline");
        assert_eq!(read_line(&mut reader).await, "", "then the end");
    }

    #[tokio::test]
    async fn a_frame_past_the_bound_is_left_to_the_reader_which_refuses_it() {
        let (input, mut reader, mut far) = lent(16);
        park(&mut reader).await;
        send(&mut far, &format!("A{}\n", "x".repeat(40))).await;
        assert_eq!(read_answers(&input), Vec::<String>::new());
        let mut frames = FrameReader::new(16);
        let refused = frames.next::<_, serde_json::Value>(&mut reader).await;
        assert!(matches!(refused, Err(FrameError::TooLarge { max: 16, .. })), "{refused:?}");
    }

    /// The frame reader refuses a frame past its bound as the bytes come, though the input
    /// would hold more (a connection's hello is bounded far below a frame).
    #[tokio::test]
    async fn the_part_of_a_frame_read_so_far_is_the_readers() {
        let (_input, mut reader, mut far) = lent(1 << 20);
        send(&mut far, &"x".repeat(100)).await;
        let mut frames = FrameReader::new(16);
        let refused = frames.next::<_, serde_json::Value>(&mut reader).await;
        assert!(matches!(refused, Err(FrameError::TooLarge { max: 16, .. })), "{refused:?}");
    }

    #[tokio::test]
    async fn nothing_is_read_once_the_reader_is_gone() {
        let (input, mut reader, mut far) = lent(1024);
        park(&mut reader).await;
        drop(reader);
        send(&mut far, "A1\n").await;
        assert_eq!(read_answers(&input), Vec::<String>::new());
    }

    /// The reader on the runtime's threads and an execution's thread race for each pair of
    /// frames: whoever takes the answer, each frame is seen once, in order, and the frame
    /// handed back reaches the reader.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn frames_raced_for_arrive_once_and_in_order() {
        let (input, mut reader, mut far) = lent(1024);
        let (lines, mut heard) = tokio::sync::mpsc::unbounded_channel();
        let reading = tokio::spawn(async move {
            loop {
                let line = read_line(&mut reader).await;
                if line.is_empty() || lines.send(line).is_err() {
                    return;
                }
            }
        });
        let mut taken_by_execution = 0;
        for n in 0..200 {
            tokio::time::sleep(Duration::from_millis(1)).await;
            far.write_all(format!("A{n}\nX{n}\n").as_bytes()).await.unwrap();
            let mut taken = Vec::new();
            // Until the reader took the frames or the execution took the answer.
            for _ in 0..1000 {
                taken = read_answers(&input);
                if !taken.is_empty() {
                    break;
                }
                std::thread::yield_now();
            }
            taken_by_execution += taken.len();
            let mut seen: Vec<String> = taken;
            while seen.last().is_none_or(|last| !last.starts_with('X')) {
                let line =
                    tokio::time::timeout(Duration::from_secs(10), heard.recv()).await.unwrap().unwrap();
                seen.push(line);
            }
            assert_eq!(seen, [format!("A{n}\n"), format!("X{n}\n")], "each frame once, in order");
        }
        drop(far);
        reading.await.unwrap();
        assert!(taken_by_execution > 0, "the execution never took an answer: the race was not run");
    }
}
