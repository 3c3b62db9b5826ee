#!/usr/bin/env bash
# What OpenTelemetry tracing costs, in one command with its same-run baseline:
# `loadtest gateway-latency` (simulated devices over QUIC on loopback, an in-process gateway
# with a 0 ms fixed-cost backend) with tracing off, then with 1 % and 100 % of escalations
# traced: those devices send their trace context (26 bytes) with the escalation, and the
# gateway exports its spans (sampler parentbased_traceidratio at the same ratio) over OTLP/HTTP
# to a receiver in the load tester's process. The three modes alternate, ROUNDS times, each in
# a fresh process. Prints a markdown table (medians over the rounds, and every run's figure):
# frame bytes, throughput, and CPU time per escalation (the load tester's process: devices,
# gateway and exporter; the receiver's decoding taken out), which varies less than throughput
# when other work shares the cores. The JSON reports stay in $OUT.
#
# Usage: deploy/bench/tracing.sh [loadtest gateway-latency flags]
#   default "--devices 50 --sessions 2 --escalations 40" (the gateway-latency figure of
#   docs/src/benchmarks/gateway.md); ROUNDS (default 3), OUT the report directory.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
export DUET_HOME="${DUET_HOME:-$HOME/.cache/duet}"
rounds="${ROUNDS:-3}"
out="${OUT:-$(mktemp -d -t duet-tracing-XXXXXX)}"
mkdir -p "$out"
if [ $# -gt 0 ]; then flags=("$@"); else flags=(--devices 50 --sessions 2 --escalations 40); fi

say() { echo "[tracing $(date +%H:%M:%S)] $*" >&2; }

cargo build --release -q -p loadtest
say "reports in $out; machine: $(nproc) cores, $(uptime | sed 's/.*load/load/')"
modes=(off 0.01 1)
for r in $(seq 1 "$rounds"); do
  for i in 0 1 2; do
    # Rotate the order so that no mode always runs first (or last) in a round.
    mode="${modes[$(( (i + r - 1) % 3 ))]}"
    extra=()
    [ "$mode" = off ] || extra=(--trace-sample "$mode")
    say "round $r: tracing $mode"
    target/release/loadtest --log error gateway-latency "${flags[@]}" "${extra[@]}" >"$out/$mode-$r.json"
  done
done

python3 - "$out" "$rounds" <<'EOF'
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
runs = {m: [json.load(open(f"{out}/{m}-{r}.json")) for r in range(1, rounds + 1)] for m in ("off", "0.01", "1")}
med = lambda m, k: statistics.median(x[k] for x in runs[m])
base = med("off", "escalations_per_s")
cpu_base = med("off", "cpu_us_per_escalation")
print("| tracing | later escalation frame bytes | escalations/s (median; runs) | vs off | CPU µs per escalation (median; runs) | vs off | p50 / p99 ms | traced escalations | gateway.escalation spans | spans exported |")
print("|---|---|---|---|---|---|---|---|---|---|")
for m, name in (("off", "off"), ("0.01", "1 % sampled"), ("1", "100 % sampled")):
    eps, cpu = med(m, "escalations_per_s"), med(m, "cpu_us_per_escalation")
    each = ", ".join(f"{x['escalations_per_s']:,.0f}" for x in runs[m])
    each_cpu = ", ".join(f"{x['cpu_us_per_escalation']:.0f}" for x in runs[m])
    n = runs[m][0]["escalations"]
    print(f"| {name} | {med(m, 'avg_escalation_frame_bytes_after_first'):.2f} | {eps:,.0f} ({each}) | {eps / base:.2f} | "
          f"{cpu:.0f} ({each_cpu}) | {cpu / cpu_base:.2f} | "
          f"{med(m, 'escalation_p50_ms'):.2f} / {med(m, 'escalation_p99_ms'):.2f} | {med(m, 'traced_escalations'):.0f} of {n} | "
          f"{med(m, 'gateway_escalation_spans'):.0f} | {med(m, 'spans_exported'):.0f} |")
EOF
