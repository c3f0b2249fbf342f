#!/usr/bin/env bash
# Run here (the dev machine, after runs/setup.sh), before bench/gpu/run.sh goes to a GPU
# machine that has no apt. Fills .deps/ (ignored by git; pass carry [".deps"] to the device tool):
# - prebuilt/: the binaries run.sh runs, built in build/ against this venv's torch wheel,
#   the GPU machine's version too (2.11+cu130), with sm_90a code for the H200;
# - lib/: the Debian libraries they load that the GPU machine may lack (not glibc, libstdc++,
#   torch or CUDA's, which it has);
# - for run.sh's fallback build there: headers, libraries, pkg-config and CMake files in
#   Debian's layout, and pkgconf itself.
# With a Python nanochat checkout as $1 (e.g. the fetched upstream snapshot's git dir), also
# writes its files to .upstream/ for run.sh's UPSTREAM=.upstream (carry ".upstream" too).
# Nothing is downloaded.
set -euo pipefail
cd "$(dirname "$0")/../.."
D=.deps
ML=lib/x86_64-linux-gnu
source bench/gpu/binaries.sh  # BINARIES
[ -f build/CMakeCache.txt ] || { echo "error: no build/: run bash runs/setup.sh first" >&2; exit 1; }
# a build on this GPU-less machine targets sm_80 + PTX by default (third_party/dependencies.cmake):
# the prebuilt binaries get the H200's own code (kept in build/'s cache from then on)
if ! grep -q 'code=sm_90a' build/build.ninja; then
  echo "prepare: configuring build/ with TORCH_CUDA_ARCH_LIST=\"8.0+PTX;9.0a\""
  cmake -S . -B build -DTORCH_CUDA_ARCH_LIST="8.0+PTX;9.0a" > /dev/null
fi
grep -q 'code=sm_90a' build/build.ninja || { echo "error: build/ has no sm_90a code (TORCH_CUDA_ARCH_LIST?)" >&2; exit 1; }
cmake --build build -j "$(nproc)" --target $(for b in $BINARIES; do basename "$b"; done)

rm -rf "$D" && mkdir -p "$D/include" "$D/share/cmake" "$D/$ML/cmake" "$D/$ML/pkgconfig" "$D/bin" "$D/prebuilt"
# the prebuilt binaries
for b in $BINARIES; do cp "build/$b" "$D/prebuilt/"; done

# headers (httplib.h includes brotli's: Debian builds cpp-httplib with it)
cp -r /usr/include/{gloo,CLI,nlohmann,gtest,gmock,openssl,yaml-cpp,brotli} "$D/include/"
cp /usr/include/x86_64-linux-gnu/openssl/* "$D/include/openssl/"  # Debian keeps these per arch
cp /usr/include/{zstd.h,zstd_errors.h,zdict.h,zlib.h,zconf.h,httplib.h,pcre2.h,zip.h,zipconf.h} /usr/include/snappy*.h \
  /usr/include/seccomp*.h "$D/include/"
# libraries (shared ones with their symlinks) and their CMake / pkg-config descriptions
cp -P /usr/$ML/lib{gtest,gtest_main,gmock,gmock_main,snappy}.a "$D/$ML/"
for lib in libzstd libsnappy libcpp-httplib libssl libcrypto libz libpcre2-8 libbrotlienc libbrotlidec libbrotlicommon libzip libyaml-cpp libpkgconf libseccomp; do
  cp -P /usr/$ML/$lib.so* "$D/$ML/" 2>/dev/null || cp -P /lib/x86_64-linux-gnu/$lib.so* "$D/$ML/"
done
# and any other library the binaries load from this system's lib folders (libbz2 for libzip)
for b in $BINARIES; do ldd "build/$b"; done | awk '$3 ~ /^\/(usr\/)?lib\// {print $3}' | sort -u |
  grep -vE '/(libc|libm|libdl|librt|libpthread|libutil|libgcc_s|libstdc\+\+|ld-linux-x86-64)\.so' |
  while read -r lib; do [ -e "$D/$ML/$(basename "$lib")" ] || cp -L "$lib" "$D/$ML/"; done
cp -r /usr/$ML/cmake/{GTest,Snappy,yaml-cpp} "$D/$ML/cmake/"
# Snappy's export names its prefix and files by absolute path: make them relative to where it lies
sed -i 's|^set(_IMPORT_PREFIX "/usr")|get_filename_component(_IMPORT_PREFIX "${CMAKE_CURRENT_LIST_DIR}/../../../.." ABSOLUTE)|' \
  "$D/$ML/cmake/Snappy/SnappyTargets.cmake"
sed -i 's|"/usr/lib/x86_64-linux-gnu/|"${_IMPORT_PREFIX}/lib/x86_64-linux-gnu/|g' "$D/$ML/cmake/Snappy/"SnappyTargets-*.cmake
cp -r /usr/share/cmake/{nlohmann_json,CLI11} "$D/share/cmake/"
for pc in libzstd libpcre2-8 cpp-httplib openssl libssl libcrypto zlib libzip yaml-cpp libbrotlicommon libbrotlidec libbrotlienc libseccomp; do
  sed "s|^prefix=.*|prefix=$PWD/$D|" "/usr/$ML/pkgconfig/$pc.pc" > "$D/$ML/pkgconfig/$pc.pc" 2>/dev/null ||
    sed "s|^prefix=.*|prefix=$PWD/$D|" "/usr/share/pkgconfig/$pc.pc" > "$D/$ML/pkgconfig/$pc.pc"
done
cp /usr/bin/pkgconf "$D/bin/"
# checks: every package resolves from .deps alone, and no CMake file points outside it
PKG_CONFIG_LIBDIR="$D/$ML/pkgconfig" pkgconf --exists --print-errors libzstd libpcre2-8 cpp-httplib openssl zlib libzip libseccomp
if grep -rn '"/usr' "$D/$ML/cmake" |
   grep -vE ':[0-9]+: *#|_realOrig|set\(_IMPORT_PREFIX "/usr/lib/x86_64-linux-gnu/cmake/|set\(PACKAGE_PREFIX_DIR "/usr"\)'; then
  echo "error: a CMake file in .deps points at /usr" >&2
  exit 1
fi
EXCLUDE=$(git rev-parse --git-path info/exclude)  # .git is a file in a worktree
mkdir -p "$(dirname "$EXCLUDE")"
grep -qxF '/.deps/' "$EXCLUDE" 2>/dev/null || echo '/.deps/' >> "$EXCLUDE"

if [ -n "${1:-}" ]; then  # the upstream checkout, files only
  rm -rf .upstream && mkdir .upstream
  if [ -d "$1/objects" ] || [ -d "$1/.git" ]; then git -C "$1" archive HEAD | tar -x -C .upstream
  else cp -r "$1"/. .upstream/; fi
  grep -qxF '/.upstream/' "$EXCLUDE" 2>/dev/null || echo '/.upstream/' >> "$EXCLUDE"
fi

# what the device tool sends (64 MiB at most): the working tree's files (tracked, and untracked
# but not ignored), shared/, and the carried folders
mib() { awk -v b="$1" 'BEGIN { printf "%.1f MiB", b / 1048576 }'; }
tree=$(git ls-files -z -co --exclude-standard | du -cb --files0-from=- 2> /dev/null | tail -1 | cut -f1)
sizes="working tree $(mib "$tree")"
total=$tree
carried=("$D")
[ -d .upstream ] && carried+=(.upstream)
[ -d shared ] && git check-ignore -q shared && carried+=(shared)
for dir in "${carried[@]}"; do
  n=$(du -sb "$dir" | cut -f1)
  sizes="$sizes + $dir $(mib "$n")"
  total=$((total + n))
done
echo "travels: $sizes = $(mib "$total") (the device tool takes 64 MiB)"
if [ "$total" -gt $((64 * 1048576)) ]; then
  echo "error: $(mib "$total") would travel to the device machine, over its 64 MiB: carry less" >&2
  exit 1
fi
