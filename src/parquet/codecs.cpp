#include "parquet/codecs.h"

#include <snappy.h>
#include <zlib.h>
#include <zstd.h>

#include <cstring>
#include <string>

#include "parquet/errors.h"
#include "parquet/metadata.h"

namespace nanochat {

Decompressor::Decompressor() = default;
Decompressor::~Decompressor() { ZSTD_freeDCtx((ZSTD_DCtx*)zstd_); }

static void gzip_decompress(const uint8_t* src, size_t n, uint8_t* out, size_t out_n) {
  z_stream z;
  std::memset(&z, 0, sizeof z);
  if (inflateInit2(&z, 32 + MAX_WBITS) != Z_OK) parquet_fail("GZIP: zlib init failed");  // 32: gzip or zlib header
  z.next_out = out;
  z.avail_out = (uInt)out_n;
  size_t used = 0;
  int rc = Z_OK;
  // a page may hold several concatenated gzip members
  while (used < n) {
    size_t chunk = n - used;
    z.next_in = const_cast<Bytef*>(src + used);
    z.avail_in = (uInt)chunk;
    rc = inflate(&z, Z_FINISH);
    used += chunk - z.avail_in;
    if (rc != Z_STREAM_END) break;
    if (used < n && inflateReset(&z) != Z_OK) break;
  }
  size_t produced = out_n - z.avail_out;
  std::string msg = z.msg ? z.msg : "";
  inflateEnd(&z);
  if (rc != Z_STREAM_END) parquet_fail("GZIP decompression failed: zlib error %d %s", rc, msg.c_str());
  if (produced != out_n) parquet_fail("GZIP page decompressed to %zu bytes, header says %zu", produced, out_n);
}

// The most bytes `n` compressed bytes can expand to, from each format's densest element:
// a zstd RLE block (3-byte header + 1 byte) gives at most 128 KiB, a snappy copy of 64 bytes
// takes 3 bytes, deflate expands at most 1032:1. A page header asking for more is corrupt,
// and is refused before its buffer is allocated.
static uint64_t max_decompressed_size(int codec, size_t n) {
  switch (codec) {
    case kUncompressed: return n;
    case kZstd: return (uint64_t)n * 32768;
    case kSnappy: return (uint64_t)n * 24 + 16;
    case kGzip: return ((uint64_t)n + 64) * 1032;
    default:
      parquet_fail("unsupported compression codec %s (this reader has UNCOMPRESSED, ZSTD, SNAPPY, GZIP)",
                   codec_name(codec));
  }
}

void Decompressor::check_declared_size(int codec, const uint8_t* src, size_t n, size_t out_n) {
  if (n == 0 && out_n == 0) return;  // an empty values section (a page of nulls)
  if (out_n > max_decompressed_size(codec, n))
    parquet_fail("page header says %zu bytes, more than %zu compressed bytes of %s can hold", out_n, n,
                 codec_name(codec));
  if (codec == kZstd) {
    unsigned long long declared = ZSTD_getFrameContentSize(src, n);
    if (declared == ZSTD_CONTENTSIZE_ERROR) parquet_fail("ZSTD decompression failed: not a zstd frame");
    if (declared != ZSTD_CONTENTSIZE_UNKNOWN && declared > out_n)
      parquet_fail("ZSTD frame holds %llu bytes, page header says %zu", declared, out_n);
  } else if (codec == kSnappy) {
    size_t declared = 0;
    if (!snappy::GetUncompressedLength((const char*)src, n, &declared))
      parquet_fail("SNAPPY decompression failed: bad length header");
    if (declared != out_n) parquet_fail("SNAPPY page holds %zu bytes, header says %zu", declared, out_n);
  }
}

void Decompressor::decompress(int codec, const uint8_t* src, size_t n, uint8_t* out, size_t out_n) {
  if (n == 0 && out_n == 0) return;
  switch (codec) {
    case kUncompressed:
      if (n != out_n) parquet_fail("uncompressed page: compressed size %zu != uncompressed size %zu", n, out_n);
      if (n) std::memcpy(out, src, n);
      return;
    case kZstd: {
      if (!zstd_) zstd_ = ZSTD_createDCtx();
      if (!zstd_) parquet_fail("ZSTD: out of memory");
      size_t got = ZSTD_decompressDCtx((ZSTD_DCtx*)zstd_, out, out_n, src, n);
      if (ZSTD_isError(got)) parquet_fail("ZSTD decompression failed: %s", ZSTD_getErrorName(got));
      if (got != out_n) parquet_fail("ZSTD page decompressed to %zu bytes, header says %zu", got, out_n);
      return;
    }
    case kSnappy: {
      size_t len = 0;
      if (!snappy::GetUncompressedLength((const char*)src, n, &len))
        parquet_fail("SNAPPY decompression failed: bad length header");
      if (len != out_n) parquet_fail("SNAPPY page holds %zu bytes, header says %zu", len, out_n);
      if (!snappy::RawUncompress((const char*)src, n, (char*)out))
        parquet_fail("SNAPPY decompression failed: corrupt data");
      return;
    }
    case kGzip:
      if (out_n > UINT32_MAX || n > UINT32_MAX) parquet_fail("GZIP page larger than 4 GiB");
      gzip_decompress(src, n, out, out_n);
      return;
    default:
      parquet_fail("unsupported compression codec %s (this reader has UNCOMPRESSED, ZSTD, SNAPPY, GZIP)",
                   codec_name(codec));
  }
}

}  // namespace nanochat
