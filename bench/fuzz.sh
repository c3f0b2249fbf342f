#!/usr/bin/env bash
# Fuzzes every parser (libFuzzer + ASan + UBSan, tests/fuzz/build.sh) for a time budget, one
# target after another, and prints a table: executions, executions/s, corpus size and
# findings per target. Each target runs at the parser's default limits with
# -rss_limit_mb=2048 (and libFuzzer's matching -malloc_limit_mb), inputs up to 4 KB
# (FUZZ_MAX_LEN), starting from its seeds in tests/fuzz/<target>/ (never written) plus what
# earlier runs found, in build-fuzz/corpus/<target>/. A finding is left as
# build-fuzz/<target>-crash-*, -leak-*, -oom-* or -timeout-*; replay it with
#   build-fuzz/fuzz_<target> <file>         (FUZZ_VERBOSE=1 prints each refusal)
# and once fixed, copy it into tests/fuzz/<target>/ as regress-<what>, so ctest replays it.
#
#   bench/fuzz.sh                 60 s per target, every target
#   bench/fuzz.sh 120 parquet     120 s, some targets
#   FUZZ_NO_BUILD=1 bench/fuzz.sh   use the binaries already in build-fuzz/
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
out="$root/build-fuzz"
seconds="${1:-60}"
shift || true
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(parquet safetensors torch_pickle tokenizer chat_request)
if [ -z "${FUZZ_NO_BUILD:-}" ]; then
  "$root/tests/fuzz/build.sh" "${targets[@]}" || exit 1
fi
export TMPDIR="$out/tmp"  # the targets' scratch files; removed at the end
export LSAN_OPTIONS="suppressions=$root/tests/fuzz/lsan.supp${LSAN_OPTIONS:+:$LSAN_OPTIONS}"  # LibTorch's own leak
mkdir -p "$TMPDIR"
summary=()
status=0
for t in "${targets[@]}"; do
  corpus="$out/corpus/$t"
  log="$out/fuzz-$t.log"
  mkdir -p "$corpus"
  echo "[fuzz] $t for ${seconds}s (log: $log)"
  (cd "$out" && ./"fuzz_$t" "$corpus" "$root/tests/fuzz/$t" -max_total_time="$seconds" \
      -max_len="${FUZZ_MAX_LEN:-4096}" -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 \
      -artifact_prefix="$out/$t-" >"$log" 2>&1)
  rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  files=$(find "$corpus" -type f | wc -l)
  finding="none"
  if [ $rc -ne 0 ]; then
    finding="$(grep -m1 -E '^==[0-9]+==ERROR|^SUMMARY|deadly signal|out-of-memory|timeout after|malloc\(' "$log" | cut -c1-70)"
    [ -z "$finding" ] && finding="exit $rc (see the log)"
    status=1
  fi
  summary+=("$(printf '%-13s %12s %9s %8s  %s' "$t" "${execs:-?}" "${rate:-?}" "$files" "$finding")")
done
rm -rf "$TMPDIR"
printf '\n%-13s %12s %9s %8s  %s\n' target executions "exec/s" corpus finding
printf '%s\n' "${summary[@]}"
exit $status
