#!/usr/bin/env bash
# The engine path under 3x overload, admission by cost against the count bound alone:
# one llama-server (built by deploy/engines/llamacpp/build; GGUF $MODEL, one thread, 4 slots)
# and `loadtest abuse --scenarios engine-overload` (a cloud-gateway process relaying to it:
# 48 sessions, the engine's capacity measured in the same shape, then escalations arriving at
# 3x it with 1 s deadlines for $SECS s). Each round runs the gateway with --engine-admission=cost
# and then =off, one after the other against the same engine. Prints a Markdown row per run
# (the uptime before each); the JSON reports go to $OUT.
#
# ADMISSIONS picks the settings each round runs, in order (default "cost off"); `base` is
# admission by cost in the cloud-gateway binary at BASE_BIN (one built from an earlier commit),
# for a same-run comparison with this build.
#
# Usage: deploy/bench/engine_admission.sh        (RUNS=3 SECS=15 MODEL=qwen2.5-coder-0.5b-instruct
#   ADMISSIONS="cost off" BASE_BIN=)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
export DUET_HOME="${DUET_HOME:-$HOME/.cache/duet}"
RUNS="${RUNS:-3}"
SECS="${SECS:-15}"
MODEL="${MODEL:-qwen2.5-coder-0.5b-instruct}"
PORT="${PORT:-18090}"
out="${OUT:-$(mktemp -d -t duet-engine-admission-XXXXXX)}"
mkdir -p "$out"
say() { echo "[engine-admission $(date +%H:%M:%S)] $*" >&2; }

cargo build --release -q --locked -p loadtest -p cloud-gateway
gguf="$DUET_HOME/gguf/$MODEL.gguf"
# The GGUFs and the tiny model (the gateway's --model: the devices' tokenizer here), if missing.
[ -f "$gguf" ] && [ -d "$DUET_HOME/models/tiny-qwen2" ] || deploy/models/prepare tiny fetch-slm fetch-llm >&2
. deploy/engines/llamacpp/start.sh
llama_start "$PORT" "$out/llama-server.log" -m "$gguf" -np 4 -c 8192 -t 1 --metrics --log-disable
say "llama-server $MODEL on 127.0.0.1:$PORT (-t 1 -np 4); reports in $out; commit $(git rev-parse --short HEAD)"

echo "| run | admission | uptime (load 1/5/15 min) | capacity esc/s | offered esc/s (x) | tokens in time | Busy (max ms) | expired | late | missed share | queue age p50 / max s | refused cost / capacity | breaker opened |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|"
for run in $(seq 1 "$RUNS"); do
  for admission in ${ADMISSIONS:-cost off}; do
    case "$admission" in
      cost|off) flags=(--gateway-arg="--engine-admission=$admission") ;;
      base) flags=(--gateway-arg=--engine-admission=cost --gateway-bin "${BASE_BIN:?base needs BASE_BIN, a cloud-gateway binary}") ;;
      *) echo "ADMISSIONS: $admission is not cost, off or base" >&2; exit 2 ;;
    esac
    load="$(uptime | sed 's/.*load average: //')"
    f="$out/run$run-$admission.json"
    target/release/loadtest --log error abuse --scenarios engine-overload --engine "llamacpp=http://127.0.0.1:$PORT" \
      --scenario-secs "$SECS" "${flags[@]}" --out "$f" >/dev/null 2>"$out/run$run-$admission.err"
    python3 - "$f" "$run" "$admission" "$load" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))["engine-overload"]
a, o, q, b = r["answers"], r["offered"], r["queue_age_s"], r["refused_at_gateway"]
print(f"| {sys.argv[2]} | {sys.argv[3]} | {sys.argv[4]} | {r['capacity']['escalations_per_s']:.1f} | {o['per_s']:.1f} ({o['times_capacity']:.2f}) "
      f"| {r['tokens_in_time']} | {a['busy']} ({r['busy_ms']['max']:.0f}) | {a['expired']} | {a['late']} | {100 * r['missed_deadline_share']:.1f} % "
      f"| {q['p50']:.2f} / {q['max']:.2f} | {b['cost']:.0f} / {b['capacity']:.0f} | {r['breaker_opened']:.0f} |")
PY
  done
done
