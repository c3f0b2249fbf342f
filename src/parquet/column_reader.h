// One column chunk of one row group, decoded: pread its bytes, walk its pages (dictionary,
// data v1, data v2), decompress each, decode the repetition/definition levels and the
// non-null values. Nothing here is shared between calls, so threads may read different
// chunks of one file at once.
#pragma once
#include <cstdint>
#include <vector>

#include "parquet/encodings.h"
#include "parquet/metadata.h"

namespace nanochat {

struct LeafInfo {  // what decoding a leaf column needs from the schema
  int type = -1, type_length = 0;
  int max_def = 0, max_rep = 0;
};

struct ColumnData {
  std::vector<uint8_t> def, rep;  // one entry per level; empty when that max level is 0
  ColumnValues values;            // the non-null values, in order
  int64_t num_levels = 0;         // values + nulls (+ empty lists)
};

// what one column chunk may decode to (ParquetLimits): its share of what a row group of
// `row_group_bytes` compressed bytes and `num_leaves` leaf columns may decode to
struct ChunkBudget {
  int64_t max_levels = 0, max_string_bytes = 0;
};
ChunkBudget chunk_budget(int64_t row_group_bytes, int num_leaves);

// `rows`: the row group's row count; a flat column has exactly one level per row, a
// repeated one at least one
ColumnData read_column_chunk(int fd, int64_t file_size, const ColumnChunkMeta& meta, const LeafInfo& leaf, int64_t rows,
                             const ChunkBudget& budget);

// reads exactly n bytes at offset (retrying short reads); ParquetError otherwise
void pread_exact(int fd, uint8_t* buf, size_t n, int64_t offset);

}  // namespace nanochat
