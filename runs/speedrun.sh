#!/usr/bin/env bash
# The leaderboard run (upstream's runs/speedrun.sh): a d24 GPT-2-capability model on one
# 8-GPU node, then SFT and chat evaluation. Designed for a blank 8xH100 node; about 1.5 h
# of pretraining upstream. Launch it so it survives a closed terminal:
#   screen -L -Logfile runs/speedrun.log -S speedrun bash runs/speedrun.sh
# Every stage resumes: rerun the script after a crash and base-train continues from its
# last checkpoint (--save-every 500). NANOCHAT_RL=1 adds RL on GSM8K after SFT (as upstream,
# not part of the leaderboard time). The report card ends up in report.md.
# Before the long downloads and before pretraining, a preflight (runs/preflight.sh) checks the
# kernels on every GPU, the plan, and 20 real steps; NANOCHAT_PREFLIGHT=0 skips it.
set -euo pipefail
cd "$(dirname "$0")/.."
export OMP_NUM_THREADS=1
export NANOCHAT_BASE_DIR="${NANOCHAT_BASE_DIR:-$HOME/.cache/nanochat}"
mkdir -p "$NANOCHAT_BASE_DIR"
NPROC="${NPROC:-8}"
RUN="${RUN:-speedrun}"
# the binary alone (see docs/building.md for its cost); runs/test.sh builds the tests
NANOCHAT_BUILD_TARGETS="${NANOCHAT_BUILD_TARGETS:-nanochat}" bash runs/setup.sh
NC=build/nanochat
LAUNCH=($NC launch --nproc-per-node "$NPROC" --)
# pretraining: d24, slightly undertrained (data:params 8) to beat GPT-2's CORE in the least time
BASE_TRAIN_FLAGS=(--depth=24 --target-param-data-ratio=8 --device-batch-size=16 --fp8)
$NC doctor
source runs/preflight.sh
preflight_plan
# the report card: a new one unless this run is being resumed (rerunning keeps its start time)
[ -f "$NANOCHAT_BASE_DIR/report/header.md" ] || $NC report reset

# data: 8 shards for the tokenizer now, ~150 (+20 spare) for pretraining in the background
$NC download -n 8
$NC download -n 170 &
DATASET_DOWNLOAD_PID=$!
$NC download eval-bundle
$NC download tasks

# tokenizer: vocab 32768 on 2B characters
$NC tok-train
$NC tok-eval
preflight_run  # on the shards already here, while the rest download
wait $DATASET_DOWNLOAD_PID

RESUME=()
if ls "$NANOCHAT_BASE_DIR"/base_checkpoints/d24/done_* >/dev/null 2>&1; then RESUME=(--resume latest); fi
"${LAUNCH[@]}" base-train "${BASE_TRAIN_FLAGS[@]}" --save-every 500 --run="$RUN" "${RESUME[@]}"
# the leaderboard entry (upstream's dev/LEADERBOARD.md): time to GPT-2, the val bpb, the commit
leaderboard_line() {
  local s="$NANOCHAT_BASE_DIR/report/base-model-training.md"
  echo "Leaderboard: time to GPT-2 $(sed -n 's/^- Time to GPT-2: //p' "$s" 2>/dev/null || true)" \
       "| final val bpb $(sed -n 's/^- Final validation bpb: //p' "$s" 2>/dev/null || true)" \
       "| commit $(git describe --always --dirty 2>/dev/null || echo unknown)"
}
leaderboard_line
"${LAUNCH[@]}" base-eval --device-batch-size=16

# chat: SFT on SmolTalk + MMLU + GSM8K (+ identity), then ChatCORE
RESUME=()
if ls "$NANOCHAT_BASE_DIR"/chatsft_checkpoints/d24/done_* >/dev/null 2>&1; then RESUME=(--resume latest); fi
"${LAUNCH[@]}" sft --run="$RUN" "${RESUME[@]}"
"${LAUNCH[@]}" chat-eval -i sft
# optional, as upstream (not part of the leaderboard time): RL on GSM8K, then its score
if [ "${NANOCHAT_RL:-0}" = 1 ]; then
  "${LAUNCH[@]}" rl --run="$RUN" --force  # RL does not resume: a rerun starts it over
  "${LAUNCH[@]}" chat-eval -i rl -a GSM8K
fi

$NC report generate
leaderboard_line
echo "Report card: report.md (and $NANOCHAT_BASE_DIR/report/)"
echo "Talk to it: $NC chat-cli    or in the browser: $NC chat-web (http://127.0.0.1:8000)"
