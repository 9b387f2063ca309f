//! Wire types: exact JSON both ways.

use codemode_protocol::wire::{
    CPU_AND_CALL_LIMITS_VERSION, ClientMessage, Hello, LOST_AND_CANCELLED_VERSION, LogLevel,
    OLDEST_PROTOCOL_VERSION, PROTOCOL_VERSION, RefusalReason, ServerMessage, negotiate,
};
use codemode_protocol::{
    Binary, ExecuteRequest, Location, Outcome, OutcomeKind, ProviderDescriptor, ToolCall, Value, texts,
};
use serde::{Deserialize, Serialize};

fn test_serialization<T>(value: &T, json: &str)
where
    T: Serialize + for<'de> Deserialize<'de> + PartialEq + std::fmt::Debug,
{
    assert_eq!(serde_json::to_string(value).unwrap(), json);
    assert_eq!(&serde_json::from_str::<T>(json).unwrap(), value);
}

#[test]
fn execute_request() {
    let mut request = ExecuteRequest::new("async () => await __dispatch('secrets', 'read', '[]')");
    request.providers = vec![ProviderDescriptor::new("store", ["listOrders"])];
    request.dispatch = true;
    test_serialization(
        &request,
        r#"{"code":"async () => await __dispatch('secrets', 'read', '[]')","providers":[{"name":"store","tools":["listOrders"]}],"dispatch":true}"#,
    );
    request.retain_handles = true;
    request.timeout_ms = Some(1000);
    request.memory_limit_bytes = Some(1 << 20);
    request.max_payload_bytes = Some(64);
    test_serialization(
        &request,
        r#"{"code":"async () => await __dispatch('secrets', 'read', '[]')","providers":[{"name":"store","tools":["listOrders"]}],"dispatch":true,"retainHandles":true,"timeoutMs":1000,"memoryLimitBytes":1048576,"maxPayloadBytes":64}"#,
    );
}

#[test]
fn every_limit_crosses_the_wire() {
    let mut request = ExecuteRequest::new("1");
    request.timeout_ms = Some(1000);
    request.memory_limit_bytes = Some(1 << 20);
    request.max_payload_bytes = Some(64);
    request.stack_limit_bytes = Some(256 << 10);
    request.max_result_bytes = Some(4096);
    request.max_log_bytes = Some(512);
    request.max_calls_in_flight = Some(8);
    test_serialization(
        &request,
        r#"{"code":"1","timeoutMs":1000,"memoryLimitBytes":1048576,"maxPayloadBytes":64,"stackLimitBytes":262144,"maxResultBytes":4096,"maxLogBytes":512,"maxCallsInFlight":8}"#,
    );
    test_serialization(&ExecuteRequest::new("1"), r#"{"code":"1"}"#);
}

/// Version 3's `events`: absent unless asked for, so a request of versions 1 and 2 is
/// the same bytes as before it existed.
#[test]
fn events_are_asked_for_only_in_version_3() {
    let mut request = ExecuteRequest::new("1");
    test_serialization(&request, r#"{"code":"1"}"#);
    request.events = true;
    test_serialization(&request, r#"{"code":"1","events":true}"#);
}

#[test]
fn outcomes() {
    test_serialization(&Outcome::result(Some("object".into()), vec![]), r#"{"result":"object","logs":[]}"#);
    test_serialization(&Outcome::result(Some(Value::Null), vec![]), r#"{"result":null,"logs":[]}"#);
    test_serialization(&Outcome::result(None, vec!["hi".into()]), r#"{"logs":["hi"]}"#);
    test_serialization(
        &Outcome::result(Some(Binary::uint8_array([1, 2, 3]).into()), vec![]),
        r#"{"result":{"__executor_binary_v1__":"Uint8Array","data":"AQID"},"logs":[]}"#,
    );
    test_serialization(
        &Outcome::error("boom", vec!["[warn] careful".into()]),
        r#"{"error":"boom","kind":"thrown","logs":["[warn] careful"]}"#,
    );
    test_serialization(
        &Outcome::failure(OutcomeKind::ResultTooLarge, "too big", vec![]),
        r#"{"error":"too big","kind":"resultTooLarge","logs":[]}"#,
    );
    test_serialization(
        &Outcome::error("boom", vec![]).with_location(Some(Location { line: 3, column: 14 })),
        r#"{"error":"boom","kind":"thrown","location":{"line":3,"column":14},"logs":[]}"#,
    );
}

#[test]
fn an_outcome_reads_with_its_location() {
    let located = Outcome::error("boom", vec![]).with_location(Some(Location { line: 3, column: 14 }));
    assert_eq!(located.location(), Some(Location { line: 3, column: 14 }));
    assert_eq!(located.error_display().as_deref(), Some("boom (at line 3, column 14)"));
    assert_eq!(Outcome::error("boom", vec![]).error_display().as_deref(), Some("boom"));
    assert_eq!(Outcome::result(None, vec![]).error_display(), None);
    // A returned outcome takes no location.
    assert_eq!(
        Outcome::result(None, vec![]).with_location(Some(Location { line: 1, column: 1 })).location(),
        None
    );
    // A text that names its place already is not told it twice.
    let syntax = Outcome::failure(
        OutcomeKind::Syntax,
        "SyntaxError in code at line 2, column 5: Unexpected token",
        vec![],
    )
    .with_location(Some(Location { line: 2, column: 5 }));
    assert_eq!(
        syntax.error_display().as_deref(),
        Some("SyntaxError in code at line 2, column 5: Unexpected token")
    );
}

#[test]
fn every_kind_has_its_wire_name() {
    let names = [
        "returned",
        "thrown",
        "timeout",
        "memory",
        "payload",
        "resultTooLarge",
        "syntax",
        "invalid",
        "internal",
        "lost",
        "cancelled",
        "cpuTime",
        "callLimit",
    ];
    assert_eq!(OutcomeKind::ALL.len(), names.len());
    for (&kind, name) in OutcomeKind::ALL.iter().zip(names) {
        test_serialization(&kind, &format!("\"{name}\""));
        assert_eq!(kind.as_str(), name);
        assert_eq!(kind.to_string(), name);
    }
}

#[test]
fn an_outcome_knows_its_kind() {
    assert_eq!(Outcome::result(None, vec![]).kind(), OutcomeKind::Returned);
    assert_eq!(Outcome::error("boom", vec![]).kind(), OutcomeKind::Thrown);
    for &kind in &OutcomeKind::ALL[1..] {
        let outcome = Outcome::failure(kind, "text", vec!["log".into()]);
        assert_eq!(
            (outcome.kind(), outcome.error_text(), outcome.logs()),
            (kind, Some("text"), &["log".to_owned()][..])
        );
    }
    // Returned is no failure: asking for one is the caller's bug, recorded as internal.
    assert_eq!(Outcome::failure(OutcomeKind::Returned, "x", vec![]).kind(), OutcomeKind::Internal);
}

#[test]
fn a_program_throwing_the_timeout_text_is_not_a_timeout() {
    let text = texts::TIMEOUT.fill(&["30000"]);
    let thrown = Outcome::error(text.clone(), vec![]);
    let timed_out = Outcome::failure(OutcomeKind::Timeout, text, vec![]);
    assert_eq!(thrown.error_text(), timed_out.error_text());
    assert_ne!(thrown, timed_out);
    assert_eq!(
        thrown.to_json_string(),
        r#"{"error":"Execution timed out after 30000 ms.","kind":"thrown","logs":[]}"#
    );
    assert_eq!(
        timed_out.to_json_string(),
        r#"{"error":"Execution timed out after 30000 ms.","kind":"timeout","logs":[]}"#
    );
}

#[test]
fn an_outcome_that_breaks_the_rules_is_refused() {
    let refusal = |json: &str| serde_json::from_str::<Outcome>(json).unwrap_err().to_string();
    assert_eq!(
        refusal(r#"{"error":"boom","logs":[]}"#),
        "an error outcome needs its `kind` (thrown, timeout, memory, ...)"
    );
    assert_eq!(
        refusal(r#"{"error":"boom","kind":"returned","logs":[]}"#),
        "an error outcome cannot be of kind `returned`"
    );
    assert_eq!(
        refusal(r#"{"error":"boom","kind":"thrown","result":1,"logs":[]}"#),
        "an outcome has `result` or `error`, not both"
    );
    assert_eq!(
        refusal(r#"{"result":1,"kind":"returned","logs":[]}"#),
        "a returned outcome carries no `kind`; only an error outcome (with `error`) does"
    );
    assert_eq!(
        refusal(r#"{"error":"boom","kind":"late","logs":[]}"#),
        "unknown variant `late`, expected one of `returned`, `thrown`, `timeout`, `memory`, `payload`, `resultTooLarge`, `syntax`, `invalid`, `internal`, `lost`, `cancelled`, `cpuTime`, `callLimit` at line 1 column 29"
    );
    assert_eq!(refusal(r#"{"result":1}"#), "missing field `logs` at line 1 column 12");
    assert_eq!(
        refusal(r#"{"result":1,"location":{"line":1,"column":1},"logs":[]}"#),
        "a returned outcome carries no `location`; only an error outcome does"
    );
    assert_eq!(
        refusal(r#"{"error":"boom","kind":"thrown","location":{"line":1},"logs":[]}"#),
        "missing field `column` at line 1 column 53"
    );
}

/// A result nested 100,000 deep crosses the wire both ways on a 2 MiB stack.
#[test]
fn a_deep_result_crosses_the_wire() {
    std::thread::Builder::new()
        .stack_size(2 << 20)
        .spawn(|| {
            const DEPTH: usize = 100_000;
            let line = format!(
                r#"{{"type":"outcome","execution":1,"outcome":{{"result":{}1{},"logs":[]}}}}"#,
                "[".repeat(DEPTH),
                "]".repeat(DEPTH)
            );
            let message: ServerMessage = codemode_protocol::from_json_str(&line).unwrap();
            assert_eq!(serde_json::to_string(&message).unwrap(), line);
            let ServerMessage::Outcome { outcome, .. } = &message else { panic!("an outcome") };
            assert_eq!(outcome.kind(), OutcomeKind::Returned);
            let copy = message.clone();
            assert_eq!(copy, message);
        })
        .unwrap()
        .join()
        .unwrap();
}

#[test]
fn a_connection_speaks_the_newest_version_both_sides_speak() {
    assert_eq!((OLDEST_PROTOCOL_VERSION, PROTOCOL_VERSION), (1, 6));
    assert_eq!(negotiate(1), Some(1));
    assert_eq!(negotiate(2), Some(2));
    assert_eq!(negotiate(3), Some(3));
    assert_eq!(negotiate(4), Some(4));
    assert_eq!(negotiate(5), Some(5));
    assert_eq!(negotiate(6), Some(6));
    assert_eq!(negotiate(7), Some(6), "a newer client is answered with this side's newest");
    assert_eq!(negotiate(0), None);
}

/// Version 6's holds: a client stops and restarts an execution's wall clock.
#[test]
fn hold_and_unhold() {
    test_serialization(&ClientMessage::Hold { execution: 3 }, r#"{"type":"hold","execution":3}"#);
    test_serialization(&ClientMessage::Unhold { execution: 3 }, r#"{"type":"unhold","execution":3}"#);
}

#[test]
fn messages() {
    test_serialization(
        &ClientMessage::Hello(Hello::version(1)),
        r#"{"type":"hello","protocol":"codemode","version":1}"#,
    );
    test_serialization(
        &ClientMessage::Hello(Hello::current()),
        r#"{"type":"hello","protocol":"codemode","version":6}"#,
    );
    test_serialization(
        &ServerMessage::Log { execution: 1, level: LogLevel::Warn, line: "[warn] low".into() },
        r#"{"type":"log","execution":1,"level":"warn","line":"[warn] low"}"#,
    );
    for (level, name) in [
        (LogLevel::Log, "log"),
        (LogLevel::Info, "info"),
        (LogLevel::Debug, "debug"),
        (LogLevel::Warn, "warn"),
        (LogLevel::Error, "error"),
    ] {
        let json = format!(r#"{{"type":"log","execution":2,"level":"{name}","line":"x"}}"#);
        test_serialization(&ServerMessage::Log { execution: 2, level, line: "x".into() }, &json);
    }
    test_serialization(
        &ServerMessage::Waiting { execution: 1, calls: 2, timers: 0 },
        r#"{"type":"waiting","execution":1,"calls":2,"timers":0}"#,
    );
    test_serialization(&ClientMessage::Ping { id: 4 }, r#"{"type":"ping","id":4}"#);
    test_serialization(&ServerMessage::Pong { id: 4 }, r#"{"type":"pong","id":4}"#);
    test_serialization(&ServerMessage::Draining {}, r#"{"type":"draining"}"#);
    test_serialization(
        &ServerMessage::Refused {
            execution: 9,
            reason: RefusalReason::Draining,
            message: texts::DAEMON_DRAINING.to_owned(),
        },
        r#"{"type":"refused","execution":9,"reason":"draining","message":"The daemon is draining and starts no new executions. This one did not start; run it on another daemon."}"#,
    );
    test_serialization(
        &ServerMessage::Refused { execution: 9, reason: RefusalReason::Full, message: "full".into() },
        r#"{"type":"refused","execution":9,"reason":"full","message":"full"}"#,
    );
    test_serialization(
        &ClientMessage::Answer { execution: 1, call: 2, answer: r#"{"result":1}"#.into() },
        r#"{"type":"answer","execution":1,"call":2,"answer":"{\"result\":1}"}"#,
    );
    test_serialization(&ClientMessage::Cancel { execution: 3 }, r#"{"type":"cancel","execution":3}"#);
    test_serialization(
        &ServerMessage::Call { execution: 1, call: 2, tool_call: ToolCall::new("store", "find", "[7]") },
        r#"{"type":"call","execution":1,"call":2,"provider":"store","tool":"find","argsJson":"[7]"}"#,
    );
    test_serialization(
        &ServerMessage::Outcome { execution: 1, outcome: Outcome::result(Some(42.into()), vec![]) },
        r#"{"type":"outcome","execution":1,"outcome":{"result":42,"logs":[]}}"#,
    );
}

#[test]
fn fetch_messages() {
    use codemode_protocol::Bytes;
    use codemode_protocol::wire::{FetchAnswer, FetchRequest};
    test_serialization(
        &ServerMessage::Fetch {
            execution: 1,
            call: 3,
            request: FetchRequest {
                method: "POST".into(),
                url: "https://api.example.com/".into(),
                headers: vec![("x-key".into(), "k".into())],
                body: Bytes::from([1, 2, 3]),
            },
        },
        r#"{"type":"fetch","execution":1,"call":3,"request":{"method":"POST","url":"https://api.example.com/","headers":[["x-key","k"]],"body":{"__executor_binary_v1__":"Uint8Array","data":"AQID"}}}"#,
    );
    test_serialization(
        &ClientMessage::FetchAnswer {
            execution: 1,
            call: 3,
            answer: FetchAnswer::Response { status: 200, headers: vec![], body: Bytes::default() },
        },
        r#"{"type":"fetchAnswer","execution":1,"call":3,"answer":{"status":200,"headers":[],"body":{"__executor_binary_v1__":"Uint8Array","data":""}}}"#,
    );
    test_serialization(
        &ClientMessage::FetchAnswer {
            execution: 1,
            call: 4,
            answer: FetchAnswer::Refused { error: "no".into() },
        },
        r#"{"type":"fetchAnswer","execution":1,"call":4,"answer":{"error":"no"}}"#,
    );
}

/// Version 4's kinds: a run lost with what ran it, and a run the host ended. A peer below
/// version 4 is sent `internal` for either, which it reads; every other kind is the same
/// at every version.
#[test]
fn lost_and_cancelled_are_internal_below_version_4() {
    let lost = Outcome::failure(OutcomeKind::Lost, texts::WORKER_PROCESS_DIED, Vec::new());
    let cancelled = Outcome::failure(OutcomeKind::Cancelled, texts::CANCELLED, Vec::new());
    assert_eq!(
        serde_json::to_string(&lost).unwrap(),
        format!(r#"{{"error":"{}","kind":"lost","logs":[]}}"#, texts::WORKER_PROCESS_DIED)
    );
    assert_eq!(
        serde_json::to_string(&cancelled).unwrap(),
        r#"{"error":"Execution was cancelled by the host.","kind":"cancelled","logs":[]}"#
    );
    for version in 1..LOST_AND_CANCELLED_VERSION {
        assert_eq!(lost.clone().for_version(version).kind(), OutcomeKind::Internal);
        assert_eq!(cancelled.clone().for_version(version).kind(), OutcomeKind::Internal);
    }
    assert_eq!(lost.clone().for_version(4).kind(), OutcomeKind::Lost);
    assert_eq!(cancelled.clone().for_version(4).kind(), OutcomeKind::Cancelled);
    for &kind in OutcomeKind::ALL {
        if !matches!(
            kind,
            OutcomeKind::Lost | OutcomeKind::Cancelled | OutcomeKind::CpuTime | OutcomeKind::CallLimit
        ) {
            assert_eq!(kind.for_version(1), kind, "{kind}");
        }
    }
}

/// Version 5's kinds: `cpuTime` reads as `timeout` and `callLimit` as `internal` below it.
#[test]
fn cpu_time_and_call_limit_are_version_5_kinds() {
    let cpu = Outcome::failure(OutcomeKind::CpuTime, texts::CPU_TIME_LIMIT.fill(&["300"]), vec![]);
    let calls = Outcome::failure(OutcomeKind::CallLimit, texts::CALL_LIMIT.fill(&["10"]), vec![]);
    assert_eq!(
        serde_json::to_string(&cpu).unwrap(),
        r#"{"error":"Execution used its CPU time limit of 300 ms.","kind":"cpuTime","logs":[]}"#
    );
    assert_eq!(
        serde_json::to_string(&calls).unwrap(),
        r#"{"error":"Execution reached its limit of 10 calls (tool calls and fetches together); the call over it was not sent.","kind":"callLimit","logs":[]}"#
    );
    for version in 1..CPU_AND_CALL_LIMITS_VERSION {
        assert_eq!(cpu.clone().for_version(version).kind(), OutcomeKind::Timeout);
        assert_eq!(calls.clone().for_version(version).kind(), OutcomeKind::Internal);
    }
    assert_eq!(cpu.for_version(5).kind(), OutcomeKind::CpuTime);
    assert_eq!(calls.for_version(5).kind(), OutcomeKind::CallLimit);
}

/// Version 5's request fields round-trip under their wire names, absent when unset, and
/// a request says the oldest version that carries it.
#[test]
fn cpu_time_limit_and_max_calls_on_the_wire() {
    let mut request = ExecuteRequest::new("async () => 1");
    assert_eq!(request.least_version(), 1);
    assert_eq!(serde_json::to_string(&request).unwrap(), r#"{"code":"async () => 1"}"#);
    request.cpu_time_limit_ms = Some(300);
    request.max_calls = Some(10);
    let json = r#"{"code":"async () => 1","cpuTimeLimitMs":300,"maxCalls":10}"#;
    assert_eq!(serde_json::to_string(&request).unwrap(), json);
    assert_eq!(serde_json::from_str::<ExecuteRequest>(json).unwrap(), request);
    assert_eq!(request.least_version(), 5);
}
