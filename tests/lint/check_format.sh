#!/usr/bin/env bash
# Fails, listing them, when C++ files differ from .clang-format (Debian's clang-format 14):
#   tests/lint/check_format.sh [ROOT]         check every tracked .cpp/.h/.cu/.cuh
#   tests/lint/check_format.sh --fix [ROOT]   format them in place
# Exit 77 (a skip for ctest) without clang-format.
set -uo pipefail
fix=0
[ "${1:-}" = --fix ] && { fix=1; shift; }
root=${1:-$(cd "$(dirname "$0")/../.." && pwd)}
cd "$root" || exit 1
command -v clang-format >/dev/null || { echo "skipped: no clang-format (apt-get install clang-format)"; exit 77; }
# another major version formats some constructs differently: only 14's verdict counts
major=$(clang-format --version | grep -oE 'version [0-9]+' | grep -oE '[0-9]+')
[ "$fix" = 1 ] || [ "$major" = 14 ] || { echo "skipped: clang-format $major, the check is clang-format 14's (Debian 12)"; exit 77; }
mapfile -t files < <(git ls-files '*.cpp' '*.h' '*.cu' '*.cuh')
if [ $fix = 1 ]; then
  clang-format -i --style=file "${files[@]}"
  exit 0
fi
bad=0
for f in "${files[@]}"; do
  if ! clang-format --style=file --dry-run -Werror "$f" >/dev/null 2>&1; then
    echo "$f: not formatted (tests/lint/check_format.sh --fix)"
    bad=$((bad + 1))
  fi
done
if [ $bad = 0 ]; then echo "${#files[@]} files, all formatted"; exit 0; fi
echo "$bad of ${#files[@]} files differ from .clang-format"
exit 1
