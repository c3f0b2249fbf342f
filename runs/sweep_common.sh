# Sourced by runs/miniseries.sh and runs/scaling_laws.sh: the binary, the toy setting's
# training flags and offline setup, and one resumable base-train run of a sweep.
NC="${NANOCHAT_BIN:-$PWD/build/nanochat}"  # NANOCHAT_BIN: another build
log() { echo "[$(date '+%Y-%m-%d %H:%M:%S')] $*"; }

# TOY=1: models 32 wide per layer, 1K-token batches at runcpu's learning rates, on the local
# corpus with a 512-token vocabulary, in a base dir of its own (its tokenizer must not
# replace a real one)
TOY_TRAIN_ARGS=(--aspect-ratio 32 --head-dim 32 --window-pattern L --max-seq-len 128 --device-batch-size 8
                --total-batch-size 1024 --warmup-steps 10 --matrix-lr 0.08 --embedding-lr 1.2
                --unembedding-lr 0.032 --scalar-lr 2.0 --eval-every 999999 --eval-tokens 8192 --save-every 100
                --core-metric-every -1)
toy_setup() {  # the local corpus and its tokenizer, once, offline
  [ -d "$NANOCHAT_BASE_DIR/local_corpus" ] || python3 runs/make_local_corpus.py "$NANOCHAT_BASE_DIR/local_corpus"
  [ -f "$NANOCHAT_BASE_DIR/tokenizer/tokenizer.json" ] ||
    $NC tok-train --data "$NANOCHAT_BASE_DIR/local_corpus" --max-chars 2000000 --vocab-size 512
}

# sweep_run TAG LOGFILE WHAT BASE_TRAIN_ARGS...: one run of the sweep, with LAUNCH, DATA and
# TRAIN_ARGS set by the caller. A finished run is skipped (scaling-fit --finished), one with
# checkpoints resumes from the last; a run stopped by a signal exits 0 too, so only a finished
# one lets the sweep go on.
sweep_run() {
  local tag="$1" logfile="$2" what="$3"
  shift 3
  local dir="$NANOCHAT_BASE_DIR/base_checkpoints/$tag" resume=() start
  if $NC scaling-fit --finished "$dir" >/dev/null 2>&1; then
    log "$what: finished before, skipped"
    return 0
  fi
  if ls "$dir"/done_* >/dev/null 2>&1; then resume=(--resume latest); fi
  log "$what: training${resume:+ (resuming)}"
  start=$(date +%s)
  "${LAUNCH[@]}" base-train "${DATA[@]}" "${resume[@]}" "$@" --model-tag "$tag" --run "$tag" --sample-every -1 \
    "${TRAIN_ARGS[@]}" 2>&1 | tee -a "$logfile"
  log "$what: $(($(date +%s) - start))s"
  $NC scaling-fit --finished "$dir" >/dev/null || { log "$tag did not finish; rerun the script to resume it"; exit 1; }
}
