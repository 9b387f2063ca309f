//! The pure protocol of codemode-rs: everything a host or an alternative executor
//! needs that is not an engine.
//!
//! ```
//! use codemode_protocol::{error_envelope, read_answer, result_envelope, Answer};
//!
//! // What a host's dispatch answers a call with, and how the program reads it.
//! let found = result_envelope(&serde_json::json!({ "id": 7, "name": "Ada" })).unwrap();
//! assert_eq!(found, r#"{"result":{"id":7,"name":"Ada"}}"#);
//! assert!(matches!(read_answer(&found), Ok(Answer::Result(_))));
//! assert_eq!(error_envelope("No user 8."), r#"{"error":"No user 8."}"#);
//! // Anything outside the envelope is a catchable error with a pinned text.
//! assert_eq!(
//!     read_answer("42").unwrap_err().message(),
//!     "The dispatch answered outside the result envelope."
//! );
//! ```
//!
//! A program runs in a sandbox whose only way out is a tool call. A call leaves as
//! three strings, a [`ToolCall`] (provider, tool, argsJson), and the host's
//! [`Dispatch`] answers with one JSON string, the envelope: `{"result": v}` or
//! `{"error": text}`. This crate holds:
//!
//! - [`texts`]: the pinned texts, to the byte;
//! - [`envelope`]: composing and reading the envelope;
//! - [`codec`] and [`binary`]: JSON with tagged binary, both ways;
//! - [`provider`]: provider descriptors and the rules their names must pass;
//! - [`entry`]: the entry scope as source text, for any engine;
//! - [`normalize`]: the code forms models send, normalized;
//! - [`dispatch`]: the trait a host implements and [`create_envelope_dispatch`];
//! - [`tools`]: tool specs with JSON Schemas, sandbox names, the routing table, the
//!   TypeScript declarations and the code tool the model reads;
//! - [`discovery`]: a catalog of tools searched and described one by one, for more
//!   tools than fit in a prompt;
//! - [`wire`] and [`schema`]: the messages of the daemon and the conformance runner.
//!
//! It does no I/O, knows no engine and names no async runtime.
//!
//! # Sending bytes: the `Vec<u8>` trap
//!
//! serde writes a `Vec<u8>` as an array of numbers, so a tool returning one hands the
//! program `[1, 2, 3]`, an ordinary array, with no error anywhere: the Rust twin of the
//! guide's Node Buffer trap. Wrap bytes once, where your tools return, and the codec
//! tags them as a `Uint8Array`:
//!
//! ```
//! use codemode_protocol::{stringify_for_dispatch, Bytes};
//! let avatar: Vec<u8> = vec![1, 2, 3];
//! assert_eq!(stringify_for_dispatch(&avatar).unwrap(), "[1,2,3]");
//! assert_eq!(
//!     stringify_for_dispatch(&Bytes::from(avatar)).unwrap(),
//!     r#"{"__executor_binary_v1__":"Uint8Array","data":"AQID"}"#,
//! );
//! ```
#![forbid(unsafe_code)]
#![deny(missing_docs)]
// What is kept by hand, locked in: no unwrap or expect outside tests (an `#[expect]` with
// its reason where one is right), and no unsafe at all.
#![warn(clippy::unwrap_used, clippy::expect_used)]
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

pub mod binary;
pub mod codec;
pub mod discovery;
pub mod dispatch;
pub mod entry;
pub mod envelope;
pub mod locate;
pub mod normalize;
pub mod provider;
pub mod schema;
pub mod texts;
pub mod tools;
pub mod wire;

pub use binary::{BINARY_TAG, Binary, BinaryKind, Bytes};
pub use codec::{
    CodecError, Value, from_json_str, parse_dispatch_arguments, parse_dispatch_arguments_as,
    parse_for_dispatch, stringify_for_dispatch,
};
pub use dispatch::{
    Dispatch, DispatchFuture, EnvelopeDispatch, Latch, LatchGuard, ToolCall, ToolNotFoundError,
    create_envelope_dispatch,
};
pub use entry::{EntryError, EntryScope, codec_source, entry_scope, entry_source, scope_source};
pub use envelope::{Answer, AnswerError, error_envelope, read_answer, result_envelope};
pub use locate::{ColumnUnit, ProgramMap};
pub use normalize::{CodeSyntaxError, Normalized, normalize_code, normalize_mapped};
pub use provider::{
    ProviderDescriptor, ProviderNameError, REFUSED_WORDS, RESERVED_PROVIDER_NAMES, validate_providers,
};
pub use tools::{CodeTool, ProviderSpec, ToolSpec, ToolTable, ToolTableError};
pub use wire::{ExecuteRequest, Location, Outcome, OutcomeKind};

/// The examples of `docs/protocol.md`, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../docs/protocol.md")]
pub struct ProtocolGuide;
