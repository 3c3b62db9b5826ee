#!/usr/bin/env bash
# Tokens/s through `edge-node serve` (streamed, official openai client) vs `edge-node generate`
# on the same prompt, local mode, greedy, in one run; plus the server's time to first token.
# Usage: deploy/bench/serve_vs_generate.sh [MAX_TOKENS] [RUNS]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
export DUET_HOME="${DUET_HOME:-$HOME/.cache/duet}"
n="${1:-128}"
runs="${2:-3}"
cargo build --release -q -p edge-node
py="$(deploy/clients/setup)"
port=$((20000 + RANDOM % 20000))
log="$(mktemp)"
./target/release/edge-node serve --listen "127.0.0.1:$port" --threads 2 >"$log" 2>&1 &
srv=$!
trap 'kill $srv 2>/dev/null || true' EXIT
for _ in $(seq 1 120); do grep -q "serving the OpenAI API" "$log" && break; sleep 0.5; done
prompt="Write a Python function that checks whether a string is a palindrome, with a short explanation."
"$py" - "$port" "$prompt" "$n" "$runs" <<'PY'
import json, subprocess, sys, time
import openai
port, prompt, n, runs = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0, timeout=600)
msgs = [{"role": "user", "content": prompt}]
client.chat.completions.create(model="duet", messages=msgs, temperature=0, max_tokens=4)  # warm-up
rows = []
for _ in range(runs):
    t0 = time.monotonic(); first = None; last = None
    for c in client.chat.completions.create(model="duet", messages=msgs, temperature=0, max_tokens=n, stream=True):
        if c.choices and c.choices[0].delta.content:
            first = first or time.monotonic()
        if c.usage:
            tokens = c.usage.completion_tokens
            server_tps = c.model_extra["duet"]["tokens_per_s"]
    end = time.monotonic()
    serve_tps = (tokens - 1) / (end - first)
    g = json.loads(subprocess.run(["./target/release/edge-node", "generate", "--chat", "--prompt", prompt, "--max-new-tokens", str(n),
                                   "--threads", "2", "--json"], capture_output=True, check=True, text=True).stdout)
    rows.append((serve_tps, server_tps, g["decode_tokens_per_s"], (first - t0) * 1e3, g["prefill_ms"], tokens, g["tokens"]))
print("| run | serve tokens/s (client side) | serve tokens/s (server side) | generate tokens/s | ratio (client side) | serve time to first token ms | generate prefill ms | tokens |")
print("|---|---|---|---|---|---|---|---|")
for i, (s, srv, g, ttft, pre, ts, tg) in enumerate(rows, 1):
    print(f"| {i} | {s:.1f} | {srv:.1f} | {g:.1f} | {s / g:.2f} | {ttft:.0f} | {pre:.0f} | {ts} / {tg} |")
ms = sum(r[0] for r in rows) / len(rows); msrv = sum(r[1] for r in rows) / len(rows); mg = sum(r[2] for r in rows) / len(rows)
print(f"| mean | {ms:.1f} | {msrv:.1f} | {mg:.1f} | {ms / mg:.2f} | | | |")
PY
