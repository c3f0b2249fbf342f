// Internal helpers shared by the parquet sources: throwing ParquetError printf-style, the
// caps that keep a corrupt file from asking for unbounded memory, and reading a length.
#pragma once
#include <cstdint>
#include <cstring>

#include "nanochat/parquet.h"

namespace nanochat {

[[noreturn]] void parquet_fail(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

// Caps on what one column chunk may expand to. A few bytes of RLE can claim 2^31 values, so
// beside absolute caps, what a row group decodes to is bounded by what its bytes can
// plausibly hold: `floor` plus `per_compressed_byte` times its compressed bytes (levels, and
// string bytes), shared equally by its leaf columns. pyarrow's densest real chunks stay
// inside: ~560 levels a byte for an all-null column, ~10^4 string bytes a byte for one long
// string repeated (dictionary + RLE). So a ~1 KB file gets a few hundred MB at most, never GBs.
struct ParquetLimits {
  int64_t max_page_bytes = int64_t(1) << 30;          // one decompressed page
  int64_t max_page_values = int64_t(1) << 26;         // levels in one page
  int64_t max_chunk_values = int64_t(1) << 31;        // levels in one column chunk
  int64_t max_chunk_output_bytes = int64_t(8) << 30;  // decoded string bytes of one chunk
  int64_t levels_floor = int64_t(1) << 20;            // per row group
  int64_t levels_per_compressed_byte = 1024;
  int64_t string_bytes_floor = int64_t(256) << 20;  // per row group
  int64_t string_bytes_per_compressed_byte = 32768;
};
ParquetLimits& parquet_limits();  // process-wide; set once before reading, then read-only

// a little-endian uint32 (lengths, PLAIN INT32): parquet's byte order, and every machine's this runs on
inline uint32_t load_le32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

}  // namespace nanochat
