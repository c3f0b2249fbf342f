#!/usr/bin/env bash
# The sanitizer checks, too slow for every CI run (the instrumented build takes about 25
# minutes on 2 cores): nanochat and the server and dataloader tests built with
# AddressSanitizer + UndefinedBehaviorSanitizer into build-asan/, then
#   - 1,000 malformed or oversized requests in a row against chat-web, which must stay
#     healthy and exit cleanly on SIGTERM with no heap error and no leak (LeakSanitizer: a
#     non-zero exit and its report in the log; a leak planted in the error path fails it),
#   - the graceful-shutdown and bad-checkpoint lifecycle tests,
#   - the dataloader's tests (its worker threads, resume, bad row groups).
# LibTorch itself is not instrumented; LeakSanitizer still sees every allocation.
set -euo pipefail
cd "$(dirname "$0")/.."
export NANOCHAT_BUILD_DIR="${NANOCHAT_BUILD_DIR:-build-asan}"
NANOCHAT_CMAKE_ARGS="-DNANOCHAT_SANITIZE=ON -DNANOCHAT_BUILD_BENCH=OFF -DNANOCHAT_WERROR=ON ${NANOCHAT_CMAKE_ARGS:-}" \
  NANOCHAT_BUILD_TARGETS="nanochat test_server test_dataloader" bash runs/setup.sh
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=0:halt_on_error=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
export OMP_NUM_THREADS=1
B="$NANOCHAT_BUILD_DIR/tests"
"$B/test_server" --gtest_filter='ServerApi.ThousandBadRequestsInARowThenHealthy:ServerLifecycle.*'
"$B/test_dataloader"
echo "[test_asan] passed: no sanitizer report"
