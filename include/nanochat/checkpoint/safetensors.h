// The safetensors format (huggingface/safetensors), read and written without Python:
//   [8 bytes: N, little-endian u64][N bytes: JSON header, space-padded to a multiple of 8]
//   [data: each tensor's row-major little-endian bytes, back to back]
// The header maps each name to {"dtype", "shape", "data_offsets": [begin, end)} (offsets
// relative to the first data byte) plus an optional "__metadata__" string->string map.
// Reading validates everything before it trusts a byte (sizes, offsets, dtypes, names), so a
// truncated or forged file is one Error naming the file and the tensor, never a crash.
#pragma once
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "nanochat/common/tensor.h"

#include "nanochat/common/named_tensors.h"

namespace nanochat {

struct SafetensorsFile {
  NamedTensors tensors;  // in data order; CPU, contiguous, owning their memory
  std::map<std::string, std::string> metadata;
};

// Writes atomically (temp + fsync + rename): a failure leaves an existing `path` untouched.
// Tensors may live on any device and be non-contiguous; they are copied to CPU as needed.
void safetensors_save(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata = {});

// the checks safetensors_save does before writing anything: names non-empty, unique and not
// "__metadata__", tensors defined, dtypes storable; Error naming `path` and the tensor
void safetensors_check_savable(const std::string& path, const NamedTensors& tensors);

SafetensorsFile safetensors_load(const std::string& path);

// "F32", "BF16", ...; Error for a dtype safetensors cannot hold
std::string safetensors_dtype_name(at::ScalarType dtype);
// false for an unknown name
bool safetensors_dtype_from_name(const std::string& name, at::ScalarType& dtype);

}  // namespace nanochat
