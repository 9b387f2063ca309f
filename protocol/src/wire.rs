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
use crate::texts;

/// The protocol's name in the hello.
pub const PROTOCOL_NAME: &str = "codemode";

/// The newest protocol version this crate speaks. Version 2 adds, to version 1's
/// messages, [`ClientMessage::Ping`] and [`ServerMessage::Pong`], [`ServerMessage::Draining`]
/// and [`ServerMessage::Refused`]; version 3 adds the execute request's `events` and
/// [`ServerMessage::Log`] and [`ServerMessage::Waiting`]; version 4 adds the outcome kinds
/// [`OutcomeKind::Lost`] and [`OutcomeKind::Cancelled`] (a peer below it reads both as
/// `internal`, [`OutcomeKind::for_version`]) and the execute request's `webAssembly`;
/// version 5 adds the execute request's `cpuTimeLimitMs` and `maxCalls` and their outcome
/// kinds [`OutcomeKind::CpuTime`] and [`OutcomeKind::CallLimit`] (below it, `timeout` and
/// `internal`); version 6 adds [`ClientMessage::Hold`] and [`ClientMessage::Unhold`].
pub const PROTOCOL_VERSION: u32 = 6;

/// The first version whose clients may hold a run's wall clock ([`ClientMessage::Hold`]).
pub const HOLD_VERSION: u32 = 6;

/// The exit status of a worker process (`codemode stdio` under process isolation) whose
/// engine could not get memory from the operating system (the host capped the worker's
/// committed memory for the run, or the machine is out of it): its host ends the run with
/// the memory outcome rather than `lost`.
pub const WORKER_OUT_OF_MEMORY_EXIT: i32 = 86;

/// The first version whose outcomes may say `lost` or `cancelled`.
pub const LOST_AND_CANCELLED_VERSION: u32 = 4;

/// The first version whose requests may carry `cpuTimeLimitMs` and `maxCalls` and whose
/// outcomes may say `cpuTime` or `callLimit`.
pub const CPU_AND_CALL_LIMITS_VERSION: u32 = 5;

/// The oldest protocol version this crate still speaks.
pub const OLDEST_PROTOCOL_VERSION: u32 = 1;

/// Which version two peers speak: a client says the newest it speaks in its hello, and
/// a server that speaks that one or an older one the client also speaks answers with the
/// version of the connection. `None`: the client's version is older than any this side
/// speaks.
pub fn negotiate(client: u32) -> Option<u32> {
    (client >= OLDEST_PROTOCOL_VERSION).then(|| client.min(PROTOCOL_VERSION))
}

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
    /// Stack limit of the engine, in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stack_limit_bytes: Option<u64>,
    /// Bound on the result in the codec's JSON form, in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_result_bytes: Option<u64>,
    /// Bound on the logs' volume, in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_log_bytes: Option<u64>,
    /// Bound on tool calls in flight at once (made and not yet answered).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_calls_in_flight: Option<u64>,
    /// Version 3: report the run's log lines and waits as they happen
    /// ([`ServerMessage::Log`], [`ServerMessage::Waiting`]). They are progress only: the
    /// outcome still carries every log line. A server drops them rather than hold the run
    /// for a client that reads slowly. Never sent on a connection below version 3 (a
    /// version 2 server refuses the field).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub events: bool,
    /// Version 4: put `WebAssembly` on the program's global, every byte it uses charged to
    /// the run's memory limit (absent by default). An engine without it (QuickJS) refuses
    /// the run with `texts::WEB_ASSEMBLY_NEEDS_V8`; a server older than version 4 refuses
    /// the field, so it is sent only when true.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub web_assembly: bool,
    /// Version 5: the CPU time the run's engine thread may spend, in milliseconds; time
    /// the program waits (on a call, a fetch, a timer) is not counted. Past it the run
    /// ends with kind `cpuTime`. Absent: no CPU budget (the wall clock, `timeoutMs`, still
    /// holds). A server below version 5 refuses the field, so a budget is never dropped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_time_limit_ms: Option<u64>,
    /// Version 5: how many calls (tool calls and fetches together) the run may make. The
    /// call over it never reaches the host and the run ends with kind `callLimit`, which
    /// the program cannot catch. Absent: no bound on the number of calls.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_calls: Option<u64>,
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
            stack_limit_bytes: None,
            max_result_bytes: None,
            max_log_bytes: None,
            max_calls_in_flight: None,
            events: false,
            web_assembly: false,
            cpu_time_limit_ms: None,
            max_calls: None,
        }
    }

    /// The oldest protocol version that carries every field this request sets: a peer
    /// below it refuses the request (version 1 for a request of version 1's fields only).
    pub fn least_version(&self) -> u32 {
        if self.cpu_time_limit_ms.is_some() || self.max_calls.is_some() {
            CPU_AND_CALL_LIMITS_VERSION
        } else if self.web_assembly {
            4
        } else if self.events {
            3
        } else {
            OLDEST_PROTOCOL_VERSION
        }
    }
}

/// How a run ended: what an outcome's `kind` says, so that a program's own text can
/// never pass for a failure of the run itself (a program may throw the timeout's text;
/// its outcome is still [`OutcomeKind::Thrown`]).
///
/// A returned outcome is always [`OutcomeKind::Returned`] and carries no `kind` on the
/// wire; every error outcome carries its kind beside its text.
// New kinds may come (`#[non_exhaustive]`): a `match` on it needs an arm for the others.
// (A plain comment: the doc comment is the schema's description.)
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub enum OutcomeKind {
    /// The program returned (or its promise resolved).
    Returned,
    /// The program threw or its promise rejected, with anything: its own text, a tool's
    /// refusal it did not catch, even a pinned text it wrote itself.
    Thrown,
    /// The run passed its deadline (`timeoutMs`).
    Timeout,
    /// The run ran out of memory: the engine's heap limit, or a budget the host side
    /// keeps for the run.
    Memory,
    /// A call was refused by a bound (the payload size, the calls in flight) and the
    /// program did not catch the refusal.
    Payload,
    /// The program's result passed the bound on result size.
    ResultTooLarge,
    /// The code, or a provider's `prelude` or `proxySource`, does not parse.
    Syntax,
    /// The request was refused before it ran: a provider name breaks a rule, a limit is
    /// out of range, a daemon already runs its maximum of executions on the connection, or
    /// a host setting this build or platform cannot run (V8 not built in, a worker command
    /// naming another engine, confinement required off Linux, no Tokio runtime).
    Invalid,
    /// Not the program's doing: a bug in the executor (its texts ask for a report), a
    /// setting of the host's that cannot run (a worker program that does not start), or a
    /// worker its confinement stopped.
    Internal,
    /// The run was lost with what ran it: its worker process died, the connection to its
    /// daemon went, no daemon could be reached, or the daemon shut down before the run
    /// ended. Neither the program's doing nor a bug:
    /// running it again may succeed (one that had dispatched calls may have had their
    /// effects). Version 4; below it, `internal`.
    Lost,
    /// The host ended the run: it cancelled it, or the person at the command line
    /// interrupted it. Version 4; below it, `internal`.
    Cancelled,
    /// The run's engine thread spent its CPU time budget (`cpuTimeLimitMs`). Version 5;
    /// below it, `timeout`.
    CpuTime,
    /// The program made more calls than `maxCalls` allows; the call over it was never
    /// sent. Version 5; below it, `internal`.
    CallLimit,
}

impl OutcomeKind {
    /// Every kind, in declaration order.
    pub const ALL: &'static [OutcomeKind] = &[
        OutcomeKind::Returned,
        OutcomeKind::Thrown,
        OutcomeKind::Timeout,
        OutcomeKind::Memory,
        OutcomeKind::Payload,
        OutcomeKind::ResultTooLarge,
        OutcomeKind::Syntax,
        OutcomeKind::Invalid,
        OutcomeKind::Internal,
        OutcomeKind::Lost,
        OutcomeKind::Cancelled,
        OutcomeKind::CpuTime,
        OutcomeKind::CallLimit,
    ];

    /// The kind as a peer speaking `version` knows it: `lost` and `cancelled` are
    /// `internal` below version 4; `cpuTime` is `timeout` and `callLimit` is `internal`
    /// below version 5. So an older peer reads every outcome it is sent.
    pub const fn for_version(self, version: u32) -> OutcomeKind {
        match self {
            OutcomeKind::Lost | OutcomeKind::Cancelled if version < LOST_AND_CANCELLED_VERSION => {
                OutcomeKind::Internal
            }
            OutcomeKind::CpuTime if version < CPU_AND_CALL_LIMITS_VERSION => OutcomeKind::Timeout,
            OutcomeKind::CallLimit if version < CPU_AND_CALL_LIMITS_VERSION => OutcomeKind::Internal,
            kind => kind,
        }
    }

    /// The kind as the wire writes it: `returned`, `thrown`, `timeout`, `memory`,
    /// `payload`, `resultTooLarge`, `syntax`, `invalid`, `internal`, `lost`, `cancelled`,
    /// `cpuTime` or `callLimit`.
    pub const fn as_str(self) -> &'static str {
        match self {
            OutcomeKind::Returned => "returned",
            OutcomeKind::Thrown => "thrown",
            OutcomeKind::Timeout => "timeout",
            OutcomeKind::Memory => "memory",
            OutcomeKind::Payload => "payload",
            OutcomeKind::ResultTooLarge => "resultTooLarge",
            OutcomeKind::Syntax => "syntax",
            OutcomeKind::Invalid => "invalid",
            OutcomeKind::Internal => "internal",
            OutcomeKind::Lost => "lost",
            OutcomeKind::Cancelled => "cancelled",
            OutcomeKind::CpuTime => "cpuTime",
            OutcomeKind::CallLimit => "callLimit",
        }
    }
}

impl std::fmt::Display for OutcomeKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How a run ended, with the logs it wrote: `{"result": v, "logs": [...]}` or
/// `{"error": text, "kind": kind, "logs": [...]}`. An undefined result has no `result`
/// key; a returned outcome has no `kind` (its kind is `returned`).
#[derive(Clone, Debug, PartialEq, Serialize, schemars::JsonSchema)]
#[serde(untagged)]
pub enum Outcome {
    /// The run threw or failed; `error` is the text and `kind` says which failure it is.
    #[schemars(extend("not" = { "properties": { "kind": { "const": "returned" } } }))]
    Error {
        /// The thrown Error's message, `String(value)` of anything else, or a pinned text.
        error: String,
        /// What ended the run; never `returned`.
        kind: OutcomeKind,
        /// Where in the code as sent the error arose, when known: a thrown Error's place
        /// in the program's own code, or a syntax error's position. Absent for a value with
        /// no stack (`throw 'x'`), an error made outside the program's code, and every
        /// failure of the run itself.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        location: Option<Location>,
        /// One string per console call.
        logs: Vec<String>,
    },
    /// The program returned.
    #[schemars(extend("not" = { "anyOf": [{ "required": ["error"] }, { "required": ["kind"] }] }))]
    Result {
        /// The value in the codec's form; `None` is undefined.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        result: Option<Value>,
        /// One string per console call.
        logs: Vec<String>,
    },
}

/// An outcome's fields as they arrive, before the rules between them are checked.
#[derive(Deserialize)]
struct OutcomeFields {
    #[serde(default, deserialize_with = "present")]
    result: Option<Value>,
    #[serde(default)]
    error: Option<String>,
    #[serde(default)]
    kind: Option<OutcomeKind>,
    #[serde(default)]
    location: Option<Location>,
    logs: Vec<String>,
}

/// A present `result` is a value, even `null`; only an absent one is undefined.
fn present<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(deserializer).map(Some)
}

impl<'de> Deserialize<'de> for Outcome {
    /// An object with `error` is an error outcome and must carry its `kind` (not
    /// `returned`) and no `result`; any other is a returned outcome and carries no `kind`.
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Outcome, D::Error> {
        use serde::de::Error as _;
        let fields = OutcomeFields::deserialize(deserializer)?;
        if fields.error.is_none() && fields.location.is_some() {
            return Err(D::Error::custom(
                "a returned outcome carries no `location`; only an error outcome does",
            ));
        }
        match (fields.error, fields.kind, fields.result) {
            (Some(_), _, Some(_)) => Err(D::Error::custom("an outcome has `result` or `error`, not both")),
            (Some(_), None, None) => {
                Err(D::Error::custom("an error outcome needs its `kind` (thrown, timeout, memory, ...)"))
            }
            (Some(_), Some(OutcomeKind::Returned), None) => {
                Err(D::Error::custom("an error outcome cannot be of kind `returned`"))
            }
            (Some(error), Some(kind), None) => {
                Ok(Outcome::Error { error, kind, location: fields.location, logs: fields.logs })
            }
            (None, Some(_), _) => Err(D::Error::custom(
                "a returned outcome carries no `kind`; only an error outcome (with `error`) does",
            )),
            (None, None, result) => Ok(Outcome::Result { result, logs: fields.logs }),
        }
    }
}

impl Outcome {
    /// The program returned `value` (`None`: undefined).
    pub fn result(value: Option<Value>, logs: Vec<String>) -> Outcome {
        Outcome::Result { result: value, logs }
    }

    /// The program threw (or its promise rejected) with `text`: kind [`OutcomeKind::Thrown`].
    pub fn error(text: impl Into<String>, logs: Vec<String>) -> Outcome {
        Outcome::failure(OutcomeKind::Thrown, text, logs)
    }

    /// The run failed as `kind` says, with `text` (usually a pinned text of [`crate::texts`]).
    ///
    /// `kind` is a failure; [`OutcomeKind::Returned`] here is a bug of the caller and is
    /// recorded as [`OutcomeKind::Internal`].
    pub fn failure(kind: OutcomeKind, text: impl Into<String>, logs: Vec<String>) -> Outcome {
        let kind = if kind == OutcomeKind::Returned { OutcomeKind::Internal } else { kind };
        Outcome::Error { error: text.into(), kind, location: None, logs }
    }

    /// The same outcome as a peer speaking `version` reads it ([`OutcomeKind::for_version`]).
    pub fn for_version(mut self, version: u32) -> Outcome {
        if let Outcome::Error { kind, .. } = &mut self {
            *kind = kind.for_version(version);
        }
        self
    }

    /// The same outcome with `location` (an error outcome only; a returned one is unchanged).
    pub fn with_location(mut self, location: Option<Location>) -> Outcome {
        if let Outcome::Error { location: at, .. } = &mut self {
            *at = location;
        }
        self
    }

    /// Where the error arose in the code as sent, when known.
    pub fn location(&self) -> Option<Location> {
        match self {
            Outcome::Error { location, .. } => *location,
            Outcome::Result { .. } => None,
        }
    }

    /// The error text as a person or a model reads it: the text, then its place in the
    /// code as sent when known, `… (at line 3, column 14)` ([`texts::ERROR_AT`]). A text
    /// that already names that place (the syntax error's `at line 3, column 14:`) is
    /// not told it twice.
    pub fn error_display(&self) -> Option<String> {
        let Outcome::Error { error, location, .. } = self else { return None };
        Some(match location {
            Some(at) if !error.contains(&at.to_string()) => {
                texts::ERROR_AT.fill(&[error, &at.line.to_string(), &at.column.to_string()])
            }
            _ => error.clone(),
        })
    }

    /// How the run ended: [`OutcomeKind::Returned`] for a result, the error's kind otherwise.
    pub fn kind(&self) -> OutcomeKind {
        match self {
            Outcome::Error { kind, .. } => *kind,
            Outcome::Result { .. } => OutcomeKind::Returned,
        }
    }

    /// The logs, one string per console call.
    pub fn logs(&self) -> &[String] {
        match self {
            Outcome::Error { logs, .. } | Outcome::Result { logs, .. } => logs,
        }
    }

    /// The error text, if the run failed. Decide by [`Outcome::kind`], never by this text:
    /// a program can throw any text, the pinned ones included.
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

/// A place in the code as sent: 1-based line, and 1-based column in characters (Unicode
/// scalar values), counting everything the model sent (a Markdown fence and prose
/// included), nothing the executor wrapped around it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Location {
    /// The line, from 1.
    pub line: u32,
    /// The column, from 1, in characters.
    pub column: u32,
}

impl std::fmt::Display for Location {
    /// `line 3, column 14`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "line {}, column {}", self.line, self.column)
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
    /// This crate's hello, without a token: the newest version it speaks.
    pub fn current() -> Hello {
        Hello::version(PROTOCOL_VERSION)
    }

    /// A hello of `version`, without a token.
    pub fn version(version: u32) -> Hello {
        Hello { protocol: PROTOCOL_NAME.to_owned(), version, token: None }
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
    /// Version 2: asks for a [`ServerMessage::Pong`], so a client learns within its
    /// keepalive interval that a daemon cut off without closing is gone.
    Ping {
        /// Echoed in the pong.
        id: u64,
    },
    /// Version 6: a call of the execution is held on the host for a person's decision:
    /// its wall clock stops until as many [`ClientMessage::Unhold`] arrive (holds nest).
    /// Not sent below version 6 (an older server refuses it).
    Hold {
        /// The execution whose clock stops.
        execution: u64,
    },
    /// Version 6: one hold of the execution ended (the call was decided).
    Unhold {
        /// The execution whose clock runs again once no hold is left.
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
    /// The connection broke a rule or passed a bound of the server's; the server closes
    /// it after this message.
    Error(ProtocolError),
    /// Version 2: the answer to a [`ClientMessage::Ping`].
    Pong {
        /// The ping's id.
        id: u64,
    },
    /// Version 2: the daemon is draining. Executions it admitted run to their outcomes;
    /// every later execute is [`ServerMessage::Refused`]. Send new work elsewhere.
    Draining {},
    /// Version 2: an execute the daemon did not start, so it may run elsewhere: it ran
    /// nothing and dispatched no call.
    Refused {
        /// The execution refused.
        execution: u64,
        /// Why.
        reason: RefusalReason,
        /// The pinned text saying so.
        message: String,
    },
    /// Version 3: one line of an execution's logs, sent as the program writes it, to a
    /// client whose execute asked for `events`. The same line is in the outcome's `logs`;
    /// only lines the outcome keeps are sent (the log limit's marker line too, as
    /// `warn`), and a server may drop some for a client that reads slowly.
    Log {
        /// The execution that wrote it.
        execution: u64,
        /// Which console method wrote it.
        level: LogLevel,
        /// The line as the outcome keeps it (`console.warn`'s with its `[warn] ` prefix).
        line: String,
    },
    /// Version 3: the execution has nothing to run until a call answers or a timer falls
    /// due, sent to a client whose execute asked for `events` (not again while nothing
    /// changed). Both zero: it waits on a promise nothing settles, and ends at its timeout.
    Waiting {
        /// The execution that waits.
        execution: u64,
        /// Its calls and fetches in flight (sent and not yet answered).
        calls: u64,
        /// Its timers pending.
        timers: u64,
    },
}

/// Which console method wrote a log line ([`ServerMessage::Log`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum LogLevel {
    /// `console.log`.
    Log,
    /// `console.info`.
    Info,
    /// `console.debug`.
    Debug,
    /// `console.warn`, and the executor's own lines (the log limit's marker).
    Warn,
    /// `console.error`.
    Error,
}

/// Why a daemon refused an execute ([`ServerMessage::Refused`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum RefusalReason {
    /// The daemon is draining.
    Draining,
    /// The daemon runs its maximum of executions across all connections.
    Full,
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
// New kinds may come with new versions of the protocol (`#[non_exhaustive]`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
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
    /// The daemon already serves its maximum of connections; this one is closed at once.
    TooManyConnections,
    /// No message crossed either way for the daemon's idle time while no execution was
    /// live; no execute sent on the connection ran, so it may be sent again on another.
    Idle,
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
