#!/usr/bin/env bash
# A gateway restarted under a running device: does the device get cloud tokens again?
#
# The gateway (embedded 1.5B) and one device (0.5B, the shipped router) on loopback. Once the
# device has had ESCALATIONS escalations answered, the gateway is killed (SIGKILL) and started
# again on the same port; the new one holds no context, so the device must resync a long
# context (prompt and answer so far). Each run reports the escalations answered before the
# restart, what the new gateway did with the device's escalations after it, and how the
# device's tokens fell back from the first fallback on, with the context sent ahead of the hard
# token (the default) and without it (`--no-presync`: a `Full` with each hard token).
#
# Usage: deploy/bench/gateway_restart.sh [RUNS] [MAX_NEW_TOKENS] [RATE]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
export DUET_HOME="${DUET_HOME:-$HOME/.cache/duet}"
runs="${1:-default no-presync}"
n="${2:-300}"
rate="${3:-0.2}"
escalations="${ESCALATIONS:-8}"
cargo build --release -q -p edge-node -p cloud-gateway
work="$(mktemp -d)"
gw=""
trap 'kill -9 $gw 2>/dev/null || true; rm -rf "$work"' EXIT

port=$((20000 + RANDOM % 20000))
http=$((40000 + RANDOM % 20000))
start_gateway() {
  : >"$work/gateway.log"
  ./target/release/cloud-gateway --listen "127.0.0.1:$port" --http-listen "127.0.0.1:$http" --log warn >"$work/gateway.log" 2>&1 &
  gw=$!
  for _ in $(seq 1 240); do grep -q "ready on" "$work/gateway.log" && return; sleep 0.5; done
  echo "the gateway did not start: $(cat "$work/gateway.log")" >&2
  exit 1
}
metric() {
  curl -s "http://127.0.0.1:$http/metrics" | awk -v m="$1" '$1 == m { print $2 }' | head -1
}

prompt="Explain, step by step and with a short example for each, how a hash map handles collisions with separate chaining and with open addressing, and when to prefer each. Then write a small Python class that implements separate chaining with insert, lookup and delete, and explain its time complexity."
echo "| run | escalations answered before the restart | after it: received / answered / busy / expired | fell back after (busy / timeout / link down / degraded / error) | full syncs |"
echo "|---|---|---|---|---|"
for run in $runs; do
  extra=()
  [ "$run" = "no-presync" ] && extra=(--no-presync)
  start_gateway
  ./target/release/edge-node generate --chat --prompt "$prompt" --max-new-tokens "$n" --gateway "127.0.0.1:$port" \
    --router default --escalation-rate "$rate" --connect-wait-ms 60000 --json "${extra[@]}" >"$work/edge.json" 2>"$work/edge.log" &
  edge=$!
  while :; do
    before="$(metric duet_gateway_escalations_answered_total || true)"
    before="${before%.*}"
    [ -n "$before" ] && [ "$before" -ge "$escalations" ] && break
    kill -0 $edge 2>/dev/null || { echo "the device finished before $escalations escalations were answered: $(tail -c 2000 "$work/edge.log") $(tail -c 600 "$work/edge.json")" >&2; exit 1; }
    sleep 0.1
  done
  kill -9 $gw
  wait $gw 2>/dev/null || true
  start_gateway
  wait $edge
  after=""
  for m in received answered busy expired; do
    v="$(metric "duet_gateway_escalations_${m}_total" || true)"
    after="$after ${v:-0}"
  done
  python3 - "$work/edge.json" "$run" "$before" $after <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
run, before = sys.argv[2], int(sys.argv[3])
received, answered, busy, expired = (int(float(v)) for v in sys.argv[4:8])
src = d["sources"]
first_fb = src.index("fallback") if "fallback" in src else len(src)
late = src[first_fb:]
fb = [d.get(k, 0) for k in ("fallback_busy", "fallback_timeout", "fallback_link_down", "fallback_degraded", "fallback_error")]
print(f"| {run} | {before} | {received} / {answered} / {busy} / {expired} | {late.count('fallback')} ({' / '.join(map(str, fb))}) | {d['full_syncs']} |")
PY
  kill -9 $gw 2>/dev/null || true
  wait $gw 2>/dev/null || true
done
