#!/usr/bin/env bash
# runs/runcpu.sh as a new user runs it on a machine without internet and without a word list:
# the built binary (NANOCHAT_BIN: no set-up, no build), a fresh base dir, no network (a network
# namespace) and /usr/share/dict hidden (a mount namespace). It must reach its chat, and the
# chat must answer. The scripts run from a copy of runs/ (report.md lands beside it), at a
# smaller scale than a user's run (RUNCPU_*: a fifth of the training steps):
# the test proves that the stages connect, not what the model learns.
#   runcpu_offline.sh SOURCE_DIR NANOCHAT_BIN OUT_DIR      (exit 77: no namespaces here)
set -uo pipefail
src=$1 bin=$2 out=$3
rm -rf "$out"
mkdir -p "$out/repo" "$out/empty"
cp -r "$src/runs" "$out/repo/"
if ! unshare -rmn true 2>/dev/null; then
  echo "skipped: unshare -rmn (user, mount and network namespaces) is not allowed here"
  exit 77
fi
failures=0
fail() { echo "FAIL $*"; failures=$((failures + 1)); }
has() { grep -qE -- "$2" "$1" || fail "no line matching '$2'"; }

start=$(date +%s)
# shellcheck disable=SC2016
NANOCHAT_BIN="$bin" NANOCHAT_BASE_DIR="$out/base" RUNCPU_BASE_STEPS=60 RUNCPU_SFT_STEPS=20 \
  unshare -rmn bash -c '
  [ -d /usr/share/dict ] && mount --bind "$1" /usr/share/dict
  exec bash "$2/runs/runcpu.sh"' _ "$out/empty" "$out/repo" > "$out/run.log" 2>&1
rc=$?
echo "runcpu.sh exited $rc after $(($(date +%s) - start)) s (log: $out/run.log)"
[ $rc = 0 ] || { tail -n 40 "$out/run.log"; fail "runcpu.sh exited $rc"; }
log="$out/run.log"
has "$log" 'the ClimbMix shards cannot be downloaded here: using a local English corpus'
has "$log" 'SFT on the offline spelling mixture'
has "$log" 'spelling the [0-9]+ whole words of the tokenizer'
# said once per stage that spells (SFT, chat-eval): the tasks of a mixture share the list
for stage in 6/8 7/8; do
  n=$(sed -n "/^=== \[runcpu\] ${stage//\//\\/} /,/^=== \[runcpu\]/p" "$log" | grep -cE 'spelling the [0-9]+ whole words')
  [ "$n" = 1 ] || fail "stage $stage said the spelling fallback $n times"
done
has "$log" '^=== \[runcpu\] 8/8 a chat ===$'
# the reply: the lines after the chat's heading up to the empty line runcpu.sh prints after it,
# without the log's timestamped lines (chat-cli's stderr)
reply=$(sed -n '/^=== \[runcpu\] 8\/8 a chat ===$/,/^$/p' "$log" | sed '1d' |
  grep -Ev '^[0-9]{2}:[0-9]{2}:[0-9]{2} |^\[|^$' || true)
echo "the chat's reply to \"Hello! Who are you?\": $reply"
# a tiny model's reply may be a few characters: any is an answer, none is not
[[ "$reply" =~ [^[:space:]] ]] || fail "the chat gave no reply"
ls "$out/base"/chatsft_checkpoints/d4/done_* > /dev/null 2>&1 || fail "no SFT checkpoint"

if [ $failures = 0 ]; then echo "runcpu.sh offline, without a word list: it reached its chat, and the chat answered"; exit 0; fi
exit 1
