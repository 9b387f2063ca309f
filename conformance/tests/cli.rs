//! The `codemode-conformance` command line: lines per case, the summary, exit codes.

use std::process::Command;

#[test]
fn prints_a_line_per_transcript_and_the_summary() {
    let output = Command::new(env!("CARGO_BIN_EXE_codemode-conformance")).output().unwrap();
    let stdout = String::from_utf8(output.stdout).unwrap();
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(output.status.code(), Some(0), "{stdout}");
    assert!(lines.iter().take(lines.len() - 1).all(|l| l.starts_with("pass ")), "{stdout}");
    assert_eq!(lines.last(), Some(&format!("{} passed, 0 failed", lines.len() - 1).as_str()));
}

#[test]
fn bad_usage_and_unreadable_directories_exit_2() {
    let output = Command::new(env!("CARGO_BIN_EXE_codemode-conformance")).arg("--bogus").output().unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(
        String::from_utf8(output.stderr)
            .unwrap()
            .starts_with("codemode-conformance: unknown argument \"--bogus\"")
    );
    let output = Command::new(env!("CARGO_BIN_EXE_codemode-conformance"))
        .args(["--transcripts", "/nonexistent"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(
        String::from_utf8(output.stderr)
            .unwrap()
            .starts_with("codemode-conformance: /nonexistent: cannot read the directory")
    );
}

#[test]
fn an_expected_failure_that_passes_fails_the_run() {
    let list = std::env::temp_dir().join(format!("codemode-expected-{}.json", std::process::id()));
    std::fs::write(&list, r#"[{"transcript":"names-fetch.json","reason":"an engine text"}]"#).unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_codemode-conformance"))
        .args(["--expected-failures", &list.display().to_string()])
        .output()
        .unwrap();
    let stdout = String::from_utf8(output.stdout).unwrap();
    assert_eq!(output.status.code(), Some(1));
    assert!(
        stdout.contains("FAIL names-fetch.json: a provider named fetch breaks only the program\n  listed as an expected failure (an engine text) but it passes: remove it from the list"),
        "{stdout}"
    );
    let _ = std::fs::remove_file(&list);
}
