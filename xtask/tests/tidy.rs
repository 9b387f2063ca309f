//! Tidy: the conventions of the workspace, enforced under `cargo test`.

use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// Files git knows about (tracked or new, not ignored), relative to the root.
fn files() -> Vec<PathBuf> {
    let output = Command::new("git")
        .args(["ls-files", "--cached", "--others", "--exclude-standard"])
        .current_dir(root())
        .output()
        .expect("git lists the files");
    // vendor/ holds third-party crates as they were published (see its PATCHES.md).
    String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(PathBuf::from)
        .filter(|p| !p.starts_with("vendor") && root().join(p).exists())
        .collect()
}

#[test]
fn every_source_file_opens_with_a_line_saying_what_it_is() {
    let mut missing = Vec::new();
    for file in files() {
        let (prefix, ext) = match file.extension().and_then(|e| e.to_str()) {
            Some("rs") => ("//!", "rs"),
            Some("js") => ("//", "js"),
            _ => continue,
        };
        let text = std::fs::read_to_string(root().join(&file)).unwrap();
        let first = text.lines().find(|l| !(ext == "js" && l.starts_with("#!"))).unwrap_or("");
        if !first.starts_with(prefix) {
            missing.push(file.display().to_string());
        }
    }
    assert!(
        missing.is_empty(),
        "these files must open with a `//!` (Rust) or `//` (JS) line saying what they are: {missing:?}"
    );
}

#[test]
fn the_protocol_crate_depends_on_no_runtime_engine_or_io_crate() {
    let output = Command::new(env!("CARGO"))
        .args(["tree", "-p", "codemode-protocol", "-e", "normal", "--prefix", "depth", "--format", "{p}"])
        .current_dir(root())
        .output()
        .expect("cargo tree runs");
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let tree = String::from_utf8(output.stdout).unwrap();
    let forbidden = [
        "tokio",
        "mio",
        "rquickjs",
        "v8",
        "socket2",
        "hyper",
        "reqwest",
        "rustls",
        "rusqlite",
        "async-std",
        "smol",
        "futures-io",
        "libc",
    ];
    // The one exception: stacker (behind serde_stacker) grows the stack for values of any
    // depth and reads the thread's stack bounds through libc; it does no other I/O.
    let allowed_parents = ["stacker", "psm"];
    let mut parents: Vec<&str> = Vec::new();
    let mut found = Vec::new();
    for line in tree.lines() {
        let digits = line.chars().take_while(char::is_ascii_digit).count();
        let Ok(depth) = line[..digits].parse::<usize>() else { continue };
        let name = line[digits..].split_whitespace().next().unwrap_or_default();
        parents.truncate(depth);
        let parent = parents.last().copied().unwrap_or_default();
        if forbidden.contains(&name) && !(name == "libc" && allowed_parents.contains(&parent)) {
            found.push(format!("{name} (through {parent})"));
        }
        parents.push(name);
    }
    assert!(
        found.is_empty(),
        "codemode-protocol must stay pure (no I/O, no engine, no runtime), but depends on {found:?}"
    );
}

/// The names in the normal dependency tree of `package` built with `args` (features).
fn normal_dependencies(package: &str, args: &[&str]) -> Vec<String> {
    let output = Command::new(env!("CARGO"))
        .args(["tree", "-p", package, "-e", "normal", "--prefix", "none", "--format", "{p}"])
        .args(args)
        .current_dir(root())
        .output()
        .expect("cargo tree runs");
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let tree = String::from_utf8(output.stdout).unwrap();
    let mut names: Vec<String> =
        tree.lines().filter_map(|l| l.split_whitespace().next()).map(str::to_owned).collect();
    names.sort();
    names.dedup();
    names
}

#[test]
fn a_library_user_of_the_executor_builds_no_cli_store_subscriber_or_tls() {
    let forbidden = [
        "clap",
        "rusqlite",
        "libsqlite3-sys",
        "toml",
        "tracing-subscriber",
        "rustls",
        "tokio-rustls",
        "ring",
        "metrics-exporter-prometheus",
        "axum",
        "hyper",
    ];
    let names = normal_dependencies("codemode-executor", &[]);
    let found: Vec<&String> = names.iter().filter(|n| forbidden.contains(&n.as_str())).collect();
    assert!(
        found.is_empty(),
        "codemode-executor's default build depends on {found:?}: put it behind a feature"
    );
    // The CLI package is where they are.
    let cli = normal_dependencies("codemode-cli", &[]);
    for name in [
        "clap",
        "rusqlite",
        "toml",
        "tracing-subscriber",
        "tokio-rustls",
        "metrics-exporter-prometheus",
        "axum",
    ] {
        assert!(cli.iter().any(|n| n == name), "codemode-cli builds {name}");
    }
}

#[test]
fn readme_has_two_commands_and_ci_runs_the_test_command() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let commands: Vec<&str> =
        readme.split("```sh\n").skip(1).map(|block| block.split("\n```").next().unwrap()).collect();
    assert_eq!(
        commands.len(),
        2,
        "README.md shows exactly two set-up commands: the main job, then all tests"
    );
    let ci = std::fs::read_to_string(root().join(".ci/run")).unwrap();
    assert!(
        ci.lines().any(|line| line.trim() == commands[1]),
        ".ci/run must call the README's test command `{}`",
        commands[1]
    );
}

/// The longest a function of the executor may be, in lines from its `fn` to its closing
/// brace, unless the comment above it says why it stays whole ("stays whole").
const LONGEST_FUNCTION: usize = 150;

#[test]
fn no_function_of_the_executor_is_longer_than_a_screenful_without_saying_why() {
    let mut long = Vec::new();
    for file in files() {
        if !file.starts_with("executor/src") || file.extension().is_none_or(|e| e != "rs") {
            continue;
        }
        let text = std::fs::read_to_string(root().join(&file)).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        for (at, line) in lines.iter().enumerate() {
            let code = line.trim_start();
            if !opens_a_function(code) || code.ends_with(';') {
                continue;
            }
            // rustfmt closes a body at the indentation it opened at.
            let closing = format!("{}}}", &line[..line.len() - code.len()]);
            let Some(length) = lines[at..].iter().position(|l| *l == closing) else { continue };
            // The comment above it, past its attributes.
            let said = lines[..at]
                .iter()
                .rev()
                .take_while(|l| l.trim_start().starts_with("//") || l.trim_start().starts_with("#["))
                .any(|l| l.contains("stays whole"));
            if length + 1 > LONGEST_FUNCTION && !said {
                long.push(format!("{}:{} ({} lines)", file.display(), at + 1, length + 1));
            }
        }
    }
    assert!(
        long.is_empty(),
        "functions over {LONGEST_FUNCTION} lines with no comment saying why they stay whole: {long:?}"
    );
}

/// Whether a line opens a function: any visibility, then any of `const`, `async`,
/// `unsafe`, `extern "ABI"`, then `fn `.
fn opens_a_function(code: &str) -> bool {
    let mut rest = code;
    if let Some(after) = rest.strip_prefix("pub") {
        rest = match after.strip_prefix('(') {
            Some(scope) => scope.split_once(") ").map_or("", |(_, rest)| rest),
            None => after.trim_start(),
        };
    }
    loop {
        let next = ["const ", "async ", "unsafe ", "extern "].iter().find_map(|word| rest.strip_prefix(word));
        match next {
            Some(after) if rest.starts_with("extern ") => {
                rest =
                    after.strip_prefix('"').and_then(|abi| abi.split_once("\" ")).map_or(after, |(_, r)| r);
            }
            Some(after) => rest = after,
            None => return rest.starts_with("fn "),
        }
    }
}

#[test]
fn a_function_is_told_whatever_its_qualifiers() {
    for line in [
        "fn a() {",
        "pub fn a() {",
        "pub(crate) async fn a() {",
        "pub(super) async fn a() {",
        "pub(in crate::x) fn a() {",
        "const fn a() {",
        "pub const unsafe fn a() {",
        "unsafe extern \"C\" fn a() {",
    ] {
        assert!(opens_a_function(line), "{line}");
    }
    for line in ["let fn_ = 1;", "// fn a() {", "pub struct Fn {", "functions();"] {
        assert!(!opens_a_function(line), "{line}");
    }
}
