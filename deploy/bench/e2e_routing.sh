#!/usr/bin/env bash
# End-to-end routed decoding on this machine: gateway (embedded 1.5B) + edge (0.5B) over QUIC on
# loopback, at several tau (escalation rates), local-only (tau 0) as the baseline of the same run.
# An entry "rate:R" runs the trained router file at target escalation rate R instead of a tau.
# Usage: deploy/bench/e2e_routing.sh ["TAU|rate:R ..."] [MAX_NEW_TOKENS]
# EDGE=PATH runs another build's edge-node against this build's gateway (a same-run baseline
# of the device's rules).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
export DUET_HOME="${DUET_HOME:-$HOME/.cache/duet}"
taus="${1:-0 0.35 1}"
n="${2:-96}"
cargo build --release -q -p edge-node -p cloud-gateway
edge="${EDGE:-./target/release/edge-node}"
port=$((20000 + RANDOM % 20000))
log="$(mktemp)"
./target/release/cloud-gateway --listen "127.0.0.1:$port" --http-listen off --log warn >"$log" 2>&1 &
gw=$!
trap 'kill $gw 2>/dev/null || true' EXIT
for _ in $(seq 1 120); do grep -q "ready on" "$log" && break; sleep 0.5; done
prompt="Write a Python function that checks whether a string is a palindrome, with a short explanation."
echo "| tau | escalated % | cloud tokens | fallbacks | tokens/s | vs local | token p50 / p99 ms | first / later escalation bytes |"
echo "|---|---|---|---|---|---|---|---|"
base=""
for tau in $taus; do
  case "$tau" in
    # The shipped router (`--router default`: the file deploy/models/prepare installs).
    rate:*) policy=(--router default --escalation-rate "${tau#rate:}") ;;
    *) policy=(--tau "$tau") ;;
  esac
  json="$("$edge" generate --chat --prompt "$prompt" --max-new-tokens "$n" --gateway "127.0.0.1:$port" "${policy[@]}" --json)"
  row="$(python3 - "$json" "$tau" "${base:-0}" <<'PY'
import json, sys
d = json.loads(sys.argv[1]); tau = sys.argv[2]; base = float(sys.argv[3]) or d["tokens_per_s"]
print(f"{d['tokens_per_s']}@@| {tau} | {100*d['escalated']/max(d['tokens'],1):.1f} | {d['cloud_tokens']} | {d['fallbacks']} | {d['tokens_per_s']:.1f} | {d['tokens_per_s']/base:.2f} | {d['token_latency_ms_p50']:.0f} / {d['token_latency_ms_p99']:.0f} | {d['first_escalation_bytes']} / {d['later_escalation_bytes_avg']:.1f} |")
PY
)"
  [ -z "$base" ] && base="${row%%@@*}"
  echo "${row#*@@}"
done
