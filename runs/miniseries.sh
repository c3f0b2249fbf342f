#!/usr/bin/env bash
# A miniseries (upstream's runs/miniseries.sh): base models of growing depth, each trained at the
# same tokens:params ratio (base-train's default, 12), then the loss fit over them (val bpb
# against compute and against parameters) by `nanochat scaling-fit`, into the report card.
#
#   bash runs/miniseries.sh [series_name]       # depths 12..26 on one 8-GPU node
#   TOY=1 bash runs/miniseries.sh               # depths 1..3 on a CPU in about a minute
#
# Resumable: rerun it and the finished depths are skipped (scaling-fit --finished), an
# interrupted one continues from its last checkpoint (base-train --resume latest).
# Setup (data and tokenizer) is skipped with SKIP_SETUP=1. Other knobs: NPROC (8), DEPTHS
# ("12 14 ..."), RATIO, NANOCHAT_BASE_DIR. Results: $NANOCHAT_BASE_DIR/<series>_miniseries_results/
# (results.csv, fit.txt, one training log per depth, report.md) and the "Miniseries" section
# of the report card. NANOCHAT_BIN runs another build of the binary.
set -euo pipefail
cd "$(dirname "$0")/.."
export OMP_NUM_THREADS=1
source runs/sweep_common.sh

SERIES="${1:-${SERIES_NAME:-$(date +%b%d | tr '[:upper:]' '[:lower:]')}}"
if [ "${TOY:-0}" = 1 ]; then
  # 2 tokens per param (TOY_TRAIN_ARGS: runs/sweep_common.sh)
  export NANOCHAT_BASE_DIR="${NANOCHAT_BASE_DIR:-$HOME/.cache/nanochat-toy}"
  DEPTHS=(${DEPTHS:-1 2 3})
  RATIO="${RATIO:-2}"
  LAUNCH=($NC)
  DATA=(--data "$NANOCHAT_BASE_DIR/local_corpus")
  TRAIN_ARGS=("${TOY_TRAIN_ARGS[@]}")
else
  export NANOCHAT_BASE_DIR="${NANOCHAT_BASE_DIR:-$HOME/.cache/nanochat}"
  DEPTHS=(${DEPTHS:-12 14 16 18 20 22 24 26})
  RATIO="${RATIO:-12}"
  LAUNCH=($NC launch --nproc-per-node "${NPROC:-8}" --)
  DATA=()
  # CORE once, at the end, over every example; the device batch size is base-train's own
  # choice on a GPU (what fits in memory)
  TRAIN_ARGS=(--save-every 500 --core-metric-every 999999 --core-metric-max-per-task -1)
fi
mkdir -p "$NANOCHAT_BASE_DIR"

# setup: the build and its dependencies, the data, the tokenizer (SKIP_SETUP=1 skips them; the
# toy always makes its local corpus and tokenizer, once, offline)
[ -n "${SKIP_SETUP:-}" ] || NANOCHAT_BUILD_TARGETS="${NANOCHAT_BUILD_TARGETS:-nanochat}" bash runs/setup.sh
if [ "${TOY:-0}" = 1 ]; then
  toy_setup
elif [ -z "${SKIP_SETUP:-}" ]; then
  $NC download -n 1000
  $NC download eval-bundle
  [ -f "$NANOCHAT_BASE_DIR/tokenizer/tokenizer.json" ] || $NC tok-train --max-chars 2000000000 --vocab-size 32768
fi

RESULTS_DIR="$NANOCHAT_BASE_DIR/${SERIES}_miniseries_results"
mkdir -p "$RESULTS_DIR"
log "miniseries $SERIES: depths ${DEPTHS[*]} at $RATIO tokens per parameter"
RUNS=()
for d in "${DEPTHS[@]}"; do
  TAG="${SERIES}_miniseries_d${d}"
  RUNS+=("$NANOCHAT_BASE_DIR/base_checkpoints/$TAG")
  sweep_run "$TAG" "$RESULTS_DIR/${TAG}_train.log" "d$d" --depth "$d" --target-param-data-ratio "$RATIO"
done

log "the loss fit over the miniseries"
$NC scaling-fit --report miniseries --csv "$RESULTS_DIR/results.csv" "${RUNS[@]}" | tee "$RESULTS_DIR/fit.txt"
(cd "$RESULTS_DIR" && $NC report generate)  # the report card, with a copy here
log "results: $RESULTS_DIR/results.csv, the fit in $RESULTS_DIR/fit.txt, the report card in $RESULTS_DIR/report.md"
