#!/usr/bin/env bash
# The one prepared script for a lent GPU machine. Builds nanochat against that machine's
# own torch (LibTorch 2.11+cu130), runs every test (the CUDA ones included), then prints a
# table of GPU checks and benchmarks. Prepare here first: bash bench/gpu/prepare.sh, then
# run with carry [".deps"]:  bash bench/gpu/run.sh
# Tests that compare against Python references need rustbpe and duckdb there too (carry them
# as wheels, see the device tool's README); the GPU machine's python3 has the others.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT="${OUT:-/tmp/nanochat_gpu_out}"
mkdir -p "$OUT"
DEPS="$PWD/.deps"
[ -d "$DEPS/include/gloo" ] || { echo "error: .deps missing: run bash bench/gpu/prepare.sh and carry .deps" >&2; exit 1; }
PY=python3
[ -x .venv/bin/python ] && [ ! -d /opt/torch ] && PY=.venv/bin/python
PREFIX="$($PY -c 'import torch; print(torch.utils.cmake_prefix_path)')"
export PATH="$PATH:/usr/local/cuda/bin"
# .deps was laid out by prepare.sh on the dev machine, under its own path: point at ours
ML=lib/x86_64-linux-gnu
sed -i "s|^prefix=.*|prefix=$DEPS|" "$DEPS/$ML/pkgconfig/"*.pc
export PKG_CONFIG_PATH="$DEPS/$ML/pkgconfig"
export LD_LIBRARY_PATH="$DEPS/$ML${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export TORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST:-9.0}"

echo "== build"
t0=$(date +%s)
cmake -S . -B build-gpu -G Ninja -DCMAKE_PREFIX_PATH="$PREFIX;$DEPS" -DGLOO_INCLUDE_DIR="$DEPS/include" \
  -DNANOCHAT_PYTHON="$(command -v $PY)" -DOPENSSL_ROOT_DIR="$DEPS" -DZLIB_ROOT="$DEPS" -DCMAKE_LIBRARY_PATH="$DEPS/$ML" \
  > "$OUT/configure.log" 2>&1 || { tail -40 "$OUT/configure.log"; exit 1; }
cmake --build build-gpu -j "$(nproc)" > "$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
echo "built in $(( $(date +%s) - t0 )) s"

echo "== tests"
ctest --test-dir build-gpu --output-on-failure -j 8 --timeout 300 2>&1 | tee "$OUT/ctest.log" | tail -15
tests_rc=${PIPESTATUS[0]}

echo "== GPU checks"
./build-gpu/nanochat --version | tee "$OUT/version.txt"
./build-gpu/nanochat doctor 2>&1 | tee "$OUT/doctor.txt"
doctor_rc=${PIPESTATUS[0]}

echo "== training throughput (base-train on a local corpus, d12 and d20, T=2048)"
export NANOCHAT_BASE_DIR="$OUT/base"
python3 runs/make_local_corpus.py "$OUT/corpus" > /dev/null
./build-gpu/nanochat tok-train --data "$OUT/corpus" --max-chars 20000000 > "$OUT/tok_train.log" 2>&1
for depth in 12 20; do
  ./build-gpu/nanochat base-train --data "$OUT/corpus" --depth $depth --device-batch-size 16 \
    --total-batch-size 524288 --num-iterations 25 --eval-every -1 --sample-every -1 --core-metric-every -1 \
    --model-tag "gpu_d$depth" > "$OUT/train_d$depth.log" 2>&1
  echo "d$depth: exit $?; $(grep '^.*step 0002[0-4]' "$OUT/train_d$depth.log" | tail -1 | grep -o 'tok/sec: [0-9,]* | bf16_mfu: [0-9.]*')"
done

echo "== summary"
printf "%-28s %s\n" "check" "result"
printf "%-28s %s\n" "ctest (CPU + CUDA)" "$([ "$tests_rc" = 0 ] && echo pass || echo FAIL)"
printf "%-28s %s\n" "doctor (cuda if present)" "$([ "$doctor_rc" = 0 ] && echo pass || echo FAIL)"
printf "%-28s %s\n" "compute dtype" "$(grep -o 'compute dtype [a-z0-9]*' "$OUT/doctor.txt" | head -1)"
[ "$tests_rc" = 0 ] && [ "$doctor_rc" = 0 ]
