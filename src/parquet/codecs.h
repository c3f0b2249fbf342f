// Page decompression: UNCOMPRESSED, ZSTD (libzstd), SNAPPY (libsnappy), GZIP (zlib).
// The output size is the page header's uncompressed size, checked by the caller against
// ParquetLimits; a codec that yields any other size is an error.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>

namespace nanochat {

// a growable byte buffer that, unlike std::vector, does not zero what it allocates: pages
// are decompressed straight into it and reused page after page
struct ByteBuffer {
  std::unique_ptr<uint8_t[]> data;
  size_t capacity = 0;
  uint8_t* reserve(size_t n) {
    if (n > capacity) {
      data.reset(new uint8_t[n]);
      capacity = n;
    }
    return data.get();
  }
};

// one per reading thread and column chunk: it owns the zstd context
class Decompressor {
 public:
  Decompressor();
  ~Decompressor();
  Decompressor(const Decompressor&) = delete;
  Decompressor& operator=(const Decompressor&) = delete;
  // before allocating out_n bytes: the size the compressed stream declares, where it
  // declares one (zstd frame header, snappy preamble, gzip trailer), must be out_n
  void check_declared_size(int codec, const uint8_t* src, size_t n, size_t out_n);
  // decompresses src[0..n) with `codec` into exactly `out_n` bytes at `out`
  void decompress(int codec, const uint8_t* src, size_t n, uint8_t* out, size_t out_n);

 private:
  void* zstd_ = nullptr;  // ZSTD_DCtx*, created on first use
};

}  // namespace nanochat
