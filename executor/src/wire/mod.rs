//! The wire protocol spoken over a byte stream: one JSON message per line, the
//! protocol crate's `ClientMessage` and `ServerMessage`.
//!
//! `server` serves the built-in executor behind it (`codemode stdio`); `process` is the
//! host side, used by process isolation.

pub(crate) mod process;
pub mod server;

use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// The largest line read from the wire, so a peer cannot grow memory without bound.
pub const MAX_LINE_BYTES: usize = 64 << 20;

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

/// Read one message; `Ok(None)` at the end of the stream. A line that is not a message is
/// an error whose text says what was wrong.
pub(crate) async fn read_message<R: AsyncBufRead + Unpin, M: DeserializeOwned>(
    input: &mut R,
) -> Result<Option<M>, String> {
    let mut line = Vec::new();
    let read = (&mut *input).take(MAX_LINE_BYTES as u64 + 1).read_until(b'\n', &mut line).await;
    match read {
        Ok(0) => Ok(None),
        Ok(_) if line.len() > MAX_LINE_BYTES => {
            Err(format!("a message is longer than {MAX_LINE_BYTES} bytes"))
        }
        Ok(_) => serde_json::from_slice(&line)
            .map(Some)
            .map_err(|e| format!("a line is not a message of this protocol: {e}")),
        Err(e) => Err(format!("the stream failed: {e}")),
    }
}
