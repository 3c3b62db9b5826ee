#!/usr/bin/env bash
# One device floods, 20 behave, on the engine path: one llama-server (built by
# deploy/engines/llamacpp/build; GGUF $MODEL, one thread, $NP slots) and `loadtest abuse
# --scenarios fair-flood --engine llamacpp=URL` (a cloud-gateway process relaying to it; the
# scenario: loadtest/src/abuse/flood.rs). Each round runs the gateway in each of SHARES (default
# "line device off"): `line` is --fair-share=device with its line (--fair-line=on), `device` the
# shares without the line (--fair-line=off, the gateway's default), `off` --fair-share=off. Every run gets an engine of its own, started afresh: llama-server does not stop
# a prefill it has started when the gateway drops the request, so a long one admitted in one run
# kept the engine busy into the next. The scenario measures the engine's capacity first (the
# well-behaved shape, closed loop) and has the well-behaved devices offer $BEHAVED_LOAD of it.
# Prints a Markdown row per run (the uptime before each): the capacity and the devices' pause,
# tokens served, the flood's share, the well-behaved devices' shares of their fair share (min /
# median, how many at >= 0.9), their answers, lost, refusals by reason; then llama-server's own
# counters for the run. The JSON reports (every device's share) go to $OUT.
# The embedded backend's rows (docs/src/benchmarks/fairness-overload.md) come from the same
# scenario without --engine.
#
# -c: 4,096 tokens a slot, the gateway's --max-context in the scenario (the flood's contexts grow
# to 3,500 tokens; with less the engine refuses the rest, counted as lost). DEADLINE_MS is every
# escalation's deadline (--probe-deadline-ms).
#
# TRACE=1 keeps every engine admission decision the gateway makes (device, outcome, cost, work
# ahead, budget, margin: `cloud_gateway::engine::pool` at debug) in $OUT/gateway-runN-SHARE.log.
#
# GATEWAY_BIN=PATH runs that cloud-gateway binary instead of this build's (a baseline built from
# an earlier commit, for a same-run comparison).
#
# Usage: deploy/bench/fair_flood.sh
#   (RUNS=2 SECS=60 DEADLINE_MS=1000 NP=4 BEHAVED_LOAD=0.5 MODEL=qwen2.5-coder-0.5b-instruct
#    SHARES="line device off" TRACE= GATEWAY_BIN=)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
export DUET_HOME="${DUET_HOME:-$HOME/.cache/duet}"
RUNS="${RUNS:-2}"
SECS="${SECS:-60}"
NP="${NP:-4}"
BEHAVED_LOAD="${BEHAVED_LOAD:-0.5}"
DEADLINE_MS="${DEADLINE_MS:-1000}"
MODEL="${MODEL:-qwen2.5-coder-0.5b-instruct}"
SHARES="${SHARES:-line device off}"
PORT="${PORT:-18091}"
out="${OUT:-$(mktemp -d -t duet-fair-flood-XXXXXX)}"
mkdir -p "$out"
say() { echo "[fair-flood $(date +%H:%M:%S)] $*" >&2; }

cargo build --release -q --locked -p loadtest -p cloud-gateway
gguf="$DUET_HOME/gguf/$MODEL.gguf"
# The GGUFs and the tiny model (the gateway's --model: the devices' tokenizer here), if missing.
[ -f "$gguf" ] && [ -d "$DUET_HOME/models/tiny-qwen2" ] || deploy/models/prepare tiny fetch-slm fetch-llm >&2
. deploy/engines/llamacpp/start.sh
say "llama-server $MODEL on 127.0.0.1:$PORT (-t 1 -np $NP, fresh for each run), deadline $DEADLINE_MS ms, behaved load $BEHAVED_LOAD; reports in $out; commit $(git rev-parse --short HEAD)"

echo "| run | fair share | uptime (load 1/5/15 min) | capacity esc/s (tokens/s) | behaved pause s | tokens served | flood's share (its fair share) | behaved of fair share min / median | at >= 0.9 | behaved answered / Busy / expired | flood answered / Busy / expired | lost | refused share / reserved / cost / capacity | breaker opened |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
for run in $(seq 1 "$RUNS"); do
  for share in $SHARES; do
    case "$share" in
      line) flags=(--gateway-arg=--fair-share=device --gateway-arg=--fair-line=on) ;;
      device) flags=(--gateway-arg=--fair-share=device --gateway-arg=--fair-line=off) ;;
      off) flags=(--gateway-arg=--fair-share=off) ;;
      *) echo "SHARES: $share is not line, device or off" >&2; exit 2 ;;
    esac
    if [ -n "${TRACE:-}" ]; then
      flags+=(--gateway-log=warn,cloud_gateway::engine::pool=debug "--gateway-log-file=$out/gateway-run$run-$share.log")
    fi
    llama_start "$PORT" "$out/llama-server-run$run-$share.log" -m "$gguf" -np "$NP" -c $((4096 * NP)) -t 1 --metrics --log-disable
    load="$(uptime | sed 's/.*load average: //')"
    f="$out/run$run-$share.json"
    target/release/loadtest --log error abuse --scenarios fair-flood --engine "llamacpp=http://127.0.0.1:$PORT" \
      --scenario-secs "$SECS" --probe-deadline-ms "$DEADLINE_MS" --fair-behaved-load "$BEHAVED_LOAD" \
      ${GATEWAY_BIN:+--gateway-bin "$GATEWAY_BIN"} "${flags[@]}" --out "$f" >/dev/null 2>"$out/run$run-$share.err"
    python3 - "$f" "$run" "$share" "$load" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))["fair-flood"]
if "error" in r:
    print(f"| {sys.argv[2]} | {sys.argv[3]} | {sys.argv[4]} | error: {r['error']} |"); sys.exit()
fl, d, ref, cap = r["flood"], r["devices"], r["refused"], r["capacity"]
def sum_(k): return sum(x["answers"][k] for x in d)
fa = fl["answers"]
print(f"| {sys.argv[2]} | {sys.argv[3]} | {sys.argv[4]} | {cap['escalations_per_s']:.1f} ({cap['tokens_per_s']:.0f}) | {r['behaved_think_ms'] / 1000:.1f} "
      f"| {r['tokens_served']:,} | {100 * fl['share_of_tokens']:.0f} % ({fl['served_tokens']:,}; {fl['fair_share_tokens']:,.0f}) "
      # Nothing served at all: every fair share is 0 and the ratios read 1.0, which says nothing.
      + (f"| n/a (nothing served) | n/a " if r['tokens_served'] == 0 else
         f"| {r['behaved_of_fair_share_min']:.2f} / {r['behaved_of_fair_share_median']:.2f} | {r['behaved_at_least_0_9']} / {r['behaved_devices']} ") +
      f"| {sum_('token')} / {sum_('busy')} / {sum_('expired')} | {fa['token']} / {fa['busy']} / {fa['expired']} | {r['lost']} "
      f"| {ref['share']:.0f} / {ref.get('reserved', 0):.0f} / {ref['cost']:.0f} / {ref['capacity']:.0f} | {r['engine_breaker_opened']:.0f} |")
PY
    # What the engine did in the run (llama-server's own counters): prompt tokens, cached, seconds.
    curl -fsS "http://127.0.0.1:$PORT/metrics" | grep -E '^llamacpp:(prompt_tokens_total|prompt_tokens_cached_total|prompt_seconds_total|tokens_predicted_total) ' \
      | sed "s/^/[run $run $share] /" >&2 || true
    llama_stop
  done
done
