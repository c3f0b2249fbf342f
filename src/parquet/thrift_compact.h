// Thrift compact protocol, read side only, over a bounded byte range: what parquet's footer
// and page headers are written in. Every length is checked against the bytes left, list
// sizes and nesting depth are capped, so corrupt metadata gives a ParquetError, never a
// crash, a huge allocation or an endless loop.
#pragma once
#include <cstdint>
#include <string>

#include "parquet/errors.h"

namespace nanochat {

// compact-protocol wire types
enum ThriftType : uint8_t {
  kThriftStop = 0,
  kThriftTrue = 1,
  kThriftFalse = 2,
  kThriftByte = 3,
  kThriftI16 = 4,
  kThriftI32 = 5,
  kThriftI64 = 6,
  kThriftDouble = 7,
  kThriftBinary = 8,
  kThriftList = 9,
  kThriftSet = 10,
  kThriftMap = 11,
  kThriftStruct = 12
};

struct ThriftReader {
  const uint8_t* begin;
  const uint8_t* p;
  const uint8_t* end;
  int depth = 0;  // struct/list nesting, capped at kMaxDepth

  static constexpr int kMaxDepth = 64;
  static constexpr int64_t kMaxListSize = 1 << 24;

  ThriftReader(const uint8_t* data, size_t n) : begin(data), p(data), end(data + n) {}

  size_t position() const { return (size_t)(p - begin); }
  [[noreturn]] void corrupt(const char* what) const;

  uint64_t read_varint();
  int64_t read_zigzag() {
    uint64_t v = read_varint();
    return (int64_t)(v >> 1) ^ -(int64_t)(v & 1);
  }
  uint8_t read_byte();
  std::string read_binary();
  void skip_binary();

  // a value of wire type `type` as an integer (bool, byte, i16, i32, i64)
  int64_t read_int(uint8_t type);
  int32_t read_i32(uint8_t type);
  bool read_bool(uint8_t type);  // a struct field's bool lives in its type nibble
  // list header: element type and size; size checked against the bytes left
  int64_t read_list_begin(uint8_t* elem_type);
  void skip(uint8_t type);
};

// Calls on_field(reader, field_id, wire_type) for each field of one struct, with the
// reader positioned at the field's value; on_field returns false for fields it does not
// know, which are skipped.
template <class F>
void thrift_read_struct(ThriftReader& r, F&& on_field) {
  if (++r.depth > ThriftReader::kMaxDepth) r.corrupt("structs nested too deeply");
  int16_t last_id = 0;
  for (;;) {
    uint8_t header = r.read_byte();
    uint8_t type = header & 0x0f;
    if (type == kThriftStop) break;
    int16_t delta = header >> 4;
    int16_t id = delta ? (int16_t)(last_id + delta) : (int16_t)r.read_zigzag();
    last_id = id;
    if (!on_field(r, id, type)) r.skip(type);
  }
  r.depth--;
}

}  // namespace nanochat
