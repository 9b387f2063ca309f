#!/usr/bin/env python3
# A wire-protocol client over TLS for podman-check.sh: starts an execution, has the daemon SIGTERMed while it waits on a call, and checks the run still completes.
"""usage: drain_client.py --address HOST:PORT --ca CA.pem --server-name NAME --token-file FILE
                       --admin HOST:PORT --stop "COMMAND ..." [--worker-parent PID]
                       [--ready-timeout S]

1. Waits until GET http://ADMIN/readyz answers 200.
2. Connects with TLS (the CA verified, NAME as the server name), sends the hello with
   the token (wire version 2), runs `6 * 7`, checks /metrics names the metrics
   docs/deploy.md lists, and executes a program that calls host.wait() and then
   returns "drained".
3. When the daemon sends that call, the execution is certainly running: it checks that
   codemode_executions_in_flight is 1 and, with --worker-parent, that this process (the
   daemon, as the host sees it) has a `codemode stdio` child, the process-isolation
   worker running the program, every thread of it with no-new-privileges, a seccomp
   filter and no capabilities (docs/security.md); then it runs --stop (e.g. `podman stop`, which sends
   SIGTERM to PID 1) in the background.
4. Expects the daemon's `draining` message on the connection, then a `refused` (reason
   draining) for a second execute sent after it; waits until /readyz answers 503 (the
   admin listener stays up while draining) and checks codemode_draining is 1; a second
   later, with the daemon still alive, answers the call.
5. Expects the outcome {"result":"drained"} on the same connection, then waits for the
   stop command and prints how long it took and its exit code.

Prints one line per step; exits 0 only if every step happened as said.
"""
import argparse
import json
import os
import shlex
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request

# What docs/deploy.md and the HPA name; each present once an execution has ended.
METRICS = ["codemode_executions_total", "codemode_execution_duration_seconds", "codemode_executions_in_flight",
           "codemode_engines_live", "codemode_connections_open", "codemode_draining", "codemode_build_info"]
PROGRAM = 'async () => { const got = await host.wait(); return got.ok ? "drained" : "no"; }'


def say(text):
    print(f"drain_client: {text}", flush=True)


def readyz(admin):
    try:
        with urllib.request.urlopen(f"http://{admin}/readyz", timeout=2) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except (urllib.error.URLError, OSError):
        return None


def children(pid):
    """A process's children as the host sees them: (pid, command line)."""
    found = []
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/children") as f:
            for child in f.read().split():
                with open(f"/proc/{child}/cmdline", "rb") as c:
                    found.append((int(child), c.read().replace(b"\0", b" ").decode().strip()))
    return found


def confinement(pid, parent):
    """What the kernel says of a worker's confinement (docs/security.md), every thread."""
    threads = []
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/status") as f:
            status = dict(line.split(":", 1) for line in f.read().splitlines() if ":" in line)
        threads.append({k: status[k].strip() for k in ("NoNewPrivs", "Seccomp", "CapEff", "CapBnd")})
    own_userns = os.readlink(f"/proc/{pid}/ns/user") != os.readlink(f"/proc/{parent}/ns/user")
    return threads, own_userns


def metrics(admin):
    """GET /metrics: each sample's name with its labels, and its value."""
    with urllib.request.urlopen(f"http://{admin}/metrics", timeout=2) as r:
        text = r.read().decode()
    samples = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            samples[name] = float(value)
    return samples


def value(samples, name):
    """The value of an unlabelled sample, or None."""
    return samples.get(name)


def has(samples, name):
    return any(s == name or s.startswith(name + "{") or s.startswith(name + "_bucket{") for s in samples)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--address", required=True)
    p.add_argument("--ca", required=True)
    p.add_argument("--server-name", required=True)
    p.add_argument("--token-file", required=True)
    p.add_argument("--admin", required=True)
    p.add_argument("--stop", required=True)
    p.add_argument("--worker-parent", type=int)
    p.add_argument("--ready-timeout", type=float, default=60)
    a = p.parse_args()

    deadline = time.monotonic() + a.ready_timeout
    while readyz(a.admin) != 200:
        if time.monotonic() > deadline:
            sys.exit(f"drain_client: /readyz on {a.admin} did not answer 200 within {a.ready_timeout:g} s")
        time.sleep(0.2)
    say(f"/readyz on {a.admin} answers 200")

    host, port = a.address.rsplit(":", 1)
    context = ssl.create_default_context(cafile=a.ca)
    raw = socket.create_connection((host, int(port)), timeout=30)
    conn = context.wrap_socket(raw, server_hostname=a.server_name)
    say(f"TLS to {a.address} verified against the CA as {a.server_name} ({conn.version()})")
    reader = conn.makefile("r", encoding="utf-8", newline="\n")

    def send(message):
        conn.sendall((json.dumps(message) + "\n").encode())

    def receive():
        line = reader.readline()
        if not line:
            sys.exit("drain_client: the daemon closed the connection")
        return json.loads(line)

    token = open(a.token_file).read().strip()
    send({"type": "hello", "protocol": "codemode", "version": 2, "token": token})
    hello = receive()
    if hello.get("type") != "hello" or hello.get("version") != 2:
        sys.exit(f"drain_client: expected the daemon's hello of version 2, got {hello}")
    send({"type": "execute", "execution": 10, "request": {"code": "async () => 6 * 7"}})
    first = receive()
    if first.get("type") != "outcome" or first["outcome"].get("result") != 42:
        sys.exit(f"drain_client: expected the outcome 42, got {first}")
    samples = metrics(a.admin)
    missing = [n for n in METRICS if not has(samples, n)]
    if missing:
        sys.exit(f"drain_client: /metrics lacks {missing}")
    say(f"/metrics has {', '.join(METRICS)}")
    send({"type": "execute", "execution": 1,
          "request": {"code": PROGRAM, "providers": [{"name": "host", "tools": ["wait"]}], "dispatch": True,
                      "timeoutMs": 60000}})
    call = receive()
    if call.get("type") != "call" or call.get("tool") != "wait":
        sys.exit(f"drain_client: expected the call host.wait, got {call}")
    in_flight = value(metrics(a.admin), "codemode_executions_in_flight")
    if in_flight != 1:
        sys.exit(f"drain_client: codemode_executions_in_flight is {in_flight} with one execution live, not 1")
    say("the execution is running and waits on host.wait(); codemode_executions_in_flight is 1")
    if a.worker_parent:
        workers = [(p, c) for p, c in children(a.worker_parent) if c.startswith("/usr/local/bin/codemode stdio ")]
        if not workers:
            sys.exit(f"drain_client: the daemon (pid {a.worker_parent}) has no `codemode stdio` child mid-run")
        say(f"ok: {len(workers)} process-isolation worker(s) are the daemon's children mid-run: {workers[0][1]}")
        for pid, _ in workers:
            threads, own_userns = confinement(pid, a.worker_parent)
            unconfined = [t for t in threads if t["NoNewPrivs"] != "1" or t["Seccomp"] != "2"
                          or t["CapEff"] != "0000000000000000" or t["CapBnd"] != "0000000000000000"]
            if unconfined:
                sys.exit(f"drain_client: worker {pid} has threads not confined: {unconfined}")
        say(f"ok: every thread of every worker has NoNewPrivs 1, Seccomp 2 (filter), no capabilities, an "
            f"empty bounding set; user namespace: {'its own' if own_userns else 'the pod’s (refused here)'}")
    say("stopping the daemon: " + a.stop)
    started = time.monotonic()
    stop = subprocess.Popen(shlex.split(a.stop), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    message = receive()
    if message != {"type": "draining"}:
        sys.exit(f"drain_client: expected the daemon's draining message after SIGTERM, got {message}")
    say(f"{time.monotonic() - started:.1f} s after SIGTERM the daemon says it is draining")
    send({"type": "execute", "execution": 2, "request": {"code": "async () => 1"}})
    message = receive()
    if message.get("type") != "refused" or message.get("execution") != 2 or message.get("reason") != "draining":
        sys.exit(f"drain_client: expected execution 2 refused for draining, got {message}")
    say(f"a new execute is refused: {message['message']}")
    status = readyz(a.admin)
    while status != 503:
        if stop.poll() is not None:
            sys.exit(f"drain_client: the daemon stopped ({stop.returncode}) while an execution was live: "
                     f"{stop.stdout.read().strip()}")
        if time.monotonic() - started > 30:
            sys.exit(f"drain_client: /readyz answers {status or 'nothing'}, not 503, 30 s after SIGTERM")
        time.sleep(0.1)
        status = readyz(a.admin)
    draining = value(metrics(a.admin), "codemode_draining")
    if draining != 1:
        sys.exit(f"drain_client: codemode_draining is {draining} while draining, not 1")
    say(f"{time.monotonic() - started:.1f} s after SIGTERM /readyz answers 503 and codemode_draining is 1")
    time.sleep(1)
    if stop.poll() is not None:
        sys.exit(f"drain_client: the daemon exited ({stop.returncode}) with the execution still live")
    send({"type": "answer", "execution": 1, "call": call["call"], "answer": json.dumps({"result": {"ok": True}})})
    outcome = receive()
    if outcome.get("type") != "outcome" or outcome["outcome"].get("result") != "drained":
        sys.exit(f"drain_client: expected the outcome {{'result': 'drained'}}, got {outcome}")
    say(f"the execution completed during the drain: {json.dumps(outcome['outcome'])}")
    output, _ = stop.communicate(timeout=300)
    say(f"`{a.stop}` returned {stop.returncode} {time.monotonic() - started:.1f} s after SIGTERM: "
        f"{output.strip()}")
    return 0 if stop.returncode == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
