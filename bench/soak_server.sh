#!/usr/bin/env bash
# Soak: a bounded mixed load against a local `nanochat chat-web` on the tiny test model (2 layers,
# n_embd 128; written by bench_server --make-base-dir). 16 clients (--concurrency) send valid
# streaming and non-streaming chats, the hostile requests of test_server_hardening and mid-reply disconnects
# for --seconds (default 600); bench/server/soak_driver.py prints requests served, the 5xx count
# (must be 0), p50/p99 latency of the valid chats in the first and last minute, and the server's
# RSS growth (must stay under 10%). Exit status 1 when a limit is broken. CPU heavy: a bench, not a test.
# Continuous batching is on (--max-batch rows per worker, default 8); at the end every worker and KV row must be free.
# usage: bench/soak_server.sh [--seconds 600] [--concurrency 16] [--workers 2] [--max-batch 8] [--no-build]
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=600 concurrency=16 workers=2 max_batch=8 deadline=2 build_first=1
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) seconds="$2"; shift 2 ;;
    --concurrency) concurrency="$2"; shift 2 ;;
    --workers) workers="$2"; shift 2 ;;
    --max-batch) max_batch="$2"; shift 2 ;;
    --no-build) build_first=0; shift ;;
    *) echo "soak_server.sh: unknown argument $1 (--seconds N, --concurrency N, --workers N, --max-batch N, --no-build)" >&2; exit 2 ;;
  esac
done
build=${BUILD_DIR:-build}
python=python3
[ -x .venv/bin/python ] && python=.venv/bin/python
[ "$build_first" = 1 ] && cmake --build "$build" --target bench_server nanochat >/dev/null

base=$("$build"/bench/bench_server --make-base-dir | tail -1)
log="$base/chat_web.log"
pid=
cleanup() {
  [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null || true
  case "$base" in /tmp/nanochat_server_*) rm -rf "$base" ;; esac
}
trap cleanup EXIT

NANOCHAT_BASE_DIR="$base" OMP_NUM_THREADS=1 "$build"/nanochat chat-web --port 0 --device-type cpu \
  --workers "$workers" --max-batch "$max_batch" -q --request-deadline "$deadline" >"$log" 2>&1 &
pid=$!
port=
for _ in $(seq 1 300); do
  port=$(sed -n 's|.*listening on http://127.0.0.1:\([0-9]*\)/.*|\1|p' "$log" | head -1)
  [ -n "$port" ] && "$python" -c "import urllib.request,sys; sys.exit(urllib.request.urlopen('http://127.0.0.1:$port/health').status != 200)" 2>/dev/null && break
  sleep 0.1
done
[ -n "$port" ] || { echo "chat-web did not start:" >&2; cat "$log" >&2; exit 1; }
echo "soak: chat-web pid $pid on port $port, --workers $workers, --max-batch $max_batch, --request-deadline $deadline"
"$python" bench/server/soak_driver.py --port "$port" --pid "$pid" --seconds "$seconds" \
  --concurrency "$concurrency" --deadline "$deadline"
