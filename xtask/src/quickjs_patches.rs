//! The QuickJS fork as its pristine upstream plus a patch series: `upstream/` and the
//! ordered `patches/*.patch` of `vendor/rquickjs-sys` must rebuild the vendored tree byte
//! for byte (`check`), and the series is kept with git (`unpack`, `pack`, `write`).
//!
//! The patches are applied with `git apply`, not `patch`: a hunk whose context does not
//! match exactly is refused rather than placed with fuzz, a patch applies whole or not at
//! all, and a patch that creates a file that exists fails. git runs in a repository of its
//! own made for the purpose (so an enclosing repository never changes what it applies),
//! without the user's or the system's git configuration (`apply.whitespace`, `core.autocrlf`
//! or `diff.noprefix` would change bytes or paths).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

/// In the vendored crate's directory, what is neither built from upstream nor vendored:
/// the series itself and its documentation.
const NOT_VENDORED: [&str; 3] = ["upstream", "patches", "PATCHES.md"];

/// The subject of the first commit `unpack` makes: `upstream/` as it is.
const UPSTREAM_SUBJECT: &str = "upstream/";

/// Where `unpack` leaves the message of a patch that did not apply, for its fix's commit.
const MESSAGE_FILE: &str = ".git/QUICKJS_PATCH_MSG";

/// Fails, naming each file and its first differing line, when `upstream/` + `patches/`
/// of `crate_dir` (the vendored rquickjs-sys) differ from the files vendored beside them.
pub fn check(crate_dir: &Path) -> Result<(), String> {
    for patch in patches(crate_dir)? {
        let name = file_name(&patch);
        if header(&read_text(&patch)?, &name)?.is_empty() {
            return Err(format!(
                "patches/{name} has no header: before its first `diff --git`, the title of its section \
                 of PATCHES.md and why"
            ));
        }
    }
    let produced = apply(crate_dir)?;
    let differences = compare(produced.path(), crate_dir, &NOT_VENDORED)?;
    if differences.is_empty() {
        return Ok(());
    }
    Err(format!(
        "{}: upstream/ + patches/ is not the vendored tree:\n{}\nA change made to the vendored tree \
         belongs in a patch (`cargo xtask quickjs-patches --unpack DIR`, commit it there, then `--pack \
         DIR`); to rebuild the vendored tree from upstream/ + patches/ instead, `cargo xtask \
         quickjs-patches --write`. See PATCHES.md, \"Updating\".",
        crate_dir.display(),
        differences.join("\n")
    ))
}

/// Rewrites the vendored files of `crate_dir` from `upstream/` + `patches/`, and deletes
/// the vendored files they do not make. Returns the paths written or deleted.
pub fn write(crate_dir: &Path) -> Result<Vec<String>, String> {
    let produced = apply(crate_dir)?;
    let made = files(produced.path(), &[".git"])?;
    let vendored = files(crate_dir, &NOT_VENDORED)?;
    let mut changed = Vec::new();
    for (name, from) in &made {
        let to = crate_dir.join(name);
        let bytes = read(from)?;
        if vendored.get(name).map(|p| read(p)).transpose()?.as_deref() == Some(&bytes[..]) {
            continue;
        }
        if let Some(parent) = to.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|e| format!("could not create {}: {e}", parent.display()))?;
        }
        std::fs::write(&to, bytes).map_err(|e| format!("could not write {}: {e}", to.display()))?;
        changed.push(format!("wrote {name}"));
    }
    for (name, path) in &vendored {
        if !made.contains_key(name) {
            std::fs::remove_file(path).map_err(|e| format!("could not delete {}: {e}", path.display()))?;
            changed.push(format!("deleted {name}"));
        }
    }
    Ok(changed)
}

/// Makes `dir` a git repository holding `upstream/` as its first commit and then one
/// commit per patch (subject: the patch's file name; body: its header), where the series
/// is changed with git. Run again on the same `dir`, it applies the patches after the last
/// one committed. A patch that does not apply is applied with `--reject` (its hunks that
/// fit are applied, the others left in `*.rej` files) and the error says how to go on.
pub fn unpack(crate_dir: &Path, dir: &Path) -> Result<(), String> {
    let fresh = !dir.exists() || std::fs::read_dir(dir).map_err(|e| e.to_string())?.next().is_none();
    if fresh {
        copy_tree(&crate_dir.join("upstream"), dir)?;
    }
    // Absolute, so that git looks for no repository above it (GIT_CEILING_DIRECTORIES).
    let dir = &std::fs::canonicalize(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    if fresh {
        git(dir, &["init", "--quiet"])?;
        git(dir, &["add", "--all"])?;
        commit(
            dir,
            &format!("{UPSTREAM_SUBJECT}\n\nThe pristine upstream: vendor/rquickjs-sys/upstream.\n"),
        )?;
    } else {
        clean(dir)?;
    }
    let subjects = git(dir, &["log", "--format=%s"])?;
    let done: Vec<&str> = subjects.lines().collect();
    if done.last() != Some(&UPSTREAM_SUBJECT) {
        return Err(format!(
            "{} is not a series `--unpack` made (its first commit is not {UPSTREAM_SUBJECT})",
            dir.display()
        ));
    }
    for patch in patches(crate_dir)? {
        let name = file_name(&patch);
        if done.contains(&name.as_str()) {
            continue;
        }
        let text = read_text(&patch)?;
        let message = format!("{name}\n\n{}\n", header(&text, &name)?);
        if let Err(e) = git(dir, &["apply", "--whitespace=nowarn", "--reject", &path_arg(&patch)?]) {
            std::fs::write(dir.join(MESSAGE_FILE), &message).map_err(|e| e.to_string())?;
            return Err(format!(
                "patches/{name} does not apply on top of the commits in {dir}: {e}\nIts hunks that fit are \
                 applied in {dir}, the others are in its *.rej files. Make the change the patch means, delete \
                 the *.rej files, commit it with `git -C {dir} add --all && git -C {dir} commit --cleanup=verbatim \
                 -F {dir}/{MESSAGE_FILE}`, and run `cargo xtask quickjs-patches --unpack {dir}` again.",
                dir = dir.display()
            ));
        }
        git(dir, &["add", "--all"])?;
        commit(dir, &message)?;
    }
    Ok(())
}

/// Rewrites `patches/` from the commits of a series `unpack` made in `dir` (one patch per
/// commit after the first, named by its subject, its header the commit's body), once it is
/// checked that `upstream/` + the new patches give `dir`'s tree; then the vendored tree
/// from them (`write`). Returns the patch files written, then what `write` changed.
pub fn pack(crate_dir: &Path, dir: &Path) -> Result<(Vec<String>, Vec<String>), String> {
    let dir = &std::fs::canonicalize(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    clean(dir)?;
    let commits = git(dir, &["rev-list", "--reverse", "HEAD"])?;
    let commits: Vec<&str> = commits.lines().collect();
    let Some((root, series)) = commits.split_first() else {
        return Err(format!("{} has no commit", dir.display()));
    };
    let base = git(dir, &["rev-parse", &format!("{root}^{{tree}}")])?;
    let upstream = TempDir::new()?;
    copy_tree(&crate_dir.join("upstream"), upstream.path())?;
    git(upstream.path(), &["init", "--quiet"])?;
    git(upstream.path(), &["add", "--all"])?;
    if git(upstream.path(), &["write-tree"])?.trim() != base.trim() {
        return Err(format!(
            "the first commit of {} is not {}: `--unpack` a series from the upstream/ it is to be packed against",
            dir.display(),
            crate_dir.join("upstream").display()
        ));
    }
    let mut texts = Vec::new();
    for commit in series {
        let name = git(dir, &["log", "-1", "--format=%s", commit])?.trim().to_owned();
        let valid = name.len() > ".patch".len() + 3
            && name.as_bytes()[..2].iter().all(u8::is_ascii_digit)
            && name.as_bytes()[2] == b'-'
            && name.ends_with(".patch")
            && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.');
        if !valid {
            return Err(format!(
                "commit {commit} of {}: its subject `{name}` is not a patch's name (NN-words.patch)",
                dir.display()
            ));
        }
        let body = git(dir, &["log", "-1", "--format=%b", commit])?;
        let diff = git(
            dir,
            &[
                "diff",
                "--full-index",
                "--no-renames",
                "--no-color",
                "--no-ext-diff",
                "--no-textconv",
                "--diff-algorithm=myers",
                "--src-prefix=a/",
                "--dst-prefix=b/",
                &format!("{commit}^"),
                commit,
            ],
        )?;
        if diff.is_empty() {
            return Err(format!("commit {commit} ({name}) of {} changes nothing", dir.display()));
        }
        let body = body.trim_end();
        texts.push((name, if body.is_empty() { diff } else { format!("{body}\n\n{diff}") }));
    }
    // upstream/ + the new series must give the tree of `dir`, before anything is written.
    let staged = TempDir::new()?;
    std::fs::create_dir(staged.path().join("patches")).map_err(|e| e.to_string())?;
    for (name, text) in &texts {
        std::fs::write(staged.path().join("patches").join(name), text).map_err(|e| e.to_string())?;
    }
    let produced = apply_series(&crate_dir.join("upstream"), &patches(staged.path())?)?;
    let differences = compare(produced.path(), dir, &[".git"])?;
    if !differences.is_empty() {
        return Err(format!(
            "upstream/ + the patches made from {} is not its tree:\n{}",
            dir.display(),
            differences.join("\n")
        ));
    }
    let patch_dir = crate_dir.join("patches");
    std::fs::create_dir_all(&patch_dir).map_err(|e| e.to_string())?;
    for old in patch_files(crate_dir)? {
        std::fs::remove_file(&old).map_err(|e| format!("could not delete {}: {e}", old.display()))?;
    }
    for (name, text) in &texts {
        let path = patch_dir.join(name);
        std::fs::write(&path, text).map_err(|e| format!("could not write {}: {e}", path.display()))?;
    }
    let changed = write(crate_dir)?;
    Ok((texts.into_iter().map(|(name, _)| name).collect(), changed))
}

/// `upstream/` + `patches/` of `crate_dir`, applied in a temporary directory.
fn apply(crate_dir: &Path) -> Result<TempDir, String> {
    apply_series(&crate_dir.join("upstream"), &patches(crate_dir)?)
}

fn apply_series(upstream: &Path, patches: &[PathBuf]) -> Result<TempDir, String> {
    if !upstream.is_dir() {
        return Err(format!(
            "{} is missing: it holds the pristine upstream (PATCHES.md)",
            upstream.display()
        ));
    }
    let work = TempDir::new()?;
    copy_tree(upstream, work.path())?;
    // A repository of its own: git apply run inside another repository's work tree applies
    // paths from that repository's root, and silently skips the files outside.
    git(work.path(), &["init", "--quiet"])?;
    for patch in patches {
        git(work.path(), &["apply", "--whitespace=nowarn", &path_arg(patch)?]).map_err(|e| {
            format!(
                "patches/{} does not apply to upstream/ + the patches before it: {e}\nFix it \
                 (PATCHES.md, \"Updating\": `cargo xtask quickjs-patches --unpack DIR`).",
                file_name(patch)
            )
        })?;
    }
    Ok(work)
}

/// The `*.patch` files of `dir/patches`, in the order of their names: at least one.
fn patches(dir: &Path) -> Result<Vec<PathBuf>, String> {
    let found = patch_files(dir)?;
    if found.is_empty() {
        return Err(format!("{} holds no *.patch file", dir.join("patches").display()));
    }
    Ok(found)
}

/// The `*.patch` files of `dir/patches`, in the order of their names (none if it is missing).
fn patch_files(dir: &Path) -> Result<Vec<PathBuf>, String> {
    let patch_dir = dir.join("patches");
    if !patch_dir.exists() {
        return Ok(Vec::new());
    }
    let entries =
        std::fs::read_dir(&patch_dir).map_err(|e| format!("could not read {}: {e}", patch_dir.display()))?;
    let mut found = Vec::new();
    for entry in entries {
        let path = entry.map_err(|e| e.to_string())?.path();
        if path.extension().is_some_and(|e| e == "patch") {
            found.push(path);
        }
    }
    found.sort();
    Ok(found)
}

/// A patch's header: its lines before the first `diff --git`, which git apply ignores.
fn header(text: &str, name: &str) -> Result<String, String> {
    let start =
        if text.starts_with("diff --git ") { Some(0) } else { text.find("\ndiff --git ").map(|i| i + 1) };
    let start =
        start.ok_or_else(|| format!("patches/{name} holds no `diff --git` (write it with git diff)"))?;
    Ok(text[..start].trim_end().to_owned())
}

/// Each difference between the files of `made` and those of `vendored` (both but the
/// top-level names in `skip`): a file on one side only, or the first line that differs.
fn compare(made: &Path, vendored: &Path, skip: &[&str]) -> Result<Vec<String>, String> {
    let made_files = files(made, &[".git"])?;
    let vendored_files = files(vendored, skip)?;
    let mut differences = Vec::new();
    for (name, path) in &made_files {
        let Some(other) = vendored_files.get(name) else {
            differences.push(format!("  {name}: made by upstream/ + patches/, but not in the vendored tree"));
            continue;
        };
        let (a, b) = (read(path)?, read(other)?);
        if a == b {
            continue;
        }
        let mut left = a.split_inclusive(|&c| c == b'\n');
        let mut right = b.split_inclusive(|&c| c == b'\n');
        let mut line = 1;
        loop {
            let (l, r) = (left.next(), right.next());
            if l != r {
                let show = |s: Option<&[u8]>| match s {
                    Some(s) => format!("{:?}", String::from_utf8_lossy(s.strip_suffix(b"\n").unwrap_or(s))),
                    None => "(end of file)".to_owned(),
                };
                differences.push(format!(
                    "  {name}: first differs at line {line}\n    upstream + patches: {}\n    vendored:           {}",
                    show(l),
                    show(r)
                ));
                break;
            }
            line += 1;
        }
    }
    for name in vendored_files.keys() {
        if !made_files.contains_key(name) {
            differences.push(format!("  {name}: in the vendored tree, but not made by upstream/ + patches/"));
        }
    }
    Ok(differences)
}

/// Every file under `dir` but the top-level names in `skip`, by its path relative to
/// `dir` (`/`-separated).
fn files(dir: &Path, skip: &[&str]) -> Result<BTreeMap<String, PathBuf>, String> {
    fn walk(
        dir: &Path,
        prefix: &str,
        skip: &[&str],
        out: &mut BTreeMap<String, PathBuf>,
    ) -> Result<(), String> {
        let entries = std::fs::read_dir(dir).map_err(|e| format!("could not read {}: {e}", dir.display()))?;
        for entry in entries {
            let entry = entry.map_err(|e| e.to_string())?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if prefix.is_empty() && skip.contains(&name.as_str()) {
                continue;
            }
            let rel = if prefix.is_empty() { name } else { format!("{prefix}/{name}") };
            if entry.path().is_dir() {
                walk(&entry.path(), &rel, &[], out)?;
            } else {
                out.insert(rel, entry.path());
            }
        }
        Ok(())
    }
    let mut out = BTreeMap::new();
    walk(dir, "", skip, &mut out)?;
    Ok(out)
}

/// Copies the files under `from` into `to` (made if missing).
pub fn copy_tree(from: &Path, to: &Path) -> Result<(), String> {
    for (name, path) in files(from, &[])? {
        let target = to.join(&name);
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|e| format!("could not create {}: {e}", parent.display()))?;
        }
        std::fs::copy(&path, &target).map_err(|e| format!("could not copy {}: {e}", path.display()))?;
    }
    Ok(())
}

/// git in `dir`, alone: no configuration but what is given here, no repository but the one
/// in `dir`. Its standard output, or its error output as the error.
fn git(dir: &Path, args: &[&str]) -> Result<String, String> {
    let output = Command::new("git")
        .args(["-c", "user.name=xtask", "-c", "user.email=xtask@localhost", "-c", "init.defaultBranch=main"])
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CEILING_DIRECTORIES", dir.parent().unwrap_or(dir))
        .env_remove("GIT_DIR")
        .env_remove("GIT_WORK_TREE")
        .env_remove("GIT_INDEX_FILE")
        .env_remove("GIT_OBJECT_DIRECTORY")
        .output()
        .map_err(|e| format!("could not run git (the QuickJS patch series needs it): {e}"))?;
    if output.status.success() {
        String::from_utf8(output.stdout).map_err(|e| format!("git {}: not UTF-8: {e}", args.join(" ")))
    } else {
        Err(format!(
            "`git {}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr).trim_end()
        ))
    }
}

fn commit(dir: &Path, message: &str) -> Result<(), String> {
    git(dir, &["commit", "--quiet", "--no-verify", "--allow-empty", "--cleanup=verbatim", "-m", message])
        .map(drop)
}

/// Fails when `dir`'s work tree has changes not committed (a fix half done).
fn clean(dir: &Path) -> Result<(), String> {
    let status = git(dir, &["status", "--porcelain", "--untracked-files=all"])?;
    if status.is_empty() {
        Ok(())
    } else {
        Err(format!("{} has changes not committed (commit or drop them first):\n{status}", dir.display()))
    }
}

fn path_arg(path: &Path) -> Result<String, String> {
    let absolute = std::fs::canonicalize(path).map_err(|e| format!("{}: {e}", path.display()))?;
    absolute.to_str().map(str::to_owned).ok_or_else(|| format!("{} is not UTF-8", absolute.display()))
}

fn file_name(path: &Path) -> String {
    path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
}

fn read(path: &Path) -> Result<Vec<u8>, String> {
    std::fs::read(path).map_err(|e| format!("could not read {}: {e}", path.display()))
}

fn read_text(path: &Path) -> Result<String, String> {
    std::fs::read_to_string(path).map_err(|e| format!("could not read {}: {e}", path.display()))
}

/// A directory under the system's temporary directory, deleted when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> Result<Self, String> {
        static COUNT: AtomicUsize = AtomicUsize::new(0);
        let nanos =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        let path = std::env::temp_dir().join(format!(
            "xtask-quickjs-patches-{}-{}-{nanos}",
            std::process::id(),
            COUNT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&path).map_err(|e| format!("could not create {}: {e}", path.display()))?;
        Ok(Self(path))
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
