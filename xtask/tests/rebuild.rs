//! A cargo command started by xtask (or by any test) finds the user's own build fresh:
//! it does not inherit the variables cargo set for the program running it, which made
//! ring's build script (it watches `CARGO_MANIFEST_DIR` and `CARGO_PKG_*`) rerun on every
//! `cargo xtask ci` and again on the user's next `cargo test`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// `cargo check -p ring` with JSON messages; the artifacts it reports as (name, fresh).
fn check_ring(mut cargo: Command) -> Vec<(String, bool)> {
    let started = Instant::now();
    let output = cargo
        .args(["check", "-p", "ring", "--message-format", "json"])
        .current_dir(root())
        .output()
        .expect("cargo runs");
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    assert!(started.elapsed() < Duration::from_secs(300), "ring alone took {:?}", started.elapsed());
    String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .filter(|line| line.contains(r#""reason":"compiler-artifact""#))
        .map(|line| {
            let name = line.split(r#""name":""#).nth(1).and_then(|rest| rest.split('"').next()).unwrap();
            (name.to_owned(), line.contains(r#""fresh":true"#))
        })
        .collect()
}

#[test]
fn a_cargo_started_by_xtask_finds_the_users_build_fresh() {
    // The user's build, from a shell: none of the CARGO_* variables this test process got
    // from `cargo test`, only the user's own settings.
    let mut user = Command::new(env!("CARGO"));
    for (name, _) in std::env::vars_os() {
        let name = name.to_string_lossy().into_owned();
        if (name.starts_with("CARGO") || name == "OUT_DIR")
            && name != "CARGO_HOME"
            && name != "CARGO_TARGET_DIR"
        {
            user.env_remove(name);
        }
    }
    let first = check_ring(user);
    assert!(first.iter().any(|(name, _)| name == "ring"), "{first:?}");
    // The same command as xtask starts it, from this process, which has cargo's variables.
    assert!(std::env::var_os("CARGO_MANIFEST_DIR").is_some());
    let second = check_ring(xtask::cargo_command(env!("CARGO")));
    let rebuilt: Vec<&String> = second.iter().filter(|(_, fresh)| !fresh).map(|(name, _)| name).collect();
    assert!(second.iter().any(|(name, _)| name == "ring"), "{second:?}");
    assert!(rebuilt.is_empty(), "xtask's cargo rebuilt what the user's build had made: {rebuilt:?}");
}
