//! The runner's own checks: it fails a case that is wrong, a transcript that does not
//! match the format, and an expected failure that passes. (The suite itself runs in
//! `tests/matrix.rs`, one trial per engine, transport and transcript.)

use std::path::{Path, PathBuf};

use codemode_conformance::{
    Executes, ExpectedFailure, Failure, Transcript, Verdict, judge, load_dir, run_case,
};

fn suite() -> Vec<(PathBuf, Transcript)> {
    load_dir(&Path::new(env!("CARGO_MANIFEST_DIR")).join("transcripts"))
        .expect("the committed transcripts load")
}

#[tokio::test]
async fn the_runner_fails_a_wrong_outcome_a_stray_call_and_a_missing_call() {
    let (_, mut transcript) = suite().into_iter().find(|(p, _)| p.ends_with("undeclared-tool.json")).unwrap();
    let implementation = Executes::in_process();
    assert_eq!(run_case(&implementation, &transcript).await, Ok(()));

    let mut wrong = transcript.clone();
    wrong.outcome = codemode_protocol::Outcome::result(Some("other".into()), vec![]);
    let failure = run_case(&implementation, &wrong).await.unwrap_err();
    assert_eq!(
        failure.message,
        "outcome differs\n  expected: {\"result\":\"other\",\"logs\":[]}\n  actual:   {\"result\":\"served\",\"logs\":[]}\n  first difference at character 11: expected \"other\\\",\\\"logs\\\":[]}\", got \"served\\\",\\\"logs\\\":[]}\""
    );

    let exchange = transcript.exchanges.pop().unwrap();
    let failure = run_case(&implementation, &transcript).await.unwrap_err();
    assert!(failure.message.starts_with("call 1 arrived beyond the exchanges: "), "{}", failure.message);

    transcript.exchanges = vec![exchange.clone(), exchange];
    let failure = run_case(&implementation, &transcript).await.unwrap_err();
    assert!(failure.message.starts_with("call 2 never arrived"), "{}", failure.message);
}

#[test]
fn the_committed_schema_matches_the_transcript_format() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/transcript.schema.json");
    let committed = std::fs::read_to_string(path).unwrap_or_default();
    assert!(
        committed == codemode_conformance::transcript::schema(),
        "{path} is missing or out of date. Regenerate it with `cargo xtask schema` and commit it."
    );
}

#[test]
fn the_committed_v2_schema_matches_the_transcript_format() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/transcript-v2.schema.json");
    let committed = std::fs::read_to_string(path).unwrap_or_default();
    assert!(
        committed == codemode_conformance::transcript::schema_v2(),
        "{path} is missing or out of date. Regenerate it with `cargo xtask schema` and commit it."
    );
}

/// A v1 file (no `format`) using a field of format v2 is refused with the field named
/// and what to write; the same request loads as v2; an unknown format is refused.
#[test]
fn format_v2_fields_need_format_2() {
    for (field, named) in [(r#""cpuTimeLimitMs":300"#, "cpuTimeLimitMs"), (r#""maxCalls":10"#, "maxCalls")] {
        assert_eq!(
            refusal_of("v2-field", field),
            format!(
                "does not match transcript format v1: unknown field `{named}` (format v2: add \"format\": 2)"
            )
        );
    }
    let dir = std::env::temp_dir().join(format!("codemode-v2-transcript-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let case = |format: u32| {
        format!(
            r#"{{"format":{format},"name":"x","section":"y","request":{{"code":"1","cpuTimeLimitMs":300}},"outcome":{{"error":"e","kind":"cpuTime","logs":[]}}}}"#
        )
    };
    std::fs::write(dir.join("v2.json"), case(2)).unwrap();
    let loaded = load_dir(&dir).unwrap();
    assert_eq!(loaded[0].1.request.cpu_time_limit_ms, Some(300));
    std::fs::write(dir.join("v3.json"), case(3)).unwrap();
    let error = load_dir(&dir).unwrap_err();
    assert_eq!(error.message, "is in transcript format 3; this runner reads formats 1 and 2");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_transcript_that_does_not_match_the_format_names_its_file_and_field() {
    let dir = std::env::temp_dir().join(format!("codemode-bad-transcript-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("bad.json"),
        r#"{"name":"x","section":"y","request":{"code":"1"},"outcome":{"logs":[]},"exchange":[]}"#,
    )
    .unwrap();
    let error = load_dir(&dir).unwrap_err();
    assert_eq!(error.path, dir.join("bad.json"));
    assert!(
        error.message.starts_with("does not match transcript format v1 or v2: unknown field `exchange`"),
        "{}",
        error.message
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// What loading a transcript whose request has `field` (JSON, as it would be written) says.
fn refusal_of(name: &str, field: &str) -> String {
    let dir = std::env::temp_dir().join(format!("codemode-{name}-transcript-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let transcript =
        format!(r#"{{"name":"x","section":"y","request":{{"code":"1",{field}}},"outcome":{{"logs":[]}}}}"#);
    std::fs::write(dir.join(format!("{name}.json")), transcript).unwrap();
    let error = load_dir(&dir).unwrap_err();
    let _ = std::fs::remove_dir_all(&dir);
    error.message
}

/// The wire's `events` (version 3) asks for progress, which a transcript does not record.
#[test]
fn a_transcript_asking_for_events_is_refused() {
    let message = refusal_of("events", r#""events":true"#);
    assert!(message.starts_with("does not match transcript format v1: unknown field `events`"), "{message}");
}

/// The wire's `webAssembly` (version 4) is the implementation's setting in the matrix, not
/// a transcript's: format v1 refuses it.
#[test]
fn a_transcript_asking_for_web_assembly_is_refused() {
    assert_eq!(
        refusal_of("wasm", r#""webAssembly":true"#),
        "does not match transcript format v1: unknown field `webAssembly` (a transcript runs with the implementation's own setting)"
    );
}

#[tokio::test]
async fn the_runner_fails_an_outcome_of_the_same_text_and_another_kind() {
    let (_, mut transcript) =
        suite().into_iter().find(|(p, _)| p.ends_with("outcome-thrown-timeout-text.json")).unwrap();
    let implementation = Executes::in_process();
    assert_eq!(run_case(&implementation, &transcript).await, Ok(()));
    transcript.outcome = codemode_protocol::Outcome::failure(
        codemode_protocol::OutcomeKind::Timeout,
        "Execution timed out after 30000 ms.",
        vec![],
    );
    let failure = run_case(&implementation, &transcript).await.unwrap_err();
    assert_eq!(
        failure.message,
        "outcome differs\n  expected: {\"error\":\"Execution timed out after 30000 ms.\",\"kind\":\"timeout\",\"logs\":[]}\n  actual:   {\"error\":\"Execution timed out after 30000 ms.\",\"kind\":\"thrown\",\"logs\":[]}\n  first difference at character 56: expected \"imeout\\\",\\\"logs\\\":[]}\", got \"hrown\\\",\\\"logs\\\":[]}\""
    );
}

#[tokio::test]
async fn a_location_is_compared_where_the_transcript_names_one() {
    let (_, mut transcript) =
        suite().into_iter().find(|(p, _)| p.ends_with("location-thrown-line-three.json")).unwrap();
    let implementation = Executes::in_process();
    assert_eq!(run_case(&implementation, &transcript).await, Ok(()));
    let named = transcript.outcome.location();
    // Another place fails the case ...
    transcript.outcome =
        transcript.outcome.with_location(Some(codemode_protocol::Location { line: 3, column: 1 }));
    let failure = run_case(&implementation, &transcript).await.unwrap_err();
    assert_eq!(
        failure.message,
        "outcome differs\n  expected: {\"error\":\"too few rows\",\"kind\":\"thrown\",\"location\":{\"line\":3,\"column\":1},\"logs\":[]}\n  actual:   {\"error\":\"too few rows\",\"kind\":\"thrown\",\"location\":{\"line\":3,\"column\":30},\"logs\":[]}\n  first difference at character 70: expected \"1},\\\"logs\\\":[]}\", got \"30},\\\"logs\\\":[]}\""
    );
    // ... and a transcript that names none leaves the place to the implementation.
    assert!(named.is_some());
    transcript.outcome = transcript.outcome.with_location(None);
    assert_eq!(run_case(&implementation, &transcript).await, Ok(()));
}

#[test]
fn an_expected_failure_that_passes_fails_and_one_that_fails_passes() {
    let known = ExpectedFailure { transcript: "names-fetch.json".into(), reason: "an engine text".into() };
    let list = "conformance/expected-failures/quickjs.json";
    let failure = Failure { message: "outcome differs".into() };
    assert_eq!(judge(Ok(()), None, list), Verdict::Pass);
    assert_eq!(judge(Err(failure.clone()), None, list), Verdict::Fail(failure.clone()));
    assert_eq!(
        judge(Err(failure.clone()), Some(&known), list),
        Verdict::ExpectedFailure { reason: "an engine text".into(), failure }
    );
    assert_eq!(
        judge(Ok(()), Some(&known), list),
        Verdict::Fail(Failure {
            message: "unexpectedly passed; remove it from conformance/expected-failures/quickjs.json (listed as an expected failure: an engine text)".into()
        })
    );
}
