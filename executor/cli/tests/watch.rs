//! Watching `codemode run`: the `--trace` lines on stderr, `--output human|json`, the
//! waiting line, and Ctrl-C ending a run with its logs and exit code 130.

use std::io::{BufRead, BufReader, Read};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A directory with `program.js` holding `code` and `fixture.json` answering `store.get`.
fn files(code: &str) -> PathBuf {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("codemode-watch-{}-{n}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("program.js"), code).unwrap();
    std::fs::write(dir.join("fixture.json"), r#"{"store.get": {"id": 7, "name": "Ada"}}"#).unwrap();
    dir
}

/// `codemode run program.js --fixture fixture.json ARGS`: exit code, stdout, stderr.
fn run(code: &str, args: &[&str]) -> (i32, String, String) {
    let dir = files(code);
    let output = Command::new(env!("CARGO_BIN_EXE_codemode"))
        .arg("run")
        .arg(dir.join("program.js"))
        .arg("--fixture")
        .arg(dir.join("fixture.json"))
        .args(args)
        .output()
        .expect("codemode runs");
    let _ = std::fs::remove_dir_all(&dir);
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8(output.stdout).unwrap(),
        String::from_utf8(output.stderr).unwrap(),
    )
}

/// Durations (`1.2 ms`) written as `N ms`, so lines compare exactly.
fn timeless(text: &str) -> String {
    text.lines()
        .map(|line| {
            let words: Vec<&str> = line.split(' ').collect();
            let mut out = Vec::new();
            for (i, word) in words.iter().enumerate() {
                let is_duration = words.get(i + 1) == Some(&"ms")
                    && word.split_once('.').is_some_and(|(a, b)| {
                        !a.is_empty() && a.bytes().all(|c| c.is_ascii_digit()) && b.len() == 1
                    });
                out.push(if is_duration { "N" } else { word });
            }
            out.join(" ") + "\n"
        })
        .collect()
}

const PROGRAM: &str = r#"async () => {
  console.log("looking up", 7);
  const order = await store.get({ id: 7, note: "x".repeat(100) });
  try { await store.missing(1, 2); } catch (e) { console.warn("missing:", e.message); }
  return { name: order.name, ids: [order.id] };
}"#;

#[test]
fn trace_prints_each_call_and_log_line_on_stderr_as_it_happens() {
    let (code, stdout, stderr) = run(PROGRAM, &["--trace"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        stdout,
        r#"{"result":{"name":"Ada","ids":[7]},"logs":["looking up 7","[warn] missing: Tool \"missing\" not found"]}"#
            .to_owned()
            + "\n"
    );
    assert_eq!(timeless(&stderr), expected_trace());
    // -v is the same, and without it stderr stays quiet.
    assert_eq!(timeless(&run(PROGRAM, &["-v"]).2), timeless(&stderr));
    assert_eq!(run(PROGRAM, &[]).2, "");
}

/// What `--trace` prints for `PROGRAM`, durations written as `N ms`; the arguments are
/// cut to 80 characters.
fn expected_trace() -> String {
    let args = format!(r#"{{"id":7,"note":"{}…"#, "x".repeat(63));
    assert_eq!(args.chars().count(), 80);
    format!(
        "log: looking up 7
→ store.get({args})
← store.get N ms ok
→ store.missing(1,2)
← store.missing N ms error: Tool \"missing\" not found
log: [warn] missing: Tool \"missing\" not found
"
    )
}

#[test]
fn trace_shows_the_calls_and_logs_of_a_worker_process_as_they_happen() {
    let (code, _, stderr) = run(PROGRAM, &["--trace", "--isolation", "process", "--confinement", "off"]);
    assert_eq!(code, 0, "{stderr}");
    // The same lines in the same order as in-process: `log: looking up 7` before the call.
    assert_eq!(timeless(&stderr), expected_trace());
}

#[test]
fn output_human_prints_the_logs_the_result_pretty_and_the_error_plainly() {
    let (code, stdout, stderr) = run(PROGRAM, &["--output", "human"]);
    assert_eq!((code, stderr.as_str()), (0, ""));
    assert_eq!(
        stdout,
        r#"log: looking up 7
log: [warn] missing: Tool "missing" not found
result: {
  "name": "Ada",
  "ids": [
    7
  ]
}
"#
    );
    // With --trace the logs were on stderr already.
    let (_, traced, _) = run(PROGRAM, &["--output", "human", "--trace"]);
    assert!(traced.starts_with("result: {\n"), "{traced}");
    let (code, stdout, stderr) =
        run("async () => {\n  console.log('before');\n  throw new Error('boom');\n}", &["--output", "human"]);
    assert_eq!((code, stderr.as_str()), (1, ""));
    assert_eq!(stdout, "log: before\nerror (thrown): boom (at line 3, column 9)\n");
    let (code, stdout, _) = run("async () => { console.log('x') }", &["--output", "human"]);
    assert_eq!((code, stdout.as_str()), (0, "log: x\nresult: undefined\n"));
}

#[test]
fn output_json_is_the_default_off_a_terminal() {
    let (code, json, stderr) = run(PROGRAM, &["--output", "json"]);
    assert_eq!((code, stderr.as_str()), (0, ""));
    assert_eq!(run(PROGRAM, &[]).1, json);
    let (code, stdout, stderr) = run("async () => { throw new Error('boom') }", &["--output", "json"]);
    assert_eq!(code, 1);
    assert_eq!(
        stdout,
        r#"{"error":"boom","kind":"thrown","location":{"line":1,"column":21},"logs":[]}"#.to_owned() + "\n"
    );
    assert_eq!(stderr, "codemode: thrown error: boom (at line 1, column 21)\n");
}

#[test]
fn a_run_without_progress_says_what_it_waits_on() {
    let (code, _, stderr) = run(
        "async () => { await new Promise(() => {}) }",
        &["--waiting-after-ms", "200", "--timeout-ms", "1000"],
    );
    assert_eq!(code, 1);
    assert_eq!(
        stderr,
        "codemode: no progress for 0.2 s: waiting on a promise nothing will settle; the run ends at its timeout
codemode: timeout error: Execution timed out after 1000 ms.
"
    );
    let (_, _, stderr) = run(
        "async () => { setTimeout(() => {}, 5000); await new Promise((r) => setTimeout(r, 600)); return 1 }",
        &["--waiting-after-ms", "200"],
    );
    assert_eq!(stderr, "codemode: no progress for 0.2 s: waiting on 2 timers\n");
}

#[test]
fn ctrl_c_ends_the_run_with_its_logs_the_interrupted_text_and_exit_code_130() {
    ctrl_c_keeps_the_logs_heard(&[]);
}

/// In a worker process the logs heard live are kept the same way.
#[test]
fn ctrl_c_keeps_the_logs_of_a_worker_process() {
    ctrl_c_keeps_the_logs_heard(&["--isolation", "process", "--confinement", "off"]);
}

fn ctrl_c_keeps_the_logs_heard(args: &[&str]) {
    let dir = files(r#"async () => { console.log("a"); await new Promise(() => {}) }"#);
    let mut child = Command::new(env!("CARGO_BIN_EXE_codemode"))
        .arg("run")
        .arg(dir.join("program.js"))
        .args(["--trace", "--output", "json"])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("codemode runs");
    // Interrupt once the program has logged: it then waits for ever.
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut first = String::new();
    stderr.read_line(&mut first).unwrap();
    assert_eq!(first, "log: a\n");
    let started = Instant::now();
    // SAFETY: kill(2) on our own child's pid, which has not been waited for.
    assert_eq!(unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) }, 0);
    let status = child.wait().unwrap();
    assert!(started.elapsed() < Duration::from_secs(5), "Ctrl-C ended the run at once");
    let mut stdout = String::new();
    child.stdout.take().unwrap().read_to_string(&mut stdout).unwrap();
    let mut rest = String::new();
    stderr.read_to_string(&mut rest).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(status.code(), Some(130));
    assert_eq!(
        stdout,
        r#"{"error":"Execution was interrupted before it ended; the logs are the ones written until then.","kind":"cancelled","logs":["a"]}"#
            .to_owned()
            + "\n"
    );
    assert_eq!(
        rest,
        "codemode: Execution was interrupted before it ended; the logs are the ones written until then.\n"
    );
}
