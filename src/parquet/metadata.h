// The subset of parquet.thrift this reader needs, decoded from the compact protocol.
// Field ids are the ones in parquet-format's parquet.thrift.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "parquet/thrift_compact.h"

namespace nanochat {

enum PhysicalType {
  kBoolean = 0,
  kInt32 = 1,
  kInt64 = 2,
  kInt96 = 3,
  kFloat = 4,
  kDouble = 5,
  kByteArray = 6,
  kFixedLenByteArray = 7
};
enum Repetition { kRequired = 0, kOptional = 1, kRepeated = 2 };
enum Codec { kUncompressed = 0, kSnappy = 1, kGzip = 2, kLzo = 3, kBrotli = 4, kLz4 = 5, kZstd = 6, kLz4Raw = 7 };
enum Encoding {
  kPlain = 0,
  kPlainDictionary = 2,
  kRle = 3,
  kBitPacked = 4,
  kDeltaBinaryPacked = 5,
  kDeltaLengthByteArray = 6,
  kDeltaByteArray = 7,
  kRleDictionary = 8,
  kByteStreamSplit = 9
};
enum PageType { kDataPage = 0, kIndexPage = 1, kDictionaryPage = 2, kDataPageV2 = 3 };
// ConvertedType values this reader looks at
enum ConvertedType {
  kConvUtf8 = 0,
  kConvMap = 1,
  kConvMapKeyValue = 2,
  kConvList = 3,
  kConvEnum = 4,
  kConvUint8 = 11,
  kConvUint16 = 12,
  kConvUint32 = 13,
  kConvUint64 = 14,
  kConvJson = 19
};

struct SchemaElement {
  int type = -1;  // PhysicalType, -1 for a group
  int type_length = 0;
  int repetition = kRequired;
  std::string name;
  int num_children = 0;
  int converted_type = -1;
  std::string logical_type;       // "STRING", "LIST", "MAP", "INTEGER", ... or ""
  bool logical_unsigned = false;  // INTEGER(isSigned=false)
};

struct ColumnChunkMeta {
  int type = -1;
  int codec = kUncompressed;
  std::vector<int> encodings;
  std::vector<std::string> path;
  int64_t num_values = 0;
  int64_t total_uncompressed_size = 0, total_compressed_size = 0;
  int64_t data_page_offset = -1, dictionary_page_offset = -1;
  bool has_meta = false;
};

struct RowGroupMeta {
  std::vector<ColumnChunkMeta> columns;
  int64_t total_byte_size = 0, num_rows = 0;
};

struct FileMeta {
  int version = 0;
  std::vector<SchemaElement> schema;
  int64_t num_rows = 0;
  std::vector<RowGroupMeta> row_groups;
  std::string created_by;
};

struct PageHeader {
  int type = -1;
  int32_t uncompressed_page_size = -1, compressed_page_size = -1;
  int32_t num_values = -1;  // data (v1/v2) and dictionary pages
  int encoding = -1;
  int def_level_encoding = kRle, rep_level_encoding = kRle;        // v1
  int32_t num_nulls = 0, num_rows = 0;                             // v2
  int32_t def_levels_byte_length = 0, rep_levels_byte_length = 0;  // v2
  bool is_compressed = true;                                       // v2
  bool has_data_header = false;
};

FileMeta parse_file_meta(const uint8_t* data, size_t n);
// parses one page header at the start of [data, data+n); *header_size gets its length
PageHeader parse_page_header(const uint8_t* data, size_t n, size_t* header_size);

const char* physical_type_name(int type);
const char* codec_name(int codec);
const char* encoding_name(int encoding);

}  // namespace nanochat
