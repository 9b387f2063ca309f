//! What xtask's steps and its tests share: a cargo command that does not inherit the
//! variables cargo set for the process running it.

use std::process::Command;

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

/// `cargo` (the one running this program) with none of the variables [`set_by_cargo`]
/// names, so it sees the environment the user's own cargo commands see.
pub fn cargo_command(cargo: &str) -> Command {
    let mut command = Command::new(cargo);
    for (name, _) in std::env::vars_os() {
        if name.to_str().is_some_and(set_by_cargo) {
            command.env_remove(name);
        }
    }
    command
}
