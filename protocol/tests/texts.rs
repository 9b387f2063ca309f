//! Pins every text of `codemode_protocol::texts` to its bytes.

use codemode_protocol::texts::*;

#[test]
fn the_guides_texts_are_pinned() {
    assert_eq!(TOOL_NOT_FOUND.fill(&["nope"]), "Tool \"nope\" not found");
    assert_eq!(EXECUTION_COMPLETED, "Execution has already completed.");
    assert_eq!(OUTSIDE_ENVELOPE, "The dispatch answered outside the result envelope.");
    assert_eq!(
        PROVIDER_NAME_RESERVED.fill(&["console"]),
        "Provider name \"console\" is reserved. Give the provider a name the entry scope does not bind."
    );
    assert_eq!(
        PROVIDER_NAME_NOT_IDENTIFIER.fill(&["my-store"]),
        "Provider name \"my-store\" must be ASCII letters, digits, underscore and dollar, and must not start with a digit."
    );
    assert_eq!(
        PROVIDER_NAME_REFUSED.fill(&["class"]),
        "Provider name \"class\" is on the list this executor refuses: every ECMAScript reserved word, the names strict mode reserves, and async. Pick a name outside it."
    );
    assert_eq!(
        PROVIDER_NAME_DUPLICATE.fill(&["store"]),
        "Provider name \"store\" is declared twice. Give each provider its own name."
    );
}

#[test]
fn the_codec_and_normalizer_texts_are_pinned() {
    assert_eq!(
        BINARY_TAG_SHAPE,
        "Binary tag must be an object with exactly two string fields, \"__executor_binary_v1__\" and \"data\"."
    );
    assert_eq!(
        BINARY_TAG_UNKNOWN_KIND.fill(&["Uint7Array"]),
        "Binary tag names \"Uint7Array\", which is not a binary kind. Use ArrayBuffer or a typed array name such as Uint8Array."
    );
    assert_eq!(
        BINARY_TAG_BAD_BASE64.fill(&["Uint8Array"]),
        "Binary tag \"Uint8Array\" carries data that is not standard padded base64."
    );
    assert_eq!(
        BINARY_TAG_BAD_LENGTH.fill(&["Float64Array", "3", "8"]),
        "Binary tag \"Float64Array\" carries 3 bytes, which is not a whole number of 8-byte elements."
    );
    assert_eq!(
        CODE_SYNTAX_ERROR.fill(&["2", "5", "Unexpected token"]),
        "SyntaxError in code at line 2, column 5: Unexpected token"
    );
    assert_eq!(
        CODE_MODULE_SYNTAX,
        "import and export are not available: the sandbox loads no modules. Reach data through the declared providers."
    );
    assert_eq!(
        CODE_TOO_LONG.fill(&["2000000", "1048576"]),
        "the code is 2000000 bytes, over the limit of 1048576 bytes for one program; send a shorter program"
    );
    assert_eq!(
        CODE_MANY_BLOCKS.fill(&["2"]),
        "the code holds 2 Markdown code blocks; put the whole program in one"
    );
    assert_eq!(
        CODE_ACCEPTED_FORMS,
        "Accepted forms: an async arrow function such as `async () => { ... }`, a function, an expression, statements with top-level await, or `export default` of a function or a value, each bare or in one Markdown code block."
    );
}

#[test]
fn a_filled_value_is_never_scanned_for_holes() {
    assert_eq!(TOOL_NOT_FOUND.fill(&["{tool}"]), "Tool \"{tool}\" not found");
    assert_eq!(
        TOOL_NOT_FOUND.parts(),
        vec![
            TemplatePart::Literal("Tool \""),
            TemplatePart::Hole("tool"),
            TemplatePart::Literal("\" not found")
        ]
    );
}

#[test]
fn the_limit_texts_are_pinned() {
    assert_eq!(TIMEOUT.fill(&["1000"]), "Execution timed out after 1000 ms.");
    assert_eq!(MEMORY_LIMIT.fill(&["8388608"]), "Execution ran out of memory: the limit is 8388608 bytes.");
    assert_eq!(
        PROGRAM_TOO_LARGE.fill(&["67108864"]),
        "The program is too large to compile within its memory limit of 67108864 bytes. Send a shorter program, or raise memoryLimitBytes."
    );
    assert_eq!(ERROR_AT.fill(&["boom", "3", "14"]), "boom (at line 3, column 14)");
    assert_eq!(
        PAYLOAD_TOO_LARGE.fill(&["70", "64"]),
        "Tool call payload is 70 bytes, over the limit of 64 bytes (provider, tool and arguments together). Send less per call."
    );
    assert_eq!(
        RESULT_TOO_LARGE.fill(&["1024"]),
        "Result is over the limit of 1024 bytes. Return less, or return it in parts over several runs."
    );
    assert_eq!(
        LOG_LIMIT_REACHED.fill(&["256"]),
        "[codemode] Log limit of 256 bytes reached; later logs are dropped."
    );
    assert_eq!(
        TOO_MANY_CALLS_IN_FLIGHT.fill(&["4"]),
        "Too many tool calls in flight: the limit is 4. Await some before starting more."
    );
    assert_eq!(
        NETWORK_CLOSED,
        "Network access is closed for this execution: fetch is refused. Reach data through the declared providers."
    );
    assert_eq!(UNPRINTABLE_THROWN_VALUE, "The program threw a value that cannot be converted to a string.");
    assert_eq!(UNHANDLED_REJECTION.fill(&["x"]), "[warn] Unhandled rejection: x");
}

#[test]
fn the_limit_refusal_and_engine_texts_are_pinned() {
    assert_eq!(
        LIMIT_TOO_SMALL.fill(&["memoryLimitBytes", "1024", "65536"]),
        "The memoryLimitBytes of 1024 is below the minimum of 65536; ask for at least 65536."
    );
    assert_eq!(
        LIMIT_ABOVE_CEILING.fill(&["timeoutMs", "600000", "300000"]),
        "The timeoutMs of 600000 is above this executor's ceiling of 300000; ask for at most 300000."
    );
    assert_eq!(
        ERROR_TEXT_TRUNCATED.fill(&["1048576", "65536"]),
        " \u{2026} [the error text was 1048576 characters; the outcome keeps the first 65536 bytes]"
    );
    assert_eq!(
        ENGINE_UNSTOPPABLE,
        "The engine did not stop after the deadline; its thread was abandoned and the executor replaced it."
    );
    assert_eq!(
        WORKER_ENGINE_MISMATCH.fill(&["quickjs", "v8"]),
        "The worker command says --engine quickjs but this executor runs v8: drop --engine from the worker command (the executor passes its engine to its workers), or make the two agree."
    );
    assert_eq!(
        V8_NOT_BUILT,
        "The V8 engine is not built into this executor. Build codemode-executor with the cargo feature `v8`, or choose EngineKind::QuickJs."
    );
    assert_eq!(
        WEB_ASSEMBLY_NEEDS_V8,
        "WebAssembly is available on the V8 engine only, and this executor runs QuickJS. Run on V8 (EngineKind::V8, --engine v8) to use it, or leave webAssembly off."
    );
}

#[test]
fn a_hole_named_twice_takes_one_value() {
    assert_eq!(LIMIT_TOO_SMALL.holes(), vec!["limit", "value", "minimum"]);
    assert_eq!(LIMIT_ABOVE_CEILING.holes(), vec!["limit", "value", "ceiling"]);
    assert_eq!(TOOL_NOT_FOUND.holes(), vec!["tool"]);
    assert_eq!(PAYLOAD_TOO_LARGE.holes(), vec!["size", "limit"]);
}

#[test]
fn the_wire_texts_are_pinned() {
    assert_eq!(CANCELLED, "Execution was cancelled by the host.");
    assert_eq!(
        INTERRUPTED,
        "Execution was interrupted before it ended; the logs are the ones written until then."
    );
    assert_eq!(CONNECTION_CLOSED, "The host closed the connection before answering this call.");
    assert_eq!(
        WORKER_PROCESS_DIED,
        "The isolated worker process ended before the run did. The execution is lost; run it again."
    );
    assert_eq!(
        WORKER_CONFINEMENT_KILLED,
        "The isolated worker process was stopped by its confinement: it attempted a system call that is not allowed. The execution is lost."
    );
    assert_eq!(
        CONFINEMENT_UNAVAILABLE.fill(&["this operating system has no seccomp"]),
        "Confinement is required but the worker process is not confined (this operating system has no seccomp). The program did not run; run the worker on Linux with seccomp, or set confinement to best-effort or off."
    );
    assert_eq!(
        TOO_MANY_EXECUTIONS.fill(&["1024"]),
        "The daemon is running its maximum of 1024 executions on this connection. Wait for one to end, or open another connection."
    );
    assert_eq!(
        DAEMON_CONNECTION_LOST,
        "The connection to the daemon closed before the run ended. The execution is lost; run it again."
    );
}

#[test]
fn the_tool_texts_are_pinned() {
    assert_eq!(
        TOOL_NAME_EMPTY.fill(&["gh"]),
        "A tool of provider \"gh\" has an empty name. Give every tool a name."
    );
    assert_eq!(
        TOOL_DECLARED_TWICE.fill(&["find", "store"]),
        "Tool \"find\" of provider \"store\" is declared twice. Give each tool its own name."
    );
    assert_eq!(
        TOOL_NAMES_COLLIDE.fill(&["a-b", "a_b", "gh", "a_b"]),
        "Tools \"a-b\" and \"a_b\" of provider \"gh\" both become \"a_b\" in the sandbox. Rename one of them, or leave one out."
    );
    assert_eq!(
        TOOL_OPTIONS_NOT_OBJECT.fill(&["gh", "add"]),
        "Provider \"gh\" sends one options object, but the input schema of its tool \"add\" is not an object. Describe the arguments as an object (a struct), or use positional arguments."
    );
    assert_eq!(
        TOOL_ARGUMENTS_NOT_JSON.fill(&["store.find", "EOF"]),
        "The arguments of store.find are not JSON: EOF"
    );
    assert_eq!(
        TOOL_TOO_MANY_ARGUMENTS.fill(&["store.find(id)", "at most 1 argument", "2"]),
        "store.find(id) takes at most 1 argument, but was called with 2."
    );
    assert_eq!(
        TOOL_ARGUMENTS_DO_NOT_FIT.fill(&["store.find", "missing field `id`"]),
        "The arguments of store.find do not fit its parameters: missing field `id`."
    );
    assert_eq!(
        TOOL_ARGUMENT_DOES_NOT_FIT.fill(&[
            "store.find",
            "id",
            "invalid type: integer `7`, expected a string"
        ]),
        "The arguments of store.find do not fit its parameters: at `id`, invalid type: integer `7`, expected a string."
    );
    assert_eq!(CODE_TOOL_NAME, "execute");
    assert_eq!(
        CODE_TOOL_CODE_PARAMETER,
        "The program: the source of an async arrow function, such as `async () => { return 1 }`."
    );
    assert!(
        CODE_TOOL_DESCRIPTION
            .starts_with("Run a JavaScript program in a sandbox and get back what it returns.\n\n")
    );
}

#[test]
fn the_daemon_bound_texts_are_pinned() {
    assert_eq!(
        DAEMON_BUSY.fill(&["256"]),
        "The daemon is serving its maximum of 256 connections. Close one, or try again later."
    );
    assert_eq!(
        DAEMON_EXECUTIONS_FULL.fill(&["1024"]),
        "The daemon is running its maximum of 1024 executions across all connections. This one did not start; try again when one ends, or on another daemon."
    );
    assert_eq!(
        DAEMON_DRAINING,
        "The daemon is draining and starts no new executions. This one did not start; run it on another daemon."
    );
    assert_eq!(
        DAEMON_SHUT_DOWN.fill(&["125000"]),
        "The daemon shut down before the run ended: its drain timeout of 125000 ms passed. The execution is lost; run it again."
    );
    assert_eq!(
        HELLO_TIMEOUT.fill(&["5000"]),
        "No hello arrived within 5000 ms of connecting. Send the hello first, at once."
    );
    assert_eq!(
        HELLO_TOO_LARGE.fill(&["4096"]),
        "The hello is longer than the maximum of 4096 bytes a connection may send before it is authenticated."
    );
    assert_eq!(
        CONNECTION_IDLE.fill(&["300000"]),
        "The connection was idle for 300000 ms (no message either way and no execution live), so the daemon closed it. Connect again to run more."
    );
    assert_eq!(
        CLIENT_NOT_READING.fill(&["10000"]),
        "The client read nothing for 10000 ms while this run's outcome waited to be sent, so the daemon dropped the outcome. Keep reading the connection while runs are live."
    );
    assert_eq!(
        OUTCOME_TOO_LARGE.fill(&["67108864"]),
        "The outcome (result, error text and logs together) is over the limit of 67108864 bytes for one message on the connection. Return less and log less, or split the work over several runs; the first logs that fit are kept."
    );
    assert_eq!(
        CALL_TOO_LARGE.fill(&["67108864"]),
        "This call is over the limit of 67108864 bytes for one message on the connection, so it was not sent to the host. Send less per call."
    );
    assert_eq!(
        ANSWER_TOO_LARGE.fill(&["67108864"]),
        "The host's answer to this call is over the limit of 67108864 bytes for one message on the connection, so it was not delivered. Ask for less per call."
    );
    assert_eq!(
        REQUEST_TOO_LARGE.fill(&["67108864"]),
        "The request is over the limit of 67108864 bytes for one message on the connection, so it was not sent. Send shorter code."
    );
    assert_eq!(
        DAEMON_UNREACHABLE
            .fill(&["cannot connect to /run/codemode.sock: No such file or directory (os error 2)"]),
        "The daemon cannot be reached (cannot connect to /run/codemode.sock: No such file or directory (os error 2)). The execution did not run; run it again."
    );
}
