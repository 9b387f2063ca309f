#!/usr/bin/env python3
# Checks the Kubernetes manifests under executor/deploy/kustomize: strict schemas for 1.30 and 1.37, the kustomization lists, the fleet's rules and its grace-period arithmetic.
"""Run by `cargo xtask ci` (and xtask/tests/deploy.rs, on broken copies).

usage: check_manifests.py --venv DIR [--root KUSTOMIZE_DIR] [--install-only]

It makes a virtualenv at DIR with requirements.txt (kubernetes-validate from PyPI, which
carries the schemas: no cluster is needed) unless one with those requirements is there,
and runs itself inside it. Then, under ROOT (default: the kustomize/ beside this file):

1. every directory with a kustomization.yaml lists exactly the .yaml files beside it,
   and every directory it names (../base) exists with a kustomization.yaml;
2. every document of every listed file validates with kubernetes-validate's strict
   schemas (unknown fields refused) for each version in VERSIONS; a kind it has no
   schema for is a failure here, not the tool's warning;
3. when `kubectl` is installed, `kubectl kustomize` renders each directory, the
   rendered documents validate the same way, and the base renders to exactly its files'
   documents (it is plain resources); without kubectl it says that nothing was rendered;
4. the rules of docs/deploy.md hold in the base: the pod runs non-root with a read-only
   root and no capabilities, mounts no service account token, probes /livez and /readyz
   on the admin port the daemon is told to serve, the listen port is the container's,
   the Service is headless, the NetworkPolicy and PodDisruptionBudget select the pods,
   the NetworkPolicy denies all egress, an HPA scales the Deployment on
   codemode_executions_in_flight, and
   terminationGracePeriodSeconds >= preStop sleep + drain_timeout_ms + MARGIN_S, with
   drain_timeout_ms >= the ceiling on timeouts + the send timeout.

It prints one line per failure and exits 1 if there was any, 0 otherwise.
"""

import argparse
import hashlib
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
VERSIONS = ["1.30.0", "1.37.0"]
MARGIN_S = 10
METRIC = "codemode_executions_in_flight"


def requirements_digest():
    with open(os.path.join(HERE, "requirements.txt"), "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def ensure_venv(venv):
    """Makes the virtualenv (once per requirements.txt) and re-runs this script in it."""
    python = os.path.join(venv, "bin", "python")
    stamp = os.path.join(venv, "requirements.sha256")
    digest = requirements_digest()
    fresh = os.path.exists(stamp) and open(stamp).read().strip() == digest
    if not fresh:
        print(f"check_manifests: installing {os.path.join(HERE, 'requirements.txt')} into {venv} (pip, from PyPI)",
              file=sys.stderr)
        shutil.rmtree(venv, ignore_errors=True)
        steps = [
            [sys.executable, "-m", "venv", venv],
            [python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
             "-r", os.path.join(HERE, "requirements.txt")],
        ]
        for step in steps:
            result = subprocess.run(step, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            if result.returncode != 0:
                shutil.rmtree(venv, ignore_errors=True)
                sys.exit("check_manifests: kubernetes-validate could NOT be installed, so the manifests were NOT "
                         f"validated: `{' '.join(step)}` failed ({result.returncode}):\n{result.stdout}")
        with open(stamp, "w") as f:
            f.write(digest + "\n")
    return python


def load_documents(path):
    import yaml
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d]


def name_of(doc):
    return f"{doc.get('kind')}/{(doc.get('metadata') or {}).get('name')}"


class Check:
    def __init__(self):
        self.failures = []
        self.validated = 0

    def fail(self, text):
        self.failures.append(text)

    def validate(self, where, doc):
        import kubernetes_validate.utils as kv
        for version in VERSIONS:
            try:
                kv.validate(doc, version, strict=True)
                self.validated += 1
            except kv.ValidationError as e:
                path = ".".join(str(p) for p in e.path)
                self.fail(f"{where}: {name_of(doc)} is not valid for Kubernetes {e.version} (strict): "
                          f"{path}: {e.message}")
            except (kv.SchemaNotFoundError, kv.InvalidSchemaError, kv.VersionNotSupportedError) as e:
                self.fail(f"{where}: {name_of(doc)} cannot be validated for Kubernetes {version}: {e.message}")
            except Exception as e:  # a document that is not a resource at all
                self.fail(f"{where}: {name_of(doc) if isinstance(doc, dict) else doc!r} cannot be validated "
                          f"for Kubernetes {version}: {e!r}")


def kustomizations(root):
    return sorted(d for d, _, files in os.walk(root) if "kustomization.yaml" in files)


def check_lists(check, root, directory):
    """The kustomization names exactly the YAML files beside it; returns their documents."""
    rel = os.path.relpath(directory, root)
    k = load_documents(os.path.join(directory, "kustomization.yaml"))[0]
    listed = k.get("resources") or []
    files = [r for r in listed if not r.startswith("..")]
    present = sorted(f for f in os.listdir(directory) if f.endswith((".yaml", ".yml")) and f != "kustomization.yaml")
    for f in sorted(set(present) - set(files)):
        check.fail(f"{rel}/{f}: not listed in {rel}/kustomization.yaml (list it under resources, or remove it)")
    for f in sorted(set(files) - set(present)):
        check.fail(f"{rel}/kustomization.yaml lists {f}, which does not exist")
    if len(set(files)) != len(files):
        check.fail(f"{rel}/kustomization.yaml lists a file twice")
    for r in listed:
        if r.startswith("..") and not os.path.exists(os.path.join(directory, r, "kustomization.yaml")):
            check.fail(f"{rel}/kustomization.yaml names {r}, which has no kustomization.yaml")
    docs = []
    for f in files:
        if f in present:
            for doc in load_documents(os.path.join(directory, f)):
                docs.append((f"{rel}/{f}", doc))
    return docs


def render(check, root, directory, plain_docs):
    rel = os.path.relpath(directory, root)
    result = subprocess.run(["kubectl", "kustomize", directory], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    if result.returncode != 0:
        check.fail(f"{rel}: `kubectl kustomize` failed: {result.stderr.strip()}")
        return 0
    import yaml
    rendered = [d for d in yaml.safe_load_all(result.stdout) if d]
    for doc in rendered:
        check.validate(f"{rel} (rendered)", doc)
    k = load_documents(os.path.join(directory, "kustomization.yaml"))[0]
    if set(k) <= {"apiVersion", "kind", "resources"} and not any(r.startswith("..") for r in k.get("resources", [])):
        key = lambda d: (d.get("kind"), d["metadata"].get("name"))  # noqa: E731
        if sorted(rendered, key=key) != sorted((d for _, d in plain_docs), key=key):
            check.fail(f"{rel}: renders to other documents than its files hold; keep the base plain resources")
    return len(rendered)


def parse_duration_arg(args, flag):
    for i, a in enumerate(args):
        if a == flag and i + 1 < len(args):
            return args[i + 1]
        if a.startswith(flag + "="):
            return a.split("=", 1)[1]
    return None


def check_rules(check, docs):
    import tomllib
    by_kind = {}
    for where, doc in docs:
        by_kind.setdefault(doc.get("kind"), []).append((where, doc))

    def one(kind):
        found = by_kind.get(kind, [])
        if len(found) != 1:
            check.fail(f"the base must hold exactly one {kind}, not {len(found)}")
            return None, None
        return found[0]

    dep_where, dep = one("Deployment")
    cm_where, cm = one("ConfigMap")
    svc_where, svc = one("Service")
    np_where, np = one("NetworkPolicy")
    pdb_where, pdb = one("PodDisruptionBudget")
    if dep is None or cm is None:
        return
    try:
        serve = tomllib.loads(cm["data"]["serve.toml"])
    except Exception as e:
        check.fail(f"{cm_where}: data.serve.toml is not TOML: {e}")
        return

    pod = dep["spec"]["template"]
    labels = pod["metadata"].get("labels", {})
    spec = pod["spec"]

    def selects(where, selector):
        wanted = (selector or {}).get("matchLabels", {})
        if not wanted or any(labels.get(k) != v for k, v in wanted.items()):
            check.fail(f"{where}: its selector {wanted} does not select the Deployment's pods {labels}")

    if spec.get("automountServiceAccountToken") is not False:
        check.fail(f"{dep_where}: automountServiceAccountToken must be false")
    pod_sc = spec.get("securityContext", {})
    if pod_sc.get("runAsNonRoot") is not True or not pod_sc.get("runAsUser"):
        check.fail(f"{dep_where}: the pod must run as a non-root uid (runAsNonRoot, runAsUser)")
    containers = spec["containers"]
    if len(containers) != 1:
        check.fail(f"{dep_where}: one container, the daemon")
        return
    c = containers[0]
    sc = c.get("securityContext", {})
    if sc.get("readOnlyRootFilesystem") is not True:
        check.fail(f"{dep_where}: readOnlyRootFilesystem must be true")
    if sc.get("allowPrivilegeEscalation") is not False:
        check.fail(f"{dep_where}: allowPrivilegeEscalation must be false")
    if (sc.get("capabilities") or {}).get("drop") != ["ALL"] or (sc.get("capabilities") or {}).get("add"):
        check.fail(f"{dep_where}: capabilities must drop [ALL] and add none")

    ports = {p.get("name"): p["containerPort"] for p in c.get("ports", [])}
    admin = parse_duration_arg(c.get("args", []), "--admin")
    if admin is None or ports.get("admin") is None or not admin.endswith(f":{ports['admin']}"):
        check.fail(f"{dep_where}: the daemon's --admin ({admin}) must be on the container port named admin "
                   f"({ports.get('admin')})")
    listen = serve.get("listen", "")
    if ports.get("execute") is None or not listen.startswith("tcp:") or not listen.endswith(f":{ports['execute']}"):
        check.fail(f"{cm_where}: listen ({listen}) must be TCP on the container port named execute "
                   f"({ports.get('execute')})")
    for key in ("token_file", "tls_cert", "tls_key"):
        if not serve.get(key):
            check.fail(f"{cm_where}: a TCP listener on the pod's address needs {key}")
    for probe, path in (("livenessProbe", "/livez"), ("readinessProbe", "/readyz")):
        get = (c.get(probe) or {}).get("httpGet") or {}
        if get.get("path") != path or get.get("port") not in ("admin", ports.get("admin")):
            check.fail(f"{dep_where}: {probe} must GET {path} on the admin port, not {get}")

    sleep = ((c.get("lifecycle") or {}).get("preStop") or {}).get("sleep", {}).get("seconds")
    grace = spec.get("terminationGracePeriodSeconds")
    drain_ms = serve.get("drain_timeout_ms")
    ceiling_ms = (serve.get("ceilings") or {}).get("timeout_ms")
    send_ms = (serve.get("connections") or {}).get("send_timeout_ms", 10000)
    if grace is None:
        check.fail(f"{dep_where}: terminationGracePeriodSeconds must be set (the default 30 s cuts a drain short)")
    if sleep is None:
        check.fail(f"{dep_where}: lifecycle.preStop.sleep.seconds must be set (endpoints forget the pod first)")
    if ceiling_ms is None:
        check.fail(f"{cm_where}: [ceilings] timeout_ms must be set: the drain and the grace period are sized on it")
    if drain_ms is None:
        check.fail(f"{cm_where}: drain_timeout_ms must be set")
    if None in (sleep, grace, drain_ms, ceiling_ms):
        return
    if drain_ms < ceiling_ms + send_ms:
        check.fail(f"{cm_where}: drain_timeout_ms {drain_ms} < ceiling {ceiling_ms} + send timeout {send_ms}: a run "
                   "started just before SIGTERM could be cut off")
    need = sleep + -(-drain_ms // 1000) + MARGIN_S
    if grace < need:
        check.fail(f"{dep_where}: terminationGracePeriodSeconds {grace} < preStop {sleep} s + drain "
                   f"{drain_ms / 1000:g} s + margin {MARGIN_S} s = {need} s: the kubelet would kill a draining daemon")
    else:
        print(f"check_manifests: grace {grace} s >= preStop {sleep} s + drain {drain_ms / 1000:g} s + margin "
              f"{MARGIN_S} s; drain {drain_ms / 1000:g} s >= ceiling {ceiling_ms / 1000:g} s + send timeout "
              f"{send_ms / 1000:g} s")

    if svc is not None:
        if svc["spec"].get("clusterIP") != "None":
            check.fail(f"{svc_where}: the Service must be headless (clusterIP: None)")
        selects(svc_where, {"matchLabels": svc["spec"].get("selector", {})})
        targets = {p.get("targetPort") for p in svc["spec"].get("ports", [])}
        if "execute" not in targets and ports.get("execute") not in targets:
            check.fail(f"{svc_where}: no port targets the execution listener")
    if np is not None:
        selects(np_where, np["spec"].get("podSelector"))
        if "Egress" not in np["spec"].get("policyTypes", []) or np["spec"].get("egress"):
            check.fail(f"{np_where}: must deny all egress (policyTypes has Egress, no egress rules)")
    if pdb is not None:
        selects(pdb_where, pdb["spec"].get("selector"))


def check_hpas(check, docs):
    for where, doc in docs:
        if doc.get("kind") != "HorizontalPodAutoscaler":
            continue
        spec = doc["spec"]
        if spec["scaleTargetRef"].get("kind") != "Deployment" or spec["scaleTargetRef"].get("name") != "codemode":
            check.fail(f"{where}: the HPA must scale the Deployment codemode")
        names = [m.get("pods", {}).get("metric", {}).get("name") for m in spec.get("metrics", [])]
        if names != [METRIC]:
            check.fail(f"{where}: the HPA must scale on the per-pod metric {METRIC}, not {names}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--venv", required=True)
    parser.add_argument("--root", default=os.path.join(HERE, "kustomize"))
    parser.add_argument("--install-only", action="store_true")
    args = parser.parse_args()

    venv = os.path.abspath(args.venv)
    if os.path.realpath(sys.prefix) != os.path.realpath(venv):
        python = ensure_venv(venv)
        os.execv(python, [python, os.path.abspath(__file__)] + sys.argv[1:])
    if args.install_only:
        return 0

    root = os.path.abspath(args.root)
    check = Check()
    dirs = kustomizations(root)
    if not dirs:
        check.fail(f"{root}: no kustomization.yaml under it")
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        print("check_manifests: kubectl is not installed: the kustomizations were NOT rendered; "
              "each listed file was validated alone", file=sys.stderr)
    rendered = 0
    all_docs = []
    for directory in dirs:
        docs = check_lists(check, root, directory)
        for where, doc in docs:
            check.validate(where, doc)
        all_docs += docs
        if os.path.relpath(directory, root) == "base":
            check_rules(check, docs)
        if kubectl is not None:
            rendered += render(check, root, directory, docs)
    if "base" not in [os.path.relpath(d, root) for d in dirs]:
        check.fail(f"{root}: no base/kustomization.yaml")
    check_hpas(check, all_docs)
    if not any(d.get("kind") == "HorizontalPodAutoscaler" for _, d in all_docs):
        check.fail(f"{root}: no HorizontalPodAutoscaler example")

    for failure in check.failures:
        print(f"check_manifests: FAILED: {failure}", file=sys.stderr)
    if check.failures:
        print(f"check_manifests: {len(check.failures)} failures", file=sys.stderr)
        return 1
    print(f"check_manifests: {len(all_docs)} documents in {len(dirs)} kustomizations"
          f"{f', {rendered} rendered by kubectl kustomize' if kubectl else ''}: "
          f"{check.validated} validations passed against Kubernetes {' and '.join(VERSIONS)} (strict)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
