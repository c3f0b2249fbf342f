# Sourced by runs/speedrun.sh: the first GPU run proves itself in minutes before it spends the
# hours. Needs NC (the binary), LAUNCH (the launcher array), NPROC and BASE_TRAIN_FLAGS (the
# pretraining flags of the real run). NANOCHAT_PREFLIGHT=0 skips every check. A failed check
# stops the script with the reason; the logs stay in $NANOCHAT_BASE_DIR/preflight/.
#
#   preflight_plan   before any download: the fused kernels against their references on every
#                    GPU (launch -- doctor --kernels), then base-train --dry-run at the real
#                    flags for NPROC ranks (counts, batch, horizon, memory per rank, wall-clock)
#   preflight_run    once a tokenizer and the first shards exist: PREFLIGHT_STEPS (20) steps of
#                    the real model, batch and schedule into the scratch tag <tag>-preflight (no
#                    evals, no checkpoint): tok/s, MFU, peak memory against the estimate and the
#                    projected time of the whole pretraining

set -o pipefail  # a failed command before tee fails the pipeline

preflight_enabled() { [ "${NANOCHAT_PREFLIGHT:-1}" != 0 ]; }

preflight_fail() {
  # the shards downloading in the background (speedrun.sh) stop with the script; a rerun resumes them
  if [ -n "${DATASET_DOWNLOAD_PID:-}" ]; then kill "$DATASET_DOWNLOAD_PID" 2>/dev/null || true; fi
  echo "preflight FAILED: $1" >&2
  echo "  log: $2" >&2
  echo "  (NANOCHAT_PREFLIGHT=0 skips the preflight)" >&2
  exit 1
}

preflight_plan() {
  preflight_enabled || { echo "[preflight] skipped (NANOCHAT_PREFLIGHT=0)"; return 0; }
  local dir="$NANOCHAT_BASE_DIR/preflight"
  mkdir -p "$dir"
  echo "[preflight] 1/3 fused kernels against their references on every GPU"
  "${LAUNCH[@]}" doctor --kernels 2>&1 | tee "$dir/kernels.log" ||
    preflight_fail "a fused kernel disagrees with its reference, or doctor --kernels failed" "$dir/kernels.log"
  echo "[preflight] 2/3 the plan: base-train --dry-run ${BASE_TRAIN_FLAGS[*]} for $NPROC rank(s)"
  "$NC" base-train --dry-run --world-size "$NPROC" "${BASE_TRAIN_FLAGS[@]}" 2>&1 | tee "$dir/plan.log" ||
    preflight_fail "the dry-run rejected the flags" "$dir/plan.log"
  if grep -q '^WARNING: the estimate exceeds' "$dir/plan.log"; then
    preflight_fail "the memory estimate per rank exceeds what the GPU can give (see the plan)" "$dir/plan.log"
  fi
}

preflight_run() {
  preflight_enabled || return 0
  local dir="$NANOCHAT_BASE_DIR/preflight"
  mkdir -p "$dir"
  echo "[preflight] 3/3 a short real run: ${PREFLIGHT_STEPS:-20} steps of the real model and batch"
  "${LAUNCH[@]}" base-train "${BASE_TRAIN_FLAGS[@]}" --preflight-steps "${PREFLIGHT_STEPS:-20}" \
    --run preflight 2>&1 | tee "$dir/short_run.log" ||
    preflight_fail "the short run failed (out of memory, a kernel, NCCL, the data?)" "$dir/short_run.log"
  grep -h 'preflight: [0-9]* steps' "$dir/short_run.log" | tail -n 1
  echo "[preflight] passed: the long run starts"
}
