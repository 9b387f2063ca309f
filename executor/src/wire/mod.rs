//! The wire protocol spoken over a byte stream: one JSON message per line, the
//! protocol crate's `ClientMessage` and `ServerMessage`.
//!
//! `server` serves the built-in executor behind it (`codemode stdio`); `process` is the
//! host side, used by process isolation.

pub(crate) mod process;
pub mod server;

use codemode_protocol::wire::ProtocolErrorKind;
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// The largest message read from the wire by default, so a peer cannot grow memory
/// without bound.
pub const MAX_FRAME_BYTES: usize = 64 << 20;

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

/// Why a frame could not be read.
#[derive(Debug)]
pub(crate) enum FrameError {
    TooLarge(usize),
    Malformed(String),
    Broken(std::io::Error),
}

impl FrameError {
    pub(crate) fn kind(&self) -> ProtocolErrorKind {
        match self {
            FrameError::TooLarge(_) => ProtocolErrorKind::FrameTooLarge,
            FrameError::Malformed(_) | FrameError::Broken(_) => ProtocolErrorKind::MalformedFrame,
        }
    }
}

impl std::fmt::Display for FrameError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FrameError::TooLarge(max) => write!(f, "a frame is longer than the maximum of {max} bytes"),
            FrameError::Malformed(problem) => {
                write!(f, "a frame is not a message of this protocol: {problem}")
            }
            FrameError::Broken(problem) => write!(f, "the stream failed: {problem}"),
        }
    }
}

/// Read one message of at most `max_bytes`; `Ok(None)` at the end of the stream.
pub(crate) async fn read_frame<R: AsyncBufRead + Unpin, M: DeserializeOwned>(
    input: &mut R,
    max_bytes: usize,
) -> Result<Option<M>, FrameError> {
    let mut line = Vec::new();
    let read = (&mut *input).take(max_bytes as u64 + 1).read_until(b'\n', &mut line).await;
    match read {
        Ok(0) => Ok(None),
        Ok(_) if line.len() > max_bytes && line.last() != Some(&b'\n') => {
            Err(FrameError::TooLarge(max_bytes))
        }
        Ok(_) => {
            // Any depth (a result may nest far past serde_json's limit of 128), and a lone
            // surrogate a JavaScript peer escaped reads as U+FFFD, as the codec reads it.
            let text = std::str::from_utf8(&line).map_err(|e| FrameError::Malformed(e.to_string()))?;
            codemode_protocol::from_json_str(text).map(Some).map_err(|e| FrameError::Malformed(e.to_string()))
        }
        Err(e) => Err(FrameError::Broken(e)),
    }
}

/// [`read_frame`] with the default maximum, the problem as text.
pub(crate) async fn read_message<R: AsyncBufRead + Unpin, M: DeserializeOwned>(
    input: &mut R,
) -> Result<Option<M>, String> {
    read_frame(input, MAX_FRAME_BYTES).await.map_err(|e| e.to_string())
}
