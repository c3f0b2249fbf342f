#!/usr/bin/env bash
# Installs everything nanochat needs and builds it into build/. Safe to run again: each
# step is skipped when its result is already there.
#   1. system packages (Debian 12 / Ubuntu) with apt
#   2. .venv with the pinned torch wheel (its LibTorch is what we link) and test references
#   3. cmake configure + build (Release, Ninja, LibTorch found via torch.utils.cmake_prefix_path)
# Environment knobs:
#   NANOCHAT_CMAKE_ARGS   extra cmake arguments (e.g. -DNANOCHAT_SANITIZE=ON)
#   NANOCHAT_BUILD_DIR    build directory (default build)
#   NANOCHAT_BUILD_TARGETS  the targets to build, space-separated (default: all; runcpu.sh,
#                         speedrun.sh and miniseries.sh pass nanochat, test.sh all)
#   NANOCHAT_TORCH_INDEX  a pip index for torch (e.g. https://download.pytorch.org/whl/cpu)
#   LIBTORCH_DIR          use an unpacked LibTorch zip instead of the wheel's LibTorch
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR="${NANOCHAT_BUILD_DIR:-build}"

log() { echo "[setup] $*"; }

# ---- 1. system packages -------------------------------------------------------------
APT_PACKAGES=(cmake g++ ninja-build pkg-config git python3 python3-venv
  nlohmann-json3-dev libcli11-dev libcpp-httplib-dev libssl-dev libgtest-dev
  libpcre2-dev libzstd-dev libsnappy-dev zlib1g-dev libgloo-dev libzip-dev libyaml-cpp-dev libseccomp-dev
  chromium wamerican)  # chromium: browser tests; wamerican: SpellingBee's word list offline
missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  if ! command -v apt-get >/dev/null; then
    echo "[setup] error: missing packages ${missing[*]} and no apt-get; install them by hand" >&2
    exit 1
  fi
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  log "installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
  log "system packages present"
fi

# ---- 2. python venv with the torch wheel ----------------------------------------------
PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  log "creating .venv"
  "$PYTHON" -m venv .venv
fi
if ! .venv/bin/python - <<'PY' 2>/dev/null
import sys, importlib.metadata as md
for line in open("runs/requirements.txt"):
    line = line.split("#")[0].strip()
    if not line: continue
    name, want = line.split("==")
    if md.version(name).split("+")[0] != want: sys.exit(1)
PY
then
  log "installing python packages (runs/requirements.txt)"
  INDEX_ARGS=()
  [ -n "${NANOCHAT_TORCH_INDEX:-}" ] && INDEX_ARGS=(--extra-index-url "$NANOCHAT_TORCH_INDEX")
  .venv/bin/pip install -q --disable-pip-version-check "${INDEX_ARGS[@]}" -r runs/requirements.txt
else
  log "python packages present"
fi

# ---- 3. configure and build ------------------------------------------------------------
if [ -n "${LIBTORCH_DIR:-}" ]; then
  PREFIX="$LIBTORCH_DIR"
else
  PREFIX="$(.venv/bin/python -c 'import torch; print(torch.utils.cmake_prefix_path)')"
fi
# the CUDA toolkit (for the CUDA/NCCL code paths) where it is usually installed
for d in /usr/local/cuda/bin /usr/local/cuda-*/bin; do
  if [ -x "$d/nvcc" ]; then export PATH="$PATH:$d"; break; fi
done
# without nvcc the build still works with the CUDA wheel: the fused ops' CUDA kernels are left
# out (third_party/dependencies.cmake says so) and on a GPU the ops run their ATen references
command -v nvcc >/dev/null || log "no nvcc (CUDA toolkit): building without the CUDA kernels of the fused ops"
log "configuring $BUILD_DIR (LibTorch from $PREFIX)"
# shellcheck disable=SC2086
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_PREFIX_PATH="$PREFIX" ${NANOCHAT_CMAKE_ARGS:-} \
  > "$BUILD_DIR.configure.log" 2>&1 || { cat "$BUILD_DIR.configure.log" >&2; exit 1; }
log "building (log: $BUILD_DIR.build.log)"
# each LibTorch translation unit takes ~1.5 GB of RAM: cap the jobs by memory too
mem_gb=$(awk '/MemAvailable/ {print int($2/1048576)}' /proc/meminfo)
jobs=$(nproc)
[ "$jobs" -gt $((mem_gb / 2 > 0 ? mem_gb / 2 : 1)) ] && jobs=$((mem_gb / 2 > 0 ? mem_gb / 2 : 1))
# shellcheck disable=SC2086
cmake --build "$BUILD_DIR" -j "$jobs" ${NANOCHAT_BUILD_TARGETS:+--target $NANOCHAT_BUILD_TARGETS} > "$BUILD_DIR.build.log" 2>&1 || { tail -50 "$BUILD_DIR.build.log" >&2; exit 1; }
log "done: $BUILD_DIR/nanochat"
