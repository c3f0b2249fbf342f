#!/usr/bin/env bash
# Scaling laws (upstream's runs/scaling_laws.sh): for each FLOP budget, base models of several
# depths each trained for exactly that many FLOPs (--target-flops); then `nanochat scaling-fit`
# fits the IsoFLOP parabola of each budget (its vertex: the compute-optimal parameters N*, with
# the tokens D* and D*/N*), N* and D* against compute as power laws, and the loss fit, into the
# report card. The data and the tokenizer must be there (runs/miniseries.sh or runs/speedrun.sh
# make them).
#
#   bash runs/scaling_laws.sh                   # 4 budgets 1e18..1e19 x depths 10..20, 8 GPUs
#   TOY=1 bash runs/scaling_laws.sh             # 3 budgets 1e11..4e11 x depths 1..3 on a CPU
#
# Resumable: rerun it and the finished runs are skipped (scaling-fit --finished), an interrupted
# one continues from its last checkpoint (base-train --resume latest). Knobs: LABEL (jan26),
# FLOPS_BUDGETS ("1e18 ..."), DEPTHS ("10 12 ..."), NPROC (8), NANOCHAT_BASE_DIR. Results:
# $NANOCHAT_BASE_DIR/scaling_laws_results_<label>/ (results.csv, fit.txt, one log per run,
# report.md) and the "Scaling laws" section of the report card. NANOCHAT_BIN runs another build.
set -euo pipefail
cd "$(dirname "$0")/.."
export OMP_NUM_THREADS=1
NC="${NANOCHAT_BIN:-$PWD/build/nanochat}"  # NANOCHAT_BIN: another build
log() { echo "[$(date '+%Y-%m-%d %H:%M:%S')] $*"; }

LABEL="${LABEL:-jan26}"
if [ "${TOY:-0}" = 1 ]; then
  # the toy base dir of runs/miniseries.sh (local corpus, vocab 512), models 32 wide per layer
  export NANOCHAT_BASE_DIR="${NANOCHAT_BASE_DIR:-$HOME/.cache/nanochat-toy}"
  FLOPS_BUDGETS=(${FLOPS_BUDGETS:-1e11 2e11 4e11})
  DEPTHS=(${DEPTHS:-1 2 3})
  LAUNCH=($NC)
  DATA=(--data "$NANOCHAT_BASE_DIR/local_corpus")
  TRAIN_ARGS=(--aspect-ratio 32 --head-dim 32 --window-pattern L --max-seq-len 128 --device-batch-size 8
              --total-batch-size 1024 --warmup-steps 10 --matrix-lr 0.08 --embedding-lr 1.2
              --unembedding-lr 0.032 --scalar-lr 2.0 --eval-every 999999 --eval-tokens 8192 --save-every 100
              --core-metric-every -1)
  [ -d "$NANOCHAT_BASE_DIR/local_corpus" ] || python3 runs/make_local_corpus.py "$NANOCHAT_BASE_DIR/local_corpus"
  [ -f "$NANOCHAT_BASE_DIR/tokenizer/tokenizer.json" ] || $NC tok-train "${DATA[@]}" --max-chars 2000000 --vocab-size 512
else
  export NANOCHAT_BASE_DIR="${NANOCHAT_BASE_DIR:-$HOME/.cache/nanochat}"
  FLOPS_BUDGETS=(${FLOPS_BUDGETS:-1e18 2.15e18 4.64e18 1e19})
  DEPTHS=(${DEPTHS:-10 12 14 16 18 20})
  LAUNCH=($NC launch --nproc-per-node "${NPROC:-8}" --)
  DATA=()
  # ~100M tokens for the final val bpb (the default is ~20M), CORE once at the end over every
  # example; the device batch size is base-train's own choice on a GPU
  TRAIN_ARGS=(--eval-tokens $((100 * 524288)) --save-every 500 --core-metric-every 999999
              --core-metric-max-per-task -1)
  [ -f "$NANOCHAT_BASE_DIR/tokenizer/tokenizer.json" ] ||
    { echo "no tokenizer in $NANOCHAT_BASE_DIR: run runs/miniseries.sh (or its setup) first" >&2; exit 1; }
fi

RESULTS_DIR="$NANOCHAT_BASE_DIR/scaling_laws_results_${LABEL}"
mkdir -p "$RESULTS_DIR"
RUNS=()
for flops in "${FLOPS_BUDGETS[@]}"; do
  log "compute budget $flops FLOPs: depths ${DEPTHS[*]}"
  for d in "${DEPTHS[@]}"; do
    TAG="scaling_${LABEL}_${flops}_d${d}"
    DIR="$NANOCHAT_BASE_DIR/base_checkpoints/$TAG"
    RUNS+=("$DIR")
    if $NC scaling-fit --finished "$DIR" >/dev/null 2>&1; then
      log "d$d at $flops: finished before, skipped"
      continue
    fi
    RESUME=()
    if ls "$DIR"/done_* >/dev/null 2>&1; then RESUME=(--resume latest); fi
    log "d$d at $flops: training${RESUME:+ (resuming)}"
    START=$(date +%s)
    # --target-param-data-ratio -1: the horizon is the budget alone
    "${LAUNCH[@]}" base-train "${DATA[@]}" "${RESUME[@]}" --depth "$d" --target-flops "$flops" \
      --target-param-data-ratio -1 --model-tag "$TAG" --run "$TAG" --sample-every -1 \
      "${TRAIN_ARGS[@]}" 2>&1 | tee -a "$RESULTS_DIR/${TAG}_train.log"
    log "d$d at $flops: $(($(date +%s) - START))s"
    # a run stopped by a signal exits 0 too: only a finished one may go on
    $NC scaling-fit --finished "$DIR" >/dev/null || { log "$TAG did not finish; rerun the script to resume it"; exit 1; }
  done
done

log "the fits: IsoFLOP optima, N* and D* against compute, the loss"
$NC scaling-fit --report scaling-laws --csv "$RESULTS_DIR/results.csv" "${RUNS[@]}" | tee "$RESULTS_DIR/fit.txt"
(cd "$RESULTS_DIR" && $NC report generate)  # the report card, with a copy here
log "results: $RESULTS_DIR/results.csv, the fit in $RESULTS_DIR/fit.txt, the report card in $RESULTS_DIR/report.md"
