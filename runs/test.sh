#!/usr/bin/env bash
# All tests: what only the tests need (system packages, then the Python references of
# requirements-test.txt), set up (runs/setup.sh: what building and running need), build
# everything (the binary, every test and bench) with warnings as errors, run ctest.
# A package the distribution lacks (Ubuntu's chromium is a snap) is skipped with one line, and
# the tests that need it skip, naming it.
#   bash runs/test.sh           the full suite
#   bash runs/test.sh --quick   the same build, then the quick tier only (`ctest -L quick`: each
#                               module's own tests, without the end-to-end runs; a few minutes
#                               on 2 cores: docs/tests.md has the times)
# Each phase prints its time, and the last line sums them up, so a CI log says where time went.
set -euo pipefail
CTEST_TIER=()
case "${1:-}" in
  --quick) CTEST_TIER=(-L quick) ;;
  "") ;;
  *) echo "usage: bash runs/test.sh [--quick]" >&2; exit 2 ;;
esac
cd "$(dirname "$0")/.."
phase_t0=$(date +%s)
PHASES=""
phase_done() {  # phase_done NAME: the time since the previous phase ended
  local now
  now=$(date +%s)
  echo "[test] $1: $((now - phase_t0)) s"
  PHASES+="${PHASES:+, }$1 $((now - phase_t0)) s"
  phase_t0=$now
}
test_t0=$phase_t0
trap 'echo "[test] times: ${PHASES:-none} (total $(($(date +%s) - test_t0)) s)"' EXIT
# shellcheck source=runs/apt_packages.sh
source runs/apt_packages.sh
apt_install test 1 libgtest-dev clang-format    # the test binaries; the format check
apt_install test 0 chromium wamerican           # the browser tests; SpellingBee's word list offline
phase_done "test packages"
NANOCHAT_CMAKE_ARGS="-DNANOCHAT_WERROR=ON ${NANOCHAT_CMAKE_ARGS:-}" NANOCHAT_BUILD_TARGETS=all bash runs/setup.sh
phase_done "set-up and build (runs/setup.sh)"
if .venv/bin/python - <<'PY' 2>/dev/null
import sys, importlib.metadata as md
for line in open("runs/requirements-test.txt"):
    line = line.split("#")[0].strip()
    if not line: continue
    name, want = line.split("==")
    if md.version(name).split("+")[0] != want: sys.exit(1)
PY
then
  echo "[test] python test references present"
else
  echo "[test] installing python test references (runs/requirements-test.txt)"
  .venv/bin/pip install -q --disable-pip-version-check -r runs/requirements-test.txt
fi
phase_done "python test references"
BUILD_DIR="${NANOCHAT_BUILD_DIR:-build}"
rc=0
ctest --test-dir "$BUILD_DIR" --output-on-failure -j "$(nproc)" --timeout 600 "${CTEST_TIER[@]}" || rc=$?
phase_done "ctest${CTEST_TIER:+ ${CTEST_TIER[*]}}"
exit $rc
