# Sourced by runs/speedrun.sh: the first GPU run proves itself in minutes before it spends the
# hours. Needs NC (the binary), LAUNCH (the launcher array), NPROC, DEVICE (--device-type ...)
# and BASE_TRAIN_FLAGS (the pretraining flags of the real run). NANOCHAT_PREFLIGHT=0 skips
# every check (speedrun.sh sets it when a base checkpoint exists: a rerun). A failed check
# stops the script with the reason; the logs stay in $NANOCHAT_BASE_DIR/preflight/.
#
#   preflight_plan   before any download: the fused kernels against their references on every
#                    GPU (launch -- doctor --kernels), then base-train --dry-run at the real
#                    flags for NPROC ranks (counts, batch, horizon, memory per rank, wall-clock)
#   preflight_run    once a tokenizer and the first shards exist: PREFLIGHT_STEPS (20) steps of
#                    the real model, batch and schedule into the scratch tag <tag>-preflight (no
#                    evals, no checkpoint): tok/s, MFU, peak memory against the estimate and the
#                    projected time of the whole pretraining; with FP8_CHOICE=time, once with
#                    --fp8 and once without, and FP8_FLAGS set to the faster

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
  "${LAUNCH[@]}" doctor --kernels "${DEVICE[@]}" 2>&1 | tee "$dir/kernels.log" ||
    preflight_fail "a fused kernel disagrees with its reference, or doctor --kernels failed" "$dir/kernels.log"
  echo "[preflight] 2/3 the plan: base-train --dry-run ${BASE_TRAIN_FLAGS[*]} for $NPROC rank(s)"
  "$NC" base-train --dry-run --world-size "$NPROC" "${BASE_TRAIN_FLAGS[@]}" "${FP8_FLAGS[@]}" 2>&1 | tee "$dir/plan.log" ||
    preflight_fail "the dry-run rejected the flags" "$dir/plan.log"
  if grep -q '^WARNING: the estimate exceeds' "$dir/plan.log"; then
    preflight_fail "the memory estimate per rank exceeds what the GPU can give (see the plan)" "$dir/plan.log"
  fi
}

# one short run: preflight_short_run LOG [FLAGS...]; prints its tok/s (the JSON line's)
preflight_short_run() {
  local log=$1
  shift
  "${LAUNCH[@]}" base-train "${BASE_TRAIN_FLAGS[@]}" "$@" --preflight-steps "${PREFLIGHT_STEPS:-20}" \
    --run preflight 2>&1 | tee "$log" >&2 ||
    preflight_fail "the short run failed (out of memory, a kernel, NCCL, the data?)" "$log"
  grep -h 'preflight: [0-9]* steps' "$log" | tail -n 1 >&2
  sed -n 's/^.*{"preflight_steps".*"tok_per_sec":\([0-9.e+]*\).*$/\1/p' "$log" | tail -n 1
}

# FP8 only when it pays: with FP8_CHOICE=time (speedrun.sh, NANOCHAT_FP8 unset) the short run
# goes once with --fp8 and once without, and the long run takes the faster (both figures
# printed; the choice kept in preflight/fp8 for reruns). FP8_FLAGS is the result.
preflight_run() {
  preflight_enabled || return 0
  local dir="$NANOCHAT_BASE_DIR/preflight"
  mkdir -p "$dir"
  echo "[preflight] 3/3 a short real run: ${PREFLIGHT_STEPS:-20} steps of the real model and batch"
  if [ "${FP8_CHOICE:-}" = time ]; then
    local fp8 bf16
    fp8=$(preflight_short_run "$dir/short_run_fp8.log" --fp8) || exit 1
    bf16=$(preflight_short_run "$dir/short_run.log") || exit 1
    if python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) > float(sys.argv[2]) else 1)" "${fp8:-0}" "${bf16:-0}"; then
      FP8_FLAGS=(--fp8)
      echo "fp8" > "$dir/fp8"
    else
      FP8_FLAGS=()
      echo "bf16" > "$dir/fp8"
    fi
    echo "[preflight] FP8 ${fp8:-?} tok/s, without ${bf16:-?} tok/s: the run trains $(cat "$dir/fp8" | sed 's/fp8/with FP8/;s/bf16/without FP8/') (NANOCHAT_FP8=0|1 forces it)"
  else
    preflight_short_run "$dir/short_run.log" "${FP8_FLAGS[@]}" > /dev/null || exit 1
  fi
  echo "[preflight] passed: the long run starts"
}
