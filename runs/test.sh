#!/usr/bin/env bash
# All tests: set up (installs what is missing), build everything (the binary, every test and
# bench) with warnings as errors, run ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
NANOCHAT_CMAKE_ARGS="-DNANOCHAT_WERROR=ON ${NANOCHAT_CMAKE_ARGS:-}" NANOCHAT_BUILD_TARGETS=all bash runs/setup.sh
BUILD_DIR="${NANOCHAT_BUILD_DIR:-build}"
ctest --test-dir "$BUILD_DIR" --output-on-failure -j "$(nproc)" --timeout 600
