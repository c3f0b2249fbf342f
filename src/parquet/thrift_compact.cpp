#include "parquet/thrift_compact.h"

namespace nanochat {

void ThriftReader::corrupt(const char* what) const {
  parquet_fail("corrupt Thrift metadata: %s at byte %zu of %zu", what, position(), (size_t)(end - begin));
}

uint8_t ThriftReader::read_byte() {
  if (p >= end) corrupt("unexpected end");
  return *p++;
}

uint64_t ThriftReader::read_varint() {
  uint64_t v = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    uint8_t b = read_byte();
    v |= uint64_t(b & 0x7f) << shift;
    if (!(b & 0x80)) return v;
  }
  corrupt("varint longer than 10 bytes");
}

std::string ThriftReader::read_binary() {
  uint64_t n = read_varint();
  if (n > (uint64_t)(end - p)) corrupt("string longer than the bytes left");
  std::string s((const char*)p, (size_t)n);
  p += n;
  return s;
}

void ThriftReader::skip_binary() {
  uint64_t n = read_varint();
  if (n > (uint64_t)(end - p)) corrupt("string longer than the bytes left");
  p += n;
}

int64_t ThriftReader::read_int(uint8_t type) {
  switch (type) {
    case kThriftTrue: return 1;
    case kThriftFalse: return 0;
    case kThriftByte: return (int8_t)read_byte();
    case kThriftI16:
    case kThriftI32:
    case kThriftI64: return read_zigzag();
    default: corrupt("expected an integer field");
  }
}

int32_t ThriftReader::read_i32(uint8_t type) {
  int64_t v = read_int(type);
  if (v < INT32_MIN || v > INT32_MAX) corrupt("i32 out of range");
  return (int32_t)v;
}

bool ThriftReader::read_bool(uint8_t type) {
  if (type == kThriftTrue) return true;
  if (type == kThriftFalse) return false;
  return read_int(type) != 0;
}

int64_t ThriftReader::read_list_begin(uint8_t* elem_type) {
  uint8_t header = read_byte();
  *elem_type = header & 0x0f;
  int64_t n = header >> 4;
  if (n == 15) {
    uint64_t big = read_varint();
    if (big > (uint64_t)kMaxListSize) corrupt("list too long");
    n = (int64_t)big;
  }
  // every element takes at least one byte, so a list can't claim more than the bytes left
  if (n > end - p) corrupt("list longer than the bytes left");
  return n;
}

void ThriftReader::skip(uint8_t type) {
  switch (type) {
    case kThriftTrue:
    case kThriftFalse: return;
    case kThriftByte: read_byte(); return;
    case kThriftI16:
    case kThriftI32:
    case kThriftI64: read_varint(); return;
    case kThriftDouble:
      if (end - p < 8) corrupt("unexpected end");
      p += 8;
      return;
    case kThriftBinary: skip_binary(); return;
    case kThriftStruct: thrift_read_struct(*this, [](ThriftReader&, int16_t, uint8_t) { return false; }); return;
    case kThriftList:
    case kThriftSet: {
      if (++depth > kMaxDepth) corrupt("lists nested too deeply");
      uint8_t et;
      int64_t n = read_list_begin(&et);
      for (int64_t i = 0; i < n; i++) {
        if (et == kThriftTrue || et == kThriftFalse) read_byte();  // list bools take a byte
        else skip(et);
      }
      depth--;
      return;
    }
    case kThriftMap: {
      if (++depth > kMaxDepth) corrupt("maps nested too deeply");
      uint64_t n = read_varint();
      if (n > (uint64_t)(end - p)) corrupt("map larger than the bytes left");
      if (n) {
        uint8_t kv = read_byte();
        for (uint64_t i = 0; i < n; i++) {
          for (uint8_t t : {uint8_t(kv >> 4), uint8_t(kv & 0x0f)}) {
            if (t == kThriftTrue || t == kThriftFalse) read_byte();
            else skip(t);
          }
        }
      }
      depth--;
      return;
    }
    default: corrupt("unknown field type");
  }
}

}  // namespace nanochat
