//! Cargo run from inside a program cargo started (xtask, a test, a bench): a clean
//! environment, and the `codemode` binary of the caller's profile.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

/// Whether `name` is a variable cargo sets for a program it runs (`cargo run`, a test),
/// not one the user set. A cargo started with them rebuilds: build scripts that watch one
/// (ring's watches `CARGO_MANIFEST_DIR` and `CARGO_PKG_*`) see it changed, and the user's
/// next build without them reruns them back. What the user set stays (`CARGO_HOME`,
/// `CARGO_TARGET_DIR`, `RUSTFLAGS`, `RUSTC_WRAPPER`, `RUSTY_V8_*`, rustup's choice of
/// toolchain).
pub fn set_by_cargo(name: &str) -> bool {
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

/// `cargo` with none of the variables [`set_by_cargo`] names, so it sees the environment
/// the user's own cargo commands see.
pub fn cargo_command(cargo: &str) -> Command {
    let mut command = Command::new(cargo);
    for (name, _) in std::env::vars_os() {
        if name.to_str().is_some_and(set_by_cargo) {
            command.env_remove(name);
        }
    }
    command
}

/// The `codemode` binary (package `codemode-cli`) with the CLI's `features`, in the profile
/// of the running test or bench, built by a nested cargo the first time it is asked for
/// (so it is never stale): a test or bench cannot name another package's binary.
pub fn codemode_binary(features: &[&str]) -> Result<PathBuf, String> {
    static BUILT: Mutex<Vec<(Vec<String>, PathBuf)>> = Mutex::new(Vec::new());
    let key: Vec<String> = features.iter().map(|f| (*f).to_owned()).collect();
    let mut built = BUILT.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some((_, path)) = built.iter().find(|(k, _)| *k == key) {
        return Ok(path.clone());
    }
    let exe = std::env::current_exe().map_err(|e| format!("cannot find the running program: {e}"))?;
    // target/<profile>/deps/<test>: the profile is two levels up.
    let release = exe.ancestors().nth(2).and_then(Path::file_name).is_some_and(|name| name == "release");
    let mut command = cargo_command(env!("CARGO"));
    command.args(["build", "--quiet", "-p", "codemode-cli", "--bin", "codemode", "--message-format=json"]);
    if !features.is_empty() {
        command.args(["--features", &features.join(",")]);
    }
    if release {
        command.arg("--release");
    }
    let output = command.output().map_err(|e| format!("cannot run cargo: {e}"))?;
    if !output.status.success() {
        return Err(format!(
            "building the codemode binary failed:\n{}",
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    let path = String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|message| message["target"]["name"] == "codemode")
        .find_map(|message| message["executable"].as_str().map(PathBuf::from))
        .ok_or_else(|| "cargo built no codemode executable".to_owned())?;
    built.push((key, path.clone()));
    Ok(path)
}
