//! Wire types: the execute request, the outcome, and the messages of the daemon
//! arrangement and the conformance runner's stdio protocol.
//!
//! Every message is one JSON object. A connection opens with a [`Hello`] each way;
//! the client then sends [`ClientMessage`]s and the server [`ServerMessage`]s, many
//! executions multiplexed by their `execution` id. JSON Schemas for these types are
//! committed under `protocol/schema/` ([`crate::schema`]).

use serde::{Deserialize, Deserializer, Serialize};

use crate::codec::Value;
use crate::dispatch::ToolCall;
use crate::provider::ProviderDescriptor;

/// The protocol's name in the hello.
pub const PROTOCOL_NAME: &str = "codemode";

/// The protocol version this crate speaks.
pub const PROTOCOL_VERSION: u32 = 1;

/// One execution as the wire carries it (the `request` of a transcript).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ExecuteRequest {
    /// The program: normally the source of an async arrow function.
    pub code: String,
    /// The providers declared for it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub providers: Vec<ProviderDescriptor>,
    /// Whether the request carries a dispatch. Without one every call meets `Tool "<tool>" not found`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub dispatch: bool,
    /// Whether the request carries an outbound handler: `fetch` then travels to the host as
    /// `fetch` messages. Without one the network is closed.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub outbound: bool,
    /// Keep the engine after the run settles, until the host releases it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub retain_handles: bool,
    /// Wall-clock limit for the run, in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// Memory limit of the engine, in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_limit_bytes: Option<u64>,
    /// Bound on provider + tool + argsJson of one call, in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_payload_bytes: Option<u64>,
}

impl ExecuteRequest {
    /// A request running `code` with no providers and no dispatch.
    pub fn new(code: impl Into<String>) -> ExecuteRequest {
        ExecuteRequest {
            code: code.into(),
            providers: Vec::new(),
            dispatch: false,
            outbound: false,
            retain_handles: false,
            timeout_ms: None,
            memory_limit_bytes: None,
            max_payload_bytes: None,
        }
    }
}

/// How a run ended, with the logs it wrote: `{"result": v, "logs": [...]}` or
/// `{"error": text, "logs": [...]}`. An undefined result has no `result` key.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(untagged)]
pub enum Outcome {
    /// The run threw or failed; `error` is the text.
    Error {
        /// The thrown Error's message, `String(value)` of anything else, or a pinned text.
        error: String,
        /// One string per console call.
        logs: Vec<String>,
    },
    /// The program returned.
    Result {
        /// The value in the codec's form; `None` is undefined.
        #[serde(default, deserialize_with = "present", skip_serializing_if = "Option::is_none")]
        result: Option<Value>,
        /// One string per console call.
        logs: Vec<String>,
    },
}

/// A present `result` is a value, even `null`; only an absent one is undefined.
fn present<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(deserializer).map(Some)
}

impl Outcome {
    /// The program returned `value` (`None`: undefined).
    pub fn result(value: Option<Value>, logs: Vec<String>) -> Outcome {
        Outcome::Result { result: value, logs }
    }

    /// The run failed with `text`.
    pub fn error(text: impl Into<String>, logs: Vec<String>) -> Outcome {
        Outcome::Error { error: text.into(), logs }
    }

    /// The logs, one string per console call.
    pub fn logs(&self) -> &[String] {
        match self {
            Outcome::Error { logs, .. } | Outcome::Result { logs, .. } => logs,
        }
    }

    /// The error text, if the run failed.
    pub fn error_text(&self) -> Option<&str> {
        match self {
            Outcome::Error { error, .. } => Some(error),
            Outcome::Result { .. } => None,
        }
    }

    /// The outcome in the codec's JSON form, as transcripts write it.
    pub fn to_json_string(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|_| unreachable!("outcomes hold only codec values"))
    }
}

/// The first message each way on a connection.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Hello {
    /// Always [`PROTOCOL_NAME`].
    pub protocol: String,
    /// The version the sender speaks; a peer refuses a version it does not.
    pub version: u32,
    /// The client's token, where the server requires one (TCP).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
}

impl Hello {
    /// This crate's hello, without a token.
    pub fn current() -> Hello {
        Hello { protocol: PROTOCOL_NAME.to_owned(), version: PROTOCOL_VERSION, token: None }
    }
}

/// What a client (the host) sends.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "type", rename_all = "camelCase", rename_all_fields = "camelCase")]
pub enum ClientMessage {
    /// Opens the connection.
    Hello(Hello),
    /// Start an execution under the client's id for it.
    Execute {
        /// The client's id for this execution, unique on the connection.
        execution: u64,
        /// What to run.
        request: ExecuteRequest,
    },
    /// The envelope answering one call.
    Answer {
        /// The execution the call belongs to.
        execution: u64,
        /// The call's id, as the server sent it.
        call: u64,
        /// The dispatch's answer string, as returned.
        answer: String,
    },
    /// The host's answer to a [`ServerMessage::Fetch`].
    FetchAnswer {
        /// The execution the fetch belongs to.
        execution: u64,
        /// The fetch's id, as the server sent it.
        call: u64,
        /// The response, or why the host refused it.
        answer: FetchAnswer,
    },
    /// End an execution now; its outcome still arrives.
    Cancel {
        /// The execution to end.
        execution: u64,
    },
    /// Release a retained execution's engine.
    Release {
        /// The retained execution.
        execution: u64,
    },
}

/// What a server (the executor) sends.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "type", rename_all = "camelCase", rename_all_fields = "camelCase")]
pub enum ServerMessage {
    /// Answers the client's hello.
    Hello(Hello),
    /// A tool call the program made; the client answers it with [`ClientMessage::Answer`].
    Call {
        /// The execution that made the call.
        execution: u64,
        /// The server's id for this call, unique within the execution.
        call: u64,
        /// The three strings of the call.
        #[serde(flatten)]
        tool_call: ToolCall,
    },
    /// A `fetch` the program made; the client answers it with [`ClientMessage::FetchAnswer`].
    Fetch {
        /// The execution that made it.
        execution: u64,
        /// The server's id for it, unique within the execution.
        call: u64,
        /// What the program asked for.
        request: FetchRequest,
    },
    /// An execution ended.
    Outcome {
        /// The execution that ended.
        execution: u64,
        /// How it ended.
        outcome: Outcome,
    },
    /// The connection broke a rule; the server closes it after this message.
    Error(ProtocolError),
}

/// A protocol failure; the message says what was wrong.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProtocolError {
    /// What kind of rule was broken.
    pub kind: ProtocolErrorKind,
    /// What was wrong and what to do.
    pub message: String,
}

/// The kinds of [`ProtocolError`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum ProtocolErrorKind {
    /// The hello was missing, of another protocol, or of an unsupported version.
    Hello,
    /// The token was missing or wrong.
    Unauthorized,
    /// A frame was not valid JSON or not a message of this protocol.
    MalformedFrame,
    /// A frame exceeded the maximum frame size.
    FrameTooLarge,
    /// An execution id was reused while still live.
    DuplicateExecution,
}

/// A `fetch(url, init)` as it crosses the wire.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FetchRequest {
    /// Upper-cased, `GET` by default.
    pub method: String,
    /// As the program wrote it.
    pub url: String,
    /// Lower-cased names and their values, in order.
    pub headers: Vec<(String, String)>,
    /// The body's bytes, tagged.
    pub body: crate::Bytes,
}

/// The host's answer to a fetch.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(untagged)]
pub enum FetchAnswer {
    /// The host refused it; the program's `fetch` rejects with this text.
    Refused {
        /// Why.
        error: String,
    },
    /// The response the program gets.
    Response {
        /// The HTTP status.
        status: u16,
        /// Header names and values.
        headers: Vec<(String, String)>,
        /// The body's bytes, tagged.
        body: crate::Bytes,
    },
}
