#!/usr/bin/env bash
# Run here (the dev machine), before bench/gpu/run.sh goes to a GPU machine that has no apt:
# copies the Debian headers, libraries, pkg-config and CMake files the build needs into
# .deps/ in Debian's layout (ignored by git; pass carry [".deps"] to the device tool).
# Nothing is downloaded.
set -euo pipefail
cd "$(dirname "$0")/../.."
D=.deps
ML=lib/x86_64-linux-gnu
rm -rf "$D" && mkdir -p "$D/include" "$D/share/cmake" "$D/$ML/cmake" "$D/$ML/pkgconfig"
# headers
cp -r /usr/include/{gloo,CLI,nlohmann,gtest,gmock,openssl,yaml-cpp} "$D/include/"
cp /usr/include/x86_64-linux-gnu/openssl/* "$D/include/openssl/"  # Debian keeps these per arch
cp /usr/include/{zstd.h,zstd_errors.h,zdict.h,zlib.h,zconf.h,httplib.h,pcre2.h,zip.h,zipconf.h} /usr/include/snappy*.h "$D/include/"
# libraries (shared ones with their symlinks) and their CMake / pkg-config descriptions
cp -P /usr/$ML/lib{gtest,gtest_main,gmock,gmock_main}.a "$D/$ML/"
for lib in libzstd libsnappy libcpp-httplib libssl libcrypto libz libpcre2-8 libbrotlienc libbrotlidec libbrotlicommon libzip libyaml-cpp; do
  cp -P /usr/$ML/$lib.so* "$D/$ML/" 2>/dev/null || cp -P /lib/x86_64-linux-gnu/$lib.so* "$D/$ML/"
done
cp -r /usr/$ML/cmake/{GTest,Snappy,yaml-cpp} "$D/$ML/cmake/"
cp -r /usr/share/cmake/{nlohmann_json,CLI11} "$D/share/cmake/"
for pc in libzstd libpcre2-8 cpp-httplib openssl libssl libcrypto zlib libzip yaml-cpp; do
  sed "s|^prefix=.*|prefix=$PWD/$D|" "/usr/$ML/pkgconfig/$pc.pc" > "$D/$ML/pkgconfig/$pc.pc" 2>/dev/null ||
    sed "s|^prefix=.*|prefix=$PWD/$D|" "/usr/share/pkgconfig/$pc.pc" > "$D/$ML/pkgconfig/$pc.pc"
done
grep -qxF '/.deps/' .git/info/exclude 2>/dev/null || echo '/.deps/' >> .git/info/exclude
du -sh "$D"
