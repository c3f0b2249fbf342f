#!/usr/bin/env bash
# Run here (the dev machine), before bench/gpu/run.sh goes to a GPU machine that has no apt:
# copies the Debian headers, static libs and CMake configs the build needs into .deps/
# (ignored by git; pass carry [".deps"] to the device tool). Nothing is downloaded.
set -euo pipefail
cd "$(dirname "$0")/../.."
D=.deps
rm -rf "$D" && mkdir -p "$D/include" "$D/share/cmake" "$D/lib/x86_64-linux-gnu/cmake"
cp -r /usr/include/gloo /usr/include/CLI /usr/include/nlohmann /usr/include/gtest /usr/include/gmock "$D/include/"
cp -r /usr/share/cmake/nlohmann_json /usr/share/cmake/CLI11 "$D/share/cmake/"
cp /usr/lib/x86_64-linux-gnu/libgtest*.a /usr/lib/x86_64-linux-gnu/libgmock*.a "$D/lib/x86_64-linux-gnu/"
cp -r /usr/lib/x86_64-linux-gnu/cmake/GTest "$D/lib/x86_64-linux-gnu/cmake/"
grep -qxF '/.deps/' .git/info/exclude 2>/dev/null || echo '/.deps/' >> .git/info/exclude
du -sh "$D"
