#!/usr/bin/env bash
# Edge decode benchmark: `edge-node bench` vs onnxruntime-genai on the same ONNX files, in one run.
# Usage: deploy/bench/slm_decode.sh [MODEL_ID] [THREADS]   (defaults: the 0.5B SLM, 2 threads)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
export DUET_HOME="${DUET_HOME:-$HOME/.cache/duet}"
model="${1:-qwen2.5-coder-0.5b-instruct}"
threads="${2:-2}"
cd "$root"
cargo build --release -q -p edge-node
ours="$(./target/release/edge-node bench --model "$model" --threads "$threads")"
base="$("$DUET_HOME/venv/bin/python" deploy/bench/genai_baseline.py "$DUET_HOME/models/$model" --threads "$threads")"
python3 - "$ours" "$base" <<'PY'
import json, sys
o, b = json.loads(sys.argv[1]), json.loads(sys.argv[2])
print(f"model {o['model']} ({o['precision']}), {o['threads']} threads; baseline: {b['runner']}")
print("| figure | duet edge-node | onnxruntime-genai | ratio (duet/genai) |")
print("|---|---|---|---|")
print(f"| prefill {o['prefill_tokens']} tokens (ms) | {o['prefill_ms']:.0f} | {b['prefill_ms']:.0f} | {o['prefill_ms']/b['prefill_ms']:.2f} |")
for do, db in zip(o["decode"], b["decode"]):
    print(f"| decode tokens/s at context {do['context']} | {do['tokens_per_s']:.1f} | {db['tokens_per_s']:.1f} | {do['tokens_per_s']/db['tokens_per_s']:.2f} |")
print(f"| ms/token ctx {o['decode'][-1]['context']} / ctx {o['decode'][0]['context']} | {o['context_growth_ratio']:.2f} | {b['context_growth_ratio']:.2f} | |")
print(f"| peak RSS (MiB) | {o['peak_rss_mib']:.0f} | {b['peak_rss_mib']:.0f} | {o['peak_rss_mib']/b['peak_rss_mib']:.2f} |")
print(f"| decode vs the seed's 4 tokens/s (M1) | {o['decode'][0]['tokens_per_s']/4:.1f}x | | |")
PY
