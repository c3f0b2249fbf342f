#include "parquet/column_reader.h"

#include <algorithm>
#include <climits>
#include <cstring>

#include "parquet/codecs.h"
#include "parquet/errors.h"

namespace nanochat {

static int bit_width_of(int max_level) {
  int w = 0;
  while ((1 << w) <= max_level) w++;
  return w;
}

// v1 levels: a 4-byte length, then RLE-hybrid; returns bytes consumed
static size_t read_v1_levels(const uint8_t* p, size_t size, int encoding, int max_level, int64_t n, uint8_t* out,
                             const char* what) {
  if (encoding != kRle) parquet_fail("%s levels in unsupported encoding %s", what, encoding_name(encoding));
  if (size < 4) parquet_fail("%s levels: missing length prefix", what);
  uint32_t len = load_le32(p);
  if (len > size - 4) parquet_fail("%s levels: length %u past the end of the page", what, len);
  rle_hybrid_decode(p + 4, len, bit_width_of(max_level), n, out);
  return 4 + (size_t)len;
}

static void check_levels(const uint8_t* levels, int64_t n, int max_level, const char* what) {
  for (int64_t i = 0; i < n; i++)
    if (levels[i] > max_level) parquet_fail("%s level %d above the maximum %d", what, levels[i], max_level);
}

static void decode_values(int encoding, const LeafInfo& leaf, const ColumnValues* dict, const uint8_t* p, size_t size,
                          int64_t n, ColumnValues& out) {
  int type = leaf.type;
  switch (encoding) {
    case kPlain: decode_plain(type, leaf.type_length, p, size, n, out); return;
    case kPlainDictionary:
    case kRleDictionary:
      if (!dict) parquet_fail("dictionary-encoded page but no dictionary page before it");
      decode_dictionary(type, *dict, p, size, n, out);
      return;
    case kDeltaBinaryPacked:
      if (type != kInt32 && type != kInt64) break;
      {
        size_t start = out.ints.size();
        decode_delta_binary_packed(p, size, n, out.ints);
        if (type == kInt32)  // INT32 deltas wrap at 32 bits
          for (size_t i = start; i < out.ints.size(); i++) out.ints[i] = (int32_t)(uint32_t)out.ints[i];
      }
      return;
    case kDeltaLengthByteArray:
      if (type != kByteArray) break;
      decode_delta_length_byte_array(p, size, n, out);
      return;
    case kDeltaByteArray:
      if (type != kByteArray && type != kFixedLenByteArray) break;
      decode_delta_byte_array(p, size, n, out);
      return;
    case kByteStreamSplit: decode_byte_stream_split(type, leaf.type_length, p, size, n, out); return;
    case kRle:
      if (type != kBoolean) break;
      decode_rle_boolean(p, size, n, out);
      return;
    default: break;
  }
  parquet_fail("unsupported encoding %s for %s values", encoding_name(encoding), physical_type_name(type));
}

static int64_t saturating_mul(int64_t a, int64_t b) {
  int64_t r;
  return __builtin_mul_overflow(a, b, &r) || r > INT64_MAX / 2 ? INT64_MAX / 2 : r;  // + floor stays finite
}

ChunkBudget chunk_budget(int64_t row_group_bytes, int num_leaves) {
  const ParquetLimits& lim = parquet_limits();
  int64_t bytes = std::max<int64_t>(row_group_bytes, 0), share = std::max(num_leaves, 1);
  ChunkBudget b;
  b.max_levels = std::min(lim.max_chunk_values,
                          (lim.levels_floor + saturating_mul(bytes, lim.levels_per_compressed_byte)) / share);
  b.max_string_bytes = std::min(
      lim.max_chunk_output_bytes,
      (lim.string_bytes_floor + saturating_mul(bytes, lim.string_bytes_per_compressed_byte)) / share);
  return b;
}

ColumnData read_column_chunk(int fd, int64_t file_size, const ColumnChunkMeta& meta, const LeafInfo& leaf, int64_t rows,
                             const ChunkBudget& budget) {
  const ParquetLimits& lim = parquet_limits();
  if (!meta.has_meta) parquet_fail("column chunk without metadata");
  if (meta.type != leaf.type)
    parquet_fail("column chunk type %s differs from the schema's %s", physical_type_name(meta.type),
                 physical_type_name(leaf.type));
  int64_t start = meta.data_page_offset;
  if (meta.dictionary_page_offset > 0 && meta.dictionary_page_offset < start) start = meta.dictionary_page_offset;
  int64_t len = meta.total_compressed_size;
  if (start < 4 || len <= 0 || len > file_size || start > file_size - 8 - len)
    parquet_fail("column chunk bytes [%lld, +%lld) outside the file (%lld bytes)", (long long)start, (long long)len,
                 (long long)file_size);
  if (meta.num_values < 0 || meta.num_values > lim.max_chunk_values)
    parquet_fail("column chunk claims %lld values", (long long)meta.num_values);
  // checked before anything is decoded: levels per row, and levels per compressed byte
  if (leaf.max_rep == 0 ? meta.num_values != rows : meta.num_values < rows)
    parquet_fail("column chunk holds %lld values for the row group's %lld rows", (long long)meta.num_values,
                 (long long)rows);
  if (meta.num_values > budget.max_levels)
    parquet_fail(
        "column chunk claims %lld values, more than the row group's bytes can hold (at most %lld for "
        "this column; corrupt or hostile file?)",
        (long long)meta.num_values, (long long)budget.max_levels);

  // per-thread scratch, reused call after call: fresh multi-MB buffers would cost a page
  // fault per 4 KiB on every chunk (about a tenth of the reading time on a text shard)
  static thread_local ByteBuffer chunk_buf, page_buf;
  struct Trim {  // don't keep an unusually large buffer alive in the thread
    ~Trim() {
      for (ByteBuffer* b : {&chunk_buf, &page_buf})
        if (b->capacity > (64u << 20)) *b = ByteBuffer();
    }
  } trim;
  uint8_t* chunk = chunk_buf.reserve((size_t)len);
  pread_exact(fd, chunk, (size_t)len, start);

  ColumnData out;
  ColumnValues dict;
  out.values.max_string_bytes = dict.max_string_bytes = budget.max_string_bytes;
  bool have_dict = false;
  Decompressor dec;
  int def_max = leaf.max_def, rep_max = leaf.max_rep;
  size_t pos = 0;
  int page_index = -1;
  while (out.num_levels < meta.num_values) {
    page_index++;
    if (pos >= (size_t)len)
      parquet_fail("column chunk ends after %lld of its %lld values", (long long)out.num_levels,
                   (long long)meta.num_values);
    size_t page_start = pos;
    try {
      size_t header_size = 0;
      PageHeader h = parse_page_header(chunk + pos, (size_t)len - pos, &header_size);
      pos += header_size;
      if (h.compressed_page_size < 0 || (size_t)h.compressed_page_size > (size_t)len - pos)
        parquet_fail("compressed page size %d past the end of the column chunk", h.compressed_page_size);
      if (h.uncompressed_page_size < 0 || h.uncompressed_page_size > lim.max_page_bytes)
        parquet_fail("uncompressed page size %d out of range", h.uncompressed_page_size);
      const uint8_t* raw = chunk + pos;
      size_t raw_n = (size_t)h.compressed_page_size;
      size_t page_n = (size_t)h.uncompressed_page_size;
      pos += raw_n;
      if (h.type != kDataPage && h.type != kDataPageV2 && h.type != kDictionaryPage) continue;  // index pages
      if (!h.has_data_header)
        parquet_fail("%s page without its header", h.type == kDictionaryPage ? "dictionary" : "data");
      if (h.num_values < 0 || h.num_values > lim.max_page_values || h.num_values > budget.max_levels)
        parquet_fail("page claims %d values", h.num_values);
      int64_t n = h.num_values;

      if (h.type == kDictionaryPage) {
        if (have_dict) parquet_fail("second dictionary page in one column chunk");
        if (h.encoding != kPlain && h.encoding != kPlainDictionary)
          parquet_fail("dictionary page in unsupported encoding %s", encoding_name(h.encoding));
        dec.check_declared_size(meta.codec, raw, raw_n, page_n);
        uint8_t* page = page_buf.reserve(page_n + 1);
        dec.decompress(meta.codec, raw, raw_n, page, page_n);
        decode_plain(leaf.type, leaf.type_length, page, page_n, n, dict);
        have_dict = true;
        continue;
      }

      if (n > meta.num_values - out.num_levels)
        parquet_fail("pages hold more values than the column chunk's %lld", (long long)meta.num_values);
      if (h.type == kDataPageV2 && (h.num_nulls < 0 || h.num_nulls > n || h.num_rows < 0 || h.num_rows > n))
        parquet_fail("v2 page: %d nulls and %d rows in %lld values", h.num_nulls, h.num_rows, (long long)n);
      size_t old = (size_t)out.num_levels;
      if (rep_max > 0) out.rep.resize(old + (size_t)n);
      if (def_max > 0) out.def.resize(old + (size_t)n);
      const uint8_t* values;
      size_t values_n;
      if (h.type == kDataPage) {
        dec.check_declared_size(meta.codec, raw, raw_n, page_n);
        uint8_t* page = page_buf.reserve(page_n + 1);
        dec.decompress(meta.codec, raw, raw_n, page, page_n);
        size_t off = 0;
        if (rep_max > 0)
          off += read_v1_levels(page + off, page_n - off, h.rep_level_encoding, rep_max, n, out.rep.data() + old,
                                "repetition");
        if (def_max > 0)
          off += read_v1_levels(page + off, page_n - off, h.def_level_encoding, def_max, n, out.def.data() + old,
                                "definition");
        values = page + off;
        values_n = page_n - off;
      } else {  // v2: levels first, never compressed; then the (maybe compressed) values
        if (h.rep_levels_byte_length < 0 || h.def_levels_byte_length < 0 ||
            (int64_t)h.rep_levels_byte_length + h.def_levels_byte_length > (int64_t)raw_n ||
            (int64_t)h.rep_levels_byte_length + h.def_levels_byte_length > (int64_t)page_n)
          parquet_fail("level byte lengths %d + %d larger than the page", h.rep_levels_byte_length,
                       h.def_levels_byte_length);
        size_t levels_n = (size_t)h.rep_levels_byte_length + (size_t)h.def_levels_byte_length;
        if (rep_max > 0)
          rle_hybrid_decode(raw, (size_t)h.rep_levels_byte_length, bit_width_of(rep_max), n, out.rep.data() + old);
        if (def_max > 0)
          rle_hybrid_decode(raw + h.rep_levels_byte_length, (size_t)h.def_levels_byte_length, bit_width_of(def_max), n,
                            out.def.data() + old);
        values_n = page_n - levels_n;
        if (h.is_compressed && meta.codec != kUncompressed) {
          dec.check_declared_size(meta.codec, raw + levels_n, raw_n - levels_n, values_n);
          uint8_t* page = page_buf.reserve(values_n + 1);
          dec.decompress(meta.codec, raw + levels_n, raw_n - levels_n, page, values_n);
          values = page;
        } else {
          if (raw_n != page_n) parquet_fail("uncompressed v2 page: sizes %zu and %zu differ", raw_n, page_n);
          values = raw + levels_n;
        }
      }
      if (rep_max > 0) check_levels(out.rep.data() + old, n, rep_max, "repetition");
      int64_t non_null = n;
      if (def_max > 0) {
        check_levels(out.def.data() + old, n, def_max, "definition");
        non_null = 0;
        for (int64_t i = 0; i < n; i++) non_null += out.def[old + i] == def_max;
      }
      decode_values(h.encoding, leaf, have_dict ? &dict : nullptr, values, values_n, non_null, out.values);
      out.num_levels += n;
    } catch (const ParquetError& e) {
      throw ParquetError(
          strprintf("page %d at byte %lld: %s", page_index, (long long)(start + (int64_t)page_start), e.what()));
    }
  }
  return out;
}

}  // namespace nanochat
