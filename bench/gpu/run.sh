#!/usr/bin/env bash
# The one prepared script for a lent GPU machine. Builds nanochat against that machine's
# own torch (LibTorch 2.11+cu130), runs every test (the CUDA ones included), then prints a
# table of GPU checks and benchmarks. Prepare here first: bash bench/gpu/prepare.sh, then
# run with carry [".deps"]:  bash bench/gpu/run.sh
# With UPSTREAM=<a Python nanochat checkout> (carried too) it also times that checkout's own
# model + optimizer under torch.compile (bench/gpu/upstream_step.py, window pattern L: FA3
# cannot be downloaded there) and prints our base-train's tok/s as a ratio against it.
# Tests that compare against Python references need rustbpe and duckdb there too (carry them
# as wheels, see the device tool's README); the GPU machine's python3 has the others.
# Budget: 6 minutes in all. The build is not capped (nothing runs without it); every later
# stage gets min(its cap, what is left before the deadline) and is skipped, saying so, when
# nothing is left. The last line is one JSON object holding every figure printed above it.
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

t0=$(date +%s)
DEADLINE=$((t0 + 345))  # 6 minutes less 15 s for the summary
# seconds a stage may take: its cap, or what is left before the deadline if that is less
# (at least 1: `timeout 0` would mean no limit)
budget() { local left=$((DEADLINE - $(date +%s))); echo $(( $1 < left ? $1 : (left > 1 ? left : 1) )); }

echo "== build"
cmake -S . -B build-gpu -G Ninja -DCMAKE_PREFIX_PATH="$PREFIX;$DEPS" -DGLOO_INCLUDE_DIR="$DEPS/include" \
  -DNANOCHAT_PYTHON="$(command -v $PY)" -DOPENSSL_ROOT_DIR="$DEPS" -DZLIB_ROOT="$DEPS" -DCMAKE_LIBRARY_PATH="$DEPS/$ML" \
  > "$OUT/configure.log" 2>&1 || { tail -40 "$OUT/configure.log"; echo '{"failed": "configure"}'; exit 1; }
# only what is measured: the binary, the kernels bench and the tests of the fused ops and attention
cmake --build build-gpu -j "$(nproc)" --target nanochat bench_kernels test_kernels test_gpt test_grad_scaler \
  > "$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; echo '{"failed": "build"}'; exit 1; }
build_s=$(( $(date +%s) - t0 ))
echo "built in $build_s s"

b=$(budget 90)
echo "== CUDA tests of the fused kernels (Muon's too), FP8, flash windows, the model (${b} s)"
ctest --test-dir build-gpu --output-on-failure -j 8 -R 'Kernels|LinearSoftcap|MlpRelu|RotaryNorm|ResidualNorm|Fp8|Attention|Gpt|GradScaler' \
  --stop-time "$(date -d "+$b sec" +%H:%M:%S)" 2>&1 |
  tee "$OUT/ctest.log" | tail -15
tests_rc=${PIPESTATUS[0]}

echo "== GPU checks"
./build-gpu/nanochat --version | tee "$OUT/version.txt"
./build-gpu/nanochat doctor 2>&1 | tee "$OUT/doctor.txt"
doctor_rc=${PIPESTATUS[0]}

echo "== fused kernels vs ATen reference (forward+backward per op)"
b=$(budget 60)
if [ "$b" -lt 5 ]; then
  kernels_rc=124
  echo "skipped: out of time" | tee "$OUT/bench_kernels.txt"
elif [ -x build-gpu/bench_kernels ]; then
  timeout "$b" ./build-gpu/bench_kernels --device cuda --dtype bfloat16 --depth 20 --batch 16 --seq-len 2048 \
    > "$OUT/bench_kernels.txt" 2>&1
  kernels_rc=$?
  cat "$OUT/bench_kernels.txt"
else
  kernels_rc=127
  echo "build-gpu/bench_kernels not built" | tee "$OUT/bench_kernels.txt"
fi

echo "== training throughput: base-train on a local corpus, T=2048, 12 steps (tok/s of the last)"
export NANOCHAT_BASE_DIR="$OUT/base"
python3 runs/make_local_corpus.py "$OUT/corpus" > /dev/null
timeout "$(budget 60)" ./build-gpu/nanochat tok-train --data "$OUT/corpus" --max-chars 20000000 > "$OUT/tok_train.log" 2>&1
# name depth pattern extra-flags; the L runs at upstream_step.py's batch 16 for the ratio, the
# others at the default batch (the memory estimate picks it, and says so)
runs="d12_L 12 L --device-batch-size 16|d12_SSSL 12 SSSL|d20_SSSL 20 SSSL|d20_SSSL_fp8 20 SSSL --fp8|d20_L 20 L --device-batch-size 16"
IFS='|' read -ra RUNS <<< "$runs"
for r in "${RUNS[@]}"; do
  read -r name depth pattern extra <<< "$r"
  b=$(budget 75)
  [ "$b" -lt 15 ] && { echo "$name: skipped, out of time"; continue; }
  # shellcheck disable=SC2086
  timeout "$b" ./build-gpu/nanochat base-train --data "$OUT/corpus" --depth "$depth" --window-pattern "$pattern" $extra \
    --total-batch-size 262144 --num-iterations 12 --eval-every -1 --sample-every -1 --core-metric-every -1 --model-tag "gpu_$name" \
    > "$OUT/train_$name.log" 2>&1
  echo "$?" > "$OUT/train_$name.rc"
  echo "$name: exit $(cat "$OUT/train_$name.rc"); $(grep -o 'step 00011.*tok/sec: [0-9,]* | bf16_mfu: [0-9.]*' "$OUT/train_$name.log" |
    grep -o 'tok/sec.*'); $(grep -o 'peak memory: [0-9.]* MiB' "$OUT/train_$name.log"); $(grep -o 'device batch size [0-9]*' "$OUT/train_$name.log")"
  grep 'attention, window' "$OUT/train_$name.log" | sed 's/^.*attention/  attention/'
done

if [ -n "${UPSTREAM:-}" ]; then
  echo "== upstream ($UPSTREAM) under torch.compile, window pattern L, random tokens, batch 16"
  for depth in 12 20; do
    b=$(budget 120)
    [ "$b" -lt 30 ] && { echo "upstream d$depth: skipped, out of time"; continue; }
    timeout "$b" python3 bench/gpu/upstream_step.py "$UPSTREAM" --depth "$depth" --batch 16 --seq-len 2048 \
      --steps 10 --warmup 3 > "$OUT/upstream_d$depth.json" 2> "$OUT/upstream_d$depth.log"
    echo "upstream d$depth: $(tail -1 "$OUT/upstream_d$depth.json")"
  done
fi

echo "== summary"
printf "%-28s %s\n" "check" "result"
printf "%-28s %s\n" "ctest (CPU + CUDA)" "$([ "$tests_rc" = 0 ] && echo pass || echo FAIL)"
printf "%-28s %s\n" "doctor (cuda if present)" "$([ "$doctor_rc" = 0 ] && echo pass || echo FAIL)"
printf "%-28s %s\n" "compute dtype" "$(grep -o 'compute dtype [a-z0-9]*' "$OUT/doctor.txt" | head -1)"
printf "%-28s %s\n" "bench_kernels" "$([ "$kernels_rc" = 0 ] && echo ran || echo "FAIL (exit $kernels_rc)")"

# one JSON line with every figure above: parsed back from the logs, nothing estimated
OUT="$OUT" BUILD_S="$build_s" TESTS_RC="$tests_rc" DOCTOR_RC="$doctor_rc" KERNELS_RC="$kernels_rc" python3 - <<'PY'
import json, os, re
out = os.environ["OUT"]
def read(name):
    try:
        with open(os.path.join(out, name)) as f: return f.read()
    except OSError: return ""
r = {"build_s": int(os.environ["BUILD_S"]), "tests_rc": int(os.environ["TESTS_RC"]),
     "doctor_rc": int(os.environ["DOCTOR_RC"]), "bench_kernels_rc": int(os.environ["KERNELS_RC"])}
m = re.search(r"(\d+)% tests passed, (\d+) tests failed out of (\d+)", read("ctest.log"))
if m: r.update(tests_passed_pct=int(m[1]), tests_failed=int(m[2]), tests_total=int(m[3]))
m = re.search(r"compute dtype ([a-z0-9]+)", read("doctor.txt"))
if m: r["compute_dtype"] = m[1]
r["version"] = read("version.txt").strip()
for name in ("d12_L", "d12_SSSL", "d20_SSSL", "d20_SSSL_fp8", "d20_L"):
    log, rc = read(f"train_{name}.log"), read(f"train_{name}.rc").strip()
    rates = re.findall(r"step 00011.*tok/sec: ([0-9,]+) \| bf16_mfu: ([0-9.]+)", log)
    mem = re.search(r"peak memory: ([0-9.]+) MiB", log)
    dbs = re.search(r"device batch size (\d+)", log)
    r[name] = {"exit": int(rc) if rc else None, "tok_per_sec": int(rates[-1][0].replace(",", "")) if rates else None,
               "bf16_mfu": float(rates[-1][1]) if rates else None, "peak_mem_mib": float(mem[1]) if mem else None,
               "device_batch_size": int(dbs[1]) if dbs else None,
               "attention": re.findall(r"attention, window (\d+): (.*)", log)}
for d in (12, 20):
    try: up = json.loads(read(f"upstream_d{d}.json").strip().splitlines()[-1])
    except (IndexError, ValueError): continue
    r[f"upstream_d{d}"] = up
    ours = r[f"d{d}_L"]["tok_per_sec"]
    if ours and up.get("tok_per_sec"): r[f"d{d}_L_over_upstream"] = ours / up["tok_per_sec"]
lines = [l for l in read("bench_kernels.txt").splitlines() if l.strip()]
try: last = json.loads(lines[-1])  # a bench that ends with its own JSON line
except (IndexError, ValueError): last = None
r["bench_kernels"] = last if isinstance(last, dict) else lines  # else its table, verbatim
print(json.dumps(r))
PY
[ "$tests_rc" = 0 ] && [ "$doctor_rc" = 0 ]
