//! Workloads the benches share: calls in a loop and a megabyte of bytes both ways.

#![allow(dead_code)]

use codemode_executor::Request;
use codemode_protocol::{Bytes, ProviderDescriptor, ToolCall, parse_dispatch_arguments_as, result_envelope};

/// `n` sequential tool calls in one run, each answered at once.
pub(crate) fn calls(n: usize) -> Request {
    let code = format!(
        "async () => {{ let sum = 0; for (let i = 0; i < {n}; i++) sum += await store.one(i); return sum }}"
    );
    Request::new(code)
        .provider(ProviderDescriptor::new("store", ["one"]))
        .dispatch(|_: ToolCall| async { r#"{"result":1}"#.to_owned() })
}

/// [`calls`], after the program waits `pause_ms` on a timer.
pub(crate) fn calls_after(n: usize, pause_ms: u64) -> Request {
    let code = format!(
        "async () => {{ await new Promise((done) => setTimeout(done, {pause_ms})); let sum = 0; for (let i = 0; i < {n}; i++) sum += await store.one(i); return sum }}"
    );
    Request::new(code)
        .provider(ProviderDescriptor::new("store", ["one"]))
        .dispatch(|_: ToolCall| async { r#"{"result":1}"#.to_owned() })
}

/// A 1 MiB `Uint8Array` sent to dispatch and echoed back.
pub(crate) fn echo_bytes() -> Request {
    Request::new(
        "async () => { const sent = new Uint8Array(1 << 20).fill(7); const back = await store.echo(sent); return back.length }",
    )
    .provider(ProviderDescriptor::new("store", ["echo"]))
    .dispatch(|call: ToolCall| async move {
        let (bytes,): (Bytes,) = parse_dispatch_arguments_as(&call.args_json).unwrap_or_default();
        result_envelope(&bytes).unwrap_or_default()
    })
}

/// The `codemode` binary (package `codemode-cli`) in this bench's profile: process
/// isolation and the daemon need one.
pub(crate) fn codemode_binary() -> std::path::PathBuf {
    codemode_binary_with(&[])
}

/// [`codemode_binary`] with the CLI's `features` (`["v8"]` for a worker that runs V8).
pub(crate) fn codemode_binary_with(features: &[&str]) -> std::path::PathBuf {
    codemode_devtools::codemode_binary(features).expect("the codemode binary builds")
}

/// `codemode serve` in a process of its own, as an operator runs it; killed when dropped.
pub(crate) struct Served(std::process::Child);

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A daemon listening on a Unix socket named for `bench`, and the socket's path.
pub(crate) fn serve(bench: &str) -> (Served, std::path::PathBuf) {
    serve_with(bench, &[])
}

/// [`serve`] with more of `codemode serve`'s flags.
pub(crate) fn serve_with(bench: &str, flags: &[&str]) -> (Served, std::path::PathBuf) {
    let path = std::env::temp_dir().join(format!("codemode-bench-{bench}-{}.sock", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let child = std::process::Command::new(codemode_binary())
        .args(["serve", "--listen", &format!("unix:{}", path.display())])
        .args(flags)
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("codemode serve");
    (Served(child), path)
}

/// A client of the daemon at `path`, once it listens (within 5 s).
pub(crate) async fn connect(path: &std::path::Path) -> codemode_executor::RemoteExecutor {
    for _ in 0..250 {
        if let Ok(remote) =
            codemode_executor::RemoteExecutor::connect(&format!("unix:{}", path.display()), None).await
        {
            return remote;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    panic!("the daemon did not start within 5 s")
}

/// A `codemode stdio` worker spoken to directly, started as the pool starts one (an
/// environment of the level's variables only), its hello answered; killed when dropped.
/// Each bench adds the runs it measures.
pub(crate) struct RawWorker {
    pub(crate) child: std::process::Child,
    stdin: std::process::ChildStdin,
    stdout: std::io::BufReader<std::process::ChildStdout>,
}

impl RawWorker {
    /// Start `binary` with `args`, in an environment of `env` only, and say hello.
    pub(crate) fn spawn(binary: &std::path::Path, args: &[&str], env: &[(&str, &str)]) -> RawWorker {
        use std::io::Write;
        let mut command = std::process::Command::new(binary);
        // stderr to /dev/null, as the pool's bounded pipe would take it: a confined worker may
        // write no file (RLIMIT_FSIZE 0), so inheriting the bench's redirected stderr kills it.
        command
            .args(args)
            .env_clear()
            .envs(env.iter().copied())
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null());
        let mut child = command.spawn().unwrap();
        let mut stdin = child.stdin.take().unwrap();
        let stdout = std::io::BufReader::new(child.stdout.take().unwrap());
        stdin.write_all(b"{\"type\":\"hello\",\"protocol\":\"codemode\",\"version\":1}\n").unwrap();
        let mut worker = RawWorker { child, stdin, stdout };
        let hello = worker.line();
        assert_eq!(hello["type"], "hello", "{hello}");
        worker
    }

    /// One message, in one write as a host sends a frame (a `writeln!` would write its
    /// pieces one by one, and the worker would wake for each).
    pub(crate) fn send(&mut self, message: &str) {
        use std::io::Write;
        self.stdin.write_all(format!("{message}\n").as_bytes()).unwrap();
    }

    pub(crate) fn line(&mut self) -> serde_json::Value {
        use std::io::BufRead;
        let mut line = String::new();
        self.stdout.read_line(&mut line).unwrap();
        serde_json::from_str(&line).unwrap_or_else(|_| panic!("not a message: {line:?}"))
    }
}

impl Drop for RawWorker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
