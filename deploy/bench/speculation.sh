#!/usr/bin/env bash
# Hiding the network, in one command: routed decoding with the gateway (embedded 1.5B) pinned to
# its own core behind `loadtest relay` adding a real delay, against local-only decoding of the
# same prompts in the same run. Two modes:
#
#   deploy/bench/speculation.sh [table]             # RTTS="0 20 50 100" ITEMS=4 WINDOW=8 MAX_TOKENS=96
#   RTTS=50 WINDOW=32 deploy/bench/speculation.sh   # one RTT, another window
#   deploy/bench/speculation.sh same-text           # CHECK_ITEMS=100 CHECK_RTT=50 WINDOW=8
#
# `table` (the default): for each round-trip time, routed waiting for every answer and routed
# with speculative continuation (--speculate WINDOW), each with and without the prompt
# pre-sync; local-only runs at the start and at the end are the baseline. Prompts: the first
# ITEMS CommonsenseQA validation questions (the seed's format) with the shipped trained router
# at its default rate, and a coding prompt with the confidence router at tau 0.7. Prints, per
# prompt kind, the markdown table docs/src/benchmarks/end-to-end.md publishes ("Hiding the
# network: speculative continuation"), with these
# definitions (each run's `edge-node generate --json`, pooled over the runs of a row):
#   decode tok/s          generated tokens / time after the SLM's prompt prefill (`decode_ms`):
#                         the prefill is the same in every configuration and is left out
#   vs local              decode tok/s / the local-only runs' decode tok/s
#   escalation wait p50   median time from asking the cloud to its answer (`escalation_ms`;
#                         answered escalations only)
#   TTFT                  mean time from the start of generation (prompt pre-sync and SLM
#                         prefill included) to the first token (`token_ms[0]`)
#   per-token p50 / p99   gaps between consecutive tokens after the first (`token_ms[1:]`)
# `same-text`: served CommonsenseQA (`router-lab eval-cqa --gateway`, the first CHECK_ITEMS
# validation items, shipped router at rate 0.1) behind RTT CHECK_RTT, deadlines of 20-60 s so
# that every answer arrives, once with --speculate 0 and once with --speculate WINDOW; prints
# how many texts (token for token) and answers are identical, and both accuracies.
#
# Every run's JSON stays in $OUT (default $DUET_HOME/bench/speculation). BIN=DIR runs binaries
# built earlier (e.g. copied out of target/release) instead of building.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
export DUET_HOME="${DUET_HOME:-$HOME/.cache/duet}"
mode="${1:-table}"
case "$mode" in
  table | same-text) ;;
  *) echo "usage: deploy/bench/speculation.sh [table|same-text]" >&2; exit 2 ;;
esac
RTTS="${RTTS:-0 20 50 100}"
ITEMS="${ITEMS:-4}"              # table: CommonsenseQA validation items per configuration
WINDOW="${WINDOW:-8}"            # --speculate
MAX_TOKENS="${MAX_TOKENS:-96}"
EDGE_CPU="${EDGE_CPU:-0}"        # the device's core
GW_CPU="${GW_CPU:-1}"            # the gateway's and the relay's core
CHECK_ITEMS="${CHECK_ITEMS:-100}" # same-text: CommonsenseQA validation items
CHECK_RTT="${CHECK_RTT:-50}"     # same-text: round-trip time, ms
out="${OUT:-$DUET_HOME/bench/speculation}"
mkdir -p "$out"
rm -f "$out"/*.json
if [ -n "${BIN:-}" ]; then
  bin="$BIN"
else
  cargo build --release --locked -q -p edge-node -p cloud-gateway -p loadtest -p router-lab
  bin=./target/release
fi
say() { echo "[speculation] $*" >&2; }
say "$mode on $(nproc) cores, $(uptime | sed 's/.*load/load/'), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"

# One profile per round-trip time: half of it each way, +-10 % jitter without reordering.
{
  for rtt in $(printf '%s\n' $RTTS "$CHECK_RTT" | sort -nu); do
    half=$((rtt / 2))
    printf '[rtt-%s]\ndescription = "%s ms round trip"\ndelay_ms = %s\njitter_ms = %s\nkeep_order = true\n\n' \
      "$rtt" "$rtt" "$half" "$((half / 10))"
  done
} >"$out/profiles.toml"

gport=$((20000 + RANDOM % 20000)) rport=$((gport + 1))
taskset -c "$GW_CPU" "$bin/cloud-gateway" --listen "127.0.0.1:$gport" --http-listen off --threads 1 \
  --write-cert "$out/cert.pem" --log warn >"$out/gateway.log" 2>&1 &
gw=$!
relay=""
trap 'kill $gw $relay 2>/dev/null || true' EXIT
for _ in $(seq 1 240); do
  grep -q "ready on" "$out/gateway.log" && break
  kill -0 $gw 2>/dev/null || { cat "$out/gateway.log"; exit 1; }
  sleep 0.5
done

# start_relay RTT: the relay in front of the gateway at that round-trip time.
start_relay() {
  taskset -c "$GW_CPU" "$bin/loadtest" relay --profiles-file "$out/profiles.toml" --profile "rtt-$1" \
    --listen "127.0.0.1:$rport" --upstream "127.0.0.1:$gport" --stats-every-s 0 >"$out/relay-$1.log" 2>&1 &
  relay=$!
  sleep 0.5
}

if [ "$mode" = same-text ]; then
  # Same texts with and without speculation when every answer arrives (long deadlines).
  start_relay "$CHECK_RTT"
  for w in 0 "$WINDOW"; do
    say "same-text: $CHECK_ITEMS CommonsenseQA items served at RTT $CHECK_RTT ms, --speculate $w"
    rm -rf "$out/served-spec$w"
    taskset -c "$EDGE_CPU" "$bin/router-lab" eval-cqa --threads 1 --gateway "127.0.0.1:$rport" --ca-cert "$out/cert.pem" \
      --escalation-rate 0.1 --limit "$CHECK_ITEMS" --deadline-min-ms 20000 --deadline-max-ms 60000 --speculate "$w" \
      --out "$out/served-spec$w" >/dev/null 2>>"$out/edge.log"
  done
  python3 - "$out/served-spec0/items.jsonl" "$out/served-spec$WINDOW/items.jsonl" "$WINDOW" <<'EOF'
import json, sys
def load(path):
    with open(path, encoding="utf-8") as f:
        return {d["id"]: d["runs"][0] for d in map(json.loads, filter(str.strip, f))}
wait, spec, window = load(sys.argv[1]), load(sys.argv[2]), sys.argv[3]
ids = [i for i in wait if i in spec]
n = len(ids)
same_text = sum(wait[i]["text"] == spec[i]["text"] for i in ids)
same_answer = sum(wait[i]["answer"] == spec[i]["answer"] for i in ids)
def acc(runs):
    return 100 * sum(bool(runs[i]["correct"]) for i in ids) / max(1, n)
def share(runs):
    return 100 * sum(runs[i]["escalated"] for i in ids) / max(1, sum(runs[i]["tokens"] for i in ids))
print(f"same text with and without speculation: {same_text} of {n} texts identical token for token, "
      f"{same_answer} of {n} answers identical; accuracy {acc(wait):.1f} % (--speculate 0) / {acc(spec):.1f} % "
      f"(--speculate {window}); tokens escalated {share(wait):.2f} % / {share(spec):.2f} %")
differ = [i for i in ids if wait[i]["text"] != spec[i]["text"]]
if differ:
    print("texts that differ: " + " ".join(differ))
EOF
  exit 0
fi

# The prompts: CommonsenseQA questions in the seed's format, and one coding request.
{
  deploy/data/commonsense_qa/seed_prompts.py "$ITEMS"
  python3 - <<'EOF'
import json
print(json.dumps({"kind": "code", "prompt": "Write a Python function that checks whether a number is prime, with a docstring.",
                  "router": ["--router", "confidence", "--tau", "0.7"]}))
EOF
} >"$out/prompts.jsonl"

# run NAME ARGS...: every prompt once, each run's --json in $out/NAME.<kind>.<i>.json.
run() {
  local name="$1"; shift
  local i=0
  while IFS= read -r line; do
    local prompt kind
    prompt="$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["prompt"])' "$line")"
    kind="$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["kind"])' "$line")"
    mapfile -t router < <(python3 -c 'import json,sys; print("\n".join(json.loads(sys.argv[1])["router"]))' "$line" | sed '/^$/d')
    taskset -c "$EDGE_CPU" "$bin/edge-node" generate --threads 1 --chat --json --max-new-tokens "$MAX_TOKENS" \
      --prompt "$prompt" "${router[@]}" "$@" >"$out/$name.$kind.$i.json" 2>>"$out/edge.log"
    i=$((i + 1))
  done <"$out/prompts.jsonl"
}

say "local-only baseline"
run local
for rtt in $RTTS; do
  start_relay "$rtt"
  cloud=(--gateway "127.0.0.1:$rport" --ca-cert "$out/cert.pem")
  for presync in on off; do
    flags=()
    [ $presync = off ] && flags=(--no-presync)
    say "RTT $rtt ms, pre-sync $presync: waiting for every answer"
    run "rtt$rtt-wait-presync$presync" "${cloud[@]}" "${flags[@]}" --speculate 0
    say "RTT $rtt ms, pre-sync $presync: speculating $WINDOW ahead"
    run "rtt$rtt-spec-presync$presync" "${cloud[@]}" "${flags[@]}" --speculate "$WINDOW"
  done
  kill $relay 2>/dev/null || true
  wait $relay 2>/dev/null || true
  relay=""
done
say "local-only baseline again (drift check)"
run local2

python3 - "$out" "$RTTS" "$WINDOW" <<'EOF'
import glob, json, sys
out, rtts, window = sys.argv[1], sys.argv[2].split(), sys.argv[3]
def load(name, kind):
    return [json.load(open(p)) for p in sorted(glob.glob(f"{out}/{name}.{kind}.*.json"))]
def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round((len(xs) - 1) * p))] if xs else None
def ms(x):
    return "-" if x is None else f"{x:,.0f}"
REASONS = ("timeout", "busy", "link_down", "degraded", "error")
def figures(runs):
    tokens = sum(r["tokens"] for r in runs)
    decode_s = sum(r["decode_ms"] for r in runs) / 1e3
    gaps = [t for r in runs for t in r["token_ms"][1:]]
    ttft = [r["token_ms"][0] for r in runs if r["token_ms"]]
    reasons = {k: sum(r[f"fallback_{k}"] for r in runs) for k in REASONS}
    return {
        "runs": len(runs), "tokens": tokens, "decode_s": decode_s,
        "decode_tokens_per_s": tokens / decode_s if decode_s else 0.0,
        "token_ms_p50": pct(gaps, 0.5), "token_ms_p99": pct(gaps, 0.99),
        "escalation_wait_ms_p50": pct([e for r in runs for e in r.get("escalation_ms", [])], 0.5),
        "ttft_ms_mean": sum(ttft) / len(ttft) if ttft else None,
        "prefill_ms_mean": sum(r["prefill_ms"] for r in runs) / max(1, len(runs)),
        "escalated": sum(r["escalated"] for r in runs), "fallbacks": sum(r["fallbacks"] for r in runs),
        "fallbacks_by_reason": {k: v for k, v in reasons.items() if v},
        "kept": sum(r["speculation_kept"] for r in runs), "rolled_back": sum(r["speculation_rolled_back"] for r in runs),
        "spec_tokens_kept": sum(r["speculated_tokens_kept"] for r in runs),
        "spec_tokens_discarded": sum(r["speculated_tokens_discarded"] for r in runs),
    }
COLUMNS = ["RTT ms", "pre-sync", "mode", "decode tok/s", "vs local", "escalation wait p50 ms", "TTFT ms", "escalated",
           "fallbacks", "kept / rolled back", "speculated tokens kept / thrown away", "per-token p50 / p99 ms"]
summary = {}
for kind, title in (("cqa", "CommonsenseQA (shipped trained router at its default rate 0.1)"),
                    ("code", "Coding prompt (confidence router, tau 0.7)")):
    local = figures(load("local", kind) + load("local2", kind))
    if not local["runs"]:
        continue
    summary[kind] = {"local": local}
    print(f"\n{title}; {local['runs']} local-only runs, SLM prompt prefill {local['prefill_ms_mean']:,.0f} ms on average:\n")
    print("| " + " | ".join(COLUMNS) + " |")
    print("|" + "---|" * len(COLUMNS))
    print(f"| local-only | | | {local['decode_tokens_per_s']:.1f} | 1.00x | | {ms(local['ttft_ms_mean'])} | | | | "
          f"| {ms(local['token_ms_p50'])} / {ms(local['token_ms_p99'])} |")
    for rtt in rtts:
        for presync in ("on", "off"):
            for mode in ("wait", "spec"):
                runs = load(f"rtt{rtt}-{mode}-presync{presync}", kind)
                if not runs:
                    continue
                f = figures(runs)
                summary[kind][f"rtt{rtt}-{mode}-presync{presync}"] = f
                ratio = f["decode_tokens_per_s"] / local["decode_tokens_per_s"] if local["decode_tokens_per_s"] else 0.0
                falls = str(f["fallbacks"])
                if f["fallbacks"]:
                    falls += " (" + ", ".join(f"{v} {k.replace('_', ' ')}" for k, v in f["fallbacks_by_reason"].items()) + ")"
                spec = f"{f['kept']} / {f['rolled_back']}" if mode == "spec" else ""
                toks = f"{f['spec_tokens_kept']} / {f['spec_tokens_discarded']}" if mode == "spec" else ""
                label, vs = (f"speculate {window}", f"**{ratio:.2f}x**") if mode == "spec" else ("wait", f"{ratio:.2f}x")
                print(f"| {rtt} | {presync} | {label} | {f['decode_tokens_per_s']:.1f} | {vs} | {ms(f['escalation_wait_ms_p50'])} "
                      f"| {ms(f['ttft_ms_mean'])} | {f['escalated']} of {f['tokens']} | {falls} | {spec} | {toks} "
                      f"| {ms(f['token_ms_p50'])} / {ms(f['token_ms_p99'])} |")
with open(f"{out}/summary.json", "w") as f:
    json.dump(summary, f, indent=1)
print(f"\n(every run: {out}/*.json; summary: {out}/summary.json)")
EOF
