//! The QuickJS patch series: vendor/rquickjs-sys is its upstream/ with its patches/
//! applied, the check names what differs when it is not, and a series that no longer
//! applies is fixed and packed again as PATCHES.md's "Updating" says.

use std::path::{Path, PathBuf};
use std::process::Command;

use xtask::quickjs_patches::{check, copy_tree, pack, unpack, write};

const TRAILER: &str = "A change made to the vendored tree belongs in a patch (`cargo xtask quickjs-patches \
     --unpack DIR`, commit it there, then `--pack DIR`); to rebuild the vendored tree from upstream/ + \
     patches/ instead, `cargo xtask quickjs-patches --write`. See PATCHES.md, \"Updating\".";

/// Section 1's line, as vendored.
const TICKS: &str =
    "#define JS_INTERRUPT_COUNTER_INIT 100 /* codemode-rs: was 10000; see vendor/rquickjs-sys/PATCHES.md */";

fn vendored() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().join("vendor/rquickjs-sys")
}

/// A fresh directory for one test, under cargo's temporary directory for tests.
fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("quickjs_patches").join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A copy of vendor/rquickjs-sys (upstream/ and patches/ included) in `dir`.
fn copy_of_the_fork(dir: &Path) -> PathBuf {
    let copy = dir.join("rquickjs-sys");
    copy_tree(&vendored(), &copy).unwrap();
    copy
}

/// `path` with its one line that starts with `start` replaced by `line`; that line's number.
fn replace_line(path: &Path, start: &str, line: &str) -> usize {
    let text = std::fs::read_to_string(path).unwrap();
    let found: Vec<usize> =
        text.lines().enumerate().filter(|(_, l)| l.starts_with(start)).map(|(i, _)| i).collect();
    assert_eq!(found.len(), 1, "one line of {} starts with {start:?}", path.display());
    let mut lines: Vec<&str> = text.split_inclusive('\n').collect();
    let replacement = format!("{line}\n");
    lines[found[0]] = &replacement;
    std::fs::write(path, lines.concat()).unwrap();
    found[0] + 1
}

#[test]
fn the_vendored_quickjs_is_its_upstream_with_the_patches_applied() {
    if let Err(message) = check(&vendored()) {
        panic!("{message}");
    }
}

#[test]
fn a_changed_byte_of_the_vendored_quickjs_c_fails_the_check_with_its_line_and_write_restores_it() {
    let copy = copy_of_the_fork(&scratch("changed_byte"));
    let quickjs_c = copy.join("quickjs/quickjs.c");
    let original = std::fs::read(&quickjs_c).unwrap();
    // One byte: 100 ticks become 101.
    let changed = TICKS.replacen(" 100 ", " 101 ", 1);
    let line = replace_line(&quickjs_c, TICKS, &changed);
    assert_eq!(std::fs::read(&quickjs_c).unwrap().iter().zip(&original).filter(|(a, b)| a != b).count(), 1);

    let message = check(&copy).unwrap_err();
    assert_eq!(
        message,
        format!(
            "{}: upstream/ + patches/ is not the vendored tree:\n  quickjs/quickjs.c: first differs at line \
             {line}\n    upstream + patches: \"{TICKS}\"\n    vendored:           \"{changed}\"\n{TRAILER}",
            copy.display()
        )
    );

    assert_eq!(write(&copy).unwrap(), ["wrote quickjs/quickjs.c"]);
    assert_eq!(std::fs::read(&quickjs_c).unwrap(), original);
    check(&copy).unwrap();
}

#[test]
fn a_vendored_file_the_patches_do_not_make_and_one_missing_fail_the_check() {
    let copy = copy_of_the_fork(&scratch("extra_and_missing"));
    std::fs::write(copy.join("quickjs/extra.c"), "int extra;\n").unwrap();
    std::fs::remove_file(copy.join("rustfmt.toml")).unwrap();

    assert_eq!(
        check(&copy).unwrap_err(),
        format!(
            "{}: upstream/ + patches/ is not the vendored tree:\n  rustfmt.toml: made by upstream/ + patches/, \
             but not in the vendored tree\n  quickjs/extra.c: in the vendored tree, but not made by upstream/ + \
             patches/\n{TRAILER}",
            copy.display()
        )
    );
}

#[test]
fn a_patch_that_no_longer_applies_is_named() {
    let copy = copy_of_the_fork(&scratch("does_not_apply"));
    // A new upstream with another interrupt interval: section 1's patch no longer applies.
    replace_line(
        &copy.join("upstream/quickjs/quickjs.c"),
        "#define JS_INTERRUPT_COUNTER_INIT ",
        "#define JS_INTERRUPT_COUNTER_INIT 20000",
    );
    let message = check(&copy).unwrap_err();
    assert!(
        message.starts_with(
            "patches/01-interrupt-every-100-ticks.patch does not apply to upstream/ + the patches before it: \
             `git apply --whitespace=nowarn "
        ),
        "{message}"
    );
    assert!(message.contains("patch failed: quickjs/quickjs.c:"), "{message}");
    assert!(
        message.ends_with("Fix it (PATCHES.md, \"Updating\": `cargo xtask quickjs-patches --unpack DIR`).")
    );
}

/// git in `dir`, without the user's configuration.
fn git(dir: &Path, args: &[&str]) {
    let status = Command::new("git")
        .args(["-c", "user.name=test", "-c", "user.email=test@localhost"])
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .status()
        .unwrap();
    assert!(status.success(), "git {args:?} in {}", dir.display());
}

#[test]
fn a_new_upstream_is_taken_by_unpacking_fixing_what_does_not_apply_and_packing() {
    let scratch = scratch("new_upstream");
    let copy = copy_of_the_fork(&scratch);
    let original_patches = |name: &str| std::fs::read(vendored().join("patches").join(name)).unwrap();
    let vendored_c = std::fs::read(copy.join("quickjs/quickjs.c")).unwrap();
    replace_line(
        &copy.join("upstream/quickjs/quickjs.c"),
        "#define JS_INTERRUPT_COUNTER_INIT ",
        "#define JS_INTERRUPT_COUNTER_INIT 20000",
    );

    // Unpacked, the series stops at section 1's patch, its hunk left in a .rej file.
    let series = scratch.join("series");
    let message = unpack(&copy, &series).unwrap_err();
    let series = series.canonicalize().unwrap();
    assert!(message.starts_with("patches/01-interrupt-every-100-ticks.patch does not apply"), "{message}");
    assert!(series.join("quickjs/quickjs.c.rej").exists());

    // The fix: the line the patch means, committed with the patch's message; then the rest.
    std::fs::remove_file(series.join("quickjs/quickjs.c.rej")).unwrap();
    replace_line(&series.join("quickjs/quickjs.c"), "#define JS_INTERRUPT_COUNTER_INIT ", TICKS);
    git(&series, &["add", "--all"]);
    git(&series, &["commit", "--quiet", "--cleanup=verbatim", "-F", ".git/QUICKJS_PATCH_MSG"]);
    unpack(&copy, &series).unwrap();

    // Packed: patch 01 is rewritten against the new upstream, the others are as they were,
    // the vendored tree is unchanged, and the check passes.
    let (written, changed) = pack(&copy, &series).unwrap();
    assert_eq!(written.len(), 12);
    assert!(changed.is_empty(), "{changed:?}");
    let patch_01 = std::fs::read_to_string(copy.join("patches/01-interrupt-every-100-ticks.patch")).unwrap();
    assert!(patch_01.starts_with("PATCHES.md section 1: Interrupt checks every 100 ticks.\n"));
    assert!(patch_01.contains("\n-#define JS_INTERRUPT_COUNTER_INIT 20000\n"));
    for name in &written[1..] {
        assert!(std::fs::read(copy.join("patches").join(name)).unwrap() == original_patches(name), "{name}");
    }
    assert!(std::fs::read(copy.join("quickjs/quickjs.c")).unwrap() == vendored_c);
    check(&copy).unwrap();
}
