//! `cargo xtask`: the project's automation. `ci` runs every check CI runs; `schema`
//! writes the wire types' JSON Schemas; `quickjs-patches` checks and maintains the QuickJS
//! fork's patch series; `bench` runs the benchmarks.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

const USAGE: &str = "usage: cargo xtask <ci | schema [--check] | quickjs-patches [<option>] | bench>
  ci              cargo fmt --check, clippy with warnings denied, every test, the generated-file drift
                  check, the QuickJS patch series check, the Kubernetes manifests, the conformance suite
                  against the Node peer, the mcp feature's tests, each feature combination that matters,
                  cargo package, the minimum Rust version
  schema          write the generated files: protocol/schema/*.json, conformance/transcript.schema.json, transcript-v2.schema.json,
                  conformance/peers/node/codec.generated.js
  schema --check  fail when protocol/schema/ differs from the wire types
  quickjs-patches [--check]
                  fail, naming each file and its first differing line, when vendor/rquickjs-sys
                  differs from its upstream/ with its patches/ applied in order (git apply)
  quickjs-patches --write
                  rewrite the vendored files of vendor/rquickjs-sys from upstream/ + patches/
  quickjs-patches --unpack DIR
                  DIR: a git repository of upstream/, then one commit per patch; run again after
                  fixing a patch that does not apply, to apply the rest
  quickjs-patches --pack DIR
                  patches/ from DIR's commits (checked to rebuild DIR's tree), then --write
  bench           run the benchmarks";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let result = match args.as_slice() {
        ["ci"] => ci(),
        ["schema"] => schema(false),
        ["schema", "--check"] => schema(true),
        ["quickjs-patches"] | ["quickjs-patches", "--check"] => quickjs_patches_check(),
        ["quickjs-patches", "--write"] => quickjs_patches_write(),
        ["quickjs-patches", "--unpack", dir] => {
            xtask::quickjs_patches::unpack(&quickjs_dir(), Path::new(dir)).map(|()| {
                eprintln!(
                    "xtask: {dir}: upstream/, then one commit per patch. Change the series there with git \
                     (`git rebase -i` to edit a section's patch, a new commit for a new one, its subject the \
                     patch's file name, its body the header), then `cargo xtask quickjs-patches --pack {dir}`."
                )
            })
        }
        ["quickjs-patches", "--pack", dir] => {
            xtask::quickjs_patches::pack(&quickjs_dir(), Path::new(dir)).and_then(|(written, changed)| {
                eprintln!("xtask: wrote vendor/rquickjs-sys/patches/: {}", written.join(", "));
                for change in &changed {
                    eprintln!("xtask: vendor/rquickjs-sys: {change}");
                }
                quickjs_patches_check()
            })
        }
        ["bench"] => bench(),
        _ => {
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("xtask: {message}");
            ExitCode::FAILURE
        }
    }
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("xtask lives in the workspace").to_path_buf()
}

/// The vendored QuickJS fork: its files, `upstream/` and `patches/`.
fn quickjs_dir() -> PathBuf {
    root().join("vendor/rquickjs-sys")
}

/// The vendored QuickJS is its pristine upstream with the patch series applied, byte for
/// byte (vendor/rquickjs-sys/PATCHES.md).
fn quickjs_patches_check() -> Result<(), String> {
    eprintln!("xtask: vendor/rquickjs-sys against its upstream/ with its patches/ applied");
    xtask::quickjs_patches::check(&quickjs_dir())
}

fn quickjs_patches_write() -> Result<(), String> {
    let changed = xtask::quickjs_patches::write(&quickjs_dir())?;
    for change in &changed {
        eprintln!("xtask: vendor/rquickjs-sys: {change}");
    }
    if changed.is_empty() {
        eprintln!("xtask: vendor/rquickjs-sys is already upstream/ + patches/");
    }
    Ok(())
}

/// Our crates: the vendored QuickJS fork is a member only to be packaged with them, and
/// keeps its upstream's formatting and lints.
const OURS: [&str; 6] = [
    "codemode-protocol",
    "codemode-executor",
    "codemode-cli",
    "codemode-conformance",
    "xtask",
    "codemode-devtools",
];
const NOT_OURS: [&str; 4] = ["--exclude", "codemode-rquickjs-sys", "--exclude", "codemode-rquickjs-core"];

fn cargo(args: &[&str]) -> Result<(), String> {
    eprintln!("xtask: cargo {}", args.join(" "));
    let status = xtask::cargo_command(env!("CARGO"))
        .args(args)
        .current_dir(root())
        .status()
        .map_err(|e| format!("could not run cargo: {e}"))?;
    if status.success() { Ok(()) } else { Err(format!("`cargo {}` failed ({status})", args.join(" "))) }
}

/// Our benchmarks, then the peers on Node doing the same work, in one run.
fn bench() -> Result<(), String> {
    cargo(&["bench", "-p", "codemode-executor"])?;
    if std::env::var_os("RUSTY_V8_ARCHIVE").is_some() {
        // The engines side by side, V8 included, process isolation's latency on V8, and
        // V8's memory per live execution.
        cargo(&[
            "bench",
            "-p",
            "codemode-executor",
            "--features",
            "v8",
            "--bench",
            "engines",
            "--bench",
            "compute",
            "--bench",
            "isolation_latency",
        ])?;
        let status = xtask::cargo_command(env!("CARGO"))
            .args(["bench", "-p", "codemode-executor", "--features", "v8", "--bench", "memory"])
            .env("CODEMODE_BENCH_ENGINE", "v8")
            .current_dir(root())
            .status()
            .map_err(|e| format!("could not run cargo: {e}"))?;
        if !status.success() {
            return Err(format!("the V8 memory bench failed ({status})"));
        }
    } else {
        eprintln!("xtask: RUSTY_V8_ARCHIVE is not set: the benches run QuickJS only (see docs/engines.md)");
    }
    let peers = root().join("executor/benches/peers");
    run_in(&peers, "npm", &["ci", "--no-audit", "--no-fund"])?;
    run_in(&peers, "node", &["peers.js"])
}

fn run_in(dir: &Path, program: &str, args: &[&str]) -> Result<(), String> {
    eprintln!("xtask: {program} {} (in {})", args.join(" "), dir.display());
    let status = Command::new(program)
        .args(args)
        .current_dir(dir)
        .status()
        .map_err(|e| format!("could not run {program}: {e}"))?;
    if status.success() { Ok(()) } else { Err(format!("`{program} {}` failed ({status})", args.join(" "))) }
}

fn ci() -> Result<(), String> {
    let fmt: Vec<&str> =
        ["fmt"].into_iter().chain(OURS.iter().flat_map(|p| ["-p", p])).chain(["--check"]).collect();
    cargo(&fmt)?;
    cargo(&[&["clippy", "--workspace"][..], &NOT_OURS, &["--all-targets", "--", "-D", "warnings"]].concat())?;
    cargo(&[&["test", "--workspace"][..], &NOT_OURS].concat())?;
    schema(true)?;
    quickjs_patches_check()?;
    deploy_manifests()?;
    node_peer()?;
    features()?;
    package()?;
    msrv()?;
    eprintln!(
        "xtask: the mcp feature: clippy, and its tests against the official MCP servers and TypeScript SDK"
    );
    cargo(&[
        "clippy",
        "-p",
        "codemode-executor",
        "-p",
        "codemode-cli",
        "--features",
        "codemode-executor/mcp,codemode-cli/mcp",
        "--all-targets",
        "--",
        "-D",
        "warnings",
    ])?;
    cargo(&["test", "-p", "codemode-executor", "--features", "mcp", "--test", "mcp_upstream"])?;
    cargo(&["test", "-p", "codemode-cli", "--features", "mcp", "--test", "mcp_serve"])?;
    cargo(&["test", "-p", "codemode-executor", "--features", "mcp", "--doc"])?;
    eprintln!(
        "xtask: confinement: every probe refused in a confined worker (test-only feature confinement-probe)"
    );
    let probe = "codemode-executor/confinement-probe,codemode-cli/confinement-probe";
    cargo(&[
        "clippy",
        "-p",
        "codemode-executor",
        "-p",
        "codemode-cli",
        "--features",
        probe,
        "--all-targets",
        "--",
        "-D",
        "warnings",
    ])?;
    cargo(&["test", "-p", "codemode-cli", "--features", "confinement-probe", "--test", "confinement"])?;
    // The probe's native call is also the one that ignores its stop: stuck engines counted.
    cargo(&["test", "-p", "codemode-executor", "--features", "confinement-probe", "--test", "stuck"])?;
    // V8 links into a test binary slowly, so only these two have it (never `--workspace`),
    // and only where its prebuilt library is at hand.
    if std::env::var_os("RUSTY_V8_ARCHIVE").is_none() {
        eprintln!("xtask: RUSTY_V8_ARCHIVE is not set: the V8 engine tests do not run (see docs/engines.md)");
        return Ok(());
    }
    eprintln!("xtask: clippy on the V8 binding and its tests");
    cargo(&[
        "clippy",
        "-p",
        "codemode-executor",
        "-p",
        "codemode-cli",
        "-p",
        "codemode-conformance",
        "--features",
        "codemode-executor/v8,codemode-cli/v8,codemode-conformance/v8",
        "--lib",
        "--tests",
        "--",
        "-D",
        "warnings",
    ])?;
    eprintln!("xtask: the engine suite on every engine built in, V8 included, and the CLI with --engine v8");
    cargo(&["test", "-p", "codemode-executor", "--features", "v8", "--test", "engines"])?;
    cargo(&["test", "-p", "codemode-cli", "--features", "v8", "--test", "cli", "--test", "ask"])?;
    cargo(&["test", "-p", "codemode-cli", "--features", "v8,confinement-probe", "--test", "confinement"])?;
    eprintln!(
        "xtask: the conformance matrix with its V8 column (every transcript on V8 in-process, over stdio and behind daemons)"
    );
    cargo(&["test", "-p", "codemode-conformance", "--features", "v8"])
}

/// Each feature combination that matters, built alone (`-p` one package, so nothing else
/// turns a feature on): what a library user gets with no features, each optional part,
/// and the CLI with and without MCP. V8 is checked with clippy below when it is at hand.
fn features() -> Result<(), String> {
    let combinations: [&[&str]; 7] = [
        &["-p", "codemode-protocol"],
        &["-p", "codemode-executor", "--no-default-features"],
        &["-p", "codemode-executor", "--features", "tls"],
        &["-p", "codemode-executor", "--features", "mcp"],
        &["-p", "codemode-cli"],
        &["-p", "codemode-cli", "--features", "mcp"],
        &["-p", "codemode-conformance"],
    ];
    for combination in combinations {
        cargo(&[&["check"][..], combination].concat())?;
    }
    // The executor without `tls` refuses TLS with its text (in the workspace the CLI turns
    // the feature on, so only a build of the executor alone sees it off).
    cargo(&["test", "-p", "codemode-executor", "--test", "tls"])
}

/// `cargo publish --dry-run` of every publishable crate, the QuickJS fork included: each
/// is packaged (its `.crate` file in `target/package/`) and checked as crates.io would
/// take it, in dependency order, the unpublished ones resolved against each other. It
/// reads the registry's index (as `cargo package` does); `--no-verify` because
/// xtask/tests/downstream.rs builds a crate outside the workspace from the `.crate` files.
fn package() -> Result<(), String> {
    // --allow-dirty: what is checked is the tree as it is (a fresh clone is clean anyway).
    cargo(&[
        "publish",
        "--workspace",
        "--exclude",
        "xtask",
        "--exclude",
        "codemode-devtools",
        "--dry-run",
        "--no-verify",
        "--allow-dirty",
    ])
}

/// The minimum Rust version every manifest declares (`rust-version`), checked with that
/// toolchain when rustup has it or can install it; otherwise said, not hidden.
fn msrv() -> Result<(), String> {
    let manifest = std::fs::read_to_string(root().join("Cargo.toml")).map_err(|e| e.to_string())?;
    let version = manifest
        .lines()
        .find_map(|line| line.strip_prefix("rust-version = \""))
        .and_then(|rest| rest.strip_suffix('"'))
        .ok_or("the workspace manifest declares no rust-version")?;
    // `1.95` means 1.95.0, the oldest release of that version.
    let version = if version.matches('.').count() == 1 { format!("{version}.0") } else { version.to_owned() };
    let version = version.as_str();
    let toolchain = format!("+{version}");
    let have = |c: &mut Command| c.arg("--version").output().is_ok_and(|o| o.status.success());
    if !have(Command::new("cargo").arg(&toolchain)) {
        eprintln!("xtask: installing Rust {version} with rustup to check the minimum Rust version");
        let installed = Command::new("rustup")
            .args(["toolchain", "install", version, "--profile", "minimal"])
            .status()
            .is_ok_and(|s| s.success());
        if !installed || !have(Command::new("cargo").arg(&toolchain)) {
            eprintln!(
                "xtask: WARNING: Rust {version} is not available here (rustup could not install it): \
                 the minimum Rust version is NOT checked"
            );
            return Ok(());
        }
    }
    eprintln!("xtask: the publishable crates on Rust {version}, the minimum the manifests declare");
    let status = xtask::cargo_command("cargo")
        .args([
            &toolchain,
            "check",
            "-p",
            "codemode-protocol",
            "-p",
            "codemode-executor",
            "-p",
            "codemode-cli",
            "-p",
            "codemode-conformance",
            "--features",
            "codemode-executor/tls,codemode-executor/mcp,codemode-cli/mcp",
        ])
        .current_dir(root())
        .status()
        .map_err(|e| format!("could not run cargo {toolchain}: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("the crates do not build on Rust {version} ({status})"))
    }
}

/// The conformance suite against the Node peer, an executor written apart on V8.
fn node_peer() -> Result<(), String> {
    let peer = root().join("conformance/peers/node");
    run_in(&peer, "npm", &["ci", "--no-audit", "--no-fund"])?;
    let command = format!("node {}", peer.join("peer.js").display());
    let expected = peer.join("expected-failures.json");
    cargo(&[
        "run",
        "--quiet",
        "-p",
        "codemode-conformance",
        "--",
        "--executor-cmd",
        &command,
        "--engine",
        "v8",
        "--expected-failures",
        &expected.display().to_string(),
    ])
}

fn schema(check: bool) -> Result<(), String> {
    let dir = root().join("protocol/schema");
    std::fs::create_dir_all(&dir).map_err(|e| format!("could not create {}: {e}", dir.display()))?;
    let mut stale = Vec::new();
    let mut schemas: Vec<(PathBuf, String)> =
        codemode_protocol::schema::schemas().into_iter().map(|(file, text)| (dir.join(file), text)).collect();
    schemas.push((
        root().join("conformance/transcript.schema.json"),
        codemode_conformance::transcript::schema(),
    ));
    schemas.push((
        root().join("conformance/transcript-v2.schema.json"),
        codemode_conformance::transcript::schema_v2(),
    ));
    schemas
        .push((root().join("conformance/peers/node/codec.generated.js"), codemode_conformance::peer_codec()));
    for (path, text) in schemas {
        let committed = std::fs::read_to_string(&path).unwrap_or_default();
        if committed == text {
            continue;
        }
        if check {
            stale.push(path.display().to_string());
        } else {
            std::fs::write(&path, text).map_err(|e| format!("could not write {}: {e}", path.display()))?;
            eprintln!("xtask: wrote {}", path.display());
        }
    }
    if stale.is_empty() {
        Ok(())
    } else {
        Err(format!("out of date: {}. Run `cargo xtask schema` and commit the result.", stale.join(", ")))
    }
}

/// The Kubernetes manifests (executor/deploy/kustomize) against the strict schemas of
/// Kubernetes 1.30 and 1.37, with kubernetes-validate from PyPI in a virtualenv under the
/// target directory, and the fleet's rules (docs/deploy.md).
fn deploy_manifests() -> Result<(), String> {
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root().join("target"), PathBuf::from);
    let venv = target.join("deploy-venv");
    let script = root().join("executor/deploy/check_manifests.py");
    eprintln!("xtask: the Kubernetes manifests ({})", script.display());
    let status = Command::new("python3")
        .arg(&script)
        .arg("--venv")
        .arg(&venv)
        .current_dir(root())
        .status()
        .map_err(|e| format!("could not run python3 (the manifest check needs it): {e}"))?;
    if status.success() { Ok(()) } else { Err(format!("the manifest check failed ({status})")) }
}
