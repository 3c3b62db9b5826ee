#!/usr/bin/env bash
# Edge decode benchmark: `edge-node bench` vs onnxruntime-genai on the same ONNX files, in one run.
# Usage: deploy/bench/slm_decode.sh [MODEL_ID] [THREADS]   (defaults: the 0.5B SLM, 2 threads)
#   ROUNDS=3       rounds; each runs every runner once as a fresh process (median of 3 inside),
#                  the order reversed every other round, so a host that drifts in speed over
#                  minutes (a shared VM does) weighs on every runner alike
#   KEEP=DIR       keep every round's JSON report in DIR (default: a temporary folder, removed)
#   RUNNERS="duet genai"  who runs: duet (edge-node bench), duet-4k (the same with
#                  --huge-pages off: the weights on 4 KiB pages, as before they were advised),
#                  base (edge-node bench from the binary BASE_BIN names: an earlier build,
#                  for a before/after in the same run; BASE_BIN=target/release/edge-node
#                  runs this build against itself, the A/A that shows the host's noise),
#                  genai (the baseline, always run)
# The table gives each figure's median over the rounds and the ratio's spread (min-max of the
# per-round ratios against genai). Below it, the host facts the figures depend on: the CPU and
# the instruction sets ONNX Runtime's int4 kernels pick from, the kernel's transparent huge
# page settings, and what each duet run actually placed on huge pages (from its load log).
# Last, the noise floor per runner: how far one process's repetitions spread ("within") and
# how far its processes spread ("between"); a ratio inside the between-spread is no difference.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
export DUET_HOME="${DUET_HOME:-$HOME/.cache/duet}"
model="${1:-qwen2.5-coder-0.5b-instruct}"
threads="${2:-2}"
rounds="${ROUNDS:-3}"
cd "$root"
cargo build --release -q -p edge-node
if [[ -n "${KEEP:-}" ]]; then out="$KEEP"; mkdir -p "$out"; else out="$(mktemp -d)"; trap 'rm -rf "$out"' EXIT; fi

read -r -a runners <<< "${RUNNERS:-duet genai}"
[[ " ${runners[*]} " == *" genai "* ]] || runners+=(genai)
run_one() {
  case "$1" in
    duet) ./target/release/edge-node bench --model "$model" --threads "$threads" ;;
    duet-4k) ./target/release/edge-node bench --model "$model" --threads "$threads" --huge-pages off ;;
    base) "${BASE_BIN:?RUNNERS has base: set BASE_BIN to the edge-node binary of the build to compare}" bench --model "$model" --threads "$threads" ;;
    genai) "$DUET_HOME/venv/bin/python" deploy/bench/genai_baseline.py "$DUET_HOME/models/$model" --threads "$threads" ;;
    *) echo "RUNNERS: $1 is not duet, duet-4k, base or genai" >&2; exit 2 ;;
  esac
}
for r in $(seq "$rounds"); do
  order=("${runners[@]}")
  if (( r % 2 == 0 )); then order=(); for ((i=${#runners[@]}-1; i>=0; i--)); do order+=("${runners[i]}"); done; fi
  for name in "${order[@]}"; do
    DUET_LOG="${DUET_LOG:-warn,model_runtime=info}" run_one "$name" > "$out/$name.$r.json" 2> "$out/$name.$r.log" \
      || { cat "$out/$name.$r.log" >&2; exit 1; }
  done
  echo "round $r of $rounds done ($(cut -d' ' -f1-3 /proc/loadavg))" >&2
done

python3 - "$out" "$rounds" "${runners[@]}" <<'PY'
import json, statistics, sys
out, rounds, runners = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
runs = {n: [json.load(open(f"{out}/{n}.{r}.json")) for r in range(1, rounds + 1)] for n in runners}
med = statistics.median
def figures(rep):
    f = {f"prefill {rep['prefill_tokens']} tokens (ms)": rep["prefill_ms"]}
    for d in rep["decode"]:
        f[f"decode tokens/s at context {d['context']}"] = d["tokens_per_s"]
    return f
first = next(n for n in runners if n != "genai")
names = list(figures(runs[first][0]))
o, b = runs[first][0], runs["genai"][0]
print(f"model {o['model']} ({o['precision']}), {o['threads']} threads, {rounds} rounds; baseline: {b['runner']}")
ours = [n for n in runners if n != "genai"]
print("| figure | " + " | ".join(f"{n} (median)" for n in ours) + " | genai (median) | " + " | ".join(f"{n}/genai median (min-max)" for n in ours) + " |")
print("|---|" + "---|" * (2 * len(ours) + 1))
for fig in names:
    cols = [f"{med(figures(r)[fig] for r in runs[n]):.1f}" for n in ours + ["genai"]]
    ratios = []
    for n in ours:
        # Prefill is a time (lower is better): its ratio is genai's time over ours, so above 1 is duet faster everywhere.
        per = [(figures(g)[fig] / figures(d)[fig]) if fig.startswith("prefill") else (figures(d)[fig] / figures(g)[fig])
               for d, g in zip(runs[n], runs["genai"])]
        ratios.append(f"{med(per):.2f} ({min(per):.2f}-{max(per):.2f})")
    print(f"| {fig} | " + " | ".join(cols) + " | " + " | ".join(ratios) + " |")
print(f"| peak RSS (MiB) | " + " | ".join(f"{med(r['peak_rss_mib'] for r in runs[n]):.0f}" for n in ours + ["genai"]) + " | " + " | ".join("" for _ in ours) + " |")
print("ratios: above 1.00 means duet is faster (prefill: genai's time over duet's)")
# The noise floor: how far one process's repetitions spread, against how far the same runner's
# processes spread (round medians). A between-process spread far above the within-process one
# is each process's own state (where its memory landed), not the code; a ratio inside it is
# not a difference between runners.
def spread(v):
    return max(v) / min(v) - 1 if v and min(v) > 0 else float("nan")
for n in runners:
    parts = []
    for fig, key in [("prefill", None)] + [(f"decode@{d['context']}", d["context"]) for d in runs[n][0]["decode"]]:
        if key is None:
            within = [spread(r.get("prefill_runs_ms", [])) for r in runs[n]]
            between = spread([r["prefill_ms"] for r in runs[n]])
        else:
            at = [next(d for d in r["decode"] if d["context"] == key) for r in runs[n]]
            within = [spread(d.get("runs_ms_per_token", [])) for d in at]
            between = spread([d["ms_per_token"] for d in at])
        w = [x for x in within if x == x]
        parts.append(f"{fig} {100 * med(w):.0f} % within, {100 * between:.0f} % between" if w else f"{fig} {100 * between:.0f} % between")
    print(f"noise: {n}: " + "; ".join(parts))
PY

# Host facts: what the lead over genai has been found to depend on.
thp() { local f="/sys/kernel/mm/transparent_hugepage/$1"; [[ -r "$f" ]] && sed 's/.*\[\(.*\)\].*/\1/' "$f" || echo "n/a"; }
flags="$(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -xE 'avx2|avx512f|avx512_vnni|avx512_bf16|avx_vnni|amx_tile|amx_int8|amx_bf16|f16c|fma' | tr '\n' ' ')"
echo
echo "host: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) cores, kernel $(uname -r), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "host: CPU flags that matter: ${flags:-none of them}"
echo "host: transparent huge pages enabled=$(thp enabled) defrag=$(thp defrag) khugepaged/defrag=$(thp khugepaged/defrag)"
for name in "${runners[@]}"; do
  [[ "$name" == genai ]] && continue
  placed=""
  for r in $(seq "$rounds"); do
    got="$(sed 's/\x1b\[[0-9;]*m//g' "$out/$name.$r.log" | grep -o 'huge_pages_mib=[0-9]* collapsed_mib=[0-9]*' | head -1 | sed 's/huge_pages_mib=\([0-9]*\) collapsed_mib=\([0-9]*\)/\1 \/ \2/' || true)"
    placed+="${placed:+; }round $r: ${got:-nothing logged}"
  done
  echo "host: $name placed on huge pages at load (MiB advised / collapsed): $placed"
done
