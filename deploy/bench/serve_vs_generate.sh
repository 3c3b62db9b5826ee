#!/usr/bin/env bash
# Tokens/s through `edge-node serve` (streamed, official openai client) vs `edge-node generate`
# on the same prompt, local mode, greedy, in one run; plus the server's time to first token.
# The same stream is also read by curl, a client that costs next to no CPU: on a 2-core device
# the Python client competes with the model's two threads, curl shows the server alone.
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
    body = json.dumps({"model": "duet", "messages": msgs, "temperature": 0, "max_tokens": n, "stream": True, "stream_options": {"include_usage": True}})
    sse = subprocess.run(["curl", "-s", "-N", f"http://127.0.0.1:{port}/v1/chat/completions", "-H", "content-type: application/json", "-d", body],
                         capture_output=True, check=True, text=True).stdout
    curl_tps = [json.loads(l[6:])["duet"]["tokens_per_s"] for l in sse.splitlines() if l.startswith("data: {") and '"usage"' in l and '"duet"' in l][-1]
    g = json.loads(subprocess.run(["./target/release/edge-node", "generate", "--chat", "--prompt", prompt, "--max-new-tokens", str(n),
                                   "--threads", "2", "--json"], capture_output=True, check=True, text=True).stdout)
    rows.append((serve_tps, server_tps, curl_tps, g["decode_tokens_per_s"], (first - t0) * 1e3, g["prefill_ms"], tokens, g["tokens"]))
print("| run | serve, openai client (client side) | same (server side) | serve, curl client (server side) | generate | ratio openai | ratio curl | serve time to first token ms | generate prefill ms | tokens |")
print("|---|---|---|---|---|---|---|---|---|---|")
for i, (s, srv, c, g, ttft, pre, ts, tg) in enumerate(rows, 1):
    print(f"| {i} | {s:.1f} | {srv:.1f} | {c:.1f} | {g:.1f} | {s / g:.2f} | {c / g:.2f} | {ttft:.0f} | {pre:.0f} | {ts} / {tg} |")
mean = [sum(r[k] for r in rows) / len(rows) for k in range(4)]
print(f"| mean | {mean[0]:.1f} | {mean[1]:.1f} | {mean[2]:.1f} | {mean[3]:.1f} | {mean[0] / mean[3]:.2f} | {mean[2] / mean[3]:.2f} | | | |")
PY
