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
source runs/sweep_common.sh

LABEL="${LABEL:-jan26}"
if [ "${TOY:-0}" = 1 ]; then
  # the toy base dir of runs/miniseries.sh (local corpus, vocab 512), models 32 wide per layer
  export NANOCHAT_BASE_DIR="${NANOCHAT_BASE_DIR:-$HOME/.cache/nanochat-toy}"
  FLOPS_BUDGETS=(${FLOPS_BUDGETS:-1e11 2e11 4e11})
  DEPTHS=(${DEPTHS:-1 2 3})
  LAUNCH=($NC)
  DATA=(--data "$NANOCHAT_BASE_DIR/local_corpus")
  TRAIN_ARGS=("${TOY_TRAIN_ARGS[@]}")
  toy_setup
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
    RUNS+=("$NANOCHAT_BASE_DIR/base_checkpoints/$TAG")
    # --target-param-data-ratio -1: the horizon is the budget alone
    sweep_run "$TAG" "$RESULTS_DIR/${TAG}_train.log" "d$d at $flops" --depth "$d" --target-flops "$flops" \
      --target-param-data-ratio -1
  done
done

log "the fits: IsoFLOP optima, N* and D* against compute, the loss"
$NC scaling-fit --report scaling-laws --csv "$RESULTS_DIR/results.csv" "${RUNS[@]}" | tee "$RESULTS_DIR/fit.txt"
(cd "$RESULTS_DIR" && $NC report generate)  # the report card, with a copy here
log "results: $RESULTS_DIR/results.csv, the fit in $RESULTS_DIR/fit.txt, the report card in $RESULTS_DIR/report.md"
