// Parquet's value encodings, each decoding `n` values from a bounded byte range and
// appending them to a ColumnValues. Every read is checked against the range's end.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace nanochat {

// the non-null values of a column chunk, in one vector chosen by physical type
struct ColumnValues {
  std::vector<std::string> strings;      // BYTE_ARRAY, FIXED_LEN_BYTE_ARRAY, INT96 (raw bytes)
  std::vector<int64_t> ints;             // BOOLEAN (0/1), INT32, INT64
  std::vector<double> doubles;           // FLOAT, DOUBLE
  int64_t string_bytes = 0;              // total bytes in `strings`, capped by ParquetLimits
  int64_t max_string_bytes = INT64_MAX;  // and by what the chunk's bytes can hold (ChunkBudget)
  int64_t size(int type) const;
  void add_string(const uint8_t* p, size_t n);
};

// RLE / bit-packed hybrid (levels, dictionary indices, booleans): exactly n values of
// bit_width bits; returns the bytes consumed
template <class T>
size_t rle_hybrid_decode(const uint8_t* data, size_t size, int bit_width, int64_t n, T* out);

// returns bytes consumed
size_t decode_plain(int type, int type_length, const uint8_t* data, size_t size, int64_t n, ColumnValues& out);
// RLE_DICTIONARY / PLAIN_DICTIONARY data: a bit-width byte, then RLE-hybrid indices into dict
void decode_dictionary(int type, const ColumnValues& dict, const uint8_t* data, size_t size, int64_t n,
                       ColumnValues& out);
// appends n values (exactly the block's total count must be >= n); returns bytes consumed
size_t decode_delta_binary_packed(const uint8_t* data, size_t size, int64_t n, std::vector<int64_t>& out);
void decode_delta_length_byte_array(const uint8_t* data, size_t size, int64_t n, ColumnValues& out);
void decode_delta_byte_array(const uint8_t* data, size_t size, int64_t n, ColumnValues& out);
void decode_byte_stream_split(int type, int type_length, const uint8_t* data, size_t size, int64_t n,
                              ColumnValues& out);
// BOOLEAN with RLE encoding (data page v2): a 4-byte length, then RLE-hybrid with width 1
void decode_rle_boolean(const uint8_t* data, size_t size, int64_t n, ColumnValues& out);

}  // namespace nanochat
