//! The manifest check (executor/deploy/check_manifests.py) passes the committed manifests and fails broken copies, each with the line that says why.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// The virtualenv `cargo xtask ci` uses: `<target>/deploy-venv`.
fn venv() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).parent().unwrap().join("deploy-venv")
}

fn script() -> PathBuf {
    root().join("executor/deploy/check_manifests.py")
}

/// Installs kubernetes-validate once for all the tests of this file.
fn installed() {
    static INSTALLED: OnceLock<()> = OnceLock::new();
    INSTALLED.get_or_init(|| {
        let output = Command::new("python3")
            .arg(script())
            .arg("--venv")
            .arg(venv())
            .arg("--install-only")
            .output()
            .expect("python3 runs");
        assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    });
}

/// A copy of executor/deploy/kustomize with `edit` applied, checked; the exit code and
/// everything the check printed.
fn check_copy(name: &str, edit: impl FnOnce(&Path)) -> (i32, String) {
    installed();
    let copy = Path::new(env!("CARGO_TARGET_TMPDIR")).join("deploy-check").join(name);
    let _ = std::fs::remove_dir_all(&copy);
    for dir in ["base", "examples"] {
        std::fs::create_dir_all(copy.join(dir)).unwrap();
        for entry in std::fs::read_dir(root().join("executor/deploy/kustomize").join(dir)).unwrap() {
            let entry = entry.unwrap();
            std::fs::copy(entry.path(), copy.join(dir).join(entry.file_name())).unwrap();
        }
    }
    edit(&copy);
    let output = Command::new("python3")
        .arg(script())
        .arg("--venv")
        .arg(venv())
        .arg("--root")
        .arg(&copy)
        .output()
        .expect("python3 runs");
    let text =
        String::from_utf8_lossy(&output.stdout).into_owned() + &String::from_utf8_lossy(&output.stderr);
    (output.status.code().expect("the check exits"), text)
}

fn replace(file: &Path, from: &str, to: &str) {
    let text = std::fs::read_to_string(file).unwrap();
    assert_eq!(text.matches(from).count(), 1, "{from:?} once in {}", file.display());
    std::fs::write(file, text.replace(from, to)).unwrap();
}

fn assert_fails_with(name: &str, edit: impl FnOnce(&Path), line: &str) {
    let (code, text) = check_copy(name, edit);
    assert_eq!(code, 1, "{text}");
    assert!(
        text.lines().any(|l| l == format!("check_manifests: FAILED: {line}")),
        "expected {line:?} in:\n{text}"
    );
}

#[test]
fn the_committed_manifests_pass() {
    let (code, text) = check_copy("pristine", |_| {});
    assert_eq!(code, 0, "{text}");
    assert!(
        text.contains("check_manifests: grace 140 s >= preStop 5 s + drain 125 s + margin 10 s; drain 125 s >= ceiling 120 s + send timeout 5 s"),
        "{text}"
    );
    assert!(text.contains("6 documents in 2 kustomizations"), "{text}");
    assert!(text.contains("validations passed against Kubernetes 1.30.0 and 1.37.0 (strict)"), "{text}");
}

#[test]
fn an_unknown_field_fails_strict_validation_for_both_versions() {
    for version in ["1.30", "1.37"] {
        assert_fails_with(
            &format!("unknown-field-{version}"),
            |copy| {
                replace(
                    &copy.join("base/deployment.yaml"),
                    "      enableServiceLinks: false\n",
                    "      enableServiceLink: false\n",
                )
            },
            &format!(
                "base/deployment.yaml: Deployment/codemode is not valid for Kubernetes {version} (strict): spec.template.spec: Additional properties are not allowed ('enableServiceLink' was unexpected)"
            ),
        );
    }
}

#[test]
fn a_value_of_the_wrong_type_fails() {
    assert_fails_with(
        "wrong-type",
        |copy| replace(&copy.join("base/deployment.yaml"), "replicas: 3", "replicas: three"),
        "base/deployment.yaml: Deployment/codemode is not valid for Kubernetes 1.30 (strict): spec.replicas: 'three' is not of type 'integer', 'null'",
    );
}

#[test]
fn a_kind_with_no_schema_fails_rather_than_warns() {
    assert_fails_with(
        "unknown-kind",
        |copy| {
            replace(
                &copy.join("base/poddisruptionbudget.yaml"),
                "kind: PodDisruptionBudget",
                "kind: PodDisruptionBudgett",
            )
        },
        "base/poddisruptionbudget.yaml: PodDisruptionBudgett/codemode cannot be validated for Kubernetes 1.37.0: Couldn't find schema for kind PodDisruptionBudgett with api version policy/v1 for kubernetes version 1.37",
    );
}

#[test]
fn a_file_the_kustomization_does_not_list_fails() {
    assert_fails_with(
        "unlisted",
        |copy| {
            std::fs::copy(copy.join("base/service.yaml"), copy.join("base/service-copy.yaml"))
                .map(drop)
                .unwrap()
        },
        "base/service-copy.yaml: not listed in base/kustomization.yaml (list it under resources, or remove it)",
    );
}

#[test]
fn a_grace_period_shorter_than_pre_stop_plus_drain_plus_margin_fails() {
    assert_fails_with(
        "short-grace",
        |copy| {
            replace(
                &copy.join("base/deployment.yaml"),
                "terminationGracePeriodSeconds: 140",
                "terminationGracePeriodSeconds: 60",
            )
        },
        "base/deployment.yaml: terminationGracePeriodSeconds 60 < preStop 5 s + drain 125 s + margin 10 s = 140 s: the kubelet would kill a draining daemon",
    );
}

#[test]
fn a_drain_shorter_than_the_ceiling_fails() {
    assert_fails_with(
        "short-drain",
        |copy| {
            replace(
                &copy.join("base/configmap.yaml"),
                "drain_timeout_ms = 125000",
                "drain_timeout_ms = 60000",
            )
        },
        "base/configmap.yaml: drain_timeout_ms 60000 < ceiling 120000 + send timeout 5000: a run started just before SIGTERM could be cut off",
    );
}

#[test]
fn a_writable_root_or_a_network_policy_allowing_egress_fails() {
    assert_fails_with(
        "writable-root",
        |copy| {
            replace(
                &copy.join("base/deployment.yaml"),
                "readOnlyRootFilesystem: true",
                "readOnlyRootFilesystem: false",
            )
        },
        "base/deployment.yaml: readOnlyRootFilesystem must be true",
    );
    assert_fails_with(
        "egress",
        |copy| replace(&copy.join("base/networkpolicy.yaml"), "  egress: []\n", "  egress:\n    - {}\n"),
        "base/networkpolicy.yaml: must deny all egress (policyTypes has Egress, no egress rules)",
    );
}
