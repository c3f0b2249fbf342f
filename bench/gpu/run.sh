#!/usr/bin/env bash
# The one prepared script for a lent GPU machine (one H100 or H200, 16 cores, PyTorch
# 2.11+cu130, no apt, no internet), ordered for its purpose: our d20 step against upstream's.
# Prepare here first: bash bench/gpu/prepare.sh [upstream checkout], then run it there with
# carry [".deps", ".upstream"] and a timeout of 600 s:
#   UPSTREAM=.upstream bash bench/gpu/run.sh
# Here, without a GPU, DRY_RUN=1 runs every stage on the CPU at tiny shapes (the CUDA tests
# skip), to check the script itself.
#
# Binaries: prepare.sh builds the three this script runs (nanochat, bench_kernels, test_cuda: the
# CUDA cases of test_kernels, test_attention and test_dataloader in one binary) here, against
# the same torch wheel, and carries them in .deps/prebuilt with the Debian libraries they load. They are used when they start there and
# run a CUDA op (the quick doctor below); else, when the wheel's own CUDA op works there (the
# machine is fine, the binaries are not), the script builds its own from the carried headers,
# libraries and pkg-config files inside the same deadline; when that fails too, the machine
# cannot run CUDA: the script stops at once with its JSON line.
#
# The stages, most wanted first (what is left out when time runs short says so):
#  1. doctor: versions, the NVIDIA driver next to LibTorch's CUDA, the GPU, and one matmul on it
#     against the CPU (NANOCHAT_KERNELS=0: no self-check yet), a few seconds. Meanwhile, in the
#     background, the local corpus, the tokenizer, and upstream's tokens of that text.
#  2. base-train d20, window pattern L, at upstream's device batch 16 with 8 micro-steps of
#     accumulation (total batch 262144), then right after it, with UPSTREAM=<a Python nanochat
#     checkout>, that checkout's model + optimizer under torch.compile at the very same cadence
#     and text (capped at UPSTREAM_S, 180 s: its cold compile took 97 s on the H200), and our
#     ratio against it, speed and memory.
#  3. d20 SSSL at the same batch, then SSSL in FP8 (the default device batch).
#  4. The CUDA tests (the fused kernels, FP8, the flash windows, the loader's staging) in one
#     process, test_cuda, beside `doctor --kernels` (every fused kernel against its reference,
#     with its times), under one timeout (TESTS_S, 75 s): CUDA's start-up and the self-check
#     paid once, and a test that hangs is named by its last [ RUN ] line.
#  5. bench_kernels: per-op forward+backward against the references (SKIP_KERNEL_BENCH=1 leaves
#     it out), when time is left.
#  6. The whole path on a small model (d4 at T=512): trained 30 steps and saved, a greedy
#     `generate` on the GPU and on the CPU (how many tokens they agree on before they part, as
#     bf16 and fp32 may), `infer-bench` (TTFT, decode tok/s and bandwidth per batch size), and
#     `chat-web` under 1, 16 and 64 concurrent streaming clients (bench/gpu/load_clients.py:
#     aggregate tok/s and time to first token, p50 and p99); the server is stopped whatever happens.
#
# No checkpoint is written in a timed run: base-train runs STEPS steps of a long plan with
# --preflight-steps (no evals, nothing saved; killed only past its time). tok/s is over the
# steps after the first WARM (tokens / time); memory is the allocator's peak that its last line
# reports (max_memory_allocated, the figure upstream_step.py reports for upstream), and the most
# used on the GPU during the run (nvidia-smi, sampled: context, allocator cache and all).
#
# Budget: one deadline for everything, BUDGET_S (555 s: the summary and the logs' archive fit
# in the 45 s left of a 600 s call), builds included, of which WHOLE_S (110 s) is kept for the
# whole path: the stages before it end by BUDGET_S - WHOLE_S. Every stage gets min(its cap, what
# is left before its deadline) and is skipped, saying so, when too little is left; the summary
# runs whatever was cut. The corpus, the small model and the logs stay under /tmp; $OUT gets
# logs.tar.gz and summary.json. The last line is one JSON object holding every figure above it.
set -uo pipefail
t0=$(date +%s)
DEADLINE=$((t0 + ${BUDGET_S:-555}))  # 10 minutes less 45 s for the summary
WHOLE_S=${WHOLE_S:-110}  # of which the whole path's, kept from the stages before it (RESERVE)
RESERVE=0
cd "$(dirname "$0")/../.."
OUT="${OUT:-/tmp/nanochat_gpu_out}"
WORK=/tmp/nanochat_gpu
rm -rf "$WORK"
mkdir -p "$OUT" "$WORK/logs" "$WORK/bin"
LOG="$WORK/logs"
source bench/gpu/binaries.sh  # BINARIES
DEPS="$PWD/.deps"
ML=lib/x86_64-linux-gnu
[ -d "$DEPS/include/gloo" ] || { echo "error: .deps missing: run bash bench/gpu/prepare.sh and carry .deps" >&2
                                 echo '{"failed": "no .deps"}'; exit 1; }
PY=python3
[ -x .venv/bin/python ] && [ ! -d /opt/torch ] && PY=.venv/bin/python
TORCH_DIR="$($PY -c 'import os, torch; print(os.path.dirname(torch.__file__))')"
export PATH="$PATH:/usr/local/cuda/bin"
# our binaries load the carried Debian libraries and this machine's torch and CUDA runtime;
# python3 and cmake keep the machine's own libraries
OUR_LD="$DEPS/$ML:$TORCH_DIR/lib:$TORCH_DIR/../nvidia/cu13/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
with_our_libs() { LD_LIBRARY_PATH="$OUR_LD" "$@"; }

# the shapes: the real ones, or tiny ones on the CPU for DRY_RUN
if [ -n "${DRY_RUN:-}" ]; then
  DEV=cpu DEPTHS="4 2" SEQ=64 DBS=2 ACCUM=2 DTYPE=float32 STEPS=4 WARM=2 UP_FLAGS="--head-dim 64 --no-compile"
  TRAIN_FLAGS="--head-dim 64" DEFAULT_DBS="--device-batch-size 2" KDEPTH=2 KBATCH=2 CHARS=2000000
  WP_DEPTH=2 WP_SEQ=64 WP_DBS=2 WP_STEPS=10 WP_GEN=16 WP_IB="--prompt-tokens 32 --decode-tokens 8 --batch-sizes 1,4"
  WP_LOAD="--seconds 2 --max-tokens 8"
else  # DEFAULT_DBS: the SSSL runs' device batch, the memory estimate's on a GPU
  DEV=cuda DEPTHS="20 12" SEQ=2048 DBS=16 ACCUM=8 DTYPE=bfloat16 STEPS=8 WARM=3 UP_FLAGS="" TRAIN_FLAGS=""
  DEFAULT_DBS="" KDEPTH=20 KBATCH=16 CHARS=20000000
  WP_DEPTH=4 WP_SEQ=512 WP_DBS=32 WP_STEPS=30 WP_GEN=32 WP_IB="--prompt-tokens 256 --decode-tokens 64 --batch-sizes 1,16,64"
  WP_LOAD="--seconds 8 --max-tokens 128"
fi
WP_CLIENTS=1,16,64  # the whole path's concurrent streaming clients, one level after the other
TOTAL_BATCH=$((DBS * SEQ * ACCUM))
# seconds a stage may take: its cap, or what is left before the deadline (less RESERVE, the time
# kept for a later stage) if that is less; at least 1 (`timeout 0` would mean no limit)
budget() { local left=$((DEADLINE - RESERVE - $(date +%s))); echo $(( $1 < left ? $1 : (left > 1 ? left : 1) )); }
# a stage's timeout: TERM at its budget, KILL 10 s later
limit() { timeout -k 10 "$@"; }

# the quick doctor: versions, the driver, the GPU and one op on it; no kernel self-check
quick_doctor() { NANOCHAT_KERNELS=0 with_our_libs limit 30 "$1" doctor --device-type "$DEV"; }
# the wheel's own CUDA op, when ours failed: a machine that cannot run even this stops here
torch_cuda_ok() {
  [ "$DEV" = cuda ] || return 0
  $PY -c 'import torch; x = torch.ones(64, 64, device="cuda"); assert (x @ x).sum().item() == 64 ** 3
print("the wheel runs CUDA:", torch.cuda.get_device_name(0), "driver", torch._C._cuda_getDriverVersion())' \
    > "$LOG/torch_cuda.log" 2>&1
}
# stop now with the promised last line
give_up() {
  echo "{\"failed\": \"$1\", \"seconds\": $(( $(date +%s) - t0 ))}"
  tar -czf "$OUT/logs.tar.gz" -C "$WORK" logs 2> /dev/null
  exit 1
}

echo "== binaries, and doctor: versions, the driver, the GPU, one CUDA op"
build_s=0
doctor_rc=1
if [ -z "${FORCE_BUILD:-}" ] && [ -x "$DEPS/prebuilt/nanochat" ] &&
   with_our_libs "$DEPS/prebuilt/nanochat" --version > "$LOG/version.txt" 2>&1; then
  quick_doctor "$DEPS/prebuilt/nanochat" > "$LOG/doctor.txt" 2>&1
  doctor_rc=$?
fi
if [ "$doctor_rc" = 0 ]; then
  echo "prebuilt by prepare.sh: $(head -1 "$LOG/version.txt")"
  for b in $BINARIES; do ln -s "$DEPS/prebuilt/$(basename "$b")" "$WORK/bin/"; done
  binaries=prebuilt
else
  echo "the prebuilt ones did not start or run a CUDA op, or FORCE_BUILD:"
  tail -3 "$LOG/version.txt" "$LOG/doctor.txt" 2> /dev/null
  torch_cuda_ok || { tail -5 "$LOG/torch_cuda.log"; echo "the wheel's own CUDA op failed too: this machine cannot run CUDA"
                     give_up cuda; }
  echo "the wheel runs CUDA here: building"
  # .deps was laid out by prepare.sh under the dev machine's path: point at ours
  sed -i "s|^prefix=.*|prefix=$DEPS|" "$DEPS/$ML/pkgconfig/"*.pc
  export PKG_CONFIG_PATH="$DEPS/$ML/pkgconfig"
  if ! command -v pkg-config > /dev/null; then  # the carried pkgconf, with its library
    printf '#!/bin/sh\nLD_LIBRARY_PATH="%s" exec "%s" "$@"\n' "$DEPS/$ML" "$DEPS/bin/pkgconf" > "$WORK/pkgconf"
    chmod +x "$WORK/pkgconf"
    export PKG_CONFIG="$WORK/pkgconf"
  fi
  export TORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST:-9.0}"
  PREFIX="$($PY -c 'import torch; print(torch.utils.cmake_prefix_path)')"
  # the build has the whole deadline: no test or figure comes without it
  limit "$(budget 120)" cmake -S . -B build-gpu -G Ninja -DCMAKE_PREFIX_PATH="$PREFIX;$DEPS" \
    -DGLOO_INCLUDE_DIR="$DEPS/include" -DNANOCHAT_PYTHON="$(command -v $PY)" -DOPENSSL_ROOT_DIR="$DEPS" \
    -DZLIB_ROOT="$DEPS" -DCMAKE_LIBRARY_PATH="$DEPS/$ML" > "$LOG/configure.log" 2>&1 ||
    { tail -40 "$LOG/configure.log"; give_up configure; }
  limit "$(budget 600)" cmake --build build-gpu -j "$(nproc)" \
    --target $(for b in $BINARIES; do basename "$b"; done) > "$LOG/build.log" 2>&1 ||
    { tail -40 "$LOG/build.log"; give_up build; }
  for b in $BINARIES; do ln -s "$PWD/build-gpu/$b" "$WORK/bin/"; done
  binaries=built
  build_s=$(( $(date +%s) - t0 ))
  echo "built in $build_s s"
  with_our_libs "$WORK/bin/nanochat" --version > "$LOG/version.txt" 2>&1
  quick_doctor "$WORK/bin/nanochat" > "$LOG/doctor.txt" 2>&1
  doctor_rc=$?
fi
BIN="$WORK/bin"
cat "$LOG/version.txt"
grep -E 'NVIDIA driver|cuda:[0-9]|CUDA op|device:|error' "$LOG/doctor.txt"
[ "$doctor_rc" = 0 ] || { tail -5 "$LOG/doctor.txt"; give_up doctor; }
RESERVE=$WHOLE_S  # the whole path's time, kept from here until it starts

# the corpus, the tokenizer and upstream's tokens, in the background while nothing else needs
# them; the first base-train waits for them
export NANOCHAT_BASE_DIR="$WORK/base"
export TORCHINDUCTOR_CACHE_DIR="$WORK/inductor"  # upstream's compiles: no half-written kernel of a killed run reused
prepare_text() {
  limit "$(budget 60)" $PY runs/make_local_corpus.py "$WORK/corpus" > "$LOG/corpus.log" 2>&1
  with_our_libs limit "$(budget 30)" "$BIN/nanochat" tok-train --data "$WORK/corpus" --max-chars "$CHARS" \
    > "$LOG/tok_train.log" 2>&1 || echo "tok-train failed: $(tail -1 "$LOG/tok_train.log")"
  # upstream's tokens: the first shard's text by our tokenizer (real text on both sides)
  [ -n "${UPSTREAM:-}" ] || return 0
  $PY -c 'import json, sys
n = 0
for line in open(sys.argv[1]):
    t = json.loads(line)["text"] + "\n"
    sys.stdout.write(t)
    n += len(t)
    if n > int(sys.argv[2]) // 2: break' "$WORK/corpus/shard_00000.jsonl" "$CHARS" 2> "$LOG/tokens.log" |
    with_our_libs limit "$(budget 30)" "$BIN/nanochat" tokenize > "$WORK/tokens.json" 2>> "$LOG/tokens.log" ||
    echo "tokenizing upstream's text failed: $(tail -1 "$LOG/tokens.log")"
}
prepare_text &
prepare_pid=$!

# the most memory used on the GPU (MiB) while the process `pid` runs, sampled every 0.5 s: the
# whole GPU's, as a container's nvidia-smi may not see its own pids (one run at a time here)
gpu_mem_watch() {
  local pid=$1 out=$2 most=0 m
  command -v nvidia-smi > /dev/null || return 0
  while kill -0 "$pid" 2> /dev/null; do
    m=$(nvidia-smi -i 0 --query-gpu=memory.used --format=csv,noheader,nounits 2> /dev/null | tr -dc '0-9')
    [ -n "$m" ] && [ "$m" -gt "$most" ] && { most=$m; echo "$most" > "$out"; }
    sleep 0.5
  done
}
# base-train NAME DEPTH PATTERN [FLAGS...]: STEPS steps of TOTAL_BATCH tokens, killed once the
# last is logged (no checkpoint); the L runs at upstream's device batch, the others at the
# default one (the memory estimate picks it, and says so)
ours() {
  local name=$1 depth=$2 pattern=$3 b pid start n
  shift 3
  echo "$name" >> "$LOG/runs"  # the summary's list, skipped runs too
  b=$(budget "${OURS_S:-75}")
  [ "$b" -lt 20 ] && { echo "$name: skipped, out of time"; return; }
  : > "$LOG/train_$name.log"  # there before the polling below reads it
  LD_LIBRARY_PATH="$OUR_LD" "$BIN/nanochat" base-train --device-type "$DEV" --data "$WORK/corpus" --depth "$depth" \
    --window-pattern "$pattern" --max-seq-len "$SEQ" --total-batch-size "$TOTAL_BATCH" --num-iterations 100000 \
    --eval-every -1 --sample-every -1 --core-metric-every -1 --model-tag "gpu_$name" --preflight-steps "$STEPS" \
    $TRAIN_FLAGS "$@" > "$LOG/train_$name.log" 2>&1 &
  pid=$!
  gpu_mem_watch "$pid" "$LOG/train_$name.gpu_mem" &
  start=$(date +%s)
  while kill -0 "$pid" 2> /dev/null; do  # --preflight-steps: it ends by itself after STEPS steps
    [ $(( $(date +%s) - start )) -ge "$b" ] && { echo "124" > "$LOG/train_$name.rc"; break; }
    sleep 0.2
  done
  grep -q '^{"preflight_steps"' "$LOG/train_$name.log" && [ ! -s "$LOG/train_$name.rc" ] && echo "timed" > "$LOG/train_$name.rc"
  kill -KILL "$pid" 2> /dev/null
  wait "$pid" 2> /dev/null
  local rc=$?
  [ -s "$LOG/train_$name.rc" ] || echo "$rc" > "$LOG/train_$name.rc"  # it ended by itself: its exit code
  wait
  echo "$name: $(cat "$LOG/train_$name.rc"); $(grep -o 'tok/sec: [0-9,]* | [a-z0-9]*_mfu: [0-9.]*' "$LOG/train_$name.log" |
    tail -1); $(grep -o 'grad accumulation [0-9]*' "$LOG/train_$name.log"); $(grep -o 'device batch size [0-9]*' "$LOG/train_$name.log")"
  grep 'attention, window' "$LOG/train_$name.log" | sed -E 's/^.*(attention, window)/  \1/'
  [ "$(cat "$LOG/train_$name.rc")" = timed ] || tail -5 "$LOG/train_$name.log"
}
# UPSTREAM's model + optimizer at our L runs' batch, accumulation and text, window pattern L or
# SSSL (without FA3 its SSSL windows run as SDPA with a mask: what a node without FA3 runs)
upstream() {
  local depth=$1 pattern=$2 b
  [ -n "${UPSTREAM:-}" ] || return 0
  echo "upstream_d${depth}_$pattern" >> "$LOG/upstream_runs"
  b=$(budget "${UPSTREAM_S:-180}")
  [ "$b" -lt 40 ] && { echo "upstream d$depth $pattern: skipped, out of time"; return; }
  local tokens=()
  [ -s "$WORK/tokens.json" ] && tokens=(--tokens "$WORK/tokens.json")
  limit "$b" $PY bench/gpu/upstream_step.py "$UPSTREAM" --device "$DEV" --depth "$depth" --batch "$DBS" --seq-len "$SEQ" \
    --grad-accum "$ACCUM" "${tokens[@]}" --steps $((STEPS - WARM)) --warmup "$WARM" --window-pattern "$pattern" $UP_FLAGS \
    > "$LOG/upstream_d${depth}_$pattern.json" 2> "$LOG/upstream_d${depth}_$pattern.log"
  local rc=$?
  if [ "$rc" = 0 ]; then echo "upstream d$depth $pattern ($UPSTREAM): $(tail -1 "$LOG/upstream_d${depth}_$pattern.json")"
  else echo "upstream d$depth $pattern: exit $rc$([ "$rc" = 124 ] && echo ' (out of its time)'); $(grep . "$LOG/upstream_d${depth}_$pattern.log" | tail -1)"; fi
}
echo "== the corpus and the tokenizer (made in the background since the doctor)"
waited=0
while kill -0 "$prepare_pid" 2> /dev/null && [ "$(budget 2)" -gt 1 ]; do sleep 0.5; waited=1; done
kill -0 "$prepare_pid" 2> /dev/null && { kill -TERM "$prepare_pid"; echo "out of time making the corpus"; }
wait "$prepare_pid" 2> /dev/null
echo "ready after $(( $(date +%s) - t0 )) s$([ "$waited" = 1 ] && echo ", waited for"): $(tail -1 "$LOG/tok_train.log")"

echo "== training throughput: base-train, T=$SEQ, $STEPS steps (tok/s after the first $WARM); upstream right after ours"
read -r DA DB <<< "$DEPTHS"
ours "d${DA}_L" "$DA" L --device-batch-size "$DBS"
upstream "$DA" L
ours "d${DA}_SSSL" "$DA" SSSL --device-batch-size "$DBS"
if [ -z "${DRY_RUN:-}" ]; then ours "d${DA}_SSSL_fp8" "$DA" SSSL --fp8  # FP8 takes CUDA
else ours "d${DB}_SSSL" "$DB" SSSL $DEFAULT_DBS; fi  # the CPU's stand-in: the default device batch

echo "== CUDA tests (the fused kernels, FP8, the flash windows, the loader's staging), one process, and doctor --kernels"
# every CUDA case in one test_cuda process (CUDA's start-up and the self-check paid once), beside
# doctor --kernels, under one timeout. A process cut by the timeout names the test it was in: its
# last [ RUN ] line without a verdict after it.
tests_rc=0
b=$(budget "${TESTS_S:-75}")
if [ "$b" -lt 15 ]; then
  tests_rc=skipped
  echo "skipped: out of time"
else
  with_our_libs limit "$b" "$BIN/test_cuda" --gtest_filter='*Cuda*' > "$LOG/tests.log" 2>&1 &
  tests_pid=$!
  with_our_libs limit "$b" "$BIN/nanochat" doctor --device-type "$DEV" --kernels > "$LOG/doctor_kernels.txt" 2>&1 &
  kernels_pid=$!
  wait "$tests_pid"
  tests_rc=$?
  [ "$tests_rc" = 77 ] && tests_rc=0  # every case skipped (no GPU): the verdicts say so
  echo "test_cuda: $(grep -E '^\[ *(PASSED|FAILED) +\]' "$LOG/tests.log" | tr '\n' ' ')exit $tests_rc"
  grep -E '^\[ +FAILED +\] [A-Za-z]' "$LOG/tests.log" | sort -u
  if [ "$tests_rc" != 0 ]; then
    hung=$(awk '/^\[ RUN +\]/ {t = $NF} /^\[ +(OK|FAILED|SKIPPED) +\]/ {t = ""} END {print t}' "$LOG/tests.log")
    [ -n "$hung" ] && echo "  cut in $hung (out of its $b s)" && echo "[  HUNG    ] $hung" >> "$LOG/tests.log"
    tail -8 "$LOG/tests.log"
  fi
  wait "$kernels_pid"
  kernels_check_rc=$?
  echo "doctor --kernels: exit $kernels_check_rc"
  grep -E 'FAILED' "$LOG/doctor_kernels.txt" | head -5
fi

echo "== fused kernels vs ATen reference (forward+backward per op)"
b=$(budget 45)
if [ -n "${SKIP_KERNEL_BENCH:-}" ] || [ "$b" -lt 15 ]; then
  kernels_rc=skipped
  echo "skipped$([ -z "${SKIP_KERNEL_BENCH:-}" ] && echo ": out of time")" | tee "$LOG/bench_kernels.txt"
else
  with_our_libs limit "$b" "$BIN/bench_kernels" --device "$DEV" --dtype "$DTYPE" --depth "$KDEPTH" --batch "$KBATCH" \
    --seq-len "$SEQ" > "$LOG/bench_kernels.txt" 2>&1
  kernels_rc=$?
  cat "$LOG/bench_kernels.txt"
fi

# the whole path, on a model of its own: trained and saved, generated from on the device and on the
# CPU, benchmarked, served. Each step's outcome goes to wp_<step>.rc: its exit code, or skipped
echo "== the whole path: d$WP_DEPTH trained $WP_STEPS steps and saved, greedy generate on $DEV and on cpu, infer-bench," \
     "chat-web on $DEV under $WP_CLIENTS streaming clients"
RESERVE=0
WP_TAG=gpu_whole_path
WP_PROMPT="The capital of France is"
CKPT=(-i base -g "$WP_TAG")
b=$(budget 60)
if [ "$b" -lt 20 ]; then
  echo skipped > "$LOG/wp_train.rc"
  echo "train: skipped, out of time"
else
  with_our_libs limit "$b" "$BIN/nanochat" base-train --device-type "$DEV" --data "$WORK/corpus" --depth "$WP_DEPTH" \
    --max-seq-len "$WP_SEQ" --device-batch-size "$WP_DBS" --total-batch-size $((WP_DBS * WP_SEQ)) \
    --num-iterations "$WP_STEPS" --warmup-steps 5 --eval-every -1 --core-metric-every -1 --sample-every -1 \
    --model-tag "$WP_TAG" $TRAIN_FLAGS > "$LOG/wp_train.log" 2>&1
  echo $? > "$LOG/wp_train.rc"
  echo "train: exit $(cat "$LOG/wp_train.rc"); $(grep -o 'step [0-9]*/[0-9]* .*| loss: [0-9.]*' "$LOG/wp_train.log" | tail -1)"
  grep -q 'saved checkpoint' "$LOG/wp_train.log" || tail -5 "$LOG/wp_train.log"
fi
wp_saved=0  # a complete checkpoint: its done_<step> marker
ls "$NANOCHAT_BASE_DIR/base_checkpoints/$WP_TAG"/done_* > /dev/null 2>&1 && wp_saved=1
# the last generated text of a generate --json, for the log
gen_text() { $PY -c 'import json, sys
d = json.loads([l for l in open(sys.argv[1]) if l.startswith("{")][-1])
print(len(d["generated_ids"]), "tokens:", repr(d["text"])[:160])' "$1" 2> /dev/null; }
# generate_dev on $DEV (on the CPU too in DRY_RUN), generate_cpu the fp32 reference
for g in "dev $DEV" "cpu cpu"; do
  read -r name dev <<< "$g"
  b=$(budget 30)
  if [ "$wp_saved" = 0 ] || [ "$b" -lt 10 ]; then
    echo skipped > "$LOG/wp_generate_$name.rc"
    echo "generate on $dev: skipped, $([ "$wp_saved" = 0 ] && echo "no checkpoint" || echo "out of time")"
    continue
  fi
  with_our_libs limit "$b" "$BIN/nanochat" generate "${CKPT[@]}" --device-type "$dev" -p "$WP_PROMPT" \
    --max-tokens "$WP_GEN" --temperature 0 --json > "$LOG/wp_generate_$name.json" 2> "$LOG/wp_generate_$name.log"
  echo $? > "$LOG/wp_generate_$name.rc"
  echo "generate on $dev: exit $(cat "$LOG/wp_generate_$name.rc"); $(gen_text "$LOG/wp_generate_$name.json")"
  [ "$(cat "$LOG/wp_generate_$name.rc")" = 0 ] || tail -5 "$LOG/wp_generate_$name.log"
done
b=$(budget 45)
if [ "$wp_saved" = 0 ] || [ "$b" -lt 15 ]; then
  echo skipped > "$LOG/wp_infer_bench.rc"
  echo "infer-bench: skipped, $([ "$wp_saved" = 0 ] && echo "no checkpoint" || echo "out of time")"
else
  with_our_libs limit "$b" "$BIN/nanochat" infer-bench "${CKPT[@]}" --device-type "$DEV" $WP_IB \
    > "$LOG/wp_infer_bench.txt" 2>&1
  echo $? > "$LOG/wp_infer_bench.rc"
  grep -v '^{' "$LOG/wp_infer_bench.txt" | tail -20  # the card; its JSON line goes to the summary
fi
# chat-web on a free port, then the load: the server goes down at the end of the step, or when
# the script itself is stopped
server_pid=""
stop_server() {
  [ -n "$server_pid" ] || return 0
  kill -TERM "$server_pid" 2> /dev/null  # it drains: requests in flight finish, then it exits 0
  for _ in $(seq 50); do kill -0 "$server_pid" 2> /dev/null || break; sleep 0.1; done
  kill -TERM "$server_pid" 2> /dev/null  # a second signal cancels what is still in flight
  for _ in $(seq 20); do kill -0 "$server_pid" 2> /dev/null || break; sleep 0.1; done
  kill -KILL "$server_pid" 2> /dev/null
  wait "$server_pid" 2> /dev/null
  echo $? > "$LOG/wp_chat_web.rc"
  server_pid=""
}
b=$(budget 75)
if [ "$wp_saved" = 0 ] || [ "$b" -lt 25 ]; then
  echo skipped > "$LOG/wp_serving.rc"
  echo "chat-web: skipped, $([ "$wp_saved" = 0 ] && echo "no checkpoint" || echo "out of time")"
else
  start=$(date +%s)
  trap stop_server EXIT
  trap 'stop_server; exit 143' TERM INT HUP
  # 64 streams decoded together (--max-batch), and every client comes from 127.0.0.1: a
  # connection cap per address above 64 (the default is a quarter of --max-connections, 64)
  LD_LIBRARY_PATH="$OUR_LD" "$BIN/nanochat" chat-web "${CKPT[@]}" --device-type "$DEV" --port 0 --max-batch 64 \
    --max-connections-per-client 128 --quiet > "$LOG/wp_chat_web.log" 2>&1 &
  server_pid=$!
  port=""
  for _ in $(seq 150); do  # the port is printed on binding, before the model loads
    port=$(grep -o 'listening on http://[0-9.]*:[0-9]*' "$LOG/wp_chat_web.log" | grep -o '[0-9]*$')
    if [ -n "$port" ] || ! kill -0 "$server_pid" 2> /dev/null; then break; fi
    sleep 0.1
  done
  if [ -n "$port" ]; then
    # the rest of the step's time less 10 s to stop the server; the client skips a level that
    # would not fit, and its last line holds every level done even when it is killed
    cb=$((b - ($(date +%s) - start) - 10))
    limit "$((cb > 1 ? cb : 1))" $PY bench/gpu/load_clients.py --port "$port" --clients "$WP_CLIENTS" $WP_LOAD \
      --ready-timeout 30 --budget "$((cb > 3 ? cb - 3 : 1))" > "$LOG/wp_serving.log" 2>&1
    echo $? > "$LOG/wp_serving.rc"
    grep -v '^{' "$LOG/wp_serving.log"
  else
    echo "no port" > "$LOG/wp_serving.rc"
    echo "chat-web did not start:"
  fi
  stop_server
  trap - EXIT TERM INT HUP
  echo "chat-web: exit $(cat "$LOG/wp_chat_web.rc")$(grep -o 'stopped after [0-9]* requests' "$LOG/wp_chat_web.log" | sed 's/^/, /')"
  [ "$(cat "$LOG/wp_chat_web.rc")" = 0 ] || tail -5 "$LOG/wp_chat_web.log"
fi

# the summary table, then one JSON line with every figure above: parsed back from the logs,
# nothing estimated
LOG="$LOG" OUT="$OUT" BIN_SOURCE="$binaries" BUILD_S="$build_s" TESTS_RC="$tests_rc" DOCTOR_RC="$doctor_rc" \
  KERNELS_RC="$kernels_rc" KERNELS_CHECK_RC="${kernels_check_rc:-skipped}" WARM="$WARM" DEPTHS="$DEPTHS" T0="$t0" SEQ="$SEQ" DEV="$DEV" WP_SAVED="$wp_saved" \
  WP_DEPTH="$WP_DEPTH" WP_CLIENTS="$WP_CLIENTS" $PY - <<'PY'
import json, os, re, time
log = os.environ["LOG"]
def read(name):
    try:
        with open(os.path.join(log, name)) as f: return f.read()
    except OSError: return ""
def code(v):  # an exit code, or why there is none ("skipped")
    return int(v) if v.lstrip("-").isdigit() else v
r = {"binaries": os.environ["BIN_SOURCE"], "build_s": int(os.environ["BUILD_S"]), "tests_rc": code(os.environ["TESTS_RC"]),
     "doctor_rc": code(os.environ["DOCTOR_RC"]), "doctor_kernels_rc": code(os.environ["KERNELS_CHECK_RC"]),
     "bench_kernels_rc": code(os.environ["KERNELS_RC"])}
tests = read("tests.log")
r["tests_passed"] = sum(int(n) for n in re.findall(r"^\[  PASSED  \] (\d+) test", tests, re.M))
r["tests_failed"] = sorted(set(re.findall(r"^\[  FAILED  \] (\w+\.\w+)", tests, re.M)))
r["tests_skipped"] = sorted(set(re.findall(r"^\[  SKIPPED \] (\w+\.\w+)", tests, re.M)))
r["tests_hung"] = sorted(set(re.findall(r"^\[  HUNG    \] (\S+)", tests, re.M)))
m = re.search(r"compute dtype ([a-z0-9]+)", read("doctor.txt"))
if m: r["compute_dtype"] = m[1]
r["version"] = read("version.txt").strip()
for key, pattern in (("driver", r"NVIDIA driver: (.*)"), ("cuda_op", r"CUDA op: (.*)"), ("gpu", r"(cuda:0 .*)")):
    m = re.search(pattern, read("doctor.txt"))
    if m: r[key] = m[1].strip()
def last_json(text):  # the last line that is a JSON object, else None
    for line in reversed(text.splitlines()):
        if line.startswith("{"):
            try: return json.loads(line)
            except ValueError: pass
    return None
kernels = (last_json(read("doctor_kernels.txt")) or {}).get("kernels") or []  # doctor --kernels (beside the tests)
r["doctor_kernels"] = {f"{k.get('op')} {k.get('dtype')}": {x: k.get(x) for x in
                       ("ok", "applies", "max_error", "fused_ms", "reference_ms", "check_ms")} for k in kernels}
warm, seq_len = int(os.environ["WARM"]), int(os.environ["SEQ"])
for name in read("runs").split():
    text, rc = read(f"train_{name}.log"), read(f"train_{name}.rc").strip()
    steps = [(int(s), int(t.replace(",", "")), float(u)) for s, t, u in
             re.findall(r"step (\d+)/\d+ .*?tok/sec: ([0-9,]+) \| [a-z0-9]+_mfu: ([0-9.]+)", text)]
    timed = [s for s in steps if s[0] >= warm]
    # tokens over time = the harmonic mean of the steps' rates (every step has the same tokens)
    tps = len(timed) / sum(1 / s[1] for s in timed) if timed and all(s[1] for s in timed) else None
    accum = re.search(r"total batch (\d+) tokens .*?grad accumulation (\d+)", text)
    mem = read(f"train_{name}.gpu_mem").strip()
    pre = [json.loads(l) for l in text.splitlines() if l.startswith("{\"preflight_steps\"")]
    peak = pre[-1].get("peak_memory_bytes") if pre else None
    # outcome: timed, skipped, 124 (out of its time before its last step) or a failed run's exit code
    r[name] = {"outcome": rc or "skipped", "timed_steps": len(timed), "tok_per_sec": round(tps) if tps else None,
               "bf16_mfu": round(tps * timed[0][2] / timed[0][1], 2) if tps else None,
               "grad_accum": int(accum[2]) if accum else None,
               "device_batch_size": int(accum[1]) // int(accum[2]) // seq_len if accum else None,
               "gpu_mem_used_mib": int(mem) if mem else None,
               # the allocator's peak (max_memory_allocated), as upstream's figure
               "peak_mem_mb": round(peak / 2**20) if peak else None,
               "attention": re.findall(r"attention, window (\d+): (.*)", text)}
for run in read("upstream_runs").split():  # upstream_d20_L ...
    try: up = json.loads(read(f"{run}.json").strip().splitlines()[-1])
    except (IndexError, ValueError): continue
    r[run] = up
    mine = r.get(run[len("upstream_"):], {})
    if mine.get("tok_per_sec") and up.get("tok_per_sec"):
        r[f"{run[len('upstream_'):]}_over_upstream"] = round(mine["tok_per_sec"] / up["tok_per_sec"], 3)
    if mine.get("peak_mem_mb") and up.get("peak_mem_mb"):
        r[f"{run[len('upstream_'):]}_memory_over_upstream"] = round(mine["peak_mem_mb"] / up["peak_mem_mb"], 3)
lines = [l for l in read("bench_kernels.txt").splitlines() if l.strip()]
try: last = json.loads(lines[-1])  # a bench that ends with its own JSON line
except (IndexError, ValueError): last = None
r["bench_kernels"] = last if isinstance(last, dict) else lines  # else its table, verbatim
# the whole path: a step's outcome is its exit code, "skipped", or missing (the script stopped before it)
def rc_of(step):
    v = read(f"wp_{step}.rc").strip()
    return int(v) if v.lstrip("-").isdigit() else (v or None)
wp = r["whole_path"] = {"device": os.environ["DEV"], "depth": int(os.environ["WP_DEPTH"]), "train_rc": rc_of("train"),
                        "saved": os.environ["WP_SAVED"] == "1"}
steps = re.findall(r"step (\d+)/\d+ .*?\| loss: ([0-9.]+) .*?tok/sec: ([0-9,]+)", read("wp_train.log"))
if steps:
    wp["train_steps"], wp["train_loss"] = int(steps[-1][0]) + 1, float(steps[-1][1])
    wp["train_tok_per_sec"] = int(steps[-1][2].replace(",", ""))
ids = {}
for name in ("dev", "cpu"):  # generate_cuda: the run on DEV (on the CPU too in DRY_RUN)
    g = {"device": os.environ["DEV"] if name == "dev" else "cpu", "rc": rc_of(f"generate_{name}")}
    out = last_json(read(f"wp_generate_{name}.json"))
    if out:
        ids[name] = out["generated_ids"]
        g.update(tokens=len(out["generated_ids"]), text=out["text"][:200])
    wp["generate_cuda" if name == "dev" else "generate_cpu"] = g
if len(ids) == 2:  # greedy on both: the tokens they agree on before they part (bf16 and fp32 may)
    n = 0
    while n < min(len(ids["dev"]), len(ids["cpu"])) and ids["dev"][n] == ids["cpu"][n]: n += 1
    wp["common_prefix_tokens"], wp["generate_agree"] = n, ids["dev"] == ids["cpu"]
ib = {"rc": rc_of("infer_bench")}
out = last_json(read("wp_infer_bench.txt"))
if out:
    ms = lambda s: round(s * 1000, 2) if s is not None else None
    ib.update(prefill_tok_per_sec=round(out.get("prefill", {}).get("tok_per_sec", 0), 1),
              compute_dtype=out.get("compute_dtype"), sweep={
        str(x["batch_size"]): {"tok_per_sec": round(x["tok_per_sec"], 1), "ttft_ms": ms(x.get("ttft_sec")),
                               "tpot_ms": ms(x.get("tpot_sec")), "mbu_percent": round(x.get("mbu_percent", 0), 2),
                               "peak_memory_mib": round(x.get("peak_memory_bytes", 0) / 2**20, 1)}
        for x in out.get("sweep", [])})
wp["infer_bench"] = ib
serving = {"rc": rc_of("serving"), "server_rc": rc_of("chat_web")}
serving.update(last_json(read("wp_serving.log")) or {})
wp["serving"] = serving
r["seconds"] = round(time.time() - int(os.environ["T0"]))
def outcome(rc, ok):  # an exit code, "skipped" (or no record: the script stopped before), or why it failed
    return ok if rc == 0 else "skipped" if rc in ("skipped", None) else f"FAIL ({'exit ' if isinstance(rc, int) else ''}{rc})"
print("== summary")
rows = [("binaries", r["binaries"]),
        ("CUDA tests", f"{outcome(r['tests_rc'], 'pass')}, {r['tests_passed']} passed, {len(r['tests_skipped'])} skipped"),
        ("CUDA tests hung", r["tests_hung"] or "none"),
        ("driver", r.get("driver", "?")), ("CUDA op", r.get("cuda_op", "none (no GPU)")),
        ("doctor", outcome(r["doctor_rc"], "pass")), ("compute dtype", r.get("compute_dtype", "?")),
        ("doctor --kernels", f"{outcome(r['doctor_kernels_rc'], 'pass')}: {sum(1 for k in r['doctor_kernels'].values() if k['ok'] and k['applies'])} ok, "
                             f"{sum(1 for k in r['doctor_kernels'].values() if not k['applies'])} without a kernel here, "
                             f"disagreeing: {[n for n, k in r['doctor_kernels'].items() if not k['ok']] or 'none'}"),
        ("bench_kernels", outcome(r["bench_kernels_rc"], "ran"))]
for name in read("runs").split():
    x = r[name]
    rows.append((name, f"{x['outcome']}: {x['tok_per_sec']} tok/s, MFU {x['bf16_mfu']}, {x['timed_steps']} steps timed, "
                       f"accum {x['grad_accum']}, peak allocated {x['peak_mem_mb']} MiB, GPU memory {x['gpu_mem_used_mib']} MiB"))
for run in read("upstream_runs").split():
    if run in r:
        mine = run[len("upstream_"):]
        rows.append((run, f"{round(r[run]['tok_per_sec'])} tok/s, peak allocated {r[run].get('peak_mem_mb')} MiB; "
                          f"ours / upstream: speed {r.get(f'{mine}_over_upstream', '?')}, "
                          f"memory {r.get(f'{mine}_memory_over_upstream', '?')}"))
dev = wp["device"]
rows.append((f"whole path d{wp['depth']} train", f"{outcome(wp['train_rc'], 'ran')}: {wp.get('train_steps')} steps, "
             f"loss {wp.get('train_loss')}, {wp.get('train_tok_per_sec')} tok/s, saved {'yes' if wp['saved'] else 'no'}"))
for key in ("generate_cuda", "generate_cpu"):
    g = wp[key]
    rows.append((f"generate on {g['device']}", f"{outcome(g['rc'], 'ran')}: {g.get('tokens')} tokens "
                                               f"{json.dumps(g.get('text', ''))[:60]}"))
rows.append((f"generate {dev} vs cpu", f"common prefix {wp.get('common_prefix_tokens')} of "
                                       f"{wp['generate_cuda'].get('tokens')} tokens"))
ib = wp["infer_bench"]
rows.append(("infer-bench", f"{outcome(ib['rc'], 'ran')}: prefill {ib.get('prefill_tok_per_sec')} tok/s; " +
             "; ".join(f"batch {b}: {x['tok_per_sec']} tok/s, TTFT {x['ttft_ms']} ms, TPOT {x['tpot_ms']} ms"
                       for b, x in ib.get("sweep", {}).items())))
sv = wp["serving"]
rows.append((f"chat-web on {dev}", outcome(sv["rc"], "ran") if sv["server_rc"] is None else
             f"{outcome(sv['rc'], 'ran')}, ready in {sv.get('ready_s')} s, server {outcome(sv['server_rc'], 'stopped cleanly')}"))
for n in os.environ.get("WP_CLIENTS", "1,16,64").split(","):
    x = sv.get(n)
    if x is None: continue
    rows.append((f"  {n} streaming clients", x.get("skipped") or
                 f"{x['tok_per_sec']} tok/s, TTFT p50 {x['ttft_p50_ms']} ms, p99 {x['ttft_p99_ms']} ms, "
                 f"{x['requests']} requests, {x['errors']} errors"))
rows.append(("seconds", r["seconds"]))
for key, value in rows:
    print(f"{key:<28} {value}")
with open(os.path.join(os.environ["OUT"], "summary.json"), "w") as f: json.dump(r, f, indent=1)
print(json.dumps(r))
PY
summary_rc=$?
tar -czf "$OUT/logs.tar.gz" -C "$WORK" logs 2> /dev/null
# the promised last line even when the summary itself broke
[ "$summary_rc" = 0 ] || { echo "{\"failed\": \"summary\", \"exit\": $summary_rc}"; exit 1; }
[ "$tests_rc" = 0 ] || [ "$tests_rc" = skipped ]
