//! The whole suite against the built-in executor, in-process and through `codemode stdio`;
//! and the runner's own checks: it fails a case that is wrong.

use std::path::{Path, PathBuf};

use codemode_conformance::{Implementation, InProcess, Subprocess, Transcript, load_dir, run_case};

fn suite() -> Vec<(PathBuf, Transcript)> {
    load_dir(&Path::new(env!("CARGO_MANIFEST_DIR")).join("transcripts"))
        .expect("the committed transcripts load")
}

async fn failures(implementation: &dyn Implementation) -> Vec<String> {
    let mut failed = Vec::new();
    for (path, transcript) in suite() {
        if let Err(failure) = run_case(implementation, &transcript).await {
            failed.push(format!("{}: {}", path.display(), failure.message));
        }
    }
    failed
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_built_in_executor_passes_every_transcript_in_process() {
    assert!(suite().len() >= 38);
    let failed = failures(&InProcess::new()).await;
    assert!(failed.is_empty(), "{failed:#?}");
}

/// The `codemode` binary of this build, built first if `cargo test` has not built it yet.
fn codemode_binary() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let profile_dir = exe.parent().and_then(Path::parent).unwrap().to_path_buf();
    let binary = profile_dir.join("codemode");
    if !binary.exists() {
        let status = std::process::Command::new(env!("CARGO"))
            .args(["build", "-p", "codemode-executor", "--bin", "codemode"])
            .status()
            .unwrap();
        assert!(status.success(), "building the codemode binary failed");
    }
    binary
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_built_in_executor_passes_every_transcript_over_stdio() {
    let command = format!("{} stdio", codemode_binary().display());
    let failed = failures(&Subprocess::new(&command, "quickjs").unwrap()).await;
    assert!(failed.is_empty(), "{failed:#?}");
}

#[tokio::test]
async fn the_runner_fails_a_wrong_outcome_a_stray_call_and_a_missing_call() {
    let (_, mut transcript) = suite().into_iter().find(|(p, _)| p.ends_with("undeclared-tool.json")).unwrap();
    let implementation = InProcess::new();
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
        error.message.starts_with("does not match transcript format v1: unknown field `exchange`"),
        "{}",
        error.message
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Runs the suite behind a daemon this test starts.
async fn behind_a_daemon(
    config: codemode_executor::daemon::DaemonConfig,
    token: Option<&str>,
) -> Vec<String> {
    let daemon = codemode_executor::daemon::Daemon::bind(config).await.unwrap();
    let address = daemon.address().to_string();
    tokio::spawn(daemon.serve(codemode_executor::Executor::default()));
    let remote = codemode_conformance::Remote::connect(&address, token, "quickjs").await.unwrap();
    failures(&remote).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_built_in_executor_passes_every_transcript_behind_a_daemon() {
    use codemode_executor::daemon::{Address, DaemonConfig};
    let path = std::env::temp_dir().join(format!("codemode-conformance-{}.sock", std::process::id()));
    let failed = behind_a_daemon(DaemonConfig::new(Address::Unix(path)), None).await;
    assert!(failed.is_empty(), "{failed:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_built_in_executor_passes_every_transcript_behind_a_tcp_daemon_with_a_token() {
    use codemode_executor::daemon::{Address, DaemonConfig};
    let config = DaemonConfig {
        token: Some("conformance".into()),
        ..DaemonConfig::new(Address::Tcp("127.0.0.1:0".into()))
    };
    let failed = behind_a_daemon(config, Some("conformance")).await;
    assert!(failed.is_empty(), "{failed:#?}");
}

#[tokio::test]
async fn the_runner_fails_an_outcome_of_the_same_text_and_another_kind() {
    let (_, mut transcript) =
        suite().into_iter().find(|(p, _)| p.ends_with("outcome-thrown-timeout-text.json")).unwrap();
    let implementation = InProcess::new();
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
