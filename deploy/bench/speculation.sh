#!/usr/bin/env bash
# Hiding the network (issue 16), in one command: routed decoding with the gateway (embedded
# 1.5B) pinned to its own core behind `loadtest relay` adding a real delay, against local-only
# decoding of the same prompts in the same run. For each round-trip time: local-only, routed
# waiting for every answer, routed with speculative continuation (--speculate), each with and
# without the prompt pre-sync. Prompts: CommonsenseQA validation questions (the seed's format)
# with the shipped trained router at its default rate, and a coding prompt with the confidence
# router. Prints a markdown table (BENCHMARKS.md quotes it) and writes every run's --json.
#
#   deploy/bench/speculation.sh                      # RTTS="0 20 50 100" ITEMS=4 WINDOW=8
#   RTTS=50 WINDOW=32 deploy/bench/speculation.sh   # one RTT, another window
#   CHECK_ITEMS=100 deploy/bench/speculation.sh      # also: served CommonsenseQA, long deadlines,
#                                                    # texts with and without speculation compared
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
export DUET_HOME="${DUET_HOME:-$HOME/.cache/duet}"
RTTS="${RTTS:-0 20 50 100}"
ITEMS="${ITEMS:-4}"              # CommonsenseQA validation items per configuration
WINDOW="${WINDOW:-8}"            # --speculate
MAX_TOKENS="${MAX_TOKENS:-96}"
EDGE_CPU="${EDGE_CPU:-0}"        # the device's core
GW_CPU="${GW_CPU:-1}"            # the gateway's and the relay's core
CHECK_ITEMS="${CHECK_ITEMS:-0}"
out="${OUT:-$DUET_HOME/bench/speculation}"
mkdir -p "$out"
rm -f "$out"/*.json
# BIN=dir runs binaries built earlier (e.g. copied out of target/release) instead of building.
if [ -n "${BIN:-}" ]; then
  bin="$BIN"
else
  cargo build --release --locked -q -p edge-node -p cloud-gateway -p loadtest -p router-lab
  bin=./target/release
fi
say() { echo "[speculation] $*" >&2; }

# One profile per round-trip time: half of it each way, +-10 % jitter without reordering.
{
  for rtt in $RTTS; do
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

# The prompts: CommonsenseQA questions in the seed's format, and one coding request.
python3 - "$ITEMS" >"$out/prompts.jsonl" <<'EOF'
import json, sys
n = int(sys.argv[1])
with open("deploy/data/commonsense_qa/validation.jsonl") as f:
    for line in list(f)[:n]:
        d = json.loads(line)
        s = "Question: " + d["question"] + "\nChoices:\n" + "".join(f"{l}. {t}\n" for l, t in zip(d["choices"]["label"], d["choices"]["text"]))
        s += "\nPlease format your response in the following way:\n[Explanation]. Therefore, the answer is answer (label).\n"
        s += "Ensure the final sentence includes the answer followed by the label in parentheses.\n\nAnswer and Reasoning:"
        print(json.dumps({"kind": "cqa", "prompt": s, "router": []}))
print(json.dumps({"kind": "code", "prompt": "Write a Python function that checks whether a number is prime, with a docstring.",
                  "router": ["--router", "confidence", "--tau", "0.7"]}))
EOF

# run NAME ARGS...: every prompt once, each run's --json in $out/NAME.<i>.json.
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
  taskset -c "$GW_CPU" "$bin/loadtest" relay --profiles-file "$out/profiles.toml" --profile "rtt-$rtt" \
    --listen "127.0.0.1:$rport" --upstream "127.0.0.1:$gport" --stats-every-s 0 >"$out/relay-$rtt.log" 2>&1 &
  relay=$!
  sleep 0.5
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

python3 - "$out" "$RTTS" <<'EOF'
import glob, json, os, sys
out, rtts = sys.argv[1], sys.argv[2].split()
def load(name, kind):
    return [json.load(open(p)) for p in sorted(glob.glob(f"{out}/{name}.{kind}.*.json"))]
def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round((len(xs) - 1) * p))] if xs else 0.0
def figures(runs):
    tokens = sum(r["tokens"] for r in runs)
    secs = sum(r["total_ms"] for r in runs) / 1e3
    itl = [t for r in runs for t in r["token_ms"][1:]]
    ttft = [r["prefill_ms"] + r["token_ms"][0] for r in runs if r["token_ms"]]
    esc = sum(r["escalated"] for r in runs)
    return {
        "tokens": tokens, "tokens_per_s": tokens / secs if secs else 0.0,
        "itl_p50_ms": pct(itl, 0.5), "itl_p99_ms": pct(itl, 0.99), "ttft_ms_mean": sum(ttft) / max(1, len(ttft)),
        "escalated": esc, "escalated_share": esc / max(1, tokens), "fallbacks": sum(r["fallbacks"] for r in runs),
        "kept": sum(r.get("speculation_kept", 0) for r in runs), "rolled_back": sum(r.get("speculation_rolled_back", 0) for r in runs),
        "spec_tokens_kept": sum(r.get("speculated_tokens_kept", 0) for r in runs),
        "spec_tokens_discarded": sum(r.get("speculated_tokens_discarded", 0) for r in runs),
        "first_escalation_ms": [r["escalation_latency_ms_p50"] for r in runs],
    }
summary = {}
for kind in ("cqa", "code"):
    local = figures(load("local", kind) + load("local2", kind))
    summary[kind] = {"local": local}
    print(f"\n{kind}: local-only {local['tokens_per_s']:.1f} tok/s, ITL p50 {local['itl_p50_ms']:.0f} / p99 {local['itl_p99_ms']:.0f} ms, TTFT {local['ttft_ms_mean']:.0f} ms\n")
    print("| RTT | pre-sync | mode | tokens/s | vs local | ITL p50 / p99 ms | TTFT ms | escalated | fallbacks | kept / rolled back | tokens kept / thrown away |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for rtt in rtts:
        for presync in ("on", "off"):
            for mode in ("wait", "spec"):
                runs = load(f"rtt{rtt}-{mode}-presync{presync}", kind)
                if not runs:
                    continue
                f = figures(runs)
                summary[kind][f"rtt{rtt}-{mode}-presync{presync}"] = f
                spec = f"{f['kept']} / {f['rolled_back']}" if mode == "spec" else ""
                toks = f"{f['spec_tokens_kept']} / {f['spec_tokens_discarded']}" if mode == "spec" else ""
                print(f"| {rtt} | {presync} | {'speculate' if mode == 'spec' else 'wait'} | {f['tokens_per_s']:.1f} | {f['tokens_per_s'] / local['tokens_per_s']:.2f}x "
                      f"| {f['itl_p50_ms']:.0f} / {f['itl_p99_ms']:.0f} | {f['ttft_ms_mean']:.0f} | {f['escalated']} ({100 * f['escalated_share']:.1f} %) | {f['fallbacks']} | {spec} | {toks} |")
json.dump(summary, open(f"{out}/summary.json", "w"), indent=1)
print(f"\n(every run: {out}/*.json; summary: {out}/summary.json)")
EOF

if [ "$CHECK_ITEMS" -gt 0 ]; then
  # Same texts with and without speculation when every answer arrives (long deadlines).
  taskset -c "$GW_CPU" "$bin/loadtest" relay --profiles-file "$out/profiles.toml" --profile "rtt-50" \
    --listen "127.0.0.1:$rport" --upstream "127.0.0.1:$gport" --stats-every-s 0 >"$out/relay-check.log" 2>&1 &
  relay=$!
  sleep 0.5
  for w in 0 "$WINDOW"; do
    rm -rf "$out/served-spec$w"
    taskset -c "$EDGE_CPU" "$bin/router-lab" eval-cqa --threads 1 --gateway "127.0.0.1:$rport" --ca-cert "$out/cert.pem" \
      --escalation-rate 0.1 --limit "$CHECK_ITEMS" --deadline-min-ms 20000 --deadline-max-ms 60000 --speculate "$w" \
      --out "$out/served-spec$w" >/dev/null 2>>"$out/edge.log"
  done
  python3 deploy/eval/table.py "$out/served-spec$WINDOW/items.jsonl" --same-as "$out/served-spec0/items.jsonl" --run "served-mlp@0.100"
fi
