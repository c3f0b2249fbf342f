#!/usr/bin/env bash
# runs/setup.sh and runs/test.sh on the images users rent, with fakes on PATH (no root, no network):
#  - the torch wheel's CUDA flavour from the NVIDIA driver (a fake nvidia-smi answering 550, 570,
#    580; a fake /proc driver file; none; NANOCHAT_TORCH_INDEX), through setup.sh --dry-run;
#  - the install's order (a fake pip and cmake): torch alone and what compiling reads, then the
#    rest of its requirements beside the build, waited for before the link;
#  - runs/apt_packages.sh against a fake apt: a test need the distribution lacks (chromium on
#    Ubuntu) is skipped with one line, a build need it lacks stops with one line naming it.
#   setup_scripts_test.sh SOURCE_DIR
set -uo pipefail
src=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
expect() {  # expect WHAT OUTPUT PATTERN: the output has a line matching the (grep -E) pattern
  if ! grep -qE -- "$3" <<<"$2"; then echo "FAIL $1: no line matching '$3' in:"; echo "$2"; failures=$((failures + 1)); fi
}
expect_not() {
  if grep -qE -- "$3" <<<"$2"; then echo "FAIL $1: a line matches '$3' in:"; echo "$2"; failures=$((failures + 1)); fi
}

# every build package installed (the real ones are, or this build would not exist): dpkg-query
# answers "installed" for all; apt-get must not run in a dry run
mkdir -p "$tmp/bin"
cat > "$tmp/bin/dpkg-query" <<'SH'
#!/bin/sh
for p; do :; done
case " ${FAKE_MISSING:-} " in *" $p "*) exit 1 ;; esac
printf 'install ok installed'
SH
cat > "$tmp/bin/apt-get" <<'SH'
#!/bin/sh
echo "apt-get $*" >> "$FAKE_APT_LOG"
SH
cat > "$tmp/bin/apt-cache" <<'SH'
#!/bin/sh
# apt-cache policy PKG: a candidate unless PKG is in FAKE_ABSENT (then nothing, as for a name apt does not know)
case " ${FAKE_ABSENT:-} " in *" $2 "*) exit 0 ;; esac
printf '%s:\n  Installed: (none)\n  Candidate: 1.0-1\n  Version table:\n' "$2"
# then a long version table, after a pause: a caller that stops reading at "Candidate" (grep -q
# under pipefail) makes this die of SIGPIPE, as the real apt-cache does on a busy machine
sleep 0.1
yes '     1.0-1 500' | head -c 200000
SH
cat > "$tmp/bin/sudo" <<'SH'
#!/bin/sh
exec "$@"
SH
chmod +x "$tmp/bin/"*
export FAKE_APT_LOG="$tmp/apt.log"

# ---- the torch wheel for the driver -----------------------------------------------------------
want_version=$(sed -n 's/^torch==\([^ #]*\).*/\1/p' "$src/runs/requirements.txt")
dry_setup() {  # dry_setup DRIVER_FILE [ENV...]: setup.sh --dry-run with the fakes first on PATH
  local file=$1
  shift
  env PATH="$tmp/bin:$tmp/smi:$PATH" NANOCHAT_NVIDIA_DRIVER_FILE="$file" "$@" bash "$src/runs/setup.sh" --dry-run 2>&1
}
fake_smi() {  # a fake nvidia-smi answering driver version $1 (none: no nvidia-smi)
  rm -rf "$tmp/smi"
  mkdir -p "$tmp/smi"
  [ "$1" = none ] && return
  printf '#!/bin/sh\n[ "$1" = --query-gpu=driver_version ] || exit 9\necho %s\necho %s\n' "$1" "$1" > "$tmp/smi/nvidia-smi"
  chmod +x "$tmp/smi/nvidia-smi"
}
for pair in 550.54.15:cu126:12.6 570.86.15:cu128:12.8 580.65.06:cu130:13.0 525.60.13:cu126:12.6 575.57.08:cu128:12.8; do
  IFS=: read -r driver flavour cuda <<<"$pair"
  fake_smi "$driver"
  out=$(dry_setup "$tmp/no_such_file")
  expect "driver $driver" "$out" "^\[setup\] torch $want_version for CUDA $cuda \($flavour, NVIDIA driver $driver\) from https://download.pytorch.org/whl/$flavour\$"
  expect "driver $driver: installs or has it" "$out" "(torch present|would run: .*pip install .*torch==$want_version --index-url https://download.pytorch.org/whl/$flavour --force-reinstall)"
  expect "driver $driver: dry" "$out" "dry run: stopping before the build"
  expect_not "driver $driver: dry apt" "$(cat "$FAKE_APT_LOG" 2>/dev/null)" "install"
done
# the kernel module's file wins over nvidia-smi (the binary reads it the same way)
fake_smi 580.65.06
printf 'NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.133.20  Release Build  (dvs-builder@U16-I3-B03-4-3)  Thu Mar 20 00:00:00 UTC 2025\nGCC version:  gcc version 12.3.0\n' > "$tmp/version"
out=$(dry_setup "$tmp/version")
expect "driver file" "$out" "for CUDA 12.8 \(cu128, NVIDIA driver 570.133.20\)"
# no driver: PyPI's wheel, no index
fake_smi none
out=$(env PATH="$tmp/bin:/usr/bin:/bin" NANOCHAT_NVIDIA_DRIVER_FILE="$tmp/no_such_file" bash "$src/runs/setup.sh" --dry-run 2>&1)
if command -v -p nvidia-smi >/dev/null 2>&1 || [ -x /usr/bin/nvidia-smi ]; then
  echo "(a real nvidia-smi here: the no-driver case is not checked)"
else
  expect "no driver" "$out" "^\[setup\] torch $want_version from PyPI \(no NVIDIA driver here\)\$"
  expect_not "no driver" "$out" "index-url"
fi
# the override
fake_smi 550.54.15
out=$(dry_setup "$tmp/no_such_file" NANOCHAT_TORCH_INDEX=https://download.pytorch.org/whl/cpu)
expect "override" "$out" "^\[setup\] torch $want_version from https://download.pytorch.org/whl/cpu \(NANOCHAT_TORCH_INDEX\)\$"
# a driver too old for any CUDA wheel: one line, exit 1
fake_smi 470.256.02
out=$(dry_setup "$tmp/no_such_file")
rc=$?
[ $rc = 1 ] || { echo "FAIL driver 470: exit $rc, want 1"; failures=$((failures + 1)); }
expect "driver 470" "$out" "^\[setup\] error: NVIDIA driver 470.256.02 is older than 525"

# ---- the install's order: torch and what compiling reads, then the rest beside the build ------
# A fake pip (it "installs" a torch whose metadata requires NCCL, the CUDA runtime and cuDNN)
# and a fake cmake log what they are asked, in order: the rest of torch's requirements must
# install in the background and be waited for before the link, not before the compile.
repo="$tmp/repo"
mkdir -p "$repo/runs" "$tmp/cmake"
cp "$src/runs/setup.sh" "$src/runs/apt_packages.sh" "$src/runs/requirements.txt" "$repo/runs/"
python3 -m venv --without-pip "$repo/.venv"
site=$("$repo/.venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
cat > "$repo/.venv/bin/pip" <<SH
#!/bin/sh
case "\$*" in
  *--no-deps*torch==*)
    echo "pip torch alone: \$*" >> "$tmp/order.log"
    mkdir -p "$site/torch/share/cmake" "$site/torch-$want_version.dist-info"
    echo "cuda: Optional[str] = '13.0'" > "$site/torch/version.py"
    printf 'Metadata-Version: 2.1\nName: torch\nVersion: $want_version\nRequires-Dist: filelock\nRequires-Dist: cuda-toolkit[cublas,cudart]==13.0.2; platform_system == "Linux"\nRequires-Dist: nvidia-cudnn-cu13==9.19.0.56; platform_system == "Linux"\nRequires-Dist: nvidia-nccl-cu13==2.28.9; platform_system == "Linux"\nRequires-Dist: pyyaml; extra == "pyyaml"\n' > "$site/torch-$want_version.dist-info/METADATA" ;;
  *torch==*) sleep 2; echo "pip the rest: done" >> "$tmp/order.log" ;;
  *) echo "pip early: \$*" >> "$tmp/order.log" ;;
esac
SH
printf '#!/bin/sh\necho "cmake $*" >> "%s"\n' "$tmp/order.log" > "$tmp/cmake/cmake"
chmod +x "$repo/.venv/bin/pip" "$tmp/cmake/cmake"
fake_smi none
out=$(cd "$repo" && env PATH="$tmp/cmake:$tmp/bin:$PATH" NANOCHAT_NVIDIA_DRIVER_FILE="$tmp/no_such_file" \
  NANOCHAT_BUILD_TARGETS=nanochat bash runs/setup.sh 2>&1)
rc=$?
[ $rc = 0 ] || { echo "FAIL install order: setup.sh exited $rc:"; echo "$out"; failures=$((failures + 1)); }
order=$(cat "$tmp/order.log" 2>/dev/null)
want="pip torch alone: .*--no-deps torch==$want_version
pip early: .*cuda-toolkit\[cudart\]==13.0.2 nvidia-nccl-cu13==2.28.9\$
cmake -S . -B build -G Ninja -DCMAKE_PREFIX_PATH=$site/torch/share/cmake
cmake --build build -j [0-9]+ --target nanochat_core nanochat_cli\$
pip the rest: done
cmake --build build -j [0-9]+ --target nanochat\$"
if [ "$(grep -c . <<<"$order")" != 6 ] || ! paste -d '\n' <(echo "$want") <(echo "$order") |
    awk 'NR % 2 { pat = $0; next } $0 !~ pat { bad = 1 } END { exit bad }'; then
  echo "FAIL install order: want lines matching"; echo "$want"; echo "got"; echo "$order"; failures=$((failures + 1))
fi

# ---- apt: skip what the distribution lacks ------------------------------------------------------
rm -f "$FAKE_APT_LOG"
out=$(cd "$src" && env PATH="$tmp/bin:$PATH" FAKE_MISSING="chromium wamerican libgtest-dev" FAKE_ABSENT="chromium" \
  bash -c 'set -euo pipefail; source runs/apt_packages.sh; apt_install test 1 libgtest-dev && apt_install test 0 chromium wamerican' 2>&1)
rc=$?
[ $rc = 0 ] || { echo "FAIL apt: exit $rc"; failures=$((failures + 1)); }
expect "apt skip" "$out" "^\[test\] skipping chromium: not an apt package of .*snap.*the browser tests skip"
log=$(cat "$FAKE_APT_LOG")
expect "apt install gtest" "$log" "^apt-get install .*libgtest-dev\$"
expect "apt install wamerican" "$log" "^apt-get install .* wamerican\$"
expect_not "apt chromium" "$log" "install.*chromium"
# a build need the distribution lacks: one line naming it, exit 1
out=$(cd "$src" && env PATH="$tmp/bin:$PATH" FAKE_MISSING="libgloo-dev" FAKE_ABSENT="libgloo-dev" \
  bash -c 'set -euo pipefail; source runs/apt_packages.sh; apt_install setup 1 cmake libgloo-dev' 2>&1)
rc=$?
[ $rc = 1 ] || { echo "FAIL apt missing build need: exit $rc, want 1"; failures=$((failures + 1)); }
expect "apt build need" "$out" "^\[setup\] error: libgloo-dev, needed to build nanochat, is not an apt package"
[ "$(grep -c . <<<"$out")" = 1 ] || { echo "FAIL apt build need: more than one line:"; echo "$out"; failures=$((failures + 1)); }

[ $failures = 0 ] && echo "setup scripts: all checks passed"
exit $((failures > 0))
