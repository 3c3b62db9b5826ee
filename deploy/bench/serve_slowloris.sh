#!/usr/bin/env bash
# `edge-node serve` under slow-header ("slowloris") sockets: starts the server with a small
# descriptor limit, measures a normal request's latency alone, then opens SOCKETS sockets that
# each send part of a request header and trickle one more byte a second (reopened when the
# server closes them), and measures the same request again while they are held (for HOLD_S
# seconds at least, default 40), and once more after they are gone. Reports the
# normal request's p50/p99 and failures in both phases, the sockets the server closed or
# refused, and the server's RSS before, at the end of the attack, and after it.
#
# Usage: deploy/bench/serve_slowloris.sh [SOCKETS] [REQUESTS]    (default 3000 and 40 per phase)
# Environment: MODEL (default the shipped SLM, qwen2.5-coder-0.5b-instruct), NOFILE (the
# server's descriptor limit, default 1024), BIN (a folder with edge-node; default: build
# target/release), and any serve flag as its DUET_SERVE_* variable.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
export DUET_HOME="${DUET_HOME:-$HOME/.cache/duet}"
sockets="${1:-3000}"
requests="${2:-40}"
model="${MODEL:-qwen2.5-coder-0.5b-instruct}"
nofile="${NOFILE:-1024}"
if [ -z "${BIN:-}" ]; then
  cargo build --release -q --locked -p edge-node
  BIN="$root/target/release"
fi
say() { echo "[slowloris $(date +%H:%M:%S)] $*" >&2; }

port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
log="$(mktemp -t duet-slowloris-XXXXXX.log)"
(ulimit -n "$nofile"; exec "$BIN/edge-node" serve --model "$model" --mode local --listen "127.0.0.1:$port") >"$log" 2>&1 &
server=$!
trap 'kill "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true' EXIT
say "edge-node serve (pid $server, descriptor limit $nofile, model $model) on port $port; log $log"
say "machine: $(nproc) cores, $(uptime | sed 's/.*load/load/')"

python3 - "$port" "$server" "$sockets" "$requests" "${HOLD_S:-40}" <<'PY'
import http.client, json, resource, socket, sys, threading, time

port, pid, n_sockets, n_requests, hold_s = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, n_sockets + 1024), hard))

def rss_mb():
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")

def request():
    """One normal completion: its latency in seconds, or None when it failed."""
    started = time.monotonic()
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        body = json.dumps({"model": "duet", "prompt": "def add(a, b):", "max_tokens": 1, "temperature": 0})
        c.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
        r = c.getresponse()
        r.read()
        c.close()
        return time.monotonic() - started if r.status == 200 else None
    except OSError:
        return None

deadline = time.monotonic() + 120
while request() is None:
    if time.monotonic() > deadline:
        sys.exit("serve did not come up")
    time.sleep(0.2)

def phase(name, at_least_s=0.0):
    started, times = time.monotonic(), []
    while len(times) < n_requests or time.monotonic() - started < at_least_s:
        times.append(request())
    n = len(times)
    ok = sorted(t for t in times if t is not None)
    q = lambda p: ok[min(len(ok) - 1, int(p * len(ok)))] * 1e3 if ok else float("nan")
    return {"phase": name, "requests": n, "failed": n - len(ok), "p50_ms": q(0.5), "p99_ms": q(0.99), "max_ms": ok[-1] * 1e3 if ok else float("nan")}

rss_before = rss_mb()
alone = phase("alone")

stop = threading.Event()
counts = {"opened": 0, "closed_by_server": 0, "connect_failed": 0}
held = []

def open_one():
    s = socket.socket()
    s.settimeout(2)
    try:
        s.connect(("127.0.0.1", port))
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nX-a: ")
        s.setblocking(False)
        counts["opened"] += 1
        return s
    except OSError:
        counts["connect_failed"] += 1
        s.close()
        return None

def attack():
    for _ in range(n_sockets):
        if stop.is_set():
            return
        held.append(open_one())
    while not stop.is_set():
        for i, s in enumerate(held):
            if s is None:
                held[i] = open_one()
                continue
            try:
                if s.recv(4096) == b"":
                    raise ConnectionResetError
            except BlockingIOError:
                try:
                    s.send(b"a")
                    continue
                except OSError:
                    pass
            except OSError:
                pass
            counts["closed_by_server"] += 1
            s.close()
            held[i] = open_one()
        stop.wait(1.0)

attacker = threading.Thread(target=attack, daemon=True)
attacker.start()
while counts["opened"] + counts["connect_failed"] < n_sockets:
    time.sleep(0.1)
opened_at = time.monotonic()
under = phase("under attack", hold_s)
rss_attack = rss_mb()
held_for = time.monotonic() - opened_at
stop.set()
attacker.join()
for s in held:
    if s is not None:
        s.close()
time.sleep(2)
after = phase("after")
report = {"sockets": n_sockets, "attack_s": round(held_for, 1), **counts,
          "rss_mb": {"before": round(rss_before, 1), "under_attack": round(rss_attack, 1), "after": round(rss_mb(), 1)},
          "phases": [alone, under, after]}
print(json.dumps(report, indent=1))
print()
print("| phase | requests | failed | p50 ms | p99 ms | max ms |")
print("|---|---|---|---|---|---|")
for p in report["phases"]:
    print(f"| {p['phase']} | {p['requests']} | {p['failed']} | {p['p50_ms']:.0f} | {p['p99_ms']:.0f} | {p['max_ms']:.0f} |")
print(f"\nsockets {n_sockets}: opened {counts['opened']} (reopened included), closed by the server {counts['closed_by_server']}, connect failed {counts['connect_failed']}; "
      f"RSS {report['rss_mb']['before']} MB before, {report['rss_mb']['under_attack']} MB under attack, {report['rss_mb']['after']} MB after")
PY
grep -c "accepting a connection" "$log" | sed 's/^/server accept errors logged: /' >&2 || true
