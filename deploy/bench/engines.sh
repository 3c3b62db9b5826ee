#!/usr/bin/env bash
# The gateway in front of external engines, in one command: `loadtest engines` at
# several session counts against
#   - the embedded ONNX LLM (no engine),
#   - one llama-server with --parallel 1, and one with --parallel 8 (-t 2: both cores),
#   - the same requests sent straight to a --parallel 8 llama-server (`--direct`, no gateway):
#     the baseline for the gateway's own overhead,
#   - two llama-servers (--parallel 8 and -t 1 each, so they share the 2 cores fairly) with
#     sticky and with round-robin routing: what the prefix cache is worth; with the gateway's
#     default 3 attempts per escalation (an attempt then gets half the time left while another
#     worker could answer) and with 1 attempt (the whole deadline).
# Every engine run gets fresh llama-server processes (no prefix cache left from a previous run),
# on free ports, with --metrics (the prefix-cache share is read from their /metrics), killed on
# exit. They get --threads-http 128: with its default (--parallel + 4 threads) llama-server
# answers nothing else, /health included, while that many requests are in flight, and the
# gateway then takes the worker for dead; one extra run at the first session count shows that
# (the `np8-default-http` row). Prints a markdown table at the end; the JSON reports stay in $OUT.
#
# Usage: deploy/bench/engines.sh ["SESSIONS:PROMPT:ESCALATIONS ..."]
#   default "16:32:6 64:16:3": on 2 cores one llama-server prefills ~55 tokens/s, so 64
#   sessions' first escalations (64 x PROMPT tokens, all at once) must stay well inside the
#   30 s deadline, and the whole script inside ~20 minutes. DELTA (default 14) is the number
#   of text tokens between escalations; OUT the report directory. ROWS (default
#   "embedded np1 np8 2w default-http") picks the configurations; np8 is the gateway/direct
#   pairs. LOADTEST runs another build's loadtest binary (a same-run baseline of an older
#   commit, deploy/bench/gateway.sh BASELINE=...); GATEWAY_ARGS are added to every run through
#   the gateway (e.g. "--engine-admission off").
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
export DUET_HOME="${DUET_HOME:-$HOME/.cache/duet}"
configs="${1:-16:32:6 64:16:3}"
delta="${DELTA:-14}"
rows=" ${ROWS:-embedded np1 np8 2w default-http} "
loadtest="${LOADTEST:-./target/release/loadtest}"
read -r -a gateway_args <<<"${GATEWAY_ARGS:-}"
row() { [[ "$rows" == *" $1 "* ]]; }
for r in $rows; do
  case "$r" in embedded | np1 | np8 | 2w | default-http) ;; *) echo "ROWS: unknown row '$r' (embedded np1 np8 2w default-http)" >&2; exit 2 ;; esac
done
out="${OUT:-$(mktemp -d -t duet-engines-XXXXXX)}"
mkdir -p "$out"
model="qwen2.5-coder-1.5b-instruct"
gguf="$DUET_HOME/gguf/$model.gguf"

say() { echo "[engines $(date +%H:%M:%S)] $*" >&2; }

[ -n "${LOADTEST:-}" ] || cargo build --release -q -p loadtest
llama="$(deploy/engines/llamacpp/build)"
say "llama-server: $llama"
[ -f "$gguf" ] || { say "no $gguf: run deploy/models/prepare first"; exit 1; }
say "reports in $out; machine: $(nproc) cores, $(uptime | sed 's/.*load/load/')"

servers=()
stop_servers() {
  local pid
  for pid in "${servers[@]}"; do
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  servers=()
}
trap stop_servers EXIT
trap 'exit 130' INT TERM

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# start_servers COUNT PARALLEL THREADS [HTTP_THREADS]: fresh llama-servers, their --engine flags
# in $engines (HTTP_THREADS 0 = llama-server's default).
engines=()
start_servers() {
  local count=$1 parallel=$2 threads=$3 http=${4:-128} i port ok
  engines=()
  for i in $(seq 1 "$count"); do
    port="$(free_port)"
    "$llama" -m "$gguf" --host 127.0.0.1 --port "$port" --parallel "$parallel" -c $((parallel * 2048)) \
      -t "$threads" --threads-http "$http" --metrics --no-webui >"$out/llama-server-$port.log" 2>&1 &
    servers+=($!)
    engines+=(--engine "llamacpp=http://127.0.0.1:$port")
  done
  for ((i = 1; i < ${#engines[@]}; i += 2)); do
    ok=""
    for _ in $(seq 1 240); do
      curl -sf "${engines[$i]#llamacpp=}/health" >/dev/null && { ok=1; break; }
      sleep 0.5
    done
    [ -n "$ok" ] || { say "${engines[$i]} not healthy after 120 s (see $out)"; exit 1; }
  done
}

# bench NAME ARGS...: one loadtest run, its report in $out/NAME.json.
bench() {
  local name=$1
  shift
  say "$name"
  if "$loadtest" engines --label "$name" --seed 1 "$@" --json "$out/$name.json" 2>>"$out/loadtest.log"; then
    tail -n 1 "$out/loadtest.log" >&2
  else
    say "$name failed (see $out/loadtest.log)"
  fi
}

started=$(date +%s)
first=1
for c in $configs; do
  IFS=: read -r s p e <<<"$c"
  common=(--sessions "$s" --prompt-tokens "$p" --escalations "$e" --delta "$delta")
  row embedded && bench "s$s-embedded" "${common[@]}" --threads 2
  if row np1; then
    start_servers 1 1 2
    bench "s$s-np1" "${common[@]}" "${engines[@]}" "${gateway_args[@]}"
    stop_servers
  fi
  # Through the gateway and direct; at the first session count twice, in ABBA order, because
  # the engine's speed on a shared 2-core box drifts between runs by more than the gateway adds.
  pairs=(np8 np8-direct)
  [ -n "$first" ] && pairs=(np8 np8-direct np8-direct-2 np8-2)
  row np8 || pairs=()
  for run in "${pairs[@]}"; do
    start_servers 1 8 2
    case "$run" in
      *direct*) bench "s$s-$run" "${common[@]}" "${engines[@]}" --direct ;;
      *) bench "s$s-$run" "${common[@]}" "${engines[@]}" "${gateway_args[@]}" ;;
    esac
    stop_servers
  done
  attempt_counts=(3 1)
  row 2w || attempt_counts=()
  for attempts in "${attempt_counts[@]}"; do
    suffix=""
    [ "$attempts" = 1 ] && suffix="-1attempt"
    for routing in sticky round-robin; do
      start_servers 2 8 1
      bench "s$s-2w-$routing$suffix" "${common[@]}" "${engines[@]}" --routing "$routing" --max-attempts "$attempts" "${gateway_args[@]}"
      stop_servers
    done
  done
  if [ -n "$first" ] && row default-http; then
    start_servers 1 8 2 0
    bench "s$s-np8-default-http" "${common[@]}" "${engines[@]}" "${gateway_args[@]}"
    stop_servers
  fi
  first=""
done
say "done in $(($(date +%s) - started)) s"

python3 - "$out" $configs <<'PY'
import json, os, sys
out, configs = sys.argv[1], sys.argv[2:]
names = [("embedded", "embedded ONNX LLM (gateway, batcher)"), ("np1", "1 llama-server, -np 1"), ("np8", "1 llama-server, -np 8"),
         ("np8-direct", "same, --direct (no gateway)"), ("np8-direct-2", "same, --direct, again"), ("np8-2", "1 llama-server, -np 8, again"),
         ("2w-sticky", "2 llama-servers (-np 8, -t 1 each), sticky"), ("2w-round-robin", "same, round-robin"),
         ("2w-sticky-1attempt", "2 llama-servers, sticky, --max-attempts 1"), ("2w-round-robin-1attempt", "same, round-robin, --max-attempts 1"),
         ("np8-default-http", "1 llama-server, -np 8, its default --threads-http")]
print("| sessions | prompt / delta / escalations | configuration | escalations/s | p50 / p99 ms | first (Full) p50 ms | later p50 / p99 ms | answered | busy | errors | prefix-cache share | gateway-added ms (mean) | host busy / steal |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
ratios = []
for c in configs:
    s = c.split(":")[0]
    r = {}
    for key, title in names:
        path = os.path.join(out, f"s{s}-{key}.json")
        if not os.path.exists(path):
            continue
        d = r[key] = json.load(open(path))
        lat = d["latency_ms"]
        cache = d.get("engine_cache") or d.get("reply_cache")
        share = f"{cache['share']:.2f}" if cache else "-"
        attempts = {k: v for k, v in d.get("gateway_engine_attempts", {}).items() if k != "ok"}
        errors = f"{d['errors']}" + (f" ({', '.join(f'{k} {v}' for k, v in attempts.items())} attempts)" if attempts else "")
        added = f"{d['gateway_added']['added_ms_mean']:.2f}" if d.get("gateway_added") else "-"
        host = f"{d['host_cpu']['busy']:.2f} / {d['host_cpu']['steal']:.3f}" if d.get("host_cpu") else "-"
        print(f"| {s} | {d['prompt_tokens']} / {d['delta']} / {d['escalations_per_session']} | {title} | {d['escalations_per_s']:.2f} | "
              f"{lat['all']['p50']:.0f} / {lat['all']['p99']:.0f} | {lat['first']['p50']:.0f} | {lat['later']['p50']:.0f} / {lat['later']['p99']:.0f} | "
              f"{d['answered']} | {d['busy']} | {errors} | {share} | {added} | {host} |")
    def ratio(what, a, b):
        xs, ys = [r[k] for k in a if k in r], [r[k] for k in b if k in r]
        if xs and ys:
            # Several runs of one configuration: total escalations over total time, mean p50.
            rate = lambda runs: sum(x["answered"] for x in runs) / sum(x["wall_s"] for x in runs)
            p50 = lambda runs: sum(x["latency_ms"]["later"]["p50"] for x in runs) / len(runs)
            later = f"{p50(xs) / p50(ys):.2f}" if p50(xs) > 0 and p50(ys) > 0 else "- (no later escalation answered)"
            per_s = f"{rate(xs) / rate(ys):.2f}" if rate(ys) > 0 else "- (nothing answered)"
            ratios.append(f"| {s} | {what} | {per_s} | {later} |")
    ratio("through the gateway / direct (1 worker, -np 8)", ["np8", "np8-2"], ["np8-direct", "np8-direct-2"])
    ratio("sticky / round-robin (2 workers, 3 attempts)", ["2w-sticky"], ["2w-round-robin"])
    ratio("sticky / round-robin (2 workers, 1 attempt)", ["2w-sticky-1attempt"], ["2w-round-robin-1attempt"])
    ratio("llama-server -np 8 / embedded", ["np8", "np8-2"], ["embedded"])
    ratio("llama-server -np 8 / -np 1", ["np8", "np8-2"], ["np1"])
    ratio("2 workers sticky / 1 worker -np 8", ["2w-sticky"], ["np8", "np8-2"])
    ratio("2 workers sticky, 1 attempt / 1 worker -np 8", ["2w-sticky-1attempt"], ["np8", "np8-2"])
print()
print("| sessions | same-run ratio | escalations/s | later p50 latency |")
print("|---|---|---|---|")
print("\n".join(ratios))
PY
