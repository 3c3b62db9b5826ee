#!/usr/bin/env bash
# Where the device's decode step spends its time: `perf record` (Debian's linux-perf) of
# `edge-node bench` at one context, then the share of samples per library and the hottest
# symbols outside ONNX Runtime's kernels. Prints a markdown table
# docs/src/benchmarks/device-decode.md quotes.
#
#   deploy/bench/slm_profile.sh                # the 0.5B SLM, context 128, 1 thread, 512 steps
#   CONTEXT=1024 THREADS=2 deploy/bench/slm_profile.sh
#
# The samples include loading the model and the prefill (a few seconds against the decode's
# tens); the `bench` run's own figures are printed first so the two can be read together.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
export DUET_HOME="${DUET_HOME:-$HOME/.cache/duet}"
MODEL="${MODEL:-qwen2.5-coder-0.5b-instruct}"
CONTEXT="${CONTEXT:-128}"
THREADS="${THREADS:-1}"
STEPS="${STEPS:-512}"
command -v perf >/dev/null || { echo "needs perf (Debian: apt-get install linux-perf)" >&2; exit 2; }
cargo build --release --locked -q -p edge-node
out="${OUT:-$DUET_HOME/bench/slm_profile}"
mkdir -p "$out"
echo "[profile] $MODEL, context $CONTEXT, $THREADS thread(s), $STEPS steps; $(uptime | sed 's/.*load/load/'), commit $(git rev-parse --short HEAD)" >&2
perf record -F 1999 -q -o "$out/perf.data" -- ./target/release/edge-node bench --model "$MODEL" \
  --threads "$THREADS" --contexts "$CONTEXT" --decode-tokens "$STEPS" --prefill-tokens 16 --repeat 1 \
  >"$out/bench.json" 2>"$out/perf-record.log"
perf report -i "$out/perf.data" --sort dso --stdio --percent-limit 0.5 2>/dev/null >"$out/dso.txt"
perf report -i "$out/perf.data" --sort dso,sym --stdio --percent-limit 0.3 2>/dev/null >"$out/sym.txt"
python3 - "$out" <<'PY'
import json, re, sys
out = sys.argv[1]
b = json.load(open(f"{out}/bench.json"))
d = b["decode"][0]
print(f"bench: decode {d['tokens_per_s']:.1f} tokens/s at context {d['context']} ({b['threads']} thread(s))")
rows = []
for line in open(f"{out}/dso.txt"):
    m = re.match(r"\s*([\d.]+)%\s+(\S+)", line)
    if m:
        rows.append((float(m.group(1)), m.group(2)))
print("\n| library | share of samples |\n|---|---|")
for pct, dso in rows:
    print(f"| {dso} | {pct:.1f} % |")
print("\n| hottest symbols outside libonnxruntime | library | share |\n|---|---|---|")
n = 0
for line in open(f"{out}/sym.txt"):
    m = re.match(r"\s*([\d.]+)%\s+(\S+)\s+\[.\]\s+(.*)", line)
    if m and "libonnxruntime" not in m.group(2) and n < 10:
        print(f"| `{m.group(3).strip()[:70]}` | {m.group(2)} | {float(m.group(1)):.1f} % |")
        n += 1
PY
