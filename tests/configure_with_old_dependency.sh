#!/usr/bin/env bash
# Configures nanochat where a system library is older than the code needs (a libseccomp.pc that
# says 2.3.0, first on PKG_CONFIG_PATH): configure must stop with one line naming the library,
# its version, the minimum and why (third_party/dependencies.cmake's nanochat_require_version).
#   configure_with_old_dependency.sh SOURCE_DIR TORCH_CMAKE_PREFIX OUT_DIR
set -euo pipefail
src=$1 prefix=$2 out=$3
rm -rf "$out" "$out.pc"
mkdir -p "$out.pc"
real=$(pkg-config --variable=pcfiledir libseccomp)/libseccomp.pc
sed 's/^Version:.*/Version: 2.3.0/' "$real" > "$out.pc/libseccomp.pc"
if PKG_CONFIG_PATH="$out.pc${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}" cmake -S "$src" -B "$out" -G Ninja \
     -DCMAKE_PREFIX_PATH="$prefix" -DNANOCHAT_BUILD_TESTS=OFF -DNANOCHAT_BUILD_BENCH=OFF > "$out.log" 2>&1; then
  cat "$out.log"; echo "FAIL: configure passed with libseccomp 2.3.0"; exit 1
fi
want="nanochat: libseccomp 2.3.0 is older than 2.4.0, the oldest nanochat builds with (SCMP_ACT_KILL_PROCESS): see docs/building.md"
grep -qF "$want" "$out.log" || { cat "$out.log"; echo "FAIL: expected the line: $want"; exit 1; }
echo "ok: libseccomp 2.3.0 stops configure with: $want"
