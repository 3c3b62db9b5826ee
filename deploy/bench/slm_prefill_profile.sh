#!/usr/bin/env bash
# Where a prefill spends its time, in `edge-node bench` and in onnxruntime-genai on the same
# files: `perf record` (Debian's linux-perf) of each runner doing REPEAT prefills of TOKENS
# tokens, then the hottest symbols side by side, as CPU milliseconds per prefill (samples at
# 1,999 Hz per thread, divided by the number of prefills run). Prints a markdown table.
#
#   deploy/bench/slm_prefill_profile.sh        # the 0.5B SLM, 256 tokens, 2 threads, 10 prefills
#   TOKENS=512 REPEAT=5 deploy/bench/slm_prefill_profile.sh
#
# Both runners also load the model and warm up (one short prefill and a few steps, one prefill
# of each timed length); those samples are in the totals too, alike on both sides.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
export DUET_HOME="${DUET_HOME:-$HOME/.cache/duet}"
MODEL="${MODEL:-qwen2.5-coder-0.5b-instruct}"
TOKENS="${TOKENS:-256}"
THREADS="${THREADS:-2}"
REPEAT="${REPEAT:-10}"
command -v perf >/dev/null || { echo "needs perf (Debian: apt-get install linux-perf)" >&2; exit 2; }
cargo build --release --locked -q -p edge-node
out="${OUT:-$DUET_HOME/bench/slm_prefill_profile}"
mkdir -p "$out"
echo "[profile] $MODEL, $TOKENS-token prefill x $REPEAT, $THREADS threads; $(uptime | sed 's/.*load/load/'), commit $(git rev-parse --short HEAD)" >&2
common=(--threads "$THREADS" --prefill-tokens "$TOKENS" --repeat "$REPEAT" --contexts 1 --decode-tokens 1)
perf record -F 1999 -q -o "$out/duet.data" -- ./target/release/edge-node bench --model "$MODEL" "${common[@]}" \
  >"$out/duet.json" 2>"$out/duet-record.log"
perf record -F 1999 -q -o "$out/genai.data" -- "$DUET_HOME/venv/bin/python" deploy/bench/genai_baseline.py \
  "$DUET_HOME/models/$MODEL" "${common[@]}" >"$out/genai.json" 2>"$out/genai-record.log"
for who in duet genai; do
  perf report -i "$out/$who.data" --sort dso,sym --stdio -n --percent-limit 0.2 2>/dev/null >"$out/$who.sym.txt"
done
python3 - "$out" "$REPEAT" <<'PY'
import json, re, sys
out, repeat = sys.argv[1], int(sys.argv[2])
# The prefills of this length either runner runs: the timed ones and the warm-up's one (the
# warm-up's short prefill, the load and the one-token steps are in the totals too).
prefills = repeat + 1
def symbols(who):
    rows = {}
    for line in open(f"{out}/{who}.sym.txt"):
        m = re.match(r"\s*[\d.]+%\s+(\d+)\s+(\S+)\s+\[.\]\s+(.*)", line)
        if m:
            # One library under two names (the wheel's libonnxruntime.so.1.32.0, its copy as
            # libonnxruntime.so): the same file, so the same addresses.
            key = (re.sub(r"\.so(\.\d+)+$", ".so", m.group(2).split("/")[-1]), m.group(3).strip()[:60])
            rows[key] = rows.get(key, 0) + int(m.group(1))
    return rows
s = {w: symbols(w) for w in ("duet", "genai")}
ms = lambda n: n / 1999 * 1e3 / prefills
for w in s:
    b = json.load(open(f"{out}/{w}.json"))
    lib = lambda name: sum(v for k, v in s[w].items() if k[0] == name)
    print(f"{w}: prefill {b['prefill_tokens']} tokens {b['prefill_ms']:.0f} ms (median of {repeat}); CPU ms sampled per prefill:"
          f" {ms(sum(s[w].values())):.0f} in all, {ms(lib('libonnxruntime.so')):.0f} in ONNX Runtime, {ms(lib('[kernel.kallsyms]')):.0f} in the kernel")
keys = sorted(set(s["duet"]) | set(s["genai"]), key=lambda k: -(s["duet"].get(k, 0) + s["genai"].get(k, 0)))[:16]
print("\n| symbol | library | duet, CPU ms per prefill | genai | duet - genai |\n|---|---|---|---|---|")
for k in keys:
    d, g = ms(s["duet"].get(k, 0)), ms(s["genai"].get(k, 0))
    print(f"| `{k[1]}` | {k[0]} | {d:.0f} | {g:.0f} | {d - g:+.0f} |")
PY
