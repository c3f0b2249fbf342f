#!/usr/bin/env bash
# Builds the libFuzzer targets (clang with libFuzzer, ASan, UBSan) into build-fuzz/, without
# CMake: each target compiles the sources of the parser it fuzzes directly. The torch-free
# targets (parquet, tokenizer, chat_request) build in seconds; safetensors and torch_pickle
# compile against the venv's LibTorch headers and link its libtorch_cpu (LibTorch itself is
# not instrumented; LeakSanitizer still sees every allocation).
#
#   tests/fuzz/build.sh                  every target
#   tests/fuzz/build.sh parquet tokenizer  some of them
#
# Run them with bench/fuzz.sh (a time budget per target); replay one input with
#   build-fuzz/fuzz_parquet path/to/input
# Their seed corpora are tests/fuzz/<target>/, which ctest replays in every CI run
# (fuzz_replay, built by CMake with the normal compiler).
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
out="$root/build-fuzz"
mkdir -p "$out"
CXX="${CXX:-clang++-14}"
python="${NANOCHAT_PYTHON:-$root/.venv/bin/python}"
flags=(-std=c++17 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
       -I"$root/include" -I"$root/src" -I"$root/tests/fuzz")
s="$root/src"
tokenizer_sources=("$s"/tokenizer/{tokenizer,split,chat_render}.cpp "$s"/common/{error,utf8,thread_pool}.cpp)

torch_flags() {
  local torch
  torch="$("$python" -c 'import torch, os; print(os.path.dirname(torch.__file__))')"
  torch_cflags=(-isystem "$torch/include" -isystem "$torch/include/torch/csrc/api/include")
  torch_libs=(-L"$torch/lib" -Wl,-rpath,"$torch/lib" -ltorch_cpu -lc10)
}

build() {  # name, sources and libraries...
  local name="$1"
  shift
  echo "[fuzz build] fuzz_$name"
  "$CXX" "${flags[@]}" "$@" -o "$out/fuzz_$name"
}

targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(parquet tokenizer chat_request safetensors torch_pickle)
for t in "${targets[@]}"; do
  case "$t" in
    parquet) build parquet "$s"/parquet/*.cpp "$s/common/error.cpp" "$root/tests/fuzz/fuzz_parquet.cpp" -lzstd -lsnappy -lz ;;
    tokenizer)
      build tokenizer "${tokenizer_sources[@]}" "$s/tokenizer/tokenizer_files.cpp" "$s"/common/{atomic_file,files,env}.cpp \
        "$root/tests/fuzz/fuzz_tokenizer.cpp" -lpcre2-8 -pthread ;;
    chat_request)
      build chat_request "${tokenizer_sources[@]}" "$s/server/request.cpp" "$root/tests/fuzz/fuzz_chat_request.cpp" \
        -lpcre2-8 -pthread ;;
    safetensors)
      torch_flags
      build safetensors "${torch_cflags[@]}" "$s/checkpoint/safetensors.cpp" "$s"/common/{error,atomic_file,files}.cpp \
        "$root/tests/fuzz/fuzz_safetensors.cpp" "${torch_libs[@]}" -pthread ;;
    torch_pickle)
      torch_flags
      build torch_pickle "${torch_cflags[@]}" "$s/checkpoint/torch_pickle.cpp" "$s/common/error.cpp" \
        "$root/tests/fuzz/fuzz_torch_pickle.cpp" "${torch_libs[@]}" -pthread ;;
    *) echo "unknown fuzz target '$t' (parquet tokenizer chat_request safetensors torch_pickle)" >&2; exit 2 ;;
  esac
done
