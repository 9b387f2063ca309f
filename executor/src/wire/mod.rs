//! The wire protocol spoken over a byte stream: one JSON message per line, the
//! protocol crate's `ClientMessage` and `ServerMessage`.
//!
//! Three parts, each in its own folder: `framing`, how a message crosses a stream (the
//! same for both sides); `server`, any executor served behind the protocol (`codemode
//! stdio`, `codemode serve`, and `server::worker`, process isolation's worker side); and
//! `client`, the one host side (process isolation's workers, `RemoteExecutor`'s daemons).
//! The client never imports the server, nor the server the client.

pub(crate) mod address;
pub(crate) mod client;
pub(crate) mod framing;
pub mod server;

pub use self::framing::MAX_FRAME_BYTES;
pub use self::server::worker;
