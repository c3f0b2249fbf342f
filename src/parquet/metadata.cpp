#include "parquet/metadata.h"

namespace nanochat {

const char* physical_type_name(int type) {
  static const char* names[] = {"BOOLEAN", "INT32",  "INT64",      "INT96",
                                "FLOAT",   "DOUBLE", "BYTE_ARRAY", "FIXED_LEN_BYTE_ARRAY"};
  return type >= 0 && type < 8 ? names[type] : "GROUP";
}

const char* codec_name(int codec) {
  static const char* names[] = {"UNCOMPRESSED", "SNAPPY", "GZIP", "LZO", "BROTLI", "LZ4", "ZSTD", "LZ4_RAW"};
  return codec >= 0 && codec < 8 ? names[codec] : "UNKNOWN_CODEC";
}

const char* encoding_name(int encoding) {
  static const char* names[] = {"PLAIN",          "GROUP_VAR_INT",       "PLAIN_DICTIONARY",        "RLE",
                                "BIT_PACKED",     "DELTA_BINARY_PACKED", "DELTA_LENGTH_BYTE_ARRAY", "DELTA_BYTE_ARRAY",
                                "RLE_DICTIONARY", "BYTE_STREAM_SPLIT"};
  return encoding >= 0 && encoding < 10 ? names[encoding] : "UNKNOWN_ENCODING";
}

// LogicalType is a union: the id of the one field present names the type
static void read_logical_type(ThriftReader& r, SchemaElement& e) {
  static const char* names[] = {"",     "STRING",    "MAP",     "LIST",     "ENUM",     "DECIMAL", "DATE",
                                "TIME", "TIMESTAMP", "",        "INTEGER",  "NULL",     "JSON",    "BSON",
                                "UUID", "FLOAT16",   "VARIANT", "GEOMETRY", "GEOGRAPHY"};
  thrift_read_struct(r, [&](ThriftReader& r, int16_t id, uint8_t type) {
    if (id > 0 && id < 19) e.logical_type = names[id];
    if (id == 10 && type == kThriftStruct) {  // IntType {1: i8 bitWidth, 2: bool isSigned}
      thrift_read_struct(r, [&](ThriftReader& r, int16_t id, uint8_t type) {
        if (id != 2) return false;
        e.logical_unsigned = !r.read_bool(type);
        return true;
      });
      return true;
    }
    return false;
  });
}

static SchemaElement read_schema_element(ThriftReader& r) {
  SchemaElement e;
  thrift_read_struct(r, [&](ThriftReader& r, int16_t id, uint8_t type) {
    switch (id) {
      case 1: e.type = r.read_i32(type); return true;
      case 2: e.type_length = r.read_i32(type); return true;
      case 3: e.repetition = r.read_i32(type); return true;
      case 4:
        if (type != kThriftBinary) return false;
        e.name = r.read_binary();
        return true;
      case 5: e.num_children = r.read_i32(type); return true;
      case 6: e.converted_type = r.read_i32(type); return true;
      case 10:
        if (type != kThriftStruct) return false;
        read_logical_type(r, e);
        return true;
      default: return false;
    }
  });
  if (e.repetition < kRequired || e.repetition > kRepeated) r.corrupt("bad repetition type");
  if (e.num_children < 0) r.corrupt("negative num_children");
  if (e.logical_type.empty() && e.converted_type >= 0) {  // files from older writers carry only this
    static const char* names[] = {"STRING",  "MAP",     "",        "LIST",      "ENUM",      "DECIMAL",
                                  "DATE",    "TIME",    "TIME",    "TIMESTAMP", "TIMESTAMP", "INTEGER",
                                  "INTEGER", "INTEGER", "INTEGER", "INTEGER",   "INTEGER",   "INTEGER",
                                  "INTEGER", "JSON",    "BSON",    "INTERVAL"};
    if (e.converted_type < 22) e.logical_type = names[e.converted_type];
    e.logical_unsigned = e.converted_type >= kConvUint8 && e.converted_type <= kConvUint64;
  }
  if (e.num_children == 0 && e.type == -1) e.type = -2;  // an empty group; rejected by the schema builder
  return e;
}

template <class F>
static void read_list(ThriftReader& r, uint8_t type, uint8_t want, F&& on_elem) {
  if (type != kThriftList) r.corrupt("expected a list");
  uint8_t et;
  int64_t n = r.read_list_begin(&et);
  if (n > 0 && et != want) r.corrupt("list of the wrong element type");
  for (int64_t i = 0; i < n; i++) on_elem(r);
}

static ColumnChunkMeta read_column_meta(ThriftReader& r) {
  ColumnChunkMeta m;
  m.has_meta = true;
  thrift_read_struct(r, [&](ThriftReader& r, int16_t id, uint8_t type) {
    switch (id) {
      case 1: m.type = r.read_i32(type); return true;
      case 2:
        read_list(r, type, kThriftI32, [&](ThriftReader& r) { m.encodings.push_back(r.read_i32(kThriftI32)); });
        return true;
      case 3:
        read_list(r, type, kThriftBinary, [&](ThriftReader& r) { m.path.push_back(r.read_binary()); });
        return true;
      case 4: m.codec = r.read_i32(type); return true;
      case 5: m.num_values = r.read_int(type); return true;
      case 6: m.total_uncompressed_size = r.read_int(type); return true;
      case 7: m.total_compressed_size = r.read_int(type); return true;
      case 9: m.data_page_offset = r.read_int(type); return true;
      case 11: m.dictionary_page_offset = r.read_int(type); return true;
      default: return false;
    }
  });
  return m;
}

static ColumnChunkMeta read_column_chunk(ThriftReader& r) {
  ColumnChunkMeta m;
  bool external = false;
  thrift_read_struct(r, [&](ThriftReader& r, int16_t id, uint8_t type) {
    if (id == 1 && type == kThriftBinary) {
      external = !r.read_binary().empty();
      return true;
    }
    if (id == 3 && type == kThriftStruct) {
      m = read_column_meta(r);
      return true;
    }
    return false;
  });
  if (external) parquet_fail("column chunk stored in another file (file_path set): not supported");
  return m;
}

static RowGroupMeta read_row_group(ThriftReader& r) {
  RowGroupMeta g;
  thrift_read_struct(r, [&](ThriftReader& r, int16_t id, uint8_t type) {
    switch (id) {
      case 1:
        read_list(r, type, kThriftStruct, [&](ThriftReader& r) { g.columns.push_back(read_column_chunk(r)); });
        return true;
      case 2: g.total_byte_size = r.read_int(type); return true;
      case 3: g.num_rows = r.read_int(type); return true;
      default: return false;
    }
  });
  return g;
}

FileMeta parse_file_meta(const uint8_t* data, size_t n) {
  ThriftReader r(data, n);
  FileMeta f;
  thrift_read_struct(r, [&](ThriftReader& r, int16_t id, uint8_t type) {
    switch (id) {
      case 1: f.version = r.read_i32(type); return true;
      case 2:
        read_list(r, type, kThriftStruct, [&](ThriftReader& r) { f.schema.push_back(read_schema_element(r)); });
        return true;
      case 3: f.num_rows = r.read_int(type); return true;
      case 4:
        read_list(r, type, kThriftStruct, [&](ThriftReader& r) { f.row_groups.push_back(read_row_group(r)); });
        return true;
      case 6:
        if (type != kThriftBinary) return false;
        f.created_by = r.read_binary();
        return true;
      default: return false;
    }
  });
  return f;
}

PageHeader parse_page_header(const uint8_t* data, size_t n, size_t* header_size) {
  ThriftReader r(data, n);
  PageHeader h;
  thrift_read_struct(r, [&](ThriftReader& r, int16_t id, uint8_t type) {
    switch (id) {
      case 1: h.type = r.read_i32(type); return true;
      case 2: h.uncompressed_page_size = r.read_i32(type); return true;
      case 3: h.compressed_page_size = r.read_i32(type); return true;
      case 5:  // DataPageHeader
        if (type != kThriftStruct) return false;
        h.has_data_header = true;
        thrift_read_struct(r, [&](ThriftReader& r, int16_t id, uint8_t type) {
          switch (id) {
            case 1: h.num_values = r.read_i32(type); return true;
            case 2: h.encoding = r.read_i32(type); return true;
            case 3: h.def_level_encoding = r.read_i32(type); return true;
            case 4: h.rep_level_encoding = r.read_i32(type); return true;
            default: return false;
          }
        });
        return true;
      case 7:  // DictionaryPageHeader
        if (type != kThriftStruct) return false;
        h.has_data_header = true;
        thrift_read_struct(r, [&](ThriftReader& r, int16_t id, uint8_t type) {
          switch (id) {
            case 1: h.num_values = r.read_i32(type); return true;
            case 2: h.encoding = r.read_i32(type); return true;
            default: return false;
          }
        });
        return true;
      case 8:  // DataPageHeaderV2
        if (type != kThriftStruct) return false;
        h.has_data_header = true;
        thrift_read_struct(r, [&](ThriftReader& r, int16_t id, uint8_t type) {
          switch (id) {
            case 1: h.num_values = r.read_i32(type); return true;
            case 2: h.num_nulls = r.read_i32(type); return true;
            case 3: h.num_rows = r.read_i32(type); return true;
            case 4: h.encoding = r.read_i32(type); return true;
            case 5: h.def_levels_byte_length = r.read_i32(type); return true;
            case 6: h.rep_levels_byte_length = r.read_i32(type); return true;
            case 7: h.is_compressed = r.read_bool(type); return true;
            default: return false;
          }
        });
        return true;
      default: return false;
    }
  });
  *header_size = r.position();
  return h;
}

}  // namespace nanochat
