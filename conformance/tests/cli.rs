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
        String::from_utf8(output.stderr).unwrap().starts_with("error: unexpected argument '--bogus' found\n")
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
fn in_process_the_engine_is_the_one_named_and_one_this_build_lacks_is_refused() {
    let built_in: Vec<&str> = codemode_executor::EngineKind::BUILT_IN.iter().map(|e| e.name()).collect();
    let output = Command::new(env!("CARGO_BIN_EXE_codemode-conformance"))
        .args(["--engine", "spidermonkey"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert_eq!(
        String::from_utf8(output.stderr).unwrap(),
        format!("codemode-conformance: unknown engine \"spidermonkey\"; built in: {}\n", built_in.join(", "))
    );
    if !cfg!(feature = "v8") {
        let output = Command::new(env!("CARGO_BIN_EXE_codemode-conformance"))
            .args(["--engine", "v8"])
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(2));
        assert_eq!(
            String::from_utf8(output.stderr).unwrap(),
            "codemode-conformance: this build has no V8 engine: build with `--features v8`; built in: quickjs\n"
        );
    }
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
        stdout.contains(&format!("FAIL names-fetch.json: a provider named fetch breaks only the program\n  unexpectedly passed; remove it from {} (listed as an expected failure: an engine text)\n", list.display())),
        "{stdout}"
    );
    let _ = std::fs::remove_file(&list);
}

/// The `codemode` binary of this build.
fn codemode_binary() -> std::path::PathBuf {
    codemode_devtools::codemode_binary(&[]).unwrap()
}

/// Starts `codemode serve` with `args`, waits until `ready` says it listens.
fn daemon(args: &[&str], ready: impl Fn() -> bool) -> std::process::Child {
    let child = Command::new(codemode_binary())
        .arg("serve")
        .args(args)
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let started = std::time::Instant::now();
    while !ready() {
        assert!(started.elapsed() < std::time::Duration::from_secs(10), "the daemon did not start");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    child
}

fn summary(output: &std::process::Output) -> String {
    String::from_utf8_lossy(&output.stdout).lines().last().unwrap_or_default().to_owned()
}

/// Two transcripts of the suite (one with calls, one with an engine-specific outcome) in
/// a directory of their own: the matrix runs the whole suite behind daemons already.
fn two_transcripts(dir: &std::path::Path) -> String {
    let transcripts = dir.join("transcripts");
    std::fs::create_dir_all(&transcripts).unwrap();
    for name in ["undeclared-tool.json", "names-fetch.json"] {
        std::fs::copy(
            concat!(env!("CARGO_MANIFEST_DIR"), "/transcripts/").to_owned() + name,
            transcripts.join(name),
        )
        .unwrap();
    }
    transcripts.display().to_string()
}

#[test]
fn connects_to_a_daemon_on_a_unix_socket_and_on_tcp_with_a_token() {
    let dir = std::env::temp_dir().join(format!("codemode-conformance-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let transcripts = two_transcripts(&dir);
    let socket = dir.join("daemon.sock");
    let listen = format!("unix:{}", socket.display());
    let mut unix = daemon(&["--listen", &listen], || socket.exists());
    let output = Command::new(env!("CARGO_BIN_EXE_codemode-conformance"))
        .args(["--connect", &listen, "--transcripts", &transcripts])
        .output()
        .unwrap();
    let _ = unix.kill();
    let _ = unix.wait();
    assert_eq!(output.status.code(), Some(0), "{}", String::from_utf8_lossy(&output.stdout));
    assert_eq!(summary(&output), "2 passed, 0 failed");

    let token = dir.join("token");
    std::fs::write(&token, "conformance-token\n").unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let address = format!("tcp:127.0.0.1:{port}");
    let token_arg = token.display().to_string();
    let mut tcp = daemon(&["--listen", &address, "--token-file", &token_arg], || {
        std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
    });
    let output = Command::new(env!("CARGO_BIN_EXE_codemode-conformance"))
        .args(["--connect", &address, "--token-file", &token_arg, "--transcripts", &transcripts])
        .output()
        .unwrap();
    let refused = Command::new(env!("CARGO_BIN_EXE_codemode-conformance"))
        .args(["--connect", &address])
        .output()
        .unwrap();
    let _ = tcp.kill();
    let _ = tcp.wait();
    assert_eq!(output.status.code(), Some(0), "{}", String::from_utf8_lossy(&output.stdout));
    assert_eq!(summary(&output), "2 passed, 0 failed");
    assert_eq!(refused.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&refused.stderr),
        "codemode-conformance: the daemon refused the connection: this daemon requires a token and the hello carried none; pass the token the daemon was started with\n"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn help_and_version_say_what_it_takes_and_exit_0() {
    let output = Command::new(env!("CARGO_BIN_EXE_codemode-conformance")).arg("--help").output().unwrap();
    let stdout = String::from_utf8(output.stdout).unwrap();
    assert_eq!(output.status.code(), Some(0));
    assert!(stdout.contains("Usage: codemode-conformance [OPTIONS]\n"), "{stdout}");
    for flag in [
        "--transcripts <DIR>",
        "--executor-cmd <CMD>",
        "--connect <ADDRESS>",
        "--token-file <FILE>",
        "--engine <NAME>",
        "--expected-failures <FILE>",
        "--json",
    ] {
        assert!(stdout.contains(&format!("      {flag} ")), "{flag}: {stdout}");
    }
    assert!(stdout.ends_with(
        "Exit status:
  0  every case passed
  1  a case failed
  2  bad usage, an unreadable transcript (the file is named), or an executor that cannot be reached

Examples:
  codemode-conformance
  codemode-conformance --executor-cmd \"codemode stdio --engine quickjs\"
  codemode-conformance --transcripts my-cases/ --transcripts conformance/transcripts
  codemode-conformance --connect tcp:127.0.0.1:7700 --token-file token
"
    ));
    let output = Command::new(env!("CARGO_BIN_EXE_codemode-conformance")).arg("--version").output().unwrap();
    assert_eq!(output.status.code(), Some(0));
    assert_eq!(
        String::from_utf8(output.stdout).unwrap(),
        format!("codemode-conformance {}\n", env!("CARGO_PKG_VERSION"))
    );
}

#[test]
fn the_executor_command_and_a_daemon_exclude_each_other_and_a_repeated_flag_keeps_its_last_value() {
    let output = Command::new(env!("CARGO_BIN_EXE_codemode-conformance"))
        .args(["--executor-cmd", "codemode stdio", "--connect", "unix:/nonexistent.sock"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8(output.stderr).unwrap().starts_with(
        "error: the argument '--executor-cmd <CMD>' cannot be used with '--connect <ADDRESS>'\n"
    ));
    let output = Command::new(env!("CARGO_BIN_EXE_codemode-conformance"))
        .args(["--engine", "spidermonkey", "--engine", "quickjs", "--transcripts", "/nonexistent"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(
        String::from_utf8(output.stderr)
            .unwrap()
            .starts_with("codemode-conformance: /nonexistent: cannot read the directory")
    );
}
