#!/usr/bin/env bash
# What per-device identity costs at connection time: `loadtest handshake`, two
# gateways in one process (the shared-token dev mode, and mutual TLS with a fleet CA and a
# 1000-entry deny list), devices that connect, say Hello, read Welcome and close: shared token
# with full handshakes (the baseline), shared token resuming TLS sessions, and mutual TLS (the
# gateway never resumes under mTLS), in alternating rounds. Prints connections/s, handshake latency and CPU per handshake (device
# and gateway together) per mode and their ratio; repeats ROUNDS times in fresh processes and
# keeps every JSON report in $OUT.
#
# Usage: deploy/bench/handshake.sh [loadtest handshake flags]
#   default "--connections 2000 --concurrency 16 --rounds 4"; ROUNDS (default 3), OUT.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
export DUET_HOME="${DUET_HOME:-$HOME/.cache/duet}"
rounds="${ROUNDS:-3}"
out="${OUT:-$(mktemp -d -t duet-handshake-XXXXXX)}"
mkdir -p "$out"
if [ $# -gt 0 ]; then flags=("$@"); else flags=(--connections 2000 --concurrency 16 --rounds 4); fi

say() { echo "[handshake $(date +%H:%M:%S)] $*" >&2; }

cargo build --release -q --locked -p loadtest
say "reports in $out; machine: $(nproc) cores, $(uptime | sed 's/.*load/load/')"
for r in $(seq 1 "$rounds"); do
  say "run $r"
  target/release/loadtest --log error handshake "${flags[@]}" >"$out/handshake-$r.json"
done

python3 - "$out" "$rounds" <<'PY'
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
runs = [json.load(open(f"{out}/handshake-{r}.json")) for r in range(1, rounds + 1)]
def med(mode, key):
    return statistics.median(run[mode][key] for run in runs)
print("| mode | connections/s | p50 ms | p99 ms | CPU ms/handshake | failures |")
print("|---|---|---|---|---|---|")
for mode, name in [("shared_token", "shared token, full handshake"), ("shared_token_resumed", "shared token, TLS session resumed"), ("mutual_tls", "mutual TLS (fleet CA + 1000-entry deny list), full")]:
    fails = sum(run[mode]["failures"] for run in runs)
    print(f"| {name} | {med(mode,'connections_per_s'):.0f} | {med(mode,'handshake_p50_ms'):.2f} | {med(mode,'handshake_p99_ms'):.2f} | {med(mode,'cpu_ms_per_handshake'):.2f} | {fails} |")
rate = statistics.median(run["mtls_over_token_rate"] for run in runs)
cpu = statistics.median(run["mtls_over_token_cpu"] for run in runs)
print(f"\nmTLS / shared token: connections/s x{rate:.2f}, CPU per handshake x{cpu:.2f} (medians of {rounds} runs)")
print("every run (token full / token resumed / mtls connections/s):", ", ".join(f"{run['shared_token']['connections_per_s']:.0f}/{run['shared_token_resumed']['connections_per_s']:.0f}/{run['mutual_tls']['connections_per_s']:.0f}" for run in runs))
PY
