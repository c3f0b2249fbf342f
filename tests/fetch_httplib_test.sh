#!/usr/bin/env bash
# The build takes cpp-httplib from its pinned release (third_party/httplib.cmake: URL + SHA256)
# where the system's is older than the code needs, as on Ubuntu 22.04 (0.10.3). Played here in a
# private mount namespace (root only; exit 77, skipped, elsewhere): the system's cpp-httplib.pc
# says 0.10.3 and its httplib.h stops any compile that includes it, and the "release" is a local
# archive (no network in CI) holding the system's own header, copied before it is hidden. Checks:
#   1. older system version: one line says so, the archive is fetched, and the httplib users
#      compile against its header
#   2. the archive with a wrong SHA256: configure stops, naming the mismatch
#   3. the system version new enough: it is used, nothing is fetched
#   fetch_httplib_test.sh SOURCE_DIR OUT_DIR
set -euo pipefail
src=$1 out=$2
if [ "$(id -u)" != 0 ] || ! unshare -m true 2>/dev/null; then
  echo "skipped: hiding the system's cpp-httplib needs root for a private mount namespace"
  exit 77
fi
pc="$(pkg-config --variable=pcfiledir cpp-httplib 2>/dev/null || true)/cpp-httplib.pc"
hdr=/usr/include/httplib.h
if [ ! -f "$pc" ] || [ ! -f "$hdr" ]; then
  echo "skipped: no system cpp-httplib (libcpp-httplib-dev) to stand in for the release"
  exit 77
fi
rm -rf "$out"
mkdir -p "$out/cpp-httplib-0.11.4"
cp "$hdr" "$out/cpp-httplib-0.11.4/"
tar -C "$out" -czf "$out/release.tar.gz" cpp-httplib-0.11.4
sha=$(sha256sum "$out/release.tar.gz" | cut -d' ' -f1)
printf 'Name: cpp-httplib\nDescription: as Ubuntu 22.04\nVersion: 0.10.3\nCflags: -I/usr/include\nLibs: -lcpp-httplib\n' > "$out/old.pc"
printf '#error "the system httplib.h was compiled, not the fetched release"\n' > "$out/hidden.h"

configure() {  # configure BUILD_DIR SHA256 HIDE(0|1): configure + build in a mount namespace
  # shellcheck disable=SC2016
  unshare -m bash -c '
    set -e
    if [ "$5" = 1 ]; then mount --bind "$1/old.pc" "$2"; mount --bind "$1/hidden.h" "$3"; fi
    cmake -S "$4/tests/cmake_fetch_httplib" -B "$1/$6" -G Ninja \
      -DNANOCHAT_HTTPLIB_URL="file://$1/release.tar.gz" -DNANOCHAT_HTTPLIB_SHA256="$7"
    cmake --build "$1/$6"
  ' hide "$out" "$pc" "$hdr" "$src" "$3" "$1" "$2" > "$out/$1.log" 2>&1
}

# 1. the system's is older: the pinned release is used
configure old "$sha" 1 || { cat "$out/old.log"; echo "FAIL: did not build with the fetched release"; exit 1; }
grep -q "nanochat: the system's cpp-httplib is 0.10.3, older than 0.11.4: using file://$out/release.tar.gz" "$out/old.log" ||
  { cat "$out/old.log"; echo "FAIL: expected the line saying the system's 0.10.3 is too old"; exit 1; }
grep -q "isystem $out/old/_deps/nanochat_cpp_httplib-src" "$out/old/build.ninja" ||
  { echo "FAIL: the compile does not name the fetched header's folder"; exit 1; }
echo "ok: system 0.10.3 -> the pinned release, and the httplib users compile against it"

# 2. a wrong hash stops configure
bad=$(printf '%064d' 0)
if configure badhash "$bad" 1; then cat "$out/badhash.log"; echo "FAIL: an archive with the wrong SHA256 was used"; exit 1; fi
grep -qi "hash" "$out/badhash.log" || { cat "$out/badhash.log"; echo "FAIL: configure did not name the hash mismatch"; exit 1; }
echo "ok: an archive whose SHA256 does not match stops configure"

# 3. the system's is new enough: used, nothing fetched
configure system "$sha" 0 || { cat "$out/system.log"; echo "FAIL: did not build with the system's cpp-httplib"; exit 1; }
if grep -q "using file://" "$out/system.log" || [ -d "$out/system/_deps/nanochat_cpp_httplib-src" ]; then
  cat "$out/system.log"; echo "FAIL: fetched although the system's cpp-httplib is new enough"; exit 1
fi
echo "ok: the system's cpp-httplib $(pkg-config --modversion cpp-httplib) is used as it is"
