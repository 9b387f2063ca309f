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

/// Whether cargo set `name` for this process (not the user): a nested cargo seeing it
/// reruns build scripts that watch it (ring's), and the user's next build reruns them back.
pub(crate) fn set_by_cargo(name: &str) -> bool {
    ["CARGO_PKG_", "CARGO_BIN_EXE_"].iter().any(|prefix| name.starts_with(prefix))
        || [
            "CARGO",
            "CARGO_MANIFEST_DIR",
            "CARGO_MANIFEST_PATH",
            "CARGO_MANIFEST_LINKS",
            "CARGO_CRATE_NAME",
            "CARGO_BIN_NAME",
            "CARGO_PRIMARY_PACKAGE",
            "CARGO_TARGET_TMPDIR",
            "CARGO_RUSTC_CURRENT_DIR",
            "OUT_DIR",
        ]
        .contains(&name)
}

/// The `codemode` binary (package `codemode-cli`) in this bench's profile, built here once:
/// a bench cannot name another package's binary, and process isolation and the daemon need one.
pub(crate) fn codemode_binary() -> std::path::PathBuf {
    static BINARY: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    BINARY
        .get_or_init(|| {
            let exe = std::env::current_exe().expect("the bench's path");
            let release =
                exe.ancestors().nth(2).and_then(std::path::Path::file_name).is_some_and(|n| n == "release");
            let mut cargo = std::process::Command::new(env!("CARGO"));
            for (name, _) in std::env::vars_os() {
                if name.to_str().is_some_and(set_by_cargo) {
                    cargo.env_remove(name);
                }
            }
            cargo.args([
                "build",
                "--quiet",
                "-p",
                "codemode-cli",
                "--bin",
                "codemode",
                "--message-format=json",
            ]);
            if release {
                cargo.arg("--release");
            }
            let output = cargo.output().expect("cargo runs");
            assert!(
                output.status.success(),
                "building codemode failed:\n{}",
                String::from_utf8_lossy(&output.stderr)
            );
            String::from_utf8_lossy(&output.stdout)
                .lines()
                .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
                .filter(|message| message["target"]["name"] == "codemode")
                .find_map(|message| message["executable"].as_str().map(std::path::PathBuf::from))
                .expect("cargo built the codemode executable")
        })
        .clone()
}
