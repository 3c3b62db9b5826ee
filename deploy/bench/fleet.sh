#!/usr/bin/env bash
# The fleet load test's reference measurements, in one command: `loadtest fleet`
#   1. BIG devices (default 5000) connected at once to one gateway with the fixed-cost backend,
#      no relay (`direct`): escalations/s, gateway-added latency p50/p99 (escalation round trip
#      minus the same links' ping round trip, same run), gateway RSS per connected device;
#   2. each named network profile with PER devices (default 1000) through the impairment relay:
#      ITL p99 vs the deadline's maximum, goodput, fallback rate; `flapping`'s blackouts;
#   3. the embedded LLM backend at increasing device counts (EMBEDDED, default "1 2 4 8 16"):
#      where the gateway saturates (Busy, timeouts and latency vs devices).
# Every run's JSON and HTML reports stay in $OUT; a markdown table is printed at the end.
# Every run checks every device's token stream: a violation fails that run.
# Usage: deploy/bench/fleet.sh [all|big|profiles|embedded]
#   BIG, PER, EMBEDDED, DURATION (s of load per run, default 60), OUT (report directory).
#   On a shared machine every report states how busy the whole machine was (`host_busy_share`)
#   and its local-only devices' ITL shows whether the load generator itself was starved.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
export DUET_HOME="${DUET_HOME:-$HOME/.cache/duet}"
what="${1:-all}"
big="${BIG:-5000}"
per="${PER:-1000}"
embedded="${EMBEDDED:-1 2 4 8 16}"
duration="${DURATION:-60}"
out="${OUT:-$(mktemp -d -t duet-fleet-XXXXXX)}"
mkdir -p "$out"
say() { echo "[fleet $(date +%H:%M:%S)] $*" >&2; }

cargo build --release -q -p loadtest
say "reports in $out; machine: $(nproc) cores, $(uptime | sed 's/.*load/load/'), ulimit -n $(ulimit -n)"

# run NAME ARGS...: one fleet run, reports in $out/NAME.{json,html}, progress in $out/NAME.log.
run() {
  local name=$1
  shift
  say "$name: $*"
  if ./target/release/loadtest fleet --label "$name" --seed 1 --duration-s "$duration" "$@" \
      --json "$out/$name.json" --html "$out/$name.html" 2>"$out/$name.log"; then
    tail -n 1 "$out/$name.log" >&2
  else
    say "$name FAILED (see $out/$name.log)"
    tail -n 5 "$out/$name.log" >&2
  fi
}

started=$(date +%s)
if [ "$what" = all ] || [ "$what" = big ]; then
  # A minute to connect them all (about 80 handshakes/s), a session every ~20 s per device, a
  # ping every ~20 s (5 s pings at 5,000 devices are 1,000 extra requests/s on these 2 cores).
  run "big-$big-direct" --devices "$big" --ramp-up-s 60 --think-time-s 20 --ping-interval-s 20 --profiles direct
fi
if [ "$what" = all ] || [ "$what" = profiles ]; then
  for p in lan wifi 4g 3g-lossy satellite flapping; do
    run "profile-$p-$per" --devices "$per" --ramp-up-s 20 --think-time-s 5 --profiles "$p"
  done
  run "mix-$per" --devices "$per" --ramp-up-s 20 --think-time-s 5 --profiles 4g=70,wifi=20,3g-lossy=10
fi
if [ "$what" = all ] || [ "$what" = embedded ]; then
  for n in $embedded; do
    run "embedded-$n" --devices "$n" --ramp-up-s 2 --think-time-s 5 --profiles 4g --backend embedded --baseline-devices 1
  done
fi
say "done in $(($(date +%s) - started)) s"

python3 - "$out" <<'PY'
import glob, json, os, sys
out = sys.argv[1]
rows = []
for path in sorted(glob.glob(os.path.join(out, "*.json")), key=os.path.getmtime):
    r = json.load(open(path))
    g, c = r["gateway"], r["correctness"]
    for p in r["profiles"]:
        b = p.get("blackouts") or {}
        added = "-" if p["gateway_added_p50_ms"] is None else f"{p['gateway_added_p50_ms']:.2f} / {p['gateway_added_p99_ms']:.2f}"
        rss = "-" if g["rss_per_connected_device_kib_at_peak"] is None or not g["backend"].startswith("fixed-cost") else f"{g['rss_per_idle_device_kib']:.1f} / {g['rss_per_connected_device_kib_at_peak']:.1f}"
        resume = f"{b['resume_ms']['p50']:.0f} / {b['resume_ms']['p99']:.0f} (first cloud token within 2 s: {100*b['resumed_within_2s']:.1f} %; served 2 s after: {100*b['served_2s_after']:.1f} % of {b['served_2s_after_n']})" if b else "-"
        rows.append(f"| {r['label']} | {p['profile']} | {p['devices']} ({p['connected']}) | {g['connections_peak']:.0f} | {g['escalations_per_s']:.0f} | "
                    f"{p['escalation_rtt_ms']['p50']:.1f} / {p['escalation_rtt_ms']['p99']:.1f} | {p['ping_ms']['p50']:.1f} / {p['ping_ms']['p99']:.1f} | {added} | "
                    f"{p['itl_ms']['p50']:.0f} / {p['itl_ms']['p99']:.0f} / {p['itl_ms']['max']:.0f} | {p['ttft_ms']['p50']:.0f} | {p['goodput']:.3f} | {p['fallback_rate']:.3f} | {p['busy_rate']:.3f} | "
                    f"{p['vs_local_only'] or 0:.2f} | {p['reconnects']} / {p['full_syncs']} | {resume} | {rss} | {g['cpu_load_pct'] or 0:.0f} / {r['fleet_cpu_load_pct'] or 0:.0f} | "
                    f"{100*(r['host_busy_share'] or 0):.0f} % | {c['tokens_checked']} / {c['cloud_tokens_checked']} / {c['violations']} |")
print("| run | profile | devices (connected) | gateway connections | gateway esc/s | escalation RTT p50 / p99 ms | ping p50 / p99 ms | gateway-added p50 / p99 ms | ITL p50 / p99 / max ms | TTFT p50 ms | goodput | fallback | busy | tokens/s vs local | reconnects / Full syncs | resume after blackout p50 / p99 ms | gateway RSS KiB per idle / connected device | CPU % gateway / fleet | machine busy (all cores) | tokens / cloud tokens checked / violations |")
print("|" + "---|" * 21)
print("\n".join(rows))
PY
