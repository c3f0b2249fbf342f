#!/usr/bin/env bash
# The whole nanochat pipeline at toy scale on a CPU (any machine, no GPU): data, tokenizer,
# pretraining, evaluation, then a chat with the model. The model is tiny and the run is short
# (about 9 minutes on 2 cores from a fresh clone, installs and build included: README.md): it
# shows every stage working, not a capable model.
# Pretraining passes 4x upstream's learning rates: the sqrt batch rule scales them by
# sqrt(1K / 512K), so the effective rates equal upstream runcpu's at its 16K batch.
# Upstream's runs/runcpu.sh with the scale cut to what 2 cores do in minutes.
#
# Without internet (the ClimbMix shards cannot be downloaded) it trains on a local English
# corpus made from this machine's Python docs and manual pages (runs/make_local_corpus.py).
#
# Without the chat task data either, SFT learns the spelling tasks, whose words come from
# words_alpha.txt, Debian's wamerican or, with neither, the trained tokenizer's whole words.
#
#   bash runs/runcpu.sh                  # everything, from a fresh Debian 12 machine
#   NANOCHAT_BASE_DIR=/tmp/nc bash runs/runcpu.sh
#   NANOCHAT_BIN=build/nanochat bash runs/runcpu.sh   # a built binary: no set-up, no build
# (the ctest runcpu_offline runs it so: no network, no word lists)
set -euo pipefail
cd "$(dirname "$0")/.."
export NANOCHAT_BASE_DIR="${NANOCHAT_BASE_DIR:-$HOME/.cache/nanochat}"
# Offline, the local corpus (half a minute of one core) is made while set-up installs and
# builds: started when there are no shards yet and the shards' host cannot be reached directly
# (nor through a proxy); the data stage below still decides, by trying the download.
LOCAL_CORPUS="$NANOCHAT_BASE_DIR/local_corpus"
CORPUS_PID=""
trap '[ -z "$CORPUS_PID" ] || kill "$CORPUS_PID" 2>/dev/null' EXIT
corpus_made() { [ -f "$LOCAL_CORPUS/shard_00003.jsonl" ]; }  # its last shard is written last
if ! corpus_made && ! ls "$NANOCHAT_BASE_DIR"/base_data_climbmix/*.parquet >/dev/null 2>&1 &&
  [ -z "${https_proxy:-}${HTTPS_PROXY:-}" ] && ! python3 -c 'import socket; socket.create_connection(("huggingface.co", 443), timeout=5).close()' 2>/dev/null; then
  mkdir -p "$NANOCHAT_BASE_DIR"
  python3 runs/make_local_corpus.py "$LOCAL_CORPUS" > "$LOCAL_CORPUS.log" 2>&1 &
  CORPUS_PID=$!
fi
if [ -n "${NANOCHAT_BIN:-}" ]; then
  NC="$NANOCHAT_BIN"
else
  # the binary alone (see docs/building.md for its cost); runs/test.sh builds the tests
  NANOCHAT_BUILD_TARGETS="${NANOCHAT_BUILD_TARGETS:-nanochat}" bash runs/setup.sh
  NC=build/nanochat
fi
say() { echo; echo "=== [runcpu] $* ==="; }
# the scale: pretraining's and SFT's steps (tests/runcpu_offline.sh runs a smaller toy: it
# proves that the stages connect, not what the model learns)
BASE_STEPS="${RUNCPU_BASE_STEPS:-300}"
SFT_STEPS="${RUNCPU_SFT_STEPS:-100}"

# the report card: a new one unless this run is being resumed (rerunning keeps its start time)
[ -f "$NANOCHAT_BASE_DIR/report/header.md" ] || $NC report reset
say "1/8 data"
DATA=()
if $NC download -n 8; then
  echo "[runcpu] training on the ClimbMix shards in $NANOCHAT_BASE_DIR/base_data_climbmix"
else
  echo "[runcpu] the ClimbMix shards cannot be downloaded here: using a local English corpus instead"
  if [ -n "$CORPUS_PID" ]; then
    wait "$CORPUS_PID" || { CORPUS_PID=""; cat "$LOCAL_CORPUS.log" >&2; exit 1; }
    CORPUS_PID=""
    cat "$LOCAL_CORPUS.log"
  elif corpus_made; then
    echo "[runcpu] the local corpus is already in $LOCAL_CORPUS"
  else
    python3 runs/make_local_corpus.py "$LOCAL_CORPUS"
  fi
  DATA=(--data "$LOCAL_CORPUS")
fi
# (the host answered after all: the shards are used, not the corpus)
[ -z "$CORPUS_PID" ] || { wait "$CORPUS_PID" || true; CORPUS_PID=""; }

# the CORE bundle and the chat task data, when they can be downloaded
CORE=(--eval bpb,sample)
if $NC download eval-bundle; then CORE=(--eval core,bpb,sample --max-per-task 16); fi
MIXTURE=(--mixture chat)
if ! $NC download tasks; then
  echo "[runcpu] the chat task data cannot be downloaded: SFT on the offline spelling mixture instead"
  MIXTURE=(--mixture spelling)
fi

say "2/8 tokenizer"
$NC tok-train "${DATA[@]}" --max-chars 20000000 --vocab-size 8192
$NC tok-eval "${DATA[@]}"

say "3/8 pretraining (d4, 256 wide, context 128)"
# resumable: rerun the script and it continues from the last checkpoint
RESUME=()
if ls "$NANOCHAT_BASE_DIR"/base_checkpoints/d4/done_* >/dev/null 2>&1; then RESUME=(--resume latest); fi
$NC base-train "${DATA[@]}" "${RESUME[@]}" --depth 4 --head-dim 64 --window-pattern L --max-seq-len 128 \
  --device-batch-size 8 --total-batch-size 1024 --num-iterations "$BASE_STEPS" --warmup-steps 20 \
  --matrix-lr 0.08 --embedding-lr 1.2 --unembedding-lr 0.032 --scalar-lr 2.0 \
  --eval-every 100 --eval-tokens 16384 --core-metric-every -1 --sample-every 150 --save-every 100 \
  --run runcpu

say "4/8 base model evaluation"
$NC base-eval "${DATA[@]}" "${CORE[@]}" --device-batch-size 8 --split-tokens 16384

say "5/8 a completion from the base model"
$NC generate --source base -p "The meaning of" --max-tokens 32 --temperature 0

say "6/8 SFT: the chat format, the calculator tool, who it is"
# resumable too (a finished SFT is only saved and evaluated again)
RESUME=()
if ls "$NANOCHAT_BASE_DIR"/chatsft_checkpoints/d4/done_* >/dev/null 2>&1; then RESUME=(--resume latest); fi
$NC sft "${MIXTURE[@]}" "${RESUME[@]}" --num-iterations "$SFT_STEPS" \
  --device-batch-size 8 --max-seq-len 128 --total-batch-size 1024 \
  --matrix-lr 0.02 --embedding-lr 0.3 --unembedding-lr 0.008 \
  --eval-every 50 --eval-tokens 8192 --chatcore-every -1 --run runcpu

say "7/8 chat evaluation"
if [ "${MIXTURE[1]}" = chat ]; then
  $NC chat-eval -i sft -x 32 -m 64
else
  $NC chat-eval -i sft -a SpellingBee -x 32 -m 64
fi

say "8/8 a chat"
$NC chat-cli -i sft -p "Hello! Who are you?" || true
echo
$NC report generate
echo "Models: $NANOCHAT_BASE_DIR/base_checkpoints/d4 and $NANOCHAT_BASE_DIR/chatsft_checkpoints/d4"
echo "(metrics.jsonl in each folder has every step)."
echo "Talk to it in the terminal:  $NC chat-cli"
echo "... or in the browser:       $NC chat-web   (then open http://127.0.0.1:8000)"
