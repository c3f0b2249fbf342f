#!/usr/bin/env bash
# The one prepared script for a lent GPU machine (one H200, 16 cores, PyTorch 2.11+cu130, no
# apt, no internet). Prepare here first: bash bench/gpu/prepare.sh [upstream checkout], then
# run it there with carry [".deps", ".upstream"] and a timeout of about 420 s:
#   UPSTREAM=.upstream bash bench/gpu/run.sh
#
# Binaries: prepare.sh builds the five this script runs (nanochat, bench_kernels, test_kernels,
# test_gpt, test_dataloader) here, against the same torch wheel, and carries them in
# .deps/prebuilt with the Debian libraries they load. They are used when they start there;
# else the script builds its own from the carried headers, libraries and pkg-config files (a
# few minutes on 16 cores).
#
# Performance first, then the CUDA tests, as the issue orders them: GPU and SDPA backends;
# per-op forward+backward times of the fused ops against their references (bench_kernels);
# base-train tok/s, MFU and peak memory at d20 and d12 for bf16 and FP8, window patterns L and
# SSSL, most wanted first; with UPSTREAM=<a Python nanochat checkout> that checkout's model +
# optimizer under torch.compile on the same shapes (bench/gpu/upstream_step.py, window pattern
# L: FA3 cannot be downloaded there) and our ratio against it; then the CUDA tests of the fused
# kernels, FP8, the flash windows and the data loader's staging.
#
# Budget: 6 minutes in all. Every stage gets min(its cap, what is left before the deadline,
# less the time kept for the tests) and is skipped, saying so, when too little is left.
# Checkpoints, the corpus and the logs stay under /tmp; $OUT gets logs.tar.gz and summary.json.
# The last line is one JSON object holding every figure printed above it.
set -uo pipefail
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

t0=$(date +%s)
DEADLINE=$((t0 + 345))  # 6 minutes less 15 s for the summary
KEEP_FOR_TESTS=50       # seconds the performance stages leave to the CUDA tests
# seconds a stage may take: its cap, or what is left before the deadline (less $2 kept for
# later stages) if that is less; at least 1 (`timeout 0` would mean no limit)
budget() { local left=$((DEADLINE - $(date +%s) - ${2:-0})); echo $(( $1 < left ? $1 : (left > 1 ? left : 1) )); }
# a stage's timeout: TERM at its budget, KILL 10 s later (base-train saves on TERM)
limit() { timeout -k 10 "$@"; }

echo "== binaries"
build_s=0
if [ -x "$DEPS/prebuilt/nanochat" ] && with_our_libs "$DEPS/prebuilt/nanochat" --version > "$LOG/prebuilt.log" 2>&1; then
  echo "prebuilt by prepare.sh: $(tail -1 "$LOG/prebuilt.log")"
  for b in $BINARIES; do ln -s "$DEPS/prebuilt/$(basename "$b")" "$WORK/bin/"; done
  binaries=prebuilt
else
  echo "the prebuilt ones did not start ($(tail -1 "$LOG/prebuilt.log" 2>/dev/null)): building"
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
  limit 120 cmake -S . -B build-gpu -G Ninja -DCMAKE_PREFIX_PATH="$PREFIX;$DEPS" -DGLOO_INCLUDE_DIR="$DEPS/include" \
    -DNANOCHAT_PYTHON="$(command -v $PY)" -DOPENSSL_ROOT_DIR="$DEPS" -DZLIB_ROOT="$DEPS" -DCMAKE_LIBRARY_PATH="$DEPS/$ML" \
    > "$LOG/configure.log" 2>&1 || { tail -40 "$LOG/configure.log"; echo '{"failed": "configure"}'; exit 1; }
  limit 300 cmake --build build-gpu -j "$(nproc)" \
    --target $(for b in $BINARIES; do basename "$b"; done) > "$LOG/build.log" 2>&1 ||
    { tail -40 "$LOG/build.log"; echo '{"failed": "build"}'; exit 1; }
  for b in $BINARIES; do ln -s "$PWD/build-gpu/$b" "$WORK/bin/"; done
  binaries=built
  build_s=$(( $(date +%s) - t0 ))
  echo "built in $build_s s"
fi
BIN="$WORK/bin"

echo "== GPU and SDPA backends"
with_our_libs "$BIN/nanochat" --version | tee "$LOG/version.txt"
with_our_libs "$BIN/nanochat" doctor 2>&1 | tee "$LOG/doctor.txt"
doctor_rc=${PIPESTATUS[0]}

echo "== fused kernels vs ATen reference (forward+backward per op)"
b=$(budget 50 "$KEEP_FOR_TESTS")
if [ "$b" -lt 10 ]; then
  kernels_rc=124
  echo "skipped: out of time" | tee "$LOG/bench_kernels.txt"
else
  with_our_libs limit "$b" "$BIN/bench_kernels" --device cuda --dtype bfloat16 --depth 20 --batch 16 --seq-len 2048 \
    > "$LOG/bench_kernels.txt" 2>&1
  kernels_rc=$?
  cat "$LOG/bench_kernels.txt"
fi

echo "== training throughput: base-train on a local corpus, T=2048, 10 steps (tok/s of the last)"
export NANOCHAT_BASE_DIR="$WORK/base"
limit "$(budget 20 "$KEEP_FOR_TESTS")" $PY runs/make_local_corpus.py "$WORK/corpus" > "$LOG/corpus.log" 2>&1
with_our_libs limit "$(budget 30 "$KEEP_FOR_TESTS")" "$BIN/nanochat" tok-train --data "$WORK/corpus" --max-chars 20000000 \
  > "$LOG/tok_train.log" 2>&1 || echo "tok-train failed: $(tail -1 "$LOG/tok_train.log")"
# base-train NAME DEPTH PATTERN [FLAGS...]: 10 steps of 262144 tokens; the L runs at
# upstream_step.py's batch 16 for the ratio, the others at the default batch (the memory
# estimate picks it, and says so)
ours() {
  local name=$1 depth=$2 pattern=$3 b
  shift 3
  echo "$name" >> "$LOG/runs"  # the summary's list, skipped runs too
  b=$(budget 60 "$KEEP_FOR_TESTS")
  [ "$b" -lt 20 ] && { echo "$name: skipped, out of time"; return; }
  with_our_libs limit "$b" "$BIN/nanochat" base-train --data "$WORK/corpus" --depth "$depth" --window-pattern "$pattern" "$@" \
    --total-batch-size 262144 --num-iterations 10 --eval-every -1 --sample-every -1 --core-metric-every -1 \
    --model-tag "gpu_$name" > "$LOG/train_$name.log" 2>&1
  echo "$?" > "$LOG/train_$name.rc"
  find "$NANOCHAT_BASE_DIR" -mindepth 1 -maxdepth 1 ! -name tokenizer -exec rm -rf {} +  # its checkpoint: GBs
  echo "$name: exit $(cat "$LOG/train_$name.rc"); $(grep -o 'tok/sec: [0-9,]* | bf16_mfu: [0-9.]*' "$LOG/train_$name.log" |
    tail -1); $(grep -o 'peak memory: [0-9.]* MiB' "$LOG/train_$name.log"); $(grep -o 'device batch size [0-9]*' "$LOG/train_$name.log")"
  grep 'attention, window' "$LOG/train_$name.log" | sed 's/^.*attention/  attention/'
}
# UPSTREAM's model + optimizer under torch.compile, window pattern L, random tokens, batch 16
upstream() {
  local depth=$1 b
  [ -n "${UPSTREAM:-}" ] || return 0
  b=$(budget 120 "$KEEP_FOR_TESTS")
  [ "$b" -lt 40 ] && { echo "upstream d$depth: skipped, out of time"; return; }
  limit "$b" $PY bench/gpu/upstream_step.py "$UPSTREAM" --depth "$depth" --batch 16 --seq-len 2048 \
    --steps 10 --warmup 3 > "$LOG/upstream_d$depth.json" 2> "$LOG/upstream_d$depth.log"
  echo "upstream d$depth ($UPSTREAM, torch.compile): $(tail -1 "$LOG/upstream_d$depth.json")"
}
# most wanted first: what is left out when time runs short says so
ours d20_SSSL 20 SSSL
ours d20_L 20 L --device-batch-size 16
upstream 20
ours d20_SSSL_fp8 20 SSSL --fp8
ours d12_L 12 L --device-batch-size 16
upstream 12
ours d12_SSSL 12 SSSL

echo "== CUDA tests: the fused kernels (Muon's too), FP8, the flash windows, the loader's staging"
tests_rc=0
for t in "test_kernels *Cuda*" "test_gpt AttentionCuda.*" "test_dataloader *Cuda*"; do
  read -r bin filter <<< "$t"
  b=$(budget 60)
  if [ "$b" -lt 10 ]; then
    echo "$bin: skipped, out of time" | tee -a "$LOG/tests.log"
    tests_rc=124
    continue
  fi
  with_our_libs limit "$b" "$BIN/$bin" --gtest_filter="$filter" > "$LOG/$bin.log" 2>&1
  rc=$?
  cat "$LOG/$bin.log" >> "$LOG/tests.log"
  grep -E '^\[ *(FAILED|SKIPPED|PASSED) ' "$LOG/$bin.log"
  [ "$rc" = 0 ] || { tests_rc=$rc; echo "$bin: exit $rc; its last lines:"; tail -25 "$LOG/$bin.log"; }
done

# the summary table, then one JSON line with every figure above: parsed back from the logs,
# nothing estimated
LOG="$LOG" OUT="$OUT" BIN_SOURCE="$binaries" BUILD_S="$build_s" TESTS_RC="$tests_rc" DOCTOR_RC="$doctor_rc" \
  KERNELS_RC="$kernels_rc" $PY - <<'PY'
import json, os, re
log = os.environ["LOG"]
def read(name):
    try:
        with open(os.path.join(log, name)) as f: return f.read()
    except OSError: return ""
r = {"binaries": os.environ["BIN_SOURCE"], "build_s": int(os.environ["BUILD_S"]), "tests_rc": int(os.environ["TESTS_RC"]),
     "doctor_rc": int(os.environ["DOCTOR_RC"]), "bench_kernels_rc": int(os.environ["KERNELS_RC"])}
tests = read("tests.log")
r["tests_passed"] = sum(int(n) for n in re.findall(r"^\[  PASSED  \] (\d+) test", tests, re.M))
r["tests_failed"] = sorted(set(re.findall(r"^\[  FAILED  \] (\w+\.\w+)", tests, re.M)))
r["tests_skipped"] = sorted(set(re.findall(r"^\[  SKIPPED \] (\w+\.\w+)", tests, re.M)))
m = re.search(r"compute dtype ([a-z0-9]+)", read("doctor.txt"))
if m: r["compute_dtype"] = m[1]
r["version"] = read("version.txt").strip()
for name in read("runs").split():
    text, rc = read(f"train_{name}.log"), read(f"train_{name}.rc").strip()
    rates = re.findall(r"tok/sec: ([0-9,]+) \| bf16_mfu: ([0-9.]+)", text)
    mem = re.search(r"peak memory: ([0-9.]+) MiB", text)
    dbs = re.search(r"device batch size (\d+)", text)
    r[name] = {"exit": int(rc) if rc else None, "tok_per_sec": int(rates[-1][0].replace(",", "")) if rates else None,
               "bf16_mfu": float(rates[-1][1]) if rates else None, "peak_mem_mib": float(mem[1]) if mem else None,
               "device_batch_size": int(dbs[1]) if dbs else None,
               "attention": re.findall(r"attention, window (\d+): (.*)", text)}
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
def outcome(rc, ok): return ok if rc == 0 else f"FAIL (exit {rc})"
print("== summary")
for key, value in [("binaries", r["binaries"]),
                   ("CUDA tests", f"{outcome(r['tests_rc'], 'pass')}, {r['tests_passed']} passed, "
                                  f"{len(r['tests_skipped'])} skipped"),
                   ("doctor", outcome(r["doctor_rc"], "pass")), ("compute dtype", r.get("compute_dtype", "?")),
                   ("bench_kernels", outcome(r["bench_kernels_rc"], "ran"))]:
    print(f"{key:<28} {value}")
with open(os.path.join(os.environ["OUT"], "summary.json"), "w") as f: json.dump(r, f, indent=1)
print(json.dumps(r))
PY
tar -czf "$OUT/logs.tar.gz" -C "$WORK" logs 2> /dev/null
[ "$tests_rc" = 0 ] && [ "$doctor_rc" = 0 ]
