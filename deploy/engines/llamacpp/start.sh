# Sourced, not run: `llama_start PORT LOG ARG...` starts llama-server (built by ./build) on
# 127.0.0.1:PORT in the background with ARG... (model, slots, threads), its output in LOG, stops
# it when the calling script exits, and returns once /health answers (or fails after 120 s).
# The benchmark and evaluation scripts that need one engine start it this way.
#
# Every server gets --threads-http 128: with llama-server's default (--parallel + 4) it answers
# nothing, /health included, while that many requests are in flight, and a gateway then takes it
# for dead.

llama_pids=()

llama_stop() {
  local p
  for p in "${llama_pids[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  llama_pids=()
}

llama_start() {
  local port="$1" log="$2"; shift 2
  local server
  server="$(deploy/engines/llamacpp/build)"
  "$server" --host 127.0.0.1 --port "$port" --threads-http 128 "$@" >"$log" 2>&1 &
  llama_pids+=($!)
  trap llama_stop EXIT
  local _
  for _ in $(seq 1 240); do
    curl -fsS "http://127.0.0.1:$port/health" >/dev/null 2>&1 && return 0
    kill -0 "${llama_pids[-1]}" 2>/dev/null || { echo "llama-server on port $port exited; see $log" >&2; return 1; }
    sleep 0.5
  done
  echo "llama-server on port $port is not healthy after 120 s; see $log" >&2
  return 1
}
