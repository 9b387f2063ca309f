//! Frames: how the wire's messages cross a byte stream, the same for both sides. A frame
//! is one message's JSON and a newline, bounded by one rule: a side neither writes
//! ([`encode_frame`]) nor reads ([`FrameReader`]) one whose JSON is longer than its bound.
//! `writer` writes frames from any thread with its bound on what waits for a peer that
//! does not read; `stream` and `lend` are the descriptors read and written directly.

mod stream;
mod writer;

use codemode_protocol::wire::{ProtocolErrorKind, ServerMessage};
use codemode_protocol::{Outcome, OutcomeKind, texts};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncWrite, AsyncWriteExt};

use crate::sync::lock;

pub(crate) use self::stream::{Lent, QuietStream, lend};
pub(crate) use self::writer::{BoundedWriter, FrameWriter};

/// The largest message read from the wire by default, so a peer cannot grow memory
/// without bound.
pub const MAX_FRAME_BYTES: usize = 64 << 20;

/// How many bytes of an oversized frame are kept to tell what it was.
const HEAD_BYTES: usize = 96;

/// A reader's line buffer grown past this is given back after its frame.
pub(super) const KEEP_LINE_CAPACITY: usize = 64 << 10;

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
            let last = *lock(&LAST);
            if let Some(last) = last {
                tokio::time::sleep_until(last + std::time::Duration::from_secs(1)).await;
            }
            SCHEDULED.store(false, std::sync::atomic::Ordering::Release);
            // SAFETY: malloc_trim takes no pointers and is safe to call from any thread.
            let _ = tokio::task::spawn_blocking(|| unsafe { libc::malloc_trim(0) }).await;
            *lock(&LAST) = Some(tokio::time::Instant::now());
        });
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;

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
