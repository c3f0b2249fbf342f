#!/usr/bin/env bash
# The leaderboard run (upstream's runs/speedrun.sh): a d24 GPT-2-capability model on one
# 8-GPU node, then SFT and chat evaluation. Designed for a blank 8xH100 node; about 1.5 h
# of pretraining upstream. Launch it so it survives a closed terminal:
#   screen -L -Logfile runs/speedrun.log -S speedrun bash runs/speedrun.sh
# Every stage resumes: rerun the script after a crash and base-train continues from its
# last checkpoint (--save-every 500, the last two kept). NANOCHAT_RL=1 adds RL on GSM8K after
# SFT (as upstream, not part of the leaderboard time). The report card ends up in report.md.
# Before the long downloads and before pretraining, a preflight (runs/preflight.sh) checks the
# kernels on every GPU, the plan, and 20 real steps; NANOCHAT_PREFLIGHT=0 skips it, and so
# does a base checkpoint already there (a rerun). Every stage runs with --device-type cuda: a
# GPU that LibTorch cannot use stops the run with the reason, never a silent CPU run.
#
# TOY=1: the same script, every stage, at toy scale on the CPU under `nanochat launch` with 2
# Gloo ranks, offline (the local corpus of runs/runcpu.sh, the spelling SFT mixture): a few
# minutes; the ctest speedrun_toy runs it twice (the second run resumes). NANOCHAT_BIN names a
# built binary and skips runs/setup.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
export OMP_NUM_THREADS=1
export NANOCHAT_BASE_DIR="${NANOCHAT_BASE_DIR:-$HOME/.cache/nanochat}"
mkdir -p "$NANOCHAT_BASE_DIR"
TOY="${TOY:-0}"
RUN="${RUN:-speedrun}"
if [ -n "${NANOCHAT_BIN:-}" ]; then
  NC="$NANOCHAT_BIN"
else
  # the binary alone (see docs/building.md for its cost); runs/test.sh builds the tests
  NANOCHAT_BUILD_TARGETS="${NANOCHAT_BUILD_TARGETS:-nanochat}" bash runs/setup.sh
  NC=build/nanochat
fi
if [ "$TOY" = 1 ]; then
  NPROC="${NPROC:-2}"
  DEVICE=(--device-type cpu)
  DEPTH=2
  DATA=(--data "$NANOCHAT_BASE_DIR/local_corpus")
  # pretraining: d2 on 64-token rows, 12 steps, a checkpoint every 4 (the last two kept)
  BASE_TRAIN_FLAGS=(--depth="$DEPTH" --head-dim 32 --window-pattern L --max-seq-len 64 --device-batch-size 4
    --total-batch-size 512 --num-iterations 12 --warmup-steps 2 --eval-every 6 --eval-tokens 2048
    --core-metric-every -1 --sample-every -1 "${DATA[@]}" "${DEVICE[@]}")
  SAVE_EVERY=4
  PREFLIGHT_STEPS="${PREFLIGHT_STEPS:-2}"
else
  NPROC="${NPROC:-8}"
  DEVICE=(--device-type cuda)
  DEPTH=24
  DATA=()
  # pretraining: d24, slightly undertrained (data:params 8) to beat GPT-2's CORE in the least time
  BASE_TRAIN_FLAGS=(--depth="$DEPTH" --target-param-data-ratio=8 --device-batch-size=16 "${DEVICE[@]}")
  SAVE_EVERY=500
fi
export PREFLIGHT_STEPS
# FP8 only when it pays: NANOCHAT_FP8=1 or 0 forces it; else the preflight times a short run with
# and without and the run takes the faster (a rerun keeps the first run's choice; with the
# preflight off, FP8 as upstream)
FP8_CHOICE=""  # read by runs/preflight.sh
# shellcheck disable=SC2034
case "${NANOCHAT_FP8:-}" in
  1) FP8_FLAGS=(--fp8) ;;
  0) FP8_FLAGS=() ;;
  *) if [ -f "$NANOCHAT_BASE_DIR/preflight/fp8" ]; then
       FP8_FLAGS=(); [ "$(cat "$NANOCHAT_BASE_DIR/preflight/fp8")" = fp8 ] && FP8_FLAGS=(--fp8)
     else FP8_FLAGS=(--fp8); FP8_CHOICE="time"; fi ;;
esac
LAUNCH=("$NC" launch --nproc-per-node "$NPROC" --)
"$NC" doctor "${DEVICE[@]}"
source runs/preflight.sh
# a rerun with a base checkpoint already there: the preflight proved itself on the first run
if ls "$NANOCHAT_BASE_DIR"/base_checkpoints/d$DEPTH/done_* >/dev/null 2>&1; then
  echo "[preflight] skipped: base_checkpoints/d$DEPTH has a checkpoint (a rerun resumes)"
  export NANOCHAT_PREFLIGHT=0
fi
preflight_plan
# the report card: a new one unless this run is being resumed (rerunning keeps its start time)
[ -f "$NANOCHAT_BASE_DIR/report/header.md" ] || "$NC" report reset

if [ "$TOY" = 1 ]; then
  # offline: the local English corpus, a small tokenizer
  [ -d "$NANOCHAT_BASE_DIR/local_corpus" ] || python3 runs/make_local_corpus.py "$NANOCHAT_BASE_DIR/local_corpus"
  [ -f "$NANOCHAT_BASE_DIR/tokenizer/tokenizer.json" ] || "$NC" tok-train "${DATA[@]}" --max-chars 2000000 --vocab-size 1024
  "$NC" tok-eval "${DATA[@]}"
  preflight_run
else
  # data: 8 shards for the tokenizer now, ~150 (+20 spare) for pretraining in the background
  "$NC" download -n 8
  "$NC" download -n 170 &
  DATASET_DOWNLOAD_PID=$!
  "$NC" download eval-bundle
  "$NC" download tasks

  # tokenizer: vocab 32768 on 2B characters
  "$NC" tok-train
  "$NC" tok-eval
  preflight_run  # on the shards already here, while the rest download
  wait $DATASET_DOWNLOAD_PID
fi

RESUME=()
if ls "$NANOCHAT_BASE_DIR"/base_checkpoints/d$DEPTH/done_* >/dev/null 2>&1; then RESUME=(--resume latest); fi
# the last two checkpoints only: a d24 one is ~10 GB, and a resumable run saves ~11 of them
"${LAUNCH[@]}" base-train "${BASE_TRAIN_FLAGS[@]}" "${FP8_FLAGS[@]}" --save-every "$SAVE_EVERY" --keep-last 2 --run="$RUN" \
  "${RESUME[@]}"
# the leaderboard entry (upstream's dev/LEADERBOARD.md): time to GPT-2, the val bpb, the commit
leaderboard_line() {
  local s="$NANOCHAT_BASE_DIR/report/base-model-training.md"
  echo "Leaderboard: time to GPT-2 $(sed -n 's/^- Time to GPT-2: //p' "$s" 2>/dev/null || true)" \
       "| final val bpb $(sed -n 's/^- Final validation bpb: //p' "$s" 2>/dev/null || true)" \
       "| commit $(git describe --always --dirty 2>/dev/null || echo unknown)"
}
leaderboard_line
if [ "$TOY" = 1 ]; then
  "${LAUNCH[@]}" base-eval "${DATA[@]}" --eval bpb,sample --device-batch-size 4 --split-tokens 2048 "${DEVICE[@]}"
else
  "${LAUNCH[@]}" base-eval --device-batch-size=16 "${DEVICE[@]}"
fi

# chat: SFT on SmolTalk + MMLU + GSM8K (+ identity), then ChatCORE (TOY: the offline spelling mixture)
RESUME=()
if ls "$NANOCHAT_BASE_DIR"/chatsft_checkpoints/d$DEPTH/done_* >/dev/null 2>&1; then RESUME=(--resume latest); fi
if [ "$TOY" = 1 ]; then
  "${LAUNCH[@]}" sft --mixture spelling --num-iterations 6 --device-batch-size 4 --max-seq-len 64 \
    --total-batch-size 512 --eval-every -1 --eval-tokens 2048 --chatcore-every -1 --run="$RUN" "${RESUME[@]}" "${DEVICE[@]}"
  "${LAUNCH[@]}" chat-eval -i sft -a SpellingBee -x 8 -m 16 "${DEVICE[@]}"
else
  "${LAUNCH[@]}" sft --run="$RUN" "${RESUME[@]}" "${DEVICE[@]}"
  "${LAUNCH[@]}" chat-eval -i sft "${DEVICE[@]}"
fi
# optional, as upstream (not part of the leaderboard time): RL on GSM8K, then its score
if [ "${NANOCHAT_RL:-0}" = 1 ]; then
  "${LAUNCH[@]}" rl --run="$RUN" --force "${DEVICE[@]}"  # RL does not resume: a rerun starts it over
  "${LAUNCH[@]}" chat-eval -i rl -a GSM8K "${DEVICE[@]}"
fi

"$NC" report generate
leaderboard_line
echo "Report card: report.md (and $NANOCHAT_BASE_DIR/report/)"
echo "Talk to it: $NC chat-cli    or in the browser: $NC chat-web (http://127.0.0.1:8000)"
