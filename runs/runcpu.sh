#!/usr/bin/env bash
# The whole nanochat pipeline at toy scale on a CPU (any machine, no GPU): data, tokenizer,
# pretraining, evaluation, then a chat with the model. The model is tiny and the run is short
# (about half an hour on 2 cores): it shows every stage working, not a capable model.
# Upstream's runs/runcpu.sh with the scale cut to what 2 cores do in minutes.
#
# Without internet (the ClimbMix shards cannot be downloaded) it trains on a local English
# corpus made from this machine's Python docs and manual pages (runs/make_local_corpus.py).
#
#   bash runs/runcpu.sh                  # everything, from a fresh Debian 12 machine
#   NANOCHAT_BASE_DIR=/tmp/nc bash runs/runcpu.sh
set -euo pipefail
cd "$(dirname "$0")/.."
bash runs/setup.sh
export NANOCHAT_BASE_DIR="${NANOCHAT_BASE_DIR:-$HOME/.cache/nanochat}"
NC=build/nanochat
say() { echo; echo "=== [runcpu] $* ==="; }

say "1/6 data"
DATA=()
if $NC download -n 8; then
  echo "[runcpu] training on the ClimbMix shards in $NANOCHAT_BASE_DIR/base_data_climbmix"
else
  echo "[runcpu] the ClimbMix shards cannot be downloaded here: using a local English corpus instead"
  python3 runs/make_local_corpus.py "$NANOCHAT_BASE_DIR/local_corpus"
  DATA=(--data "$NANOCHAT_BASE_DIR/local_corpus")
fi

say "2/6 tokenizer"
$NC tok-train "${DATA[@]}" --max-chars 20000000 --vocab-size 8192
$NC tok-eval "${DATA[@]}"

say "3/6 pretraining (d4, 256 wide, context 256)"
# resumable: rerun the script and it continues from the last checkpoint
RESUME=()
if ls "$NANOCHAT_BASE_DIR"/base_checkpoints/d4/done_* >/dev/null 2>&1; then RESUME=(--resume latest); fi
$NC base-train "${DATA[@]}" "${RESUME[@]}" --depth 4 --head-dim 64 --window-pattern L --max-seq-len 256 \
  --device-batch-size 8 --total-batch-size 2048 --num-iterations 400 --warmup-steps 20 \
  --eval-every 100 --eval-tokens 32768 --core-metric-every -1 --sample-every 200 --save-every 100 \
  --run runcpu

say "4/6 base model evaluation"
$NC base-eval "${DATA[@]}" --eval bpb,sample --device-batch-size 8 --split-tokens 32768

say "5/6 a completion from the base model"
$NC generate --source base -p "The meaning of" --max-tokens 32 --temperature 0

say "6/6 done"
echo "The base model is in $NANOCHAT_BASE_DIR/base_checkpoints/d4 (metrics.jsonl has every step)."
echo "Complete a prompt:   $NC generate --source base -p 'Once upon a time'"
