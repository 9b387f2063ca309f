//! `codemode run --ask` at a real terminal (a pseudo-terminal on its stdin and stderr):
//! approve, deny with a reason, and no terminal at all; `--deny` refuses without asking.

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Deletes order 7 through the fixture's `store.delete`, reporting a refusal as its result.
const PROGRAM: &str = "async () => { try { return await store.delete(7) } catch (e) { return e.message } }";

/// The program and a fixture answering `store.delete`, in a fresh directory.
fn files() -> (std::path::PathBuf, std::path::PathBuf) {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("codemode-ask-{}-{n}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (program, fixture) = (dir.join("delete.js"), dir.join("store.json"));
    std::fs::write(&program, PROGRAM).unwrap();
    std::fs::write(&fixture, r#"{"store.delete": "deleted"}"#).unwrap();
    (program, fixture)
}

fn command(extra: &[&str]) -> Command {
    let (program, fixture) = files();
    let mut command = Command::new(env!("CARGO_BIN_EXE_codemode"));
    command.arg("run").arg(program).arg("--fixture").arg(fixture).args(extra);
    command
}

/// Run with a pseudo-terminal on stdin and stderr; answer `line` once asked, `pause`
/// later. What the terminal showed and what stdout printed.
fn at_a_terminal(extra: &[&str], line: &str, pause: Duration) -> (String, String) {
    let pty = nix::pty::openpty(None, None).unwrap();
    let slave = |fd: &OwnedFd| Stdio::from(fd.try_clone().unwrap());
    let child = command(extra)
        .stdin(slave(&pty.slave))
        .stderr(slave(&pty.slave))
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    drop(pty.slave);
    let mut terminal = File::from(pty.master);
    let mut shown = Vec::new();
    let started = Instant::now();
    while !String::from_utf8_lossy(&shown).contains("Approve?") {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "never asked: {}",
            String::from_utf8_lossy(&shown)
        );
        let mut buffer = [0; 1024];
        let n = terminal.read(&mut buffer).unwrap();
        shown.extend_from_slice(&buffer[..n]);
    }
    std::thread::sleep(pause);
    terminal.write_all(format!("{line}\n").as_bytes()).unwrap();
    let output = child.wait_with_output().unwrap();
    (String::from_utf8_lossy(&shown).replace("\r\n", "\n"), String::from_utf8(output.stdout).unwrap())
}

#[test]
fn y_at_the_terminal_approves_the_call() {
    let (shown, stdout) = at_a_terminal(&["--ask", "store.delete"], "y", Duration::ZERO);
    assert_eq!(
        shown,
        "codemode: the program calls store.delete with\n[\n  7\n]\nApprove? y to run it, n [REASON] to refuse it: "
    );
    assert_eq!(stdout, "{\"result\":\"deleted\",\"logs\":[]}\n");
}

#[test]
fn n_with_a_reason_denies_it_and_the_program_catches_the_reason() {
    let (_, stdout) = at_a_terminal(&["--ask", "store.*"], "n too risky", Duration::ZERO);
    assert_eq!(stdout, "{\"result\":\"The call store.delete was denied: too risky\",\"logs\":[]}\n");
}

#[test]
fn without_a_terminal_an_asked_call_is_denied_saying_so() {
    let output = command(&["--ask", "store.delete"]).stdin(Stdio::null()).output().unwrap();
    assert_eq!(
        String::from_utf8(output.stdout).unwrap(),
        "{\"result\":\"The call store.delete was denied: approval was required and there was no terminal to ask on (codemode run --ask reads the answer from a terminal on stdin)\",\"logs\":[]}\n"
    );
}

#[test]
fn deny_refuses_without_asking_and_a_bad_pattern_is_bad_usage() {
    let output = command(&["--deny", "store.delete", "--ask", "*"]).stdin(Stdio::null()).output().unwrap();
    assert_eq!(
        String::from_utf8(output.stdout).unwrap(),
        "{\"result\":\"The call store.delete was denied: refused by --deny store.delete\",\"logs\":[]}\n"
    );
    let output = command(&["--ask", "store."]).output().unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert_eq!(
        String::from_utf8(output.stderr).unwrap(),
        "codemode: \"store.\" is not a tool pattern: write PROVIDER.TOOL, where either part may be *, such as db.exec or db.*\n"
    );
}

/// The engines this binary has.
fn engines() -> Vec<&'static str> {
    if cfg!(feature = "v8") { vec!["quickjs", "v8"] } else { vec!["quickjs"] }
}

/// Under process isolation the question is asked here, and the worker's deadline pauses
/// while it waits: `--timeout-ms 300`, answered after a second, still a result.
#[test]
fn under_process_isolation_the_time_asked_is_not_charged_to_the_deadline() {
    for engine in engines() {
        let extra =
            ["--ask", "store.delete", "--isolation", "process", "--timeout-ms", "300", "--engine", engine];
        let (_, stdout) = at_a_terminal(&extra, "y", Duration::from_secs(1));
        assert_eq!(stdout, "{\"result\":\"deleted\",\"logs\":[]}\n", "{engine}");
    }
}
