#!/usr/bin/env bash
# Devices per LLM server at a service level, in one command: `loadtest capacity` against
#   - llama-server (the 1.5B coder, GGUF, built from source by the project) behind the gateway's
#     engine path, and
#   - the embedded ONNX 1.5B in the gateway,
# each with three rows: one token per escalation, drafts at the edge's adaptive length, and
# the same drafts checked by load (`--draft-verify by-load`). Devices replay the recorded
# 0.5B traces of CommonsenseQA and code prompts (loadtest/traces), so draft lengths and the
# LLM's acceptance are the real models'. The level: at least SERVED of escalations answered
# in time and the devices' ITL p99 at most ITL_MS, no stall, no violation, and at least
# MIN_ESC escalations in the probe (fewer cannot measure a share). SERVED is 0.95 by default:
# on 2 cores a probe sees 20-300 escalations, where 0.99 would be decided by one or two.
#
#   deploy/bench/capacity.sh                      # both servers
#   SERVERS=llamacpp DURATION=30 deploy/bench/capacity.sh
#   SERVERS=engine=sglang=http://gpu-host:30000 deploy/bench/capacity.sh   # a GPU engine
#
# Knobs: SERVERS ("llamacpp embedded"), RATE (0.1), MIX (cqa=50,code=50), THINK (2 s between a
# device's sessions), DURATION (60 s of load per probe), PROFILE (4g), NP (4 llama-server
# slots), SERVED (0.95), ITL_MS (1500: half the edge's 3 s deadline cap), MIN_ESC (20), START (2: the first fleet tried),
# MAX_DEVICES (256), OUT (report directory). Each server's capacity.md is printed;
# capacity.html plots the served share against fleet size.
# On a shared machine stop other work first: the server's CPU is what is measured.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
export DUET_HOME="${DUET_HOME:-$HOME/.cache/duet}"
SERVERS="${SERVERS:-llamacpp embedded}"
RATE="${RATE:-0.1}"
MIX="${MIX:-cqa=50,code=50}"
THINK="${THINK:-2}"
DURATION="${DURATION:-60}"
PROFILE="${PROFILE:-4g}"
NP="${NP:-4}"
SERVED="${SERVED:-0.95}"
ITL_MS="${ITL_MS:-1500}"
MAX_DEVICES="${MAX_DEVICES:-256}"
START="${START:-2}"
MIN_ESC="${MIN_ESC:-20}"
PORT="${PORT:-18093}"
out="${OUT:-$(mktemp -d -t duet-capacity-XXXXXX)}"
mkdir -p "$out"
say() { echo "[capacity $(date +%H:%M:%S)] $*" >&2; }

cargo build --release -q --locked -p loadtest
gguf="$DUET_HOME/gguf/qwen2.5-coder-1.5b-instruct.gguf"
[ -f "$gguf" ] || deploy/models/prepare fetch-llm >&2
. deploy/engines/llamacpp/start.sh
say "reports in $out; commit $(git rev-parse --short HEAD); $(nproc) cores, $(uptime | sed 's/.*load/load/')"

capacity() {
  local name=$1
  shift
  mkdir -p "$out/$name"
  ./target/release/loadtest --log error capacity --out "$out/$name" --served-at-least "$SERVED" --itl-p99-ms "$ITL_MS" \
    --max-devices "$MAX_DEVICES" --devices "$START" --min-escalations "$MIN_ESC" --ramp-up-s 5 --duration-s "$DURATION" --think-time-s "$THINK" \
    --escalation-rate "$RATE" --mix "$MIX" --profiles "$PROFILE" --baseline-devices 1 --progress-s 0 "$@" \
    >"$out/$name/stdout.md" 2>"$out/$name/log"
  echo "### $name"
  cat "$out/$name/stdout.md"
}

for server in $SERVERS; do
  case "$server" in
    llamacpp)
      llama_start "$PORT" "$out/llama-server.log" -m "$gguf" -np "$NP" -c $((4096 * NP)) -t 2 --metrics --log-disable
      capacity llamacpp --backend "engine=llamacpp=http://127.0.0.1:$PORT"
      llama_stop
      ;;
    embedded) capacity embedded --backend embedded ;;
    # An engine already running elsewhere (SGLang or vLLM on a GPU host): engine=KIND=URL.
    engine=*) name="${server#engine=}"; capacity "${name%%=*}" --backend "$server" ;;
    *) echo "SERVERS: $server is not llamacpp, embedded or engine=KIND=URL" >&2; exit 2 ;;
  esac
done
say "done: $out"
