#!/usr/bin/env bash
# Re-record the trace `loadtest fleet` replays (loadtest/traces/qwen2.5-coder-0.5b.trace.json,
# built into the loadtest binary: rebuild it after recording):
# real local runs of the 0.5B SLM through `edge-node generate --chat --json` (greedy, no cloud),
# over CommonsenseQA validation prompts (the seed's prompt format, as the router lab uses) and
# a few coding and chat prompts. Per generated token it keeps the token id, the SLM's top
# probability and the step time. Run it on a quiet machine: the step times are what every
# simulated device sleeps. NICE sets the generations' niceness (with the kernel's autogroups,
# on by default in Debian, it only orders processes of one session); the machine's load
# average is written into the trace. THREADS
# (default 1) is ONNX Runtime's thread count: two threads that spin-wait for each other lose
# far more to other processes than one does (this box, busy: 61 vs 41 ms per token).
# Usage: [NICE=-10] [THREADS=1] loadtest/traces/record.sh [CQA_PROMPTS] [MAX_NEW_TOKENS]   (default 30 128)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
export DUET_HOME="${DUET_HOME:-$HOME/.cache/duet}"
ncqa="${1:-30}"
max_new="${2:-128}"
out="loadtest/traces/qwen2.5-coder-0.5b.trace.json"
cargo build --release -q -p edge-node
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# The prompts: kind <TAB> name <TAB> text (newlines as \n), one per line.
python3 - "$ncqa" >"$work/prompts.tsv" <<'PY'
import json, sys
n = int(sys.argv[1])
items = [json.loads(l) for l in open("deploy/data/commonsense_qa/validation.jsonl") if l.strip()]
step = max(1, len(items) // max(n, 1))
def cqa_prompt(it):
    # router-lab/src/cqa.rs `prompt_for`, verbatim.
    s = f"Question: {it['question']}\nChoices:\n"
    for l, t in zip(it["choices"]["label"], it["choices"]["text"]):
        s += f"{l}. {t}\n"
    s += ("\nPlease format your response in the following way:\n[Explanation]. Therefore, the answer is answer (label).\n"
          "Ensure the final sentence includes the answer followed by the label in parentheses.\n\nAnswer and Reasoning:")
    return s
rows = [("cqa", f"cqa-{i}", cqa_prompt(items[i])) for i in range(0, step * n, step)][:n]
code = [
    "Write a Python function that checks whether a string is a palindrome.",
    "Write a Rust function that returns the n-th Fibonacci number iteratively.",
    "Explain what this does and fix the bug: def mean(xs): return sum(xs) / len(xs) + 1",
    "Write a SQL query that returns the ten customers with the highest total order value.",
    "Write a bash one-liner that counts the lines of every .rs file under src/ and prints the total.",
    "Write a JavaScript function that debounces another function by a given number of milliseconds.",
]
chat = [
    "What is the capital of France, and what is it famous for?",
    "Give me three tips for sleeping better.",
    "Summarise the plot of Romeo and Juliet in four sentences.",
    "How do I politely decline a meeting invitation? Write a short email.",
    "What is the difference between weather and climate?",
    "Suggest a name for a small bakery by the sea and explain why.",
]
rows += [("code", f"code-{i}", p) for i, p in enumerate(code)]
rows += [("chat", f"chat-{i}", p) for i, p in enumerate(chat)]
for kind, name, text in rows:
    print(f"{kind}\t{name}\t{json.dumps(text)}")
PY

count="$(wc -l <"$work/prompts.tsv")"
i=0
while IFS=$'\t' read -r kind name text; do
  i=$((i + 1))
  prompt="$(python3 -c 'import json,sys; print(json.loads(sys.argv[1]))' "$text")"
  echo "[$i/$count] $name" >&2
  nice -n "${NICE:-0}" ./target/release/edge-node generate --chat --prompt "$prompt" --max-new-tokens "$max_new" --threads "${THREADS:-1}" --json --log error >"$work/$name.json"
  cut -d' ' -f1 /proc/loadavg >>"$work/load.txt"
  printf '%s\t%s\n' "$kind" "$name" >>"$work/done.tsv"
done <"$work/prompts.tsv"

python3 - "$work" "$out" <<'PY'
import json, os, subprocess, sys, datetime
work, out = sys.argv[1], sys.argv[2]
home = os.environ["DUET_HOME"]
manifest = json.load(open(os.path.join(home, "models", "qwen2.5-coder-0.5b-instruct", "duet-model.json")))
sessions = []
for line in open(os.path.join(work, "done.tsv")):
    kind, name = line.rstrip("\n").split("\t")
    d = json.load(open(os.path.join(work, name + ".json")))
    probs = d["top_probs"]
    assert all(p is not None for p in probs), name
    steps = list(d["token_ms"])
    steps[0] = max(0.0, steps[0] - d["prefill_ms"])  # the first interval includes the prefill
    sessions.append({
        "name": name, "kind": kind, "prompt": d["prompt_token_ids"], "prefill_ms": round(d["prefill_ms"], 1),
        "tokens": d["token_ids"], "top_probs": [round(p, 4) for p in probs], "step_ms": [round(s, 2) for s in steps],
    })
cpu = subprocess.run(["sh", "-c", "grep -m1 'model name' /proc/cpuinfo | cut -d: -f2"], capture_output=True, text=True).stdout.strip()
loads = [float(x) for x in open(os.path.join(work, "load.txt")) if x.strip()]
nice = os.environ.get("NICE", "0")
threads = os.environ.get("THREADS", "1")
trace = {
    "format": 1,
    "slm_id": manifest["id"],
    "tokenizer_fingerprint": manifest["tokenizer_fingerprint"],
    "vocab_size": manifest["vocab_size"],
    # As model-runtime's CausalLm: the manifest's EOS ids, plus <|endoftext|> and <|im_end|> for Qwen.
    "stop_tokens": sorted(set(manifest["eos_token_ids"]) | ({151643, 151645} if manifest["vocab_size"] == 151936 else set())),
    "recorded": f"loadtest/traces/record.sh on {datetime.date.today()}: edge-node generate --chat --json, greedy, local, "
                f"{threads} thread(s) on {os.cpu_count()} cores ({cpu}), nice {nice}, load average {min(loads):.1f}-{max(loads):.1f}",
    "sessions": sessions,
}
with open(out, "w") as f:
    json.dump(trace, f, separators=(",", ":"))
    f.write("\n")
n = sum(len(s["tokens"]) for s in sessions)
print(f"wrote {out}: {len(sessions)} sessions, {n} tokens, {os.path.getsize(out) // 1024} KiB", file=sys.stderr)
PY
