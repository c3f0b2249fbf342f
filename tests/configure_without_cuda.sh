#!/usr/bin/env bash
# Configures nanochat as a machine without the CUDA toolkit would, with the same CUDA torch
# wheel: the toolkit's directories hidden behind an empty bind mount in a private mount
# namespace (root only; exit 77, skipped, elsewhere). Configure must pass, say that the CUDA
# kernels are left out, and compile no .cu file.
#   configure_without_cuda.sh SOURCE_DIR TORCH_CMAKE_PREFIX OUT_DIR
set -euo pipefail
src=$1 prefix=$2 out=$3
if [ "$(id -u)" != 0 ] || ! unshare -m true 2>/dev/null; then
  echo "skipped: hiding the CUDA toolkit needs root for a private mount namespace"
  exit 77
fi
empty=$(mktemp -d)
rm -rf "$out"
# shellcheck disable=SC2016
unshare -m bash -c '
  set -e
  for d in /usr/local/cuda /usr/local/cuda-*; do [ -d "$d" ] && mount --bind "$1" "$(readlink -f "$d")"; done
  if nvcc --version >/dev/null 2>&1; then echo "nvcc still runs: the toolkit is not hidden"; exit 1; fi
  cmake -S "$2" -B "$3" -G Ninja -DCMAKE_PREFIX_PATH="$4" -DNANOCHAT_BUILD_TESTS=OFF -DNANOCHAT_BUILD_BENCH=OFF
' hide "$empty" "$src" "$out" "$prefix" > "$out.log" 2>&1 || { cat "$out.log"; exit 1; }
rmdir "$empty"
grep -q "CUDA ON, CUDA kernels OFF" "$out.log" || { cat "$out.log"; echo "expected 'CUDA ON, CUDA kernels OFF'"; exit 1; }
if grep -q '\.cu\.o:' "$out/build.ninja"; then echo "a .cu file would be compiled without nvcc"; exit 1; fi
echo "configured without the CUDA toolkit: the CUDA kernels are left out"
