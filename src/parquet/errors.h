// defines: parquet_fail, ParquetLimits, parquet_limits
// Internal helpers shared by the parquet sources: throwing ParquetError printf-style and the
// caps that keep a corrupt file from asking for unbounded memory.
#pragma once
#include <cstdint>

#include "nanochat/parquet.h"

namespace nanochat {

[[noreturn]] void parquet_fail(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

// Caps on what one column chunk may expand to. Real files stay far below them; the fuzz
// target lowers them so that a hostile size field cannot exhaust its memory budget.
struct ParquetLimits {
  int64_t max_page_bytes = int64_t(1) << 30;          // one decompressed page
  int64_t max_page_values = int64_t(1) << 26;         // levels in one page
  int64_t max_chunk_values = int64_t(1) << 31;        // levels in one column chunk
  int64_t max_chunk_output_bytes = int64_t(8) << 30;  // decoded string bytes of one chunk
};
ParquetLimits& parquet_limits();  // process-wide; set once before reading, then read-only

}  // namespace nanochat
