//! The MCP tests' npm peers (`executor/tests/mcp`, for the executor's and the CLI's MCP
//! tests): installed with `npm ci` when missing, once per test binary and safely beside
//! other binaries doing the same.

#![allow(dead_code, unreachable_pub)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// What to install when Node.js is missing.
const INSTALL_NODE: &str = "the MCP tests run real MCP servers on Node.js: install Node.js 20 or later \
     with npm (for example `apt-get install nodejs npm`) so that `node` and `npm` are on PATH";

/// The directory holding the peers' package.json and package-lock.json.
pub fn peers_dir() -> PathBuf {
    // This file is compiled into the executor's tests and into the CLI's (`executor/cli`).
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let executor = if manifest.ends_with("cli") { manifest.parent().unwrap_or(manifest) } else { manifest };
    executor.join("tests").join("mcp")
}

/// Files whose presence means the install finished (npm writes `.package-lock.json` last).
fn installed(dir: &Path) -> bool {
    let modules = dir.join("node_modules");
    [
        ".package-lock.json",
        "@modelcontextprotocol/server-everything/dist/index.js",
        "@modelcontextprotocol/server-memory/dist/index.js",
        "@modelcontextprotocol/sdk/package.json",
    ]
    .iter()
    .all(|file| modules.join(file).exists())
}

fn require(tool: &str) {
    match Command::new(tool).arg("--version").output() {
        Ok(output) if output.status.success() => {}
        Ok(output) => panic!("`{tool} --version` failed ({}): {INSTALL_NODE}", output.status),
        Err(error) => panic!("`{tool}` could not run ({error}): {INSTALL_NODE}"),
    }
}

/// The peers' directory with `node_modules` installed; panics saying what to install
/// when `node` or `npm` is missing.
///
/// `npm ci` runs in a staging directory under the target directory, and its
/// `node_modules` is renamed into place: a rename is atomic, so a test binary running
/// the same install at the same moment either wins or finds the other's complete tree.
pub fn peers() -> &'static Path {
    static PEERS: OnceLock<PathBuf> = OnceLock::new();
    PEERS.get_or_init(|| {
        require("node");
        let dir = peers_dir();
        if installed(&dir) {
            return dir;
        }
        require("npm");
        let staging =
            Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("mcp-peers-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&staging);
        std::fs::create_dir_all(&staging).expect("a staging directory for npm ci");
        for file in ["package.json", "package-lock.json"] {
            std::fs::copy(dir.join(file), staging.join(file)).expect("the peers' npm manifest");
        }
        let status = Command::new("npm")
            .args(["ci", "--no-audit", "--no-fund"])
            .current_dir(&staging)
            .status()
            .unwrap_or_else(|error| panic!("npm ci could not run ({error}): {INSTALL_NODE}"));
        assert!(status.success(), "npm ci in {} failed ({status})", staging.display());
        let renamed = std::fs::rename(staging.join("node_modules"), dir.join("node_modules"));
        let _ = std::fs::remove_dir_all(&staging);
        assert!(
            installed(&dir),
            "{} is incomplete and could not be replaced ({renamed:?}): delete it and run the tests again",
            dir.join("node_modules").display()
        );
        dir
    })
}

/// `node` with `script` (a path under `node_modules`) and `args`, as a program and its arguments.
pub fn node_script(script: &str) -> PathBuf {
    peers().join("node_modules").join(script)
}
