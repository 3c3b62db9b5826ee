#!/usr/bin/env bash
# What a GPU cloud would give, as a labelled projection: routed decoding with the real 0.5B SLM on
# the device, the real network path (`loadtest relay` at each round-trip time) and a gateway
# whose LLM is a latency model (per escalation A_MS + B_US·prefilled tokens + C_US·draft tokens,
# the figures docs/src/benchmarks/draft-verification.md cites for a ~32B model on one H100)
# answering with tokens recorded
# from the real embedded 1.5B. Against local-only decoding of the same prompts in the same run.
#
#   deploy/bench/projection.sh        # CQA_ITEMS=8 CODE_ITEMS=4 RTTS="0 20 50 100" A_MS=25 B_US=150 C_US=150
#   RTTS=50 deploy/bench/projection.sh
#
# 1. Record (once; kept in $OUT/answers.bin, RECORD=1 records again on top): a gateway with the
#    embedded 1.5B on its own core and `--record-answers`, behind the relay at LIVE_RTT (50 ms),
#    device deadlines of 20-60 s so that every answer arrives, each prompt in each mode of
#    LIVE_MODES. These runs are also the live rows of the table (the real LLM on one CPU core).
# 2. Replay: a gateway with `--replay-answers` and the latency model (no model loaded), behind the
#    relay at each RTT, each prompt in each mode, with the device's default deadlines.
# 3. Local-only at the start and at the end: the baseline.
# 4. With LIVE_ENGINE=llamacpp (the default; "none" skips it): the live rows again with
#    llama-server (built from source by deploy/engines/llamacpp/build, the 1.5B Q4_K_M GGUF,
#    one slot, one thread on GW_CPU) as the gateway's engine instead of the embedded LLM.
#
# Modes: wait (--speculate 0), speculate (--speculate 8, the default), verify (--draft adaptive,
# with the default --speculate). Prompts: the first CQA_ITEMS CommonsenseQA validation items in
# the seed's format (shipped router at its default rate) and CODE_ITEMS coding requests written
# here (confidence router, tau 0.7), MAX_TOKENS (96) each. The device is pinned to EDGE_CPU, the
# gateway and the relay to GW_CPU.
#
# Prints one markdown table per prompt kind: decode tokens/s (generated tokens / time after the
# SLM's prompt prefill, pooled over the prompts: the prefill is the same everywhere), the
# local-only figure, their ratio, escalations, replay misses (escalations the recording had no
# answer for: answered with an error the device fell back on; a projection with many is not
# valid), fallbacks by reason, and draft tokens accepted / sent.
#
# Every run's JSON stays in $OUT (default $DUET_HOME/bench/projection). BIN=DIR runs binaries
# built earlier instead of building.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
export DUET_HOME="${DUET_HOME:-$HOME/.cache/duet}"
RTTS="${RTTS:-0 20 50 100}"
CQA_ITEMS="${CQA_ITEMS:-8}"
CODE_ITEMS="${CODE_ITEMS:-4}"
MAX_TOKENS="${MAX_TOKENS:-96}"
A_MS="${A_MS:-25}"               # per escalation (one forward pass of the 32B at batch 1), ms
B_US="${B_US:-150}"              # per prefilled token, µs
C_US="${C_US:-150}"              # per draft token, µs (prefilled in the same pass)
LIVE_RTT="${LIVE_RTT:-50}"
LIVE_MODES="${LIVE_MODES:-wait speculate verify}"
MODES="${MODES:-wait speculate verify}"
LIVE_ENGINE="${LIVE_ENGINE:-llamacpp}"
RECORD="${RECORD:-auto}"         # auto: record when $OUT/answers.bin does not exist; 1: always; 0: never
EDGE_CPU="${EDGE_CPU:-0}"
GW_CPU="${GW_CPU:-1}"
out="${OUT:-$DUET_HOME/bench/projection}"
mkdir -p "$out"
if [ -n "${BIN:-}" ]; then
  bin="$BIN"
else
  cargo build --release --locked -q -p edge-node -p cloud-gateway -p loadtest
  bin=./target/release
fi
say() { echo "[projection] $*" >&2; }
load() { uptime | sed 's/.*load/load/'; }
say "on $(nproc) cores, $(load), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown); model A=${A_MS} ms B=${B_US} µs C=${C_US} µs"

# The prompts: CommonsenseQA questions in the seed's format, and coding requests.
{
  deploy/data/commonsense_qa/seed_prompts.py "$CQA_ITEMS"
  python3 - "$CODE_ITEMS" <<'EOF'
import json, sys
m = int(sys.argv[1])
CODE = [
    "Write a Python function that checks whether a number is prime, with a docstring.",
    "Write a Python function that returns the words of a sentence in reverse order.",
    "Write a Python function that returns the n-th Fibonacci number iteratively, with type hints.",
    "Write a Python function that counts how often each character occurs in a string and returns a dict.",
]
for p in CODE[:m]:
    print(json.dumps({"kind": "code", "prompt": p, "router": ["--router", "confidence", "--tau", "0.7"]}))
EOF
} >"$out/prompts.jsonl"

# One relay profile per round-trip time: half of it each way, +-10 % jitter without reordering.
{
  for rtt in $(printf '%s\n' $RTTS "$LIVE_RTT" | sort -nu); do
    half=$((rtt / 2))
    printf '[rtt-%s]\ndescription = "%s ms round trip"\ndelay_ms = %s\njitter_ms = %s\nkeep_order = true\n\n' \
      "$rtt" "$rtt" "$half" "$((half / 10))"
  done
} >"$out/profiles.toml"

gw="" relay=""
trap 'kill $gw $relay 2>/dev/null || true' EXIT
gport=$((20000 + RANDOM % 20000)) rport=$((gport + 1))

# start_gateway LOG ARGS...: a gateway on GW_CPU, waited for until ready.
start_gateway() {
  local log="$1"; shift
  taskset -c "$GW_CPU" "$bin/cloud-gateway" --listen "127.0.0.1:$gport" --http-listen off --threads 1 \
    --write-cert "$out/cert.pem" --log warn "$@" >"$log" 2>&1 &
  gw=$!
  for _ in $(seq 1 240); do
    grep -q "ready on" "$log" && return 0
    kill -0 $gw 2>/dev/null || { cat "$log" >&2; exit 1; }
    sleep 0.5
  done
  echo "gateway not ready: $log" >&2; exit 1
}
stop_gateway() { kill $gw 2>/dev/null || true; wait $gw 2>/dev/null || true; gw=""; }
start_relay() {
  taskset -c "$GW_CPU" "$bin/loadtest" relay --profiles-file "$out/profiles.toml" --profile "rtt-$1" \
    --listen "127.0.0.1:$rport" --upstream "127.0.0.1:$gport" --stats-every-s 0 >"$out/relay-$1.log" 2>&1 &
  relay=$!
  sleep 0.5
}
stop_relay() { kill $relay 2>/dev/null || true; wait $relay 2>/dev/null || true; relay=""; }
mode_flags() {
  case "$1" in
    wait) echo "--speculate 0" ;;
    speculate) echo "--speculate 8" ;;
    verify) echo "--draft adaptive" ;;
  esac
}

# run NAME GATEWAY_LOG ARGS...: every prompt once, each run's --json in $out/NAME.<kind>.<i>.json
# and the replay misses it caused in $out/NAME.<kind>.<i>.misses.
run() {
  local name="$1" log="$2"; shift 2
  local i=0
  while IFS= read -r line; do
    local prompt kind before
    prompt="$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["prompt"])' "$line")"
    kind="$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["kind"])' "$line")"
    mapfile -t router < <(python3 -c 'import json,sys; print("\n".join(json.loads(sys.argv[1])["router"]))' "$line" | sed '/^$/d')
    before=$( { [ -f "$log" ] && grep -c "replay: no recorded answer" "$log"; } || true)
    taskset -c "$EDGE_CPU" "$bin/edge-node" generate --threads 1 --chat --json --max-new-tokens "$MAX_TOKENS" \
      --prompt "$prompt" "${router[@]}" "$@" >"$out/$name.$kind.$i.json" 2>>"$out/edge.log"
    sleep 0.2
    after=$( { [ -f "$log" ] && grep -c "replay: no recorded answer" "$log"; } || true)
    echo $(( ${after:-0} - ${before:-0} )) >"$out/$name.$kind.$i.misses"
    i=$((i + 1))
  done <"$out/prompts.jsonl"
}

# live NAME: every prompt in each mode of LIVE_MODES through the relay at LIVE_RTT, with device
# deadlines of 20-60 s so that every answer arrives; runs named NAME-MODE-rttLIVE_RTT.
live() {
  local name="$1" mode
  start_relay "$LIVE_RTT"
  for mode in $LIVE_MODES; do
    say "$name $mode ($(load))"
    # shellcheck disable=SC2046
    run "$name-$mode-rtt$LIVE_RTT" /dev/null --gateway "127.0.0.1:$rport" --ca-cert "$out/cert.pem" \
      --deadline-min-ms 20000 --deadline-max-ms 60000 $(mode_flags "$mode")
  done
  stop_relay
}

rm -f "$out"/local*.json "$out"/proj-*.json "$out"/*.misses
say "local-only baseline ($(load))"
run local /dev/null

if [ "$RECORD" = 1 ] || { [ "$RECORD" = auto ] && [ ! -s "$out/answers.bin" ]; }; then
  rm -f "$out"/live-*.json
  say "recording the embedded 1.5B's answers (live, RTT $LIVE_RTT ms, deadlines 20-60 s; $(load))"
  start_gateway "$out/gateway-record.log" --record-answers "$out/answers.bin"
  live live
  stop_gateway
fi

if [ "$LIVE_ENGINE" = llamacpp ]; then
  rm -f "$out"/live-llama-*.json
  # shellcheck source=deploy/engines/llamacpp/start.sh
  . deploy/engines/llamacpp/start.sh
  eport=$((gport + 2))
  say "live with llama-server (the 1.5B GGUF, one thread on core $GW_CPU; RTT $LIVE_RTT ms, deadlines 20-60 s; $(load))"
  llama_start "$eport" "$out/llama-server.log" -m "$DUET_HOME/gguf/qwen2.5-coder-1.5b-instruct.gguf" -np 1 -c 4096 -t 1
  taskset -a -p -c "$GW_CPU" "${llama_pids[-1]}" >/dev/null
  trap 'llama_stop; kill $gw $relay 2>/dev/null || true' EXIT
  start_gateway "$out/gateway-llama.log" --engine "llamacpp=http://127.0.0.1:$eport"
  live live-llama
  stop_gateway
  llama_stop
elif [ "$LIVE_ENGINE" != none ]; then
  echo "LIVE_ENGINE: llamacpp or none (SGLang and vLLM need a GPU host)" >&2; exit 2
fi

say "replaying with the latency model ($(load))"
start_gateway "$out/gateway-replay.log" --replay-answers "$out/answers.bin" \
  --backend-delay-ms "$A_MS" --backend-token-delay-us "$B_US" --backend-draft-token-delay-us "$C_US"
for rtt in $RTTS; do
  start_relay "$rtt"
  for mode in $MODES; do
    say "projection: RTT $rtt ms, $mode ($(load))"
    # shellcheck disable=SC2046
    run "proj-$mode-rtt$rtt" "$out/gateway-replay.log" --gateway "127.0.0.1:$rport" --ca-cert "$out/cert.pem" $(mode_flags "$mode")
  done
  stop_relay
done
stop_gateway
say "local-only baseline again (drift check; $(load))"
run local2 /dev/null
say "done ($(load))"

python3 - "$out" "$RTTS" "$MODES" "$LIVE_RTT" "$LIVE_MODES" "$A_MS" "$B_US" "$C_US" <<'EOF'
import glob, json, os, sys
out, rtts, modes, live_rtt, live_modes = sys.argv[1], sys.argv[2].split(), sys.argv[3].split(), sys.argv[4], sys.argv[5].split()
a, b, c = sys.argv[6:9]
def load(name, kind):
    runs = []
    for p in sorted(glob.glob(f"{out}/{name}.{kind}.*.json")):
        r = json.load(open(p))
        m = p[:-5] + ".misses"
        r["misses"] = int(open(m).read().strip() or 0) if os.path.exists(m) else 0
        runs.append(r)
    return runs
REASONS = ("timeout", "busy", "link_down", "degraded", "error")
def figures(runs):
    tokens = sum(r["tokens"] for r in runs)
    decode_s = sum(r["decode_ms"] for r in runs) / 1e3
    return {
        "runs": len(runs), "tokens": tokens, "tok_s": tokens / decode_s if decode_s else 0.0,
        "escalated": sum(r["escalated"] for r in runs), "fallbacks": sum(r["fallbacks"] for r in runs),
        "reasons": {k: sum(r.get(f"fallback_{k}", 0) for r in runs) for k in REASONS},
        "misses": sum(r["misses"] for r in runs),
        "sent": sum(r.get("draft_tokens_sent", 0) for r in runs), "accepted": sum(r.get("draft_tokens_accepted", 0) for r in runs),
    }
LABEL = {"wait": "wait (--speculate 0)", "speculate": "speculate (--speculate 8)", "verify": "verify (--draft adaptive)"}
COLUMNS = ["cloud", "mode", "RTT ms", "tokens/s routed", "local-only", "routed / local", "escalations", "misses", "fallbacks", "draft accepted / sent"]
summary = {}
for kind, title in (("cqa", "CommonsenseQA (shipped trained router at its default rate)"), ("code", "Coding requests (confidence router, tau 0.7)")):
    local = figures(load("local", kind) + load("local2", kind))
    if not local["runs"]:
        continue
    summary[kind] = {"local": local}
    print(f"\n{title}: {local['runs'] // 2} prompts, local-only {local['tok_s']:.1f} tokens/s (runs at the start and at the end)\n")
    print("| " + " | ".join(COLUMNS) + " |")
    print("|" + "---|" * len(COLUMNS))
    rows = [("projected", m, r, f"proj-{m}-rtt{r}") for r in rtts for m in modes] + [("live 1.5B, 1 core", m, live_rtt, f"live-{m}-rtt{live_rtt}") for m in live_modes] \
        + [("live llama-server, 1 core", m, live_rtt, f"live-llama-{m}-rtt{live_rtt}") for m in live_modes]
    for cloud, mode, rtt, name in rows:
        runs = load(name, kind)
        if not runs:
            continue
        f = figures(runs)
        summary[kind][name] = f
        ratio = f["tok_s"] / local["tok_s"] if local["tok_s"] else 0.0
        falls = str(f["fallbacks"])
        if f["fallbacks"]:
            falls += " (" + ", ".join(f"{v} {k.replace('_', ' ')}" for k, v in f["reasons"].items() if v) + ")"
        drafts = f"{f['accepted']} / {f['sent']}" if mode == "verify" else ""
        r = f"**{ratio:.2f}x**" if mode == "verify" else f"{ratio:.2f}x"
        misses = str(f["misses"]) if cloud == "projected" else "-"
        print(f"| {cloud} | {LABEL[mode]} | {rtt} | {f['tok_s']:.1f} | {local['tok_s']:.1f} | {r} | {f['escalated']} | {misses} | {falls} | {drafts} |")
print(f"\n(latency model: {a} ms + {b} µs per prefilled token + {c} µs per draft token per escalation; live rows: "
      f"deadlines 20-60 s, every answer waited for; every run: {out}/*.json; summary: {out}/summary.json)")
with open(f"{out}/summary.json", "w") as f:
    json.dump(summary, f, indent=1)
EOF
