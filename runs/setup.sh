#!/usr/bin/env bash
# Installs everything nanochat needs and builds it into build/. Safe to run again: each
# step is skipped when its result is already there.
#   1. system packages (Debian 12 / Ubuntu 22.04, 24.04) with apt: what building and running need
#      (runs/test.sh installs what only the tests need)
#   2. .venv with the pinned torch wheel built for a CUDA this machine's driver runs (its LibTorch
#      is what we link); its CUDA libraries install while the library compiles
#   3. cmake configure + build (Release, Ninja, LibTorch found via torch.utils.cmake_prefix_path)
# `bash runs/setup.sh --dry-run` (or NANOCHAT_SETUP_DRY_RUN=1) prints what it would install and
# stops before the build.
# Environment knobs:
#   NANOCHAT_CMAKE_ARGS   extra cmake arguments (e.g. -DNANOCHAT_SANITIZE=ON)
#   NANOCHAT_BUILD_DIR    build directory (default build)
#   NANOCHAT_BUILD_TARGETS  the targets to build, space-separated (default: all; runcpu.sh,
#                         speedrun.sh and miniseries.sh pass nanochat, test.sh all)
#   NANOCHAT_BUILD_JOBS   parallel compile jobs (default: the cores, fewer when memory is short)
#   NANOCHAT_TORCH_INDEX  the pip index torch comes from (e.g. https://download.pytorch.org/whl/cpu),
#                         in place of the one picked for the driver
#   LIBTORCH_DIR          use an unpacked LibTorch zip instead of the wheel's LibTorch
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR="${NANOCHAT_BUILD_DIR:-build}"
DRY_RUN="${NANOCHAT_SETUP_DRY_RUN:-0}"
[ "${1:-}" = --dry-run ] && DRY_RUN=1

log() { echo "[setup] $*"; }

# ---- 1. system packages ---------------------------------------------------------------
# what building and running need; what only the tests need runs/test.sh installs
BUILD_PACKAGES=(cmake g++ ninja-build pkg-config git python3 python3-venv
  nlohmann-json3-dev libcli11-dev libcpp-httplib-dev libssl-dev
  libpcre2-dev libzstd-dev libsnappy-dev zlib1g-dev libgloo-dev libzip-dev libyaml-cpp-dev libseccomp-dev
  bubblewrap)  # bwrap: the code sandbox (docs/security.md)
# shellcheck source=runs/apt_packages.sh
source runs/apt_packages.sh
apt_install setup 1 "${BUILD_PACKAGES[@]}"

# ---- 2. python venv with the torch wheel for this machine's driver ----------------------
# The torch version is requirements.txt's; its CUDA flavour is the newest the NVIDIA driver
# runs (PyTorch's indexes: cu130 from driver 580, cu128 from 570, cu126 from 525). PyPI's own
# wheel is CUDA 13.0, which a driver before 580 cannot run: LibTorch would then see no GPU.
# No driver (a CPU machine, a laptop): PyPI's wheel. NANOCHAT_TORCH_INDEX overrides the choice.
TORCH_VERSION="$(sed -n 's/^torch==\([^ #]*\).*/\1/p' runs/requirements.txt)"
driver_version() {  # as nanochat's own check (src/common/device_driver.cpp)
  local f="${NANOCHAT_NVIDIA_DRIVER_FILE:-/proc/driver/nvidia/version}" v=""
  [ -r "$f" ] && v="$(head -n 1 "$f" | grep -oE '[[:space:]][0-9]{3,}\.[0-9]+(\.[0-9]+)?[[:space:]]' | head -n 1 | tr -d '[:space:]')"
  if [ -z "$v" ] && command -v nvidia-smi >/dev/null; then
    v="$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -n 1 | tr -d '[:space:]')"
    [[ "$v" =~ ^[0-9]{3,}\.[0-9]+ ]] || v=""
  fi
  echo "$v"
}
DRIVER="$(driver_version)"
TORCH_INDEX="" TORCH_FLAVOUR=""
if [ -n "${NANOCHAT_TORCH_INDEX:-}" ]; then
  TORCH_INDEX="$NANOCHAT_TORCH_INDEX"
  TORCH_FLAVOUR="$(basename "$TORCH_INDEX")"
  [[ "$TORCH_FLAVOUR" =~ ^(cpu|cu[0-9]+)$ ]] || TORCH_FLAVOUR=""
  log "torch $TORCH_VERSION from $TORCH_INDEX (NANOCHAT_TORCH_INDEX)"
elif [ -z "$DRIVER" ]; then
  log "torch $TORCH_VERSION from PyPI (no NVIDIA driver here)"
else
  major="${DRIVER%%.*}"
  if [ "$major" -ge 580 ]; then TORCH_FLAVOUR=cu130
  elif [ "$major" -ge 570 ]; then TORCH_FLAVOUR=cu128
  elif [ "$major" -ge 525 ]; then TORCH_FLAVOUR=cu126
  else
    echo "[setup] error: NVIDIA driver $DRIVER is older than 525, the oldest a CUDA build of torch $TORCH_VERSION runs on: upgrade it (or NANOCHAT_TORCH_INDEX=https://download.pytorch.org/whl/cpu for a CPU build)" >&2
    exit 1
  fi
  TORCH_INDEX="https://download.pytorch.org/whl/$TORCH_FLAVOUR"
  cuda="${TORCH_FLAVOUR#cu}"
  log "torch $TORCH_VERSION for CUDA ${cuda%?}.${cuda: -1} ($TORCH_FLAVOUR, NVIDIA driver $DRIVER) from $TORCH_INDEX"
fi
PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  if [ "$DRY_RUN" = 1 ]; then log "would run: $PYTHON -m venv .venv"; else log "creating .venv"; "$PYTHON" -m venv .venv; fi
fi
# torch_present: the pinned version, of the flavour wanted (its torch/version.py's cuda, read
# without importing torch), with every package it requires (an install stopped half-way is not
# present)
torch_present() {
  [ -x .venv/bin/python ] || return 1
  .venv/bin/python - "$TORCH_VERSION" "$TORCH_FLAVOUR" <<'PY' 2>/dev/null
import importlib.metadata as md, importlib.util, os, re, sys
want, flavour = sys.argv[1], sys.argv[2]
if md.version("torch").split("+")[0] != want: sys.exit(1)
if flavour:
    src = open(os.path.join(importlib.util.find_spec("torch").submodule_search_locations[0], "version.py")).read()
    cuda = re.search(r"^cuda\b.*?=\s*'?([0-9.]+|None)", src, re.M).group(1)
    have = "cpu" if cuda == "None" else "cu" + cuda.replace(".", "")
    if have != flavour: sys.exit(1)
for req in md.requires("torch") or []:
    if "extra ==" not in req:
        md.version(re.match(r"[A-Za-z0-9_.-]+", req).group(0))  # raises when missing
PY
}
# torch's requirements that compiling against it reads: NCCL's headers, and the CUDA runtime
# that CMake takes from the wheel where there is no CUDA toolkit (the rest, ~3 GB of CUDA
# libraries and triton, only the link and the binary need)
torch_build_requirements() {
  .venv/bin/python - <<'PY'
import importlib.metadata as md, re
for req in md.requires("torch") or []:
    spec = re.sub(r"\s+", "", req.split(";")[0])
    name = re.match(r"[A-Za-z0-9_.-]+", spec).group(0).lower()
    if "extra ==" in req: continue
    if name.startswith(("nvidia-nccl", "nvidia-cuda-runtime")): print(spec)
    elif name == "cuda-toolkit": print(re.sub(r"\[[^]]*\]", "[cudart]", spec))
PY
}
# Installing torch is mostly downloading (~3 GB: about 4 min at 15 MB/s): torch itself and what
# compiling reads come first, the rest installs while the library compiles (PIP_PID, waited for
# before the first link).
PIP_PID=""
if torch_present; then
  log "torch present"
else
  # --no-compile: Python compiles a module's bytecode when it is first imported; pip would
  # compile all of torch's and sympy's first, seconds of the CPU the build needs
  TORCH_ARGS=(--disable-pip-version-check --no-compile --no-deps "torch==$TORCH_VERSION")
  INDEX_ARGS=()
  [ -n "$TORCH_INDEX" ] && INDEX_ARGS=(--index-url "$TORCH_INDEX")
  # another flavour of the same version counts as installed for pip: replace it
  [ -n "$TORCH_INDEX" ] && TORCH_ARGS+=("${INDEX_ARGS[@]}" --force-reinstall)
  if [ "$DRY_RUN" = 1 ]; then
    log "would run: .venv/bin/pip install ${TORCH_ARGS[*]}"
    log "would run, while the library compiles: .venv/bin/pip install --disable-pip-version-check --no-compile torch==$TORCH_VERSION ${INDEX_ARGS[*]}"
  else
    log "installing torch (a few GB): torch and what compiling reads first (log: $BUILD_DIR.pip.log)"
    # (pip warns there that torch's other requirements are missing: they come next)
    pip_failed() { tail -20 "$BUILD_DIR.pip.log" >&2; echo "[setup] error: pip install torch==$TORCH_VERSION failed (log: $BUILD_DIR.pip.log)" >&2; exit 1; }
    .venv/bin/pip install -q "${TORCH_ARGS[@]}" > "$BUILD_DIR.pip.log" 2>&1 || pip_failed
    mapfile -t early < <(torch_build_requirements)
    [ ${#early[@]} -eq 0 ] || .venv/bin/pip install -q --disable-pip-version-check --no-compile "${INDEX_ARGS[@]}" "${early[@]}" \
      >> "$BUILD_DIR.pip.log" 2>&1 || pip_failed
    log "installing the rest of torch's requirements while the library compiles"
    .venv/bin/pip install -q --disable-pip-version-check --no-compile "torch==$TORCH_VERSION" "${INDEX_ARGS[@]}" \
      >> "$BUILD_DIR.pip.log" 2>&1 &
    PIP_PID=$!
    trap '[ -z "$PIP_PID" ] || kill "$PIP_PID" 2>/dev/null' EXIT  # a failed build stops it
  fi
fi
if [ "$DRY_RUN" = 1 ]; then
  log "dry run: stopping before the build"
  exit 0
fi

# ---- 3. configure and build ------------------------------------------------------------
if [ -n "${LIBTORCH_DIR:-}" ]; then
  PREFIX="$LIBTORCH_DIR"
else
  # torch.utils.cmake_prefix_path, found without importing torch (its CUDA libraries may still
  # be installing, and an import takes seconds)
  TORCH_DIR="$(.venv/bin/python -c 'import importlib.util; print(importlib.util.find_spec("torch").submodule_search_locations[0])')"
  PREFIX="$TORCH_DIR/share/cmake"
fi
# the CUDA toolkit for the .cu files: one of the torch wheel's CUDA major (one CUDA runtime in
# the process); CMake leaves out a toolkit of another major with one line (dependencies.cmake)
WHEEL_CUDA=""
[ -n "${TORCH_DIR:-}" ] && WHEEL_CUDA="$(sed -n "s/^cuda[^=]*= *'\([0-9.]*\)'.*/\1/p" "$TORCH_DIR/version.py")"
if [ -n "$WHEEL_CUDA" ] && [ -z "${CUDACXX:-}" ]; then
  for d in /usr/local/cuda/bin "/usr/local/cuda-${WHEEL_CUDA%%.*}".*/bin; do
    if [ -x "$d/nvcc" ] && "$d/nvcc" --version | grep "release ${WHEEL_CUDA%%.*}\." >/dev/null; then export CUDACXX="$d/nvcc"; break; fi
  done
fi
# without nvcc the build still works with the CUDA wheel: the fused ops' CUDA kernels are left
# out (third_party/dependencies.cmake says so) and on a GPU the ops run their ATen references
[ -n "${CUDACXX:-}" ] || command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ] ||
  log "no nvcc (CUDA toolkit): building without the CUDA kernels of the fused ops"
log "configuring $BUILD_DIR (LibTorch from $PREFIX)"
# shellcheck disable=SC2086
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_PREFIX_PATH="$PREFIX" ${NANOCHAT_CMAKE_ARGS:-} \
  > "$BUILD_DIR.configure.log" 2>&1 || { cat "$BUILD_DIR.configure.log" >&2; exit 1; }
log "building (log: $BUILD_DIR.build.log)"
# each LibTorch translation unit takes ~1.5 GB of RAM: cap the jobs by memory too
mem_gb=$(awk '/MemAvailable/ {print int($2/1048576)}' /proc/meminfo)
jobs=$(nproc)
[ "$jobs" -gt $((mem_gb / 2 > 0 ? mem_gb / 2 : 1)) ] && jobs=$((mem_gb / 2 > 0 ? mem_gb / 2 : 1))
jobs="${NANOCHAT_BUILD_JOBS:-$jobs}"
build() {  # build TARGET...: the targets, or all without any
  local targets=()
  [ $# -eq 0 ] || targets=(--target "$@")
  cmake --build "$BUILD_DIR" -j "$jobs" "${targets[@]}" >> "$BUILD_DIR.build.log" 2>&1 || {
    tail -50 "$BUILD_DIR.build.log" >&2
    exit 1
  }
}
: > "$BUILD_DIR.build.log"
if [ -n "$PIP_PID" ]; then
  # the library (a static archive) and the binary's objects compile without torch's CUDA
  # libraries; linking needs them
  build nanochat_core nanochat_cli
  log "waiting for pip to install the rest of torch's requirements"
  wait "$PIP_PID" || { PIP_PID=""; pip_failed; }
  PIP_PID=""
fi
# shellcheck disable=SC2086
build ${NANOCHAT_BUILD_TARGETS:-}
log "done: $BUILD_DIR/nanochat"
