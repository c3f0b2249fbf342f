#!/usr/bin/env bash
# runs/speedrun.sh as a whole, TOY=1: every stage on the CPU at toy scale under `nanochat launch`
# with 2 Gloo ranks, offline (the preflight, the local corpus and tokenizer, base-train, base-eval,
# SFT, chat-eval, the report and the leaderboard line); then again: the rerun resumes and skips
# the preflight. The scripts run from a copy of runs/ (report.md lands beside it, not in the tree).
#   speedrun_toy.sh SOURCE_DIR NANOCHAT_BIN OUT_DIR
set -uo pipefail
src=$1 bin=$2 out=$3
rm -rf "$out"
mkdir -p "$out/repo"
cp -r "$src/runs" "$out/repo/"
export TOY=1 NANOCHAT_BIN="$bin" NANOCHAT_BASE_DIR="$out/base"
unset NANOCHAT_PREFLIGHT NANOCHAT_KERNELS_FAULT
failures=0
fail() { echo "FAIL $*"; failures=$((failures + 1)); }
has() { grep -qE -- "$2" "$1" || fail "$(basename "$1"): no line matching '$2'"; }

bash "$out/repo/runs/speedrun.sh" > "$out/run1.log" 2>&1 || { tail -n 40 "$out/run1.log"; fail "the first run exited $?"; }
has "$out/run1.log" '^\[preflight\] 1/3 fused kernels'
has "$out/run1.log" '^\[preflight\] passed: the long run starts'
# FP8 only when it pays: both short runs timed, the faster taken and kept for the rerun
has "$out/run1.log" '^\[preflight\] FP8 [0-9.e+]+ tok/s, without [0-9.e+]+ tok/s: the run trains with(out)? FP8'
[ -f "$out/base/preflight/fp8" ] || fail "no preflight/fp8"
has "$out/run1.log" '^\[rank 1\]'
has "$out/run1.log" '^Leaderboard: time to GPT-2 .*\| final val bpb [0-9.]+ \| commit'
has "$out/run1.log" '^Report card: report.md'
[ -f "$out/repo/report.md" ] || fail "no report.md"
ls "$out/base"/chatsft_checkpoints/d2/done_* > /dev/null 2>&1 || fail "no SFT checkpoint"
# --keep-last 2: of the checkpoints at steps 4, 8 and 12 the last two are left
models=$(find "$out/base/base_checkpoints/d2" -maxdepth 1 -name "model_*" | wc -l)
[ "$models" = 2 ] || fail "base_checkpoints/d2 holds $models models, want 2 (--keep-last 2): $(ls "$out/base"/base_checkpoints/d2/)"

bash "$out/repo/runs/speedrun.sh" > "$out/run2.log" 2>&1 || { tail -n 40 "$out/run2.log"; fail "the rerun exited $?"; }
has "$out/run2.log" '^\[preflight\] skipped: base_checkpoints/d2 has a checkpoint'
if grep -q '^\[preflight\] 1/3' "$out/run2.log"; then fail "the rerun ran the preflight"; fi
has "$out/run2.log" '--resume latest|resum'
has "$out/run2.log" '^Leaderboard: time to GPT-2'

if [ $failures = 0 ]; then echo "speedrun TOY=1: every stage ran, and the rerun resumed"; exit 0; fi
echo "(logs: $out/run1.log, $out/run2.log)"
exit 1
