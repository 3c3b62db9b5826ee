#!/usr/bin/env bash
# The gateway's own cost, both LLM paths, in one command: what BENCHMARKS.md's "Gateway-added
# latency" and "Gateway in front of external engines" rows measure, re-run together on the
# current build so that a change to the gateway (the dispatch seam, admission, fair sharing)
# can be checked against them.
#   1. `loadtest gateway-latency` (50 simulated devices over QUIC on loopback, an in-process
#      gateway with a fixed-cost backend, its `Ping` round trips the same-run baseline), at a
#      0 ms and a 5 ms backend, ROUNDS times each.
#   2. `deploy/bench/engines.sh` at ENGINE_CONFIGS (default "16:32:6", its first session count:
#      the embedded ONNX LLM, llama-server -np 1 and -np 8, the same requests `--direct`, sticky
#      and round-robin over two workers), with its own same-run ratios.
# Prints the commit, the machine's load before each part, and both Markdown tables; JSON
# reports stay in $OUT.
#
# Usage: deploy/bench/gateway.sh    (ROUNDS=3 ENGINE_CONFIGS="16:32:6" OUT=dir)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
export DUET_HOME="${DUET_HOME:-$HOME/.cache/duet}"
rounds="${ROUNDS:-3}"
engine_configs="${ENGINE_CONFIGS:-16:32:6}"
out="${OUT:-$(mktemp -d -t duet-gateway-XXXXXX)}"
mkdir -p "$out"
say() { echo "[gateway $(date +%H:%M:%S)] $*" >&2; }

cargo build --release -q --locked -p loadtest
echo "commit $(git rev-parse --short HEAD), $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores"
echo
echo "gateway-latency: load before: $(uptime | sed 's/.*load average: //')"
for r in $(seq 1 "$rounds"); do
  for cost in 0 5; do
    say "gateway-latency round $r, backend $cost ms"
    target/release/loadtest --log error gateway-latency --devices 50 --sessions 2 --escalations 40 --cost-ms "$cost" \
      >"$out/latency-$cost-$r.json"
  done
done
python3 - "$out" "$rounds" <<'PY'
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
print()
print("| backend | escalation p50 / p99 ms | ping p50 / p99 ms | added over the backend p50 / p99 ms | escalations/s | frame bytes after the first |")
print("|---|---|---|---|---|---|")
for cost in (0, 5):
    runs = [json.load(open(f"{out}/latency-{cost}-{r}.json")) for r in range(1, rounds + 1)]
    med = lambda k: statistics.median(x[k] for x in runs)
    each = lambda k: ", ".join(f"{x[k]:.2f}" for x in runs)
    print(f"| {cost} ms (median of {rounds}) | {med('escalation_p50_ms'):.2f} / {med('escalation_p99_ms'):.2f} | "
          f"{med('ping_p50_ms'):.2f} / {med('ping_p99_ms'):.2f} | {med('added_over_backend_p50_ms'):.2f} / {med('added_over_backend_p99_ms'):.2f} | "
          f"{med('escalations_per_s'):,.0f} | {med('avg_escalation_frame_bytes_after_first'):.1f} |")
    print(f"| {cost} ms, each run: p99 | {each('escalation_p99_ms')} | | | | |")
PY
echo
echo "engines: load before: $(uptime | sed 's/.*load average: //')"
OUT="$out/engines" deploy/bench/engines.sh "$engine_configs"
