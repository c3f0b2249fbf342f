// A reader for the parquet files nanochat's datasets ship (ClimbMix shards, SmolTalk, MMLU,
// ARC, GSM8K, HumanEval): footer + Thrift compact metadata, data pages v1/v2, dictionary
// pages, PLAIN / dictionary / RLE-bit-packed / DELTA_(LENGTH_)BYTE_ARRAY encodings,
// UNCOMPRESSED / ZSTD / SNAPPY / GZIP codecs, nullable and nested (LIST, STRUCT) columns.
// Row groups are read one at a time with pread: the file is never loaded whole.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "nanochat/common/error.h"

namespace nanochat {

// every reader failure; the message names the file, row group, column and what is wrong
struct ParquetError : Error {
  using Error::Error;
};

struct ParquetColumn {        // one leaf column
  std::string path;           // dotted path from the root, e.g. "messages.list.element.role"
  std::string physical_type;  // "BYTE_ARRAY", "INT64", ...
  std::string logical_type;   // "STRING", "LIST", ... or "" when none
  int max_definition_level = 0, max_repetition_level = 0;
};

struct ParquetRowGroup {
  int64_t num_rows = 0;
  int64_t uncompressed_bytes = 0, compressed_bytes = 0;
  std::vector<std::string> codecs;                                          // one per leaf column, e.g. "ZSTD"
  std::vector<int64_t> column_compressed_bytes, column_uncompressed_bytes;  // one per leaf column
};

class ParquetFile {
 public:
  // opens the file and parses the footer; every size in it is checked against the file size
  explicit ParquetFile(const std::string& path);
  ~ParquetFile();
  ParquetFile(const ParquetFile&) = delete;
  ParquetFile& operator=(const ParquetFile&) = delete;

  const std::string& path() const;
  int64_t file_size() const;
  const std::string& created_by() const;  // the writer, e.g. "parquet-cpp-arrow version 21.0.0"
  int64_t num_rows() const;
  int num_row_groups() const;
  const ParquetRowGroup& row_group(int index) const;
  const std::vector<ParquetColumn>& columns() const;  // leaves, in file order
  std::vector<std::string> top_level_names() const;   // e.g. {"text"} or {"messages", "source"}
  std::string schema_text() const;                    // human-readable schema tree

  // a top-level primitive column of one row group, each value as a string (numbers in
  // decimal, booleans "true"/"false"); null values give "" and, if `nulls` is given,
  // nulls[i] = 1
  std::vector<std::string> read_column_strings(int row_group, const std::string& column,
                                               std::vector<uint8_t>* nulls = nullptr) const;
  // the rows of one row group as JSON objects (nested LIST/STRUCT columns assembled, null
  // as JSON null); only `columns` (top-level names) when not empty
  std::vector<nlohmann::json> read_rows_json(int row_group, const std::vector<std::string>& columns = {}) const;

 private:
  struct Impl;
  Impl* impl_;
};

}  // namespace nanochat
