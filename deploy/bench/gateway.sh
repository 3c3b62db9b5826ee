#!/usr/bin/env bash
# The gateway's own cost, both LLM paths, in one command: what docs/src/benchmarks/gateway.md's
# "Gateway-added latency on a fixed-cost backend" and docs/src/benchmarks/engines.md's rows
# measure, re-run together on the
# current build so that a change to the gateway (the dispatch seam, admission, fair sharing)
# can be checked against them.
#   1. `loadtest gateway-latency` (50 simulated devices over QUIC on loopback, an in-process
#      gateway with a fixed-cost backend, its `Ping` round trips the same-run baseline), at a
#      0 ms and a 5 ms backend, ROUNDS times each (default 9: a round takes about a second,
#      and the spread between medians of 3 was as wide as the fair-sharing cost it measures).
#   2. `deploy/bench/engines.sh` at ENGINE_CONFIGS (default "16:32:6", its first session count:
#      the embedded ONNX LLM, llama-server -np 1 and -np 8, the same requests `--direct`, sticky
#      and round-robin over two workers), with its own same-run ratios.
# Prints the commit, the machine's load before each part, and both Markdown tables; JSON
# reports stay in $OUT.
#
# BASELINE=COMMIT adds a same-run baseline of an older build, so that the host's speed (which
# moves more between machines than the gateway's own cost does) drops out of the comparison:
# that commit's loadtest is built once in a worktree under $DUET_HOME/bench/baseline-COMMIT
# (its target seeded from this one's, so only the workspace's crates compile), each
# gateway-latency round at 0 ms runs this build, this build with `--fair-share off` (fair
# sharing reorders the queue, which moves the tail), and then that one, all with the same cost
# cap (32 tokens, the gateway's default; a loadtest old enough to lack `--max-batch-tokens`
# always used it, a newer one is given it), and the engine rows
# (embedded; llama-server -np 8 through the gateway and --direct, twice each) run three times:
# this build, this build with `--engine-admission off`, that build.
#
# PARTS (default "latency engines") runs only some parts.
#
# Usage: deploy/bench/gateway.sh    (ROUNDS=9 ENGINE_CONFIGS="16:32:6" OUT=dir BASELINE=commit PARTS=latency)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
export DUET_HOME="${DUET_HOME:-$HOME/.cache/duet}"
rounds="${ROUNDS:-9}"
parts=" ${PARTS:-latency engines} "
for part in $parts; do
  case "$part" in latency | engines) ;; *) echo "PARTS: unknown part '$part' (latency engines)" >&2; exit 2 ;; esac
done
engine_configs="${ENGINE_CONFIGS:-16:32:6}"
out="${OUT:-$(mktemp -d -t duet-gateway-XXXXXX)}"
mkdir -p "$out"
say() { echo "[gateway $(date +%H:%M:%S)] $*" >&2; }

cargo build --release -q --locked -p loadtest
base_bin=""
if [ -n "${BASELINE:-}" ]; then
  commit="$(git rev-parse --short "$BASELINE")"
  base="$DUET_HOME/bench/baseline-$commit"
  if [ ! -d "$base/src" ]; then
    mkdir -p "$base"
    git worktree add --detach "$base/src" "$commit" >&2
  fi
  [ -d "$base/target" ] || { say "seeding $base/target from target/"; cp -a target "$base/target"; }
  say "building $commit's loadtest in $base"
  (cd "$base/src" && CARGO_TARGET_DIR="$base/target" cargo build --release -q --locked -p loadtest)
  base_bin="$base/target/release/loadtest"
  base_cap=()
  "$base_bin" gateway-latency --help 2>/dev/null | grep -q -- --max-batch-tokens && base_cap=(--max-batch-tokens 32)
fi
echo "commit $(git rev-parse --short HEAD), $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores"
echo
if [[ "$parts" == *" latency "* ]]; then
echo "gateway-latency: load before: $(uptime | sed 's/.*load average: //')"
for r in $(seq 1 "$rounds"); do
  for cost in 0 5; do
    say "gateway-latency round $r, backend $cost ms"
    target/release/loadtest --log error gateway-latency --devices 50 --sessions 2 --escalations 40 --cost-ms "$cost" \
      >"$out/latency-$cost-$r.json"
    if [ -n "$base_bin" ] && [ "$cost" = 0 ]; then
      say "gateway-latency round $r, backend 0 ms: this build with the 32-token cap, then $commit"
      target/release/loadtest --log error gateway-latency --devices 50 --sessions 2 --escalations 40 --cost-ms 0 \
        --max-batch-tokens 32 >"$out/capped-latency-0-$r.json"
      target/release/loadtest --log error gateway-latency --devices 50 --sessions 2 --escalations 40 --cost-ms 0 \
        --max-batch-tokens 32 --fair-share off >"$out/unfair-latency-0-$r.json"
      "$base_bin" --log error gateway-latency --devices 50 --sessions 2 --escalations 40 --cost-ms 0 \
        "${base_cap[@]}" >"$out/baseline-latency-0-$r.json"
    fi
  done
done
python3 - "$out" "$rounds" "${commit:-}" <<'PY'
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
if len(sys.argv) > 3 and sys.argv[3]:
    base = sys.argv[3]
    print()
    print("Same-run baseline, backend 0 ms, 32-token cost cap in both (rounds interleaved):")
    print()
    print("| build | escalation p50 / p99 ms | ping p50 / p99 ms | escalation minus ping p50 ms | escalations/s |")
    print("|---|---|---|---|---|")
    for name, prefix in (("this build", "capped-latency"), ("this build, --fair-share off", "unfair-latency"), (base, "baseline-latency")):
        runs = [json.load(open(f"{out}/{prefix}-0-{r}.json")) for r in range(1, rounds + 1)]
        med = lambda k: statistics.median(x[k] for x in runs)
        gap = statistics.median(x["escalation_p50_ms"] - x["ping_p50_ms"] for x in runs)
        p99s = ", ".join(f"{x['escalation_p99_ms']:.2f}" for x in runs)
        print(f"| {name} (median of {rounds}; p99 of each: {p99s}) | "
              f"{med('escalation_p50_ms'):.2f} / {med('escalation_p99_ms'):.2f} | {med('ping_p50_ms'):.2f} / {med('ping_p99_ms'):.2f} | "
              f"{gap:.2f} | {med('escalations_per_s'):,.0f} |")
PY
fi
[[ "$parts" == *" engines "* ]] || exit 0
echo
echo "engines: load before: $(uptime | sed 's/.*load average: //')"
if [ -z "$base_bin" ]; then
  OUT="$out/engines" deploy/bench/engines.sh "$engine_configs"
else
  echo "### this build"
  OUT="$out/engines" ROWS="embedded np8" deploy/bench/engines.sh "$engine_configs"
  echo "### this build, --engine-admission off"
  OUT="$out/engines-admission-off" ROWS="np8" GATEWAY_ARGS="--engine-admission off" deploy/bench/engines.sh "$engine_configs"
  echo "### $commit"
  OUT="$out/engines-$commit" ROWS="embedded np8" LOADTEST="$base_bin" deploy/bench/engines.sh "$engine_configs"
fi
