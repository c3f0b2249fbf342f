#!/usr/bin/env bash
# Configures nanochat with a CUDA toolkit of another major than LibTorch's (a fake nvcc that says
# "release 12.8" against the CUDA 13 wheel, or 13.0 against a CUDA 12 one, through CUDACXX):
# CMake must say in one line that it does not use it, and leave the CUDA kernels out.
# Skipped (77) with a LibTorch without CUDA.
#   configure_with_other_cuda.sh SOURCE_DIR TORCH_CMAKE_PREFIX OUT_DIR
set -euo pipefail
src=$1 prefix=$2 out=$3
torch_cuda=$(sed -n "s/^cuda.*'\([0-9]*\)\.[0-9]*'.*/\1/p" "$prefix/../../version.py" 2>/dev/null || true)
if [ -z "$torch_cuda" ]; then echo "skipped: this LibTorch has no CUDA (or is not a wheel)"; exit 77; fi
other=$([ "$torch_cuda" = 12 ] && echo "13.0" || echo "12.8")
rm -rf "$out"
mkdir -p "$out.bin"
printf '#!/bin/sh\necho "nvcc: NVIDIA (R) Cuda compiler driver"\necho "Cuda compilation tools, release %s, V%s.93"\n' \
  "$other" "$other" > "$out.bin/nvcc"
chmod +x "$out.bin/nvcc"
CUDACXX="$out.bin/nvcc" cmake -S "$src" -B "$out" -G Ninja -DCMAKE_PREFIX_PATH="$prefix" -DNANOCHAT_BUILD_TESTS=OFF \
  -DNANOCHAT_BUILD_BENCH=OFF > "$out.log" 2>&1 || { cat "$out.log"; exit 1; }
grep -q "nanochat: $out.bin/nvcc is CUDA $other, LibTorch's is CUDA $torch_cuda\.[0-9]*: not used" "$out.log" ||
  { cat "$out.log"; echo "expected the line saying the CUDA $other nvcc is not used"; exit 1; }
grep -q "CUDA ON, CUDA kernels OFF" "$out.log" || { cat "$out.log"; echo "expected 'CUDA ON, CUDA kernels OFF'"; exit 1; }
if grep -q '\.cu\.o:' "$out/build.ninja"; then echo "a .cu file would be compiled with the CUDA $other nvcc"; exit 1; fi
echo "configured with a CUDA $other nvcc against LibTorch's CUDA $torch_cuda: not used, the CUDA kernels are left out"
