//! Pinned texts: every sentence the protocol composes for a program or a host, to the byte.
//!
//! A program may recognise these texts and a host should not reword them, so each one
//! lives here exactly once and `tests/texts.rs` pins it. Texts with holes are
//! [`Template`]s: the same pieces fill in Rust ([`Template::fill`]) and in the
//! generated entry source, so both sides can never drift apart.

/// A pinned text with named holes such as `{tool}`.
///
/// The holes are filled in order of the arguments given to [`Template::fill`]; a hole
/// named twice takes the same value both times.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Template(&'static str);

impl Template {
    /// The template as written, holes included.
    pub const fn as_str(self) -> &'static str {
        self.0
    }

    /// Split into literal pieces and hole names, in order.
    ///
    /// `"a {x} b"` gives `[Literal("a "), Hole("x"), Literal(" b")]`.
    pub fn parts(self) -> Vec<TemplatePart> {
        let mut parts = Vec::new();
        let mut rest = self.0;
        while let Some(open) = rest.find('{') {
            let Some(close) = rest[open..].find('}') else { break };
            if open > 0 {
                parts.push(TemplatePart::Literal(&rest[..open]));
            }
            parts.push(TemplatePart::Hole(&rest[open + 1..open + close]));
            rest = &rest[open + close + 1..];
        }
        if !rest.is_empty() {
            parts.push(TemplatePart::Literal(rest));
        }
        parts
    }

    /// The names of the holes, each once, in order of first appearance: the order of
    /// the values [`Template::fill`] takes.
    pub fn holes(self) -> Vec<&'static str> {
        let mut holes = Vec::new();
        for part in self.parts() {
            if let TemplatePart::Hole(name) = part
                && !holes.contains(&name)
            {
                holes.push(name);
            }
        }
        holes
    }

    /// Fill the holes with `values`: the first value into the first hole named, the
    /// second into the second name, and so on ([`Template::holes`]). A hole named twice
    /// takes the same value both times.
    ///
    /// A value is inserted as it is; it is never itself scanned for holes.
    pub fn fill(self, values: &[&str]) -> String {
        let holes = self.holes();
        let mut text = String::with_capacity(self.0.len() + values.iter().map(|v| v.len()).sum::<usize>());
        for part in self.parts() {
            match part {
                TemplatePart::Literal(literal) => text.push_str(literal),
                TemplatePart::Hole(name) => {
                    let index = holes.iter().position(|hole| *hole == name).unwrap_or(usize::MAX);
                    text.push_str(values.get(index).copied().unwrap_or_default());
                }
            }
        }
        text
    }
}

/// One piece of a [`Template`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TemplatePart {
    /// Text written as it is.
    Literal(&'static str),
    /// A named hole.
    Hole(&'static str),
}

// ---- The guide's pinned texts ----

/// The refusal of a tool nobody routes: the Display of [`crate::ToolNotFoundError`].
pub const TOOL_NOT_FOUND: Template = Template("Tool \"{tool}\" not found");

/// A call that arrived after the run settled, composed by the sandbox and by the latch.
pub const EXECUTION_COMPLETED: &str = "Execution has already completed.";

/// The dispatch returned something that is not a JSON object.
pub const OUTSIDE_ENVELOPE: &str = "The dispatch answered outside the result envelope.";

/// Provider rule 1: the name shadows something the entry scope binds or reads.
pub const PROVIDER_NAME_RESERVED: Template =
    Template("Provider name \"{name}\" is reserved. Give the provider a name the entry scope does not bind.");

/// Provider rule 2: the name is not an identifier of the allowed shape.
pub const PROVIDER_NAME_NOT_IDENTIFIER: Template = Template(
    "Provider name \"{name}\" must be ASCII letters, digits, underscore and dollar, and must not start with a digit.",
);

/// Provider rule 3: the name is on the refused-words list.
pub const PROVIDER_NAME_REFUSED: Template = Template(
    "Provider name \"{name}\" is on the list this executor refuses: every ECMAScript reserved word, the names strict mode reserves, and async. Pick a name outside it.",
);

/// Provider rule 4: two providers share a name.
pub const PROVIDER_NAME_DUPLICATE: Template =
    Template("Provider name \"{name}\" is declared twice. Give each provider its own name.");

// ---- The codec's texts ----

/// A binary tag whose fields are not exactly the tag and `data`, both strings.
pub const BINARY_TAG_SHAPE: &str =
    "Binary tag must be an object with exactly two string fields, \"__executor_binary_v1__\" and \"data\".";

/// A binary tag naming a kind the codec does not know.
pub const BINARY_TAG_UNKNOWN_KIND: Template = Template(
    "Binary tag names \"{kind}\", which is not a binary kind. Use ArrayBuffer or a typed array name such as Uint8Array.",
);

/// A binary tag whose data is not standard padded base64.
pub const BINARY_TAG_BAD_BASE64: Template =
    Template("Binary tag \"{kind}\" carries data that is not standard padded base64.");

/// A binary tag whose byte count does not fit the element size of its kind.
pub const BINARY_TAG_BAD_LENGTH: Template = Template(
    "Binary tag \"{kind}\" carries {length} bytes, which is not a whole number of {size}-byte elements.",
);

// ---- Code normalization ----

/// The program's code does not parse as any accepted form; says where.
pub const CODE_SYNTAX_ERROR: Template =
    Template("SyntaxError in code at line {line}, column {column}: {message}");

/// The message of a syntax error for code past `normalize::MAX_CODE_BYTES`.
pub const CODE_TOO_LONG: Template = Template(
    "the code is {bytes} bytes, over the limit of {limit} bytes for one program; send a shorter program",
);

/// The program tried to import a module or make a named export; the sandbox loads none.
pub const CODE_MODULE_SYNTAX: &str = "import and export are not available: the sandbox loads no modules. Reach data through the declared providers.";

/// The message of a syntax error for code holding several Markdown code blocks.
pub const CODE_MANY_BLOCKS: Template =
    Template("the code holds {count} Markdown code blocks; put the whole program in one");

/// Appended to a syntax error where the code fits no accepted form: which forms are.
pub const CODE_ACCEPTED_FORMS: &str = "Accepted forms: an async arrow function such as `async () => { ... }`, a function, an expression, statements with top-level await, or `export default` of a function or a value, each bare or in one Markdown code block.";

// ---- Tools: tables, arguments, the code tool ----

/// A tool registered with an empty name.
pub const TOOL_NAME_EMPTY: Template =
    Template("A tool of provider \"{provider}\" has an empty name. Give every tool a name.");

/// A tool registered twice under one provider.
pub const TOOL_DECLARED_TWICE: Template =
    Template("Tool \"{tool}\" of provider \"{provider}\" is declared twice. Give each tool its own name.");

/// Two tool names that become one sandbox name.
pub const TOOL_NAMES_COLLIDE: Template = Template(
    "Tools \"{first}\" and \"{second}\" of provider \"{provider}\" both become \"{name}\" in the sandbox. Rename one of them, or leave one out.",
);

/// An options-object provider's tool whose arguments are not an object.
pub const TOOL_OPTIONS_NOT_OBJECT: Template = Template(
    "Provider \"{provider}\" sends one options object, but the input schema of its tool \"{tool}\" is not an object. Describe the arguments as an object (a struct), or use positional arguments.",
);

/// A call's argsJson that is not the codec's JSON (only a hand-made call sends one).
pub const TOOL_ARGUMENTS_NOT_JSON: Template = Template("The arguments of {call} are not JSON: {problem}");

/// A positional call with more arguments than the tool has parameters.
/// `{most}` reads `no arguments`, `at most 1 argument` or `at most N arguments`.
pub const TOOL_TOO_MANY_ARGUMENTS: Template =
    Template("{signature} takes {most}, but was called with {given}.");

/// Arguments whose shape does not fit the tool's type.
pub const TOOL_ARGUMENTS_DO_NOT_FIT: Template =
    Template("The arguments of {call} do not fit its parameters: {problem}.");

/// One argument or field that does not fit the tool's type, named by its path.
pub const TOOL_ARGUMENT_DOES_NOT_FIT: Template =
    Template("The arguments of {call} do not fit its parameters: at `{path}`, {problem}.");

/// The name of the code tool an agent offers the model.
pub const CODE_TOOL_NAME: &str = "execute";

/// The description of the code tool; the providers' declarations follow it in a
/// TypeScript code block ([`crate::tools::code_tool()`]).
pub const CODE_TOOL_DESCRIPTION: &str = "Run a JavaScript program in a sandbox and get back what it returns.

Write one async arrow function, `async () => { ... }`. Inside it, each provider declared below is a global object whose methods are tool calls: await them, run independent calls together with Promise.all, and do the filtering, joining and arithmetic in code instead of asking for each step. A tool that fails throws an Error you can catch. The function's return value is the result (JSON values; bytes as Uint8Array), and console.log lines come back with it. There is no network, no file system and no module loading: these tools are the only way to reach data. Write plain JavaScript; the declarations use TypeScript only to describe the tools.";

/// The description of the code tool's one parameter.
pub const CODE_TOOL_CODE_PARAMETER: &str =
    "The program: the source of an async arrow function, such as `async () => { return 1 }`.";

// ---- Limits and the sandbox ----

/// The run passed its wall-clock limit.
pub const TIMEOUT: Template = Template("Execution timed out after {ms} ms.");

/// The run's engine thread spent its CPU time budget (`cpuTimeLimitMs`); waiting is not counted.
pub const CPU_TIME_LIMIT: Template = Template("Execution used its CPU time limit of {ms} ms.");

/// A request asks for a limit the daemon's protocol version does not know: it is refused
/// on the client rather than sent to be refused, or worse run without it.
pub const LIMIT_NEEDS_VERSION: Template = Template(
    "The daemon speaks codemode version {version}, and {limit} needs version {needed} or newer. Upgrade the daemon, or run without {limit}.",
);

// ---- Approvals ----

/// The JSDoc line of a tool that needs a person's approval, in the declarations.
pub const NEEDS_APPROVAL_DOC: &str = "Each call waits for a person's approval before it runs, and rejects if they deny it or do not answer in time: call it only when the task needs it.";

/// The rejection of a held call a person denied: the host's reason follows.
pub const APPROVAL_DENIED: Template = Template("The call {provider}.{tool} was denied: {reason}");

/// The rejection of a held call nobody decided within the approval timeout.
pub const APPROVAL_TIMED_OUT: Template =
    Template("The call {provider}.{tool} was not approved within {ms} ms, so it was not made.");

/// The rejection of a call that needs approval when the host has nobody to ask.
pub const APPROVAL_UNAVAILABLE: Template = Template(
    "The call {provider}.{tool} needs a person's approval, and this host has no way to ask for it, so it was not made.",
);

/// What an MCP client shows the person asked to approve a held call (`codemode mcp
/// --ask`): the provider and tool, then the arguments' JSON indented, every value as the
/// dispatch gets it if the call is accepted.
pub const APPROVAL_ELICITATION: Template = Template(
    "A program wants to call {provider}.{tool} with these arguments:\n{arguments}\nAccept to let this call run, or decline to refuse it; a reason you give goes to the program.",
);

/// The reason a program reads when the person an MCP client asked declined without one.
pub const APPROVAL_DECLINED: &str = "the person declined it";

/// The reason a program reads when an MCP client's request for approval was cancelled,
/// failed, or was never answered within the approval timeout.
pub const APPROVAL_ELICITATION_CANCELLED: &str =
    "the request for approval was cancelled, so nobody approved it";

/// The reason a program reads when a call needs approval and the MCP client that started
/// the run cannot ask a person (it did not declare the elicitation capability).
pub const APPROVAL_NO_ELICITATION: &str = "it needs a person's approval, and the MCP client that started this run cannot ask a person for it (the client does not support elicitation)";

/// The reason a program reads for a call `codemode mcp --deny PATTERN` refuses.
pub const APPROVAL_DENIED_BY_SERVER: Template = Template("denied by the server's --deny {pattern}");

/// A decision for a held call that is not waiting for one.
pub const APPROVAL_NOT_HELD: Template = Template(
    "Held call {id} is not waiting for a decision: it was decided already, timed out, or its run ended.",
);

/// A decision approving with edited arguments that are not JSON.
pub const APPROVAL_BAD_ARGUMENTS: Template =
    Template("The edited arguments for held call {id} are not JSON ({problem}); send an array or an object.");

/// `codemode run --ask`: how a held call is shown on the terminal (stderr).
pub const ASK_CALL: Template = Template("codemode: the program calls {provider}.{tool} with\n{arguments}\n");

/// `codemode run --ask`: the question after an asked call, asked again until answered.
pub const ASK_PROMPT: &str = "Approve? y to run it, n [REASON] to refuse it: ";

/// The reason of a call refused at the terminal with `n` and no reason.
pub const ASK_DENIED_AT_TERMINAL: &str = "denied at the terminal";

/// The reason of an asked call when the terminal closed before an answer.
pub const ASK_TERMINAL_CLOSED: &str = "the terminal closed before anyone answered";

/// The reason of an asked call when there is no terminal to ask on.
pub const APPROVAL_NO_TERMINAL: &str = "approval was required and there was no terminal to ask on (codemode run --ask reads the answer from a terminal on stdin)";

/// The reason of a call refused by a `--deny PATTERN` flag.
pub const DENIED_BY_FLAG: Template = Template("refused by --deny {pattern}");

/// With discovery required, a call to a tool the run has not described first.
pub const NOT_DESCRIBED: Template = Template(
    "The tool {path} has not been described in this run, so it was not called. Describe it first with catalog.describe, read its declaration, then call it.",
);

/// The program made one call more than `maxCalls` allows; that call was never sent.
pub const CALL_LIMIT: Template = Template(
    "Execution reached its limit of {limit} calls (tool calls and fetches together); the call over it was not sent.",
);

/// An error outcome as a person or a model reads it: its text, then where in the code as
/// sent it arose (`Outcome::error_display`).
pub const ERROR_AT: Template = Template("{text} (at line {line}, column {column})");

/// The engine ran out of memory while compiling the program, before any of it ran.
pub const PROGRAM_TOO_LARGE: Template = Template(
    "The program is too large to compile within its memory limit of {bytes} bytes. Send a shorter program, or raise memoryLimitBytes.",
);

/// The engine passed its memory limit.
pub const MEMORY_LIMIT: Template = Template("Execution ran out of memory: the limit is {bytes} bytes.");

/// A call's provider + tool + argsJson passed the payload bound; the call was not delivered.
pub const PAYLOAD_TOO_LARGE: Template = Template(
    "Tool call payload is {size} bytes, over the limit of {limit} bytes (provider, tool and arguments together). Send less per call.",
);

/// The program's result passed the result bound.
pub const RESULT_TOO_LARGE: Template = Template(
    "Result is over the limit of {limit} bytes. Return less, or return it in parts over several runs.",
);

/// A limit in a request below the least the executor can run with. `{limit}` is the
/// request's field (`memoryLimitBytes`, say).
pub const LIMIT_TOO_SMALL: Template =
    Template("The {limit} of {value} is below the minimum of {minimum}; ask for at least {minimum}.");

/// A limit in a request above the most this executor allows. `{limit}` is the request's
/// field (`timeoutMs`, say).
pub const LIMIT_ABOVE_CEILING: Template = Template(
    "The {limit} of {value} is above this executor's ceiling of {ceiling}; ask for at most {ceiling}.",
);

/// Appended to a thrown text the outcome cut short: how long it was and how much is kept.
pub const ERROR_TEXT_TRUNCATED: Template =
    Template(" … [the error text was {length} characters; the outcome keeps the first {kept} bytes]");

/// A log or diagnostic line: an engine kept running past its deadline and was given up.
pub const ENGINE_UNSTOPPABLE: &str =
    "The engine did not stop after the deadline; its thread was abandoned and the executor replaced it.";

/// The outcome of every execution on an executor configured with V8 (`EngineKind::V8`) in a
/// build without the `v8` feature: kind `invalid`, the program never runs.
pub const V8_NOT_BUILT: &str = "The V8 engine is not built into this executor. Build codemode-executor with the cargo feature `v8`, or choose EngineKind::QuickJs.";

/// The outcome of an execution that asks for WebAssembly (`webAssembly: true`, or an
/// executor configured so) on QuickJS, which has none: kind `invalid`, the program never runs.
pub const WEB_ASSEMBLY_NEEDS_V8: &str = "WebAssembly is available on the V8 engine only, and this executor runs QuickJS. Run on V8 (EngineKind::V8, --engine v8) to use it, or leave webAssembly off.";

/// A `ProcessExecutor` whose worker command names another engine than its config: the
/// executor passes its engine to its workers, so the command need not name one.
pub const WORKER_ENGINE_MISMATCH: Template = Template(
    "The worker command says --engine {worker} but this executor runs {engine}: drop --engine from the worker command (the executor passes its engine to its workers), or make the two agree.",
);

/// The last log line, once the logs passed their volume bound.
pub const LOG_LIMIT_REACHED: Template =
    Template("[codemode] Log limit of {limit} bytes reached; later logs are dropped.");

/// A call beyond the bound on calls in flight; the call was not delivered.
pub const TOO_MANY_CALLS_IN_FLIGHT: Template =
    Template("Too many tool calls in flight: the limit is {limit}. Await some before starting more.");

/// `fetch` when the host gave no outbound handler.
pub const NETWORK_CLOSED: &str = "Network access is closed for this execution: fetch is refused. Reach data through the declared providers.";

/// The program threw a value whose String conversion itself throws.
pub const UNPRINTABLE_THROWN_VALUE: &str = "The program threw a value that cannot be converted to a string.";

/// The log line of a rejection nothing handled by the time the microtasks ran out.
pub const UNHANDLED_REJECTION: Template = Template("[warn] Unhandled rejection: {reason}");

/// The outcome of an execution the host cancelled over the wire.
pub const CANCELLED: &str = "Execution was cancelled by the host.";

/// The outcome of a run the host interrupted (`codemode run` on Ctrl-C): its logs are the
/// ones the host had heard by then.
pub const INTERRUPTED: &str =
    "Execution was interrupted before it ended; the logs are the ones written until then.";

/// A call the host never answered because the connection closed first.
pub const CONNECTION_CLOSED: &str = "The host closed the connection before answering this call.";

/// A worker process of process isolation ended before the run did.
pub const WORKER_PROCESS_DIED: &str =
    "The isolated worker process ended before the run did. The execution is lost; run it again.";

/// A confined worker process was killed by its seccomp filter (SIGSYS): the program made
/// the engine attempt a system call the allowlist forbids.
pub const WORKER_CONFINEMENT_KILLED: &str = "The isolated worker process was stopped by its confinement: it attempted a system call that is not allowed. The execution is lost.";

/// Confinement `required` where a worker cannot be confined (another operating system, or
/// a worker the host finds without its seccomp filter); the program did not run.
pub const CONFINEMENT_UNAVAILABLE: Template = Template(
    "Confinement is required but the worker process is not confined ({why}). The program did not run; run the worker on Linux with seccomp, or set confinement to best-effort or off.",
);

/// An execute beyond the daemon's bound on executions per connection.
pub const TOO_MANY_EXECUTIONS: Template = Template(
    "The daemon is running its maximum of {limit} executions on this connection. Wait for one to end, or open another connection.",
);

/// Every pending execute of a client whose connection to the daemon closed.
pub const DAEMON_CONNECTION_LOST: &str =
    "The connection to the daemon closed before the run ended. The execution is lost; run it again.";

// ---- The daemon's bounds ----

/// The error frame of a connection past the daemon's bound on connections; it is closed
/// at once.
pub const DAEMON_BUSY: Template =
    Template("The daemon is serving its maximum of {limit} connections. Close one, or try again later.");

/// An execute past the daemon's bound on executions live across all its connections
/// (kind `invalid`); it was refused before it ran.
pub const DAEMON_EXECUTIONS_FULL: Template = Template(
    "The daemon is running its maximum of {limit} executions across all connections. This one did not start; try again when one ends, or on another daemon.",
);

/// An execute that arrived once the daemon was draining: refused (version 2), or for a
/// version 1 client the outcome (kind `internal`). It did not start.
pub const DAEMON_DRAINING: &str =
    "The daemon is draining and starts no new executions. This one did not start; run it on another daemon.";

/// An execution still live when the daemon's drain timeout passed (kind `lost`; `internal`
/// for a peer below version 4).
pub const DAEMON_SHUT_DOWN: Template = Template(
    "The daemon shut down before the run ended: its drain timeout of {ms} ms passed. The execution is lost; run it again.",
);

/// The error frame of a connection whose hello did not arrive in time.
pub const HELLO_TIMEOUT: Template =
    Template("No hello arrived within {ms} ms of connecting. Send the hello first, at once.");

/// The error frame of a hello past the bound on what a connection may send before it is
/// authenticated.
pub const HELLO_TOO_LARGE: Template = Template(
    "The hello is longer than the maximum of {limit} bytes a connection may send before it is authenticated.",
);

/// The error frame of a connection the daemon closed for being idle.
pub const CONNECTION_IDLE: Template = Template(
    "The connection was idle for {ms} ms (no message either way and no execution live), so the daemon closed it. Connect again to run more.",
);

/// The outcome of a run whose own outcome waited for room while the client read nothing
/// for the daemon's send timeout (kind `internal`); the outcome itself was dropped.
pub const CLIENT_NOT_READING: Template = Template(
    "The client read nothing for {ms} ms while this run's outcome waited to be sent, so the daemon dropped the outcome. Keep reading the connection while runs are live.",
);

/// An outcome too long for one message on the connection (kind `resultTooLarge`), made by
/// the side that found it too long instead of the outcome; the first logs that fit stay.
pub const OUTCOME_TOO_LARGE: Template = Template(
    "The outcome (result, error text and logs together) is over the limit of {limit} bytes for one message on the connection. Return less and log less, or split the work over several runs; the first logs that fit are kept.",
);

/// A call or fetch too long for one message on the connection; the program's call
/// rejects with it.
pub const CALL_TOO_LARGE: Template = Template(
    "This call is over the limit of {limit} bytes for one message on the connection, so it was not sent to the host. Send less per call.",
);

/// The host's answer too long for one message on the connection; the program's call
/// rejects with it.
pub const ANSWER_TOO_LARGE: Template = Template(
    "The host's answer to this call is over the limit of {limit} bytes for one message on the connection, so it was not delivered. Ask for less per call.",
);

/// A request too long for one message on the connection (kind `invalid`); it was not sent.
pub const REQUEST_TOO_LARGE: Template = Template(
    "The request is over the limit of {limit} bytes for one message on the connection, so it was not sent. Send shorter code.",
);

/// An execute whose connection to the daemon could not be made again (kind `lost`);
/// the run did not start.
pub const DAEMON_UNREACHABLE: Template =
    Template("The daemon cannot be reached ({problem}). The execution did not run; run it again.");

// ---- Cells: runs a model resumes ----

/// A cell id no live cell has (the Display of `CellError::Unknown`; through MCP, a `wait`
/// or `terminate` answered with kind `invalid`): its outcome was handed out already, it
/// was ended, it belongs to another session, or it never existed.
pub const CELL_UNKNOWN: Template = Template(
    "No running cell has the id \"{cell}\": its outcome was already handed out, it was ended (terminated, or not waited on in time), or it never existed. Start a new execution.",
);

/// A cell nobody waited on for its time to live, ended (kind `cancelled`).
pub const CELL_EXPIRED: Template = Template(
    "The run was ended because nobody waited on it for {ms} ms (the time to live of a run that yielded).",
);

/// A cell ended to make room for a newer one past the cap on live cells (kind `cancelled`).
pub const CELL_EVICTED: Template = Template(
    "The run was ended to make room for a newer one: at most {limit} runs that yield are kept at once, and this one was waited on least recently.",
);

/// The text a model reads when a run yielded before it settled: call `wait` for more.
pub const CELL_RUNNING: Template = Template(
    "The program is still running (cell \"{cell}\"); the log lines it wrote since the last answer follow, if any. Call the tool `wait` with this cell for the next logs and, once it ends, its outcome; or `terminate` to end it.",
);

/// How the code tool's description tells the model to use `yieldAfterMs`, `wait` and `terminate`.
pub const CELL_CODE_TOOL_PARAGRAPH: &str = "A long program can hand control back before it ends: give `yieldAfterMs`, and a run still going after that many milliseconds answers {\"status\": \"running\", \"cell\": ID, \"logs\": [...]} instead of its outcome. Call `wait` with {\"cell\": ID} to get the logs written since and, once the program ends, its outcome exactly as this tool gives it; call `terminate` with {\"cell\": ID} to end it. A run nobody waits on for a while is ended.";

/// The description of the code tool's `yieldAfterMs` parameter.
pub const CELL_YIELD_PARAMETER: &str = "Optional. Answer after this many milliseconds even if the program is still running (then call `wait` with the cell it names). Without it, the call answers when the program ends.";

/// The name of the tool that waits on a cell.
pub const CELL_WAIT_TOOL_NAME: &str = "wait";

/// The description of the tool `wait`.
pub const CELL_WAIT_TOOL_DESCRIPTION: &str = "Wait on a program that `execute` left running (it answered {\"status\": \"running\", \"cell\": ID}). Answers the log lines written since the last answer and, once the program ends, its outcome exactly as `execute` gives it; if it is still running after `yieldAfterMs` (default 10000), it answers {\"status\": \"running\"} again.";

/// The name of the tool that ends a cell.
pub const CELL_TERMINATE_TOOL_NAME: &str = "terminate";

/// The description of the tool `terminate`.
pub const CELL_TERMINATE_TOOL_DESCRIPTION: &str = "End a program that `execute` left running (it answered {\"status\": \"running\", \"cell\": ID}). Answers its outcome: cancelled, with the log lines not yet handed out.";

/// The description of the `cell` parameter of `wait` and `terminate`.
pub const CELL_PARAMETER: &str = "The cell `execute` named when it answered {\"status\": \"running\"}.";

/// A `yieldAfterMs` that is not a non-negative integer (kind `invalid`).
pub const CELL_YIELD_NOT_MILLISECONDS: Template = Template(
    "The argument `yieldAfterMs` of the tool `{tool}` must be a non-negative integer number of milliseconds, not {found}.",
);

/// A `cell` argument that is missing or not a string (kind `invalid`).
pub const CELL_ARGUMENT_MISSING: Template = Template(
    "The tool `{tool}` needs the argument `cell`, a string: the cell `execute` named when it answered that the program is still running.",
);

/// A cell started outside a Tokio runtime (kind `invalid`): its run is a task on the runtime.
pub const CELL_NO_RUNTIME: &str = "A cell must start inside a Tokio runtime: its run is a task on it. Start it from within #[tokio::main] or Runtime::block_on.";

// ---- Discovery: search and describe over a catalog ----

/// The name of the tool (and of the in-program provider's method) that searches a catalog.
pub const SEARCH_TOOL_NAME: &str = "search";

/// The description of the tool `search`.
pub const SEARCH_TOOL_DESCRIPTION: &str = "Search the providers' tools by what they do. Give `query` in plain words (a typo in a long word still matches), optionally `provider` to search one provider, `limit` (default 8, at most 50) and `offset` to page. Answers the catalog's size, how many tools match, and the best hits: each tool's path (provider.tool, as the program calls it), the first sentence of its description, whether it needs approval or is destructive, and a score. Call `describe` with a path for the tool's declaration.";

/// The name of the tool (and of the in-program provider's method) that describes one tool.
pub const DESCRIBE_TOOL_NAME: &str = "describe";

/// The description of the tool `describe`.
pub const DESCRIBE_TOOL_DESCRIPTION: &str = "Describe one tool by its path (provider.tool, as `search` answers it): its TypeScript declaration as the program calls it, its description and its JSON Schemas. An unknown path answers the nearest paths.";

/// The paragraph the code tool carries, in place of every declaration, when discovery is on.
pub const DISCOVERY_CODE_TOOL_PARAGRAPH: &str = "The providers below hold more tools than are declared here. Every provider is in the program's scope and every tool of it can be called as `await provider.tool(...)`; find the tools you need with `search` (words for what you need) and read one's declaration with `describe` (its path, provider.tool) before writing the program.";

/// The name of the provider that serves `search` and `describe` inside programs.
pub const DISCOVERY_PROVIDER_NAME: &str = "catalog";

/// The description of the in-program discovery provider.
pub const DISCOVERY_PROVIDER_DESCRIPTION: &str = "Find the other providers' tools: `await catalog.search({ query: \"words for what you need\" })` answers paths (provider.tool) with a first sentence each; `await catalog.describe(\"provider.tool\")` answers one tool's TypeScript declaration and schemas. Any tool can be called without being described first.";

/// A search whose `limit` is over the most one answer holds. Holes: the limit asked, the most.
pub const SEARCH_LIMIT_CLAMPED: Template =
    Template("The limit {asked} is over the most one search answers; this answer holds at most {most} hits.");

/// A search of a provider the catalog does not have. Holes: the name, the catalog's providers.
pub const SEARCH_UNKNOWN_PROVIDER: Template =
    Template("No provider \"{provider}\" in the catalog. Its providers are: {providers}.");

/// A path `describe` does not know, with the nearest paths. Holes: the path, the suggestions.
pub const DESCRIBE_UNKNOWN: Template = Template(
    "No tool \"{path}\" in the catalog. The nearest paths: {suggestions}. Describe one of them, or search.",
);

/// A path `describe` does not know and nothing near it. Hole: the path.
pub const DESCRIBE_UNKNOWN_NOTHING_NEAR: Template =
    Template("No tool \"{path}\" in the catalog, and no path near it. Search for the tool by what it does.");
