#include "parquet/encodings.h"

#include <algorithm>
#include <cstring>

#include "parquet/errors.h"
#include "parquet/metadata.h"

namespace nanochat {

int64_t ColumnValues::size(int type) const {
  if (type == kFloat || type == kDouble) return (int64_t)doubles.size();
  if (type == kBoolean || type == kInt32 || type == kInt64) return (int64_t)ints.size();
  return (int64_t)strings.size();
}

void ColumnValues::add_string(const uint8_t* p, size_t n) {
  string_bytes += (int64_t)n;
  int64_t cap = std::min(max_string_bytes, parquet_limits().max_chunk_output_bytes);
  if (string_bytes > cap)
    parquet_fail(
        "column chunk decodes to more than %lld bytes of strings, more than its size can hold "
        "(corrupt or hostile file?)",
        (long long)cap);
  strings.emplace_back((const char*)p, n);
}

static uint64_t read_uleb(const uint8_t*& p, const uint8_t* end) {
  uint64_t v = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (p >= end) parquet_fail("truncated varint in page data");
    uint8_t b = *p++;
    v |= uint64_t(b & 0x7f) << shift;
    if (!(b & 0x80)) return v;
  }
  parquet_fail("varint longer than 10 bytes in page data");
}

static int64_t read_zigzag(const uint8_t*& p, const uint8_t* end) {
  uint64_t v = read_uleb(p, end);
  return (int64_t)(v >> 1) ^ -(int64_t)(v & 1);
}

// `count` values of `bw` bits packed LSB-first, starting at bit 0 of p (bw <= 64)
template <class T>
static void unpack_bits(const uint8_t* p, int bw, int64_t count, T* out) {
  uint64_t bit = 0;
  for (int64_t i = 0; i < count; i++) {
    uint64_t v = 0;
    for (int got = 0; got < bw;) {  // up to 8 bits per step, from the byte holding `bit`
      int off = (int)(bit & 7);
      int take = 8 - off < bw - got ? 8 - off : bw - got;
      v |= uint64_t((p[bit >> 3] >> off) & ((1u << take) - 1)) << got;
      got += take;
      bit += take;
    }
    out[i] = (T)v;
  }
}

template <class T>
size_t rle_hybrid_decode(const uint8_t* data, size_t size, int bit_width, int64_t n, T* out) {
  if (bit_width < 0 || bit_width > 32) parquet_fail("RLE bit width %d out of range", bit_width);
  const uint8_t* p = data;
  const uint8_t* end = data + size;
  int value_bytes = (bit_width + 7) / 8;
  uint64_t max_value = bit_width == 32 ? UINT32_MAX : (uint64_t(1) << bit_width) - 1;
  int64_t done = 0;
  while (done < n) {
    uint64_t header = read_uleb(p, end);
    uint64_t count = header >> 1;
    int64_t left = n - done;
    if (header & 1) {                                                          // bit-packed: count groups of 8 values
      uint64_t values = count >= (uint64_t)left ? (uint64_t)left : count * 8;  // left < 2^31
      if (values > (uint64_t)left) values = (uint64_t)left;
      uint64_t need = (values * bit_width + 7) / 8;  // the last run may be cut short
      if (need > (uint64_t)(end - p)) parquet_fail("RLE/bit-packed run past the end of its data");
      unpack_bits(p, bit_width, (int64_t)values, out + done);
      // 8 values of bw bits take bw bytes; a run claiming more than is left ends the data
      uint64_t bytes_left = (uint64_t)(end - p);
      p += count > bytes_left ? bytes_left : std::min<uint64_t>(count * (uint64_t)bit_width, bytes_left);
      done += (int64_t)values;
    } else {  // RLE: one value repeated count times
      if (value_bytes > end - p) parquet_fail("RLE run past the end of its data");
      uint64_t v = 0;
      for (int i = 0; i < value_bytes; i++) v |= uint64_t(p[i]) << (8 * i);
      p += value_bytes;
      if (v > max_value) parquet_fail("RLE value wider than its bit width");
      int64_t take = count > (uint64_t)left ? left : (int64_t)count;
      for (int64_t i = 0; i < take; i++) out[done + i] = (T)v;
      done += take;
    }
  }
  return (size_t)(p - data);
}
template size_t rle_hybrid_decode<uint8_t>(const uint8_t*, size_t, int, int64_t, uint8_t*);
template size_t rle_hybrid_decode<uint32_t>(const uint8_t*, size_t, int, int64_t, uint32_t*);

static void need_bytes(uint64_t need, size_t have, const char* what) {
  if (need > have)
    parquet_fail("%s: page data too short (%llu bytes needed, %zu left)", what, (unsigned long long)need, have);
}

size_t decode_plain(int type, int type_length, const uint8_t* data, size_t size, int64_t n, ColumnValues& out) {
  const uint8_t* p = data;
  const uint8_t* end = data + size;
  switch (type) {
    case kBoolean: {
      need_bytes(((uint64_t)n + 7) / 8, size, "PLAIN BOOLEAN");
      for (int64_t i = 0; i < n; i++) out.ints.push_back((p[i >> 3] >> (i & 7)) & 1);
      return (size_t)((n + 7) / 8);
    }
    case kInt32: {
      need_bytes((uint64_t)n * 4, size, "PLAIN INT32");
      for (int64_t i = 0; i < n; i++) out.ints.push_back((int32_t)load_le32(p + 4 * i));
      return (size_t)n * 4;
    }
    case kInt64:
    case kDouble: {
      need_bytes((uint64_t)n * 8, size, type == kInt64 ? "PLAIN INT64" : "PLAIN DOUBLE");
      for (int64_t i = 0; i < n; i++) {
        uint64_t v;
        std::memcpy(&v, p + 8 * i, 8);
        if (type == kInt64) out.ints.push_back((int64_t)v);
        else {
          double d;
          std::memcpy(&d, &v, 8);
          out.doubles.push_back(d);
        }
      }
      return (size_t)n * 8;
    }
    case kFloat: {
      need_bytes((uint64_t)n * 4, size, "PLAIN FLOAT");
      for (int64_t i = 0; i < n; i++) {
        float f;
        std::memcpy(&f, p + 4 * i, 4);
        out.doubles.push_back(f);
      }
      return (size_t)n * 4;
    }
    case kByteArray: {
      for (int64_t i = 0; i < n; i++) {
        if (end - p < 4) parquet_fail("PLAIN BYTE_ARRAY: value %lld's length past the end of the page", (long long)i);
        uint32_t len = load_le32(p);
        p += 4;
        if (len > (uint64_t)(end - p))
          parquet_fail("PLAIN BYTE_ARRAY: value %lld (%u bytes) past the end of the page", (long long)i, len);
        out.add_string(p, len);
        p += len;
      }
      return (size_t)(p - data);
    }
    case kFixedLenByteArray:
    case kInt96: {
      int64_t w = type == kInt96 ? 12 : type_length;
      if (w <= 0) parquet_fail("FIXED_LEN_BYTE_ARRAY with type_length %lld", (long long)w);
      need_bytes((uint64_t)n * (uint64_t)w, size, "PLAIN FIXED_LEN_BYTE_ARRAY");
      for (int64_t i = 0; i < n; i++) out.add_string(p + i * w, (size_t)w);
      return (size_t)(n * w);
    }
    default: parquet_fail("unsupported physical type %d", type);
  }
}

void decode_dictionary(int type, const ColumnValues& dict, const uint8_t* data, size_t size, int64_t n,
                       ColumnValues& out) {
  if (n == 0) return;
  if (size < 1) parquet_fail("dictionary-encoded page without its bit-width byte");
  int bw = data[0];
  std::vector<uint32_t> idx((size_t)n);
  rle_hybrid_decode(data + 1, size - 1, bw, n, idx.data());
  int64_t dict_n = dict.size(type);
  for (uint32_t i : idx)
    if ((int64_t)i >= dict_n)
      parquet_fail("dictionary index %u out of range (dictionary has %lld values)", i, (long long)dict_n);
  if (type == kFloat || type == kDouble) {
    for (uint32_t i : idx) out.doubles.push_back(dict.doubles[i]);
  } else if (type == kBoolean || type == kInt32 || type == kInt64) {
    for (uint32_t i : idx) out.ints.push_back(dict.ints[i]);
  } else {
    // n indices can ask for n copies of the longest entry: count the bytes before copying any
    int64_t bytes = 0;
    for (uint32_t i : idx) bytes += (int64_t)dict.strings[i].size();
    int64_t cap = std::min(out.max_string_bytes, parquet_limits().max_chunk_output_bytes);
    if (bytes > cap - out.string_bytes)
      parquet_fail(
          "dictionary indices ask for %lld bytes of strings, more than the column chunk's size can hold "
          "(at most %lld; corrupt or hostile file?)",
          (long long)(out.string_bytes + bytes), (long long)cap);
    for (uint32_t i : idx) out.add_string((const uint8_t*)dict.strings[i].data(), dict.strings[i].size());
  }
}

size_t decode_delta_binary_packed(const uint8_t* data, size_t size, int64_t n, std::vector<int64_t>& out) {
  const uint8_t* p = data;
  const uint8_t* end = data + size;
  uint64_t block_size = read_uleb(p, end);
  uint64_t miniblocks = read_uleb(p, end);
  uint64_t total = read_uleb(p, end);
  int64_t first = read_zigzag(p, end);
  if (block_size == 0 || block_size % 128 || block_size > (1u << 16) || miniblocks == 0 || block_size % miniblocks ||
      (block_size / miniblocks) % 32)
    parquet_fail("DELTA_BINARY_PACKED: bad block size %llu / %llu miniblocks", (unsigned long long)block_size,
                 (unsigned long long)miniblocks);
  if (total != (uint64_t)n)
    parquet_fail("DELTA_BINARY_PACKED: %llu values, page needs %lld", (unsigned long long)total, (long long)n);
  if (n == 0) return (size_t)(p - data);
  uint64_t per_mini = block_size / miniblocks;
  std::vector<uint64_t> deltas(per_mini);
  uint64_t value = (uint64_t)first;  // wrapping arithmetic, as the format specifies
  out.push_back((int64_t)value);
  int64_t done = 1;
  while (done < n) {
    uint64_t min_delta = (uint64_t)read_zigzag(p, end);
    if ((uint64_t)(end - p) < miniblocks) parquet_fail("DELTA_BINARY_PACKED: truncated block header");
    const uint8_t* widths = p;
    p += miniblocks;
    for (uint64_t m = 0; m < miniblocks && done < n; m++) {
      int bw = widths[m];
      if (bw > 64) parquet_fail("DELTA_BINARY_PACKED: bit width %d", bw);
      uint64_t bytes = per_mini * (uint64_t)bw / 8;
      if (bytes > (uint64_t)(end - p)) parquet_fail("DELTA_BINARY_PACKED: miniblock past the end of the page");
      unpack_bits(p, bw, (int64_t)per_mini, deltas.data());
      p += bytes;
      for (uint64_t i = 0; i < per_mini && done < n; i++, done++) {
        value += min_delta + deltas[i];
        out.push_back((int64_t)value);
      }
    }
  }
  return (size_t)(p - data);
}

// lengths (DELTA_BINARY_PACKED) then the bytes back to back; used by both delta string encodings
static size_t delta_lengths_and_bytes(const uint8_t* data, size_t size, int64_t n, std::vector<int64_t>& lengths) {
  size_t used = decode_delta_binary_packed(data, size, n, lengths);
  uint64_t total = 0;
  for (int64_t len : lengths) {
    if (len < 0) parquet_fail("DELTA_LENGTH_BYTE_ARRAY: negative length");
    total += (uint64_t)len;
    if (total > size - used) parquet_fail("DELTA_LENGTH_BYTE_ARRAY: values past the end of the page");
  }
  return used;
}

void decode_delta_length_byte_array(const uint8_t* data, size_t size, int64_t n, ColumnValues& out) {
  std::vector<int64_t> lengths;
  const uint8_t* p = data + delta_lengths_and_bytes(data, size, n, lengths);
  for (int64_t len : lengths) {
    out.add_string(p, (size_t)len);
    p += len;
  }
}

void decode_delta_byte_array(const uint8_t* data, size_t size, int64_t n, ColumnValues& out) {
  std::vector<int64_t> prefixes, suffixes;
  size_t used = decode_delta_binary_packed(data, size, n, prefixes);
  const uint8_t* p = data + used;
  p += delta_lengths_and_bytes(p, size - used, n, suffixes);
  std::string prev, cur;
  for (int64_t i = 0; i < n; i++) {
    if (prefixes[i] < 0 || (uint64_t)prefixes[i] > prev.size())
      parquet_fail("DELTA_BYTE_ARRAY: prefix length %lld longer than the previous value", (long long)prefixes[i]);
    cur.assign(prev, 0, (size_t)prefixes[i]);
    cur.append((const char*)p, (size_t)suffixes[i]);
    p += suffixes[i];
    out.add_string((const uint8_t*)cur.data(), cur.size());
    std::swap(prev, cur);
  }
}

void decode_byte_stream_split(int type, int type_length, const uint8_t* data, size_t size, int64_t n,
                              ColumnValues& out) {
  int w = type == kFloat || type == kInt32    ? 4
          : type == kDouble || type == kInt64 ? 8
          : type == kFixedLenByteArray        ? type_length
                                              : 0;
  if (w <= 0) parquet_fail("BYTE_STREAM_SPLIT on an unsupported type");
  need_bytes((uint64_t)n * (uint64_t)w, size, "BYTE_STREAM_SPLIT");
  // byte k of value i lives in stream k at position i; regather into PLAIN order
  std::vector<uint8_t> plain((size_t)(n * w));
  for (int64_t i = 0; i < n; i++)
    for (int k = 0; k < w; k++) plain[(size_t)(i * w + k)] = data[(size_t)(k * n + i)];
  decode_plain(type, type_length, plain.data(), plain.size(), n, out);
}

void decode_rle_boolean(const uint8_t* data, size_t size, int64_t n, ColumnValues& out) {
  if (size < 4) parquet_fail("RLE BOOLEAN: missing length prefix");
  uint32_t len = load_le32(data);
  if (len > size - 4) parquet_fail("RLE BOOLEAN: length %u past the end of the page", len);
  std::vector<uint8_t> bits((size_t)n);
  rle_hybrid_decode(data + 4, len, 1, n, bits.data());
  for (uint8_t b : bits) out.ints.push_back(b);
}

}  // namespace nanochat
