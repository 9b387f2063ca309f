#!/usr/bin/env bash
# The podman job (issue 19, item 7): `podman kube play` of the base Deployment on the locally built image; checks PID 1, the read-only root, and a drain mid-run.
#
# usage: executor/deploy/podman/podman-check.sh [--binary PATH]
#
# Not part of `cargo xtask ci` (it needs podman, rootful, and a release build). Needs
# podman, runc or crun, openssl and python3 (`apt-get install podman runc openssl`).
# It builds the image with ../build-image.sh (from --binary, or a release build), makes a
# CA, a server certificate for codemode.default.svc and a token, and plays the base's
# ConfigMap and Deployment (one replica, hostNetwork so the checks reach it on
# 127.0.0.1), with the token and TLS files bound where the Secrets would be. Then:
#   1. PID 1 is tini, its child the daemon, both uid 65532 with no capabilities, and
#      mid-run, process isolation's `codemode stdio` workers are the daemon's children;
#   2. the root is read-only (a write through /proc/PID/root fails with EROFS);
#   3. metrics and drain (drain_client.py, the wire protocol over TLS): /metrics names
#      the metrics docs/deploy.md lists; an execution waits on a call (in flight: 1);
#      `podman stop` sends SIGTERM while it runs; the connection is told `draining`, a
#      new execute is refused, /readyz turns 503 (codemode_draining 1); the call is
#      answered, the run completes with its result, and the container exits 0 by
#      itself, before the stop timeout.
# Everything runs on 127.0.0.1. The pod is removed at the end, whatever happened.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
deploy="$(cd "$here/.." && pwd)"
root="$(cd "$deploy/../.." && pwd)"
target="${CARGO_TARGET_DIR:-$root/target}"
binary=""
while [ $# -gt 0 ]; do
  case "$1" in
    --binary) binary="$2"; shift 2 ;;
    *) echo "usage: $0 [--binary PATH]" >&2; exit 2 ;;
  esac
done

say() { echo "podman-check: $*" >&2; }
passed=0
pass() { passed=$((passed + 1)); say "ok: $*"; }
fail() { say "FAILED: $*"; say "$passed passed, 1 failed"; exit 1; }

for tool in podman openssl python3; do
  command -v "$tool" >/dev/null || fail "$tool is not installed (apt-get install podman runc openssl): nothing was checked"
done
[ "$(id -u)" = 0 ] || fail "run it as root (rootful podman): nothing was checked"

work="$target/deploy/podman-check"
rm -rf "$work"
mkdir -p "$work"

# This machine's podman defaults may not fit the host: crun 1.8 refuses a hybrid cgroup
# hierarchy (runc does not), and podman's default ulimits (the maximum) are refused
# where the limits are lower, as in this project's sandbox.
{
  echo "[containers]"
  echo 'default_ulimits = ["nofile=16384:16384", "nproc=4096:4096"]'
  if [ -d /sys/fs/cgroup/unified ] && command -v runc >/dev/null; then
    echo "[engine]"
    echo "runtime = \"runc\""
  fi
} >"$work/containers.conf"
export CONTAINERS_CONF="$work/containers.conf"

image="localhost/codemode:latest"
"$deploy/build-image.sh" ${binary:+--binary "$binary"} --tag "$image" >/dev/null

# A CA, a certificate for the Service's names (and 127.0.0.1), a token.
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj "/CN=codemode test CA" \
  -keyout "$work/ca.key" -out "$work/ca.pem" 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=codemode.default.svc" \
  -keyout "$work/tls.key" -out "$work/tls.csr" 2>/dev/null
printf 'subjectAltName=DNS:codemode.default.svc,DNS:codemode.default.svc.cluster.local,IP:127.0.0.1\n' >"$work/san.ext"
openssl x509 -req -in "$work/tls.csr" -CA "$work/ca.pem" -CAkey "$work/ca.key" -CAcreateserial -days 2 \
  -extfile "$work/san.ext" -out "$work/tls.crt" 2>/dev/null
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$work/token"

# Debian's podman 4.3 crashes on a secret volume (a nil dereference in
# VolumeFromSecret), so the two Secrets are directories bound in their place, holding
# the same files with the modes a Secret volume gives them (owner 65532, 0440).
mkdir -p "$work/secrets/token" "$work/secrets/tls"
cp "$work/token" "$work/secrets/token/token"
cp "$work/tls.crt" "$work/tls.key" "$work/secrets/tls/"
chown -R 65532:65532 "$work/secrets"
chmod 0440 "$work/secrets"/*/*
{
  cat "$deploy/kustomize/base/configmap.yaml"
  echo "---"
  sed 's/^  replicas: 3$/  replicas: 1/' "$deploy/kustomize/base/deployment.yaml"
} >"$work/kube.yaml"
python3 - "$work" <<'PY' || fail "the base Deployment's secret volumes changed; update this script"
import sys
work = sys.argv[1]
path = f"{work}/kube.yaml"
text = open(path).read()
for name, secret in (("token", "codemode-token"), ("tls", "codemode-tls")):
    old = (f"        - name: {name}\n          secret:\n            secretName: {secret}\n"
           f"            defaultMode: 0440\n")
    new = f"        - name: {name}\n          hostPath:\n            path: {work}/secrets/{name}\n            type: Directory\n"
    assert text.count(old) == 1, old
    text = text.replace(old, new)
# The host's network, so the checks reach the pod on 127.0.0.1 and nothing else.
old = "      automountServiceAccountToken: false\n"
assert text.count(old) == 1, old
text = text.replace(old, old + "      hostNetwork: true\n")
# Podman 4.3 turns containerPorts into port mappings, which host networking refuses;
# on the host's network the ports are the host's anyway.
start, end = text.index("          ports:\n"), text.index("          startupProbe:\n")
text = text[:start] + text[end:]
open(path, "w").write(text)
PY
grep -q '^  replicas: 1$' "$work/kube.yaml" || fail "the base Deployment's replicas line changed; update this script"

cleanup() {
  podman kube down "$work/kube.yaml" >/dev/null 2>&1 || true
}
trap cleanup EXIT
podman kube play --replace "$work/kube.yaml" >"$work/play.log" 2>&1 || { cat "$work/play.log" >&2; fail "podman kube play failed"; }
ctr="$(podman ps --format '{{.Names}}' | grep -- '-codemode$' | head -1)"
[ -n "$ctr" ] || fail "no codemode container is running after podman kube play: $(cat "$work/play.log")"
say "playing $ctr from $work/kube.yaml"

# The admin listener answers once the daemon has started.
for _ in $(seq 1 100); do
  python3 -c 'import urllib.request,sys; urllib.request.urlopen("http://127.0.0.1:9090/readyz", timeout=1)' 2>/dev/null && break
  sleep 0.2
done

pid="$(podman inspect --format '{{.State.Pid}}' "$ctr")"
cmdline() { tr '\0' ' ' <"/proc/$1/cmdline" | sed 's/ $//'; }
field() { awk -v f="$2:" '$1 == f { print $2 }' "/proc/$1/status"; }
[ "$(cmdline "$pid")" = "/usr/bin/tini -- /usr/local/bin/codemode serve --config /etc/codemode/serve.toml --admin 0.0.0.0:9090" ] \
  || fail "PID 1 is \`$(cmdline "$pid")\`, not tini running the daemon"
daemon="$(cat "/proc/$pid/task/$pid/children" | tr -s ' ' '\n' | grep . | head -1)"
[ -n "$daemon" ] && [ "$(cmdline "$daemon")" = "/usr/local/bin/codemode serve --config /etc/codemode/serve.toml --admin 0.0.0.0:9090" ] \
  || fail "tini's child is not the daemon: ${daemon:+$(cmdline "$daemon")}"
pass "PID 1 is tini ($(cmdline "$pid")), its child the daemon"
for p in "$pid" "$daemon"; do
  [ "$(field "$p" Uid)" = 65532 ] || fail "process $p runs as uid $(field "$p" Uid), not 65532"
  [ "$(field "$p" CapEff)" = 0000000000000000 ] || fail "process $p has capabilities $(field "$p" CapEff)"
done
pass "tini and the daemon run as uid 65532 with no effective capabilities"
if touch "/proc/$pid/root/podman-check-probe" 2>"$work/touch.err"; then
  fail "wrote /podman-check-probe into the container's root"
fi
grep -q "Read-only file system" "$work/touch.err" || fail "writing the root failed otherwise: $(cat "$work/touch.err")"
[ "$(podman inspect --format '{{.HostConfig.ReadonlyRootfs}}' "$ctr")" = true ] || fail "the container's root is not read-only"
pass "the root is read-only (a write fails: $(sed 's/.*: //' "$work/touch.err"))"

python3 "$here/drain_client.py" --address 127.0.0.1:7700 --ca "$work/ca.pem" --server-name codemode.default.svc \
  --token-file "$work/token" --admin 127.0.0.1:9090 --worker-parent "$daemon" \
  --stop "podman stop --time 150 $ctr" || fail "the drain (see the lines above)"
code="$(podman inspect --format '{{.State.ExitCode}}' "$ctr")"
podman logs "$ctr" >"$work/daemon.log" 2>&1 || true
[ "$code" = 0 ] || fail "the daemon exited $code after the drain (log: $work/daemon.log)"
pass "SIGTERM mid-run: the execution completed, the daemon exited 0 by itself"
say "$passed passed, 0 failed"
