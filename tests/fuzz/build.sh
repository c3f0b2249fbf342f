#!/usr/bin/env bash
# Builds and runs the parquet reader's libFuzzer target (clang with libFuzzer, ASan, UBSan).
# The parquet sources use no LibTorch, so they compile here directly, without CMake.
#
#   tests/fuzz/build.sh            build into build-fuzz/ and fuzz for 300 s
#   tests/fuzz/build.sh 3600       fuzz for an hour
#   FUZZ_JOBS=2 tests/fuzz/build.sh  several fuzzing processes
#
# The corpus starts from the test fixtures (make_parquet_fixtures.py) and grows in
# build-fuzz/corpus; crashes land in build-fuzz/ as crash-*. Replay one with
#   build-fuzz/fuzz_parquet build-fuzz/crash-...
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
out="$root/build-fuzz"
seconds="${1:-300}"
mkdir -p "$out/corpus" "$out/seeds"
CXX="${CXX:-clang++-14}"
"$CXX" -std=c++17 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  -I"$root/include" -I"$root/src" \
  "$root"/src/parquet/*.cpp "$root/src/common/error.cpp" "$root/tests/fuzz/fuzz_parquet.cpp" \
  -lzstd -lsnappy -lz -o "$out/fuzz_parquet"
if [ -z "$(ls -A "$out/seeds")" ]; then
  python="${NANOCHAT_PYTHON:-$root/.venv/bin/python}"
  "$python" "$root/tests/fixtures/make_parquet_fixtures.py" "$out/fixtures" >/dev/null
  cp "$out"/fixtures/*.parquet "$out/seeds/"
fi
cd "$out"
jobs=()
[ -n "${FUZZ_JOBS:-}" ] && jobs=(-jobs="$FUZZ_JOBS" -workers="$FUZZ_JOBS")  # logs in build-fuzz/fuzz-N.log
exec ./fuzz_parquet corpus seeds -max_total_time="$seconds" -max_len=65536 -rss_limit_mb=2048 \
  -timeout=10 -print_final_stats=1 "${jobs[@]}"
