// A few rows times a weight on the CPU (the decode step of a batch of chats: 2 to 16 rows; int8
// weights with bf16 rows also a prompt's chunk, up to 64),
// y = x @ w^T, times a scale per output for int8 weights. MKL's sgemm packs its operands on every
// call, which at 16 rows and 256-wide layers cost more than the products (perf: its copy routine
// 30% of a 16-row step, its kernel 17%); oneDNN's bf16 GEMM sets itself up on every call; and the
// matvecs beside this file reduce every (row, output) dot on its own. Here a tile of 4 input rows
// by 4 outputs keeps its 16 sums in registers across the whole width, the 4 weight rows read once
// per tile from L1; int8 and bf16 weights widen to fp32 as they load (exactly), unless the rows
// are bf16 and the CPU multiplies bf16 pairs (AVX512-BF16): then bf16 pairs are multiplied, an
// int8 block widened to bf16 once for all its row tiles. AVX-512 only.
#include <immintrin.h>

#include <ATen/Parallel.h>

#include "cpu_helpers.h"

namespace nanochat {
namespace {

constexpr int kTileOut = 4;

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512dq")
// GCC 12 warns inside its own AVX-512 intrinsics (their _undefined_ operands)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

// 16 weights of one row from `p`, as fp32
inline __m512 load16(const float* p) { return _mm512_loadu_ps(p); }
inline __m512 load16(const at::BFloat16* p) { return widen16_bf16(p); }
inline __m512 load16(const int8_t* p) {
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
}

// a tile's sums: each accumulator's lanes, plus the products from k to `in` one by one
template <int R, typename X, typename W>
inline void tile_sums(const __m512 (&acc)[R][kTileOut], const X* x, const W* const* w, int64_t k, int64_t in,
                      float* sums) {
  for (int r = 0; r < R; r++) {
    _mm_storeu_ps(sums + r * kTileOut, lane_sums4(acc[r][0], acc[r][1], acc[r][2], acc[r][3]));
    for (int64_t j = k; j < in; j++)
      for (int c = 0; c < kTileOut; c++) sums[r * kTileOut + c] += (float)x[r * in + j] * (float)w[c][j];
  }
}

// the next block's weight rows `next` (or none) are prefetched as this tile goes along: the first
// row tile of a block then reads its weights from cache, not from memory (a large model's do not
// stay in cache from one step to the next)
inline void prefetch_rows(const void* const* next, int64_t byte) {
  for (int c = 0; c < kTileOut; c++) _mm_prefetch(static_cast<const char*>(next[c]) + byte, _MM_HINT_T0);
}

// sums (R, kTileOut) = x (R rows of `in`) . the kTileOut weight rows w[c]. Not inlined: inlined
// into the block loop, GCC stored the 16 sums to the stack on every step (twice the time)
template <int R, typename W>
__attribute__((noinline)) void tile(const float* x, const W* const* w, int64_t in, float* sums, const void* const* next,
                                    int64_t next_width) {
  __m512 acc[R][kTileOut] = {};
  int64_t k = 0;
  for (; k + 16 <= in; k += 16) {
    if (next) prefetch_rows(next, k * next_width);
    __m512 wv[kTileOut];
    for (int c = 0; c < kTileOut; c++) wv[c] = load16(w[c] + k);
    for (int r = 0; r < R; r++) {
      const __m512 xv = _mm512_loadu_ps(x + r * in + k);
      for (int c = 0; c < kTileOut; c++) acc[r][c] = _mm512_fmadd_ps(xv, wv[c], acc[r][c]);
    }
  }
  tile_sums<R>(acc, x, w, k, in, sums);
}

#pragma GCC push_options
#pragma GCC target("avx512bf16")
// the same with bf16 rows and weights on AVX512-BF16: pairs multiplied at twice the fp32 rate
template <int R>
__attribute__((noinline)) void tile(const at::BFloat16* x, const at::BFloat16* const* w, int64_t in, float* sums,
                                    const void* const* next, int64_t next_width) {
  __m512 acc[R][kTileOut] = {};
  int64_t k = 0;
  for (; k + 32 <= in; k += 32) {
    if (next) prefetch_rows(next, k * next_width);
    __m512bh wv[kTileOut];
    for (int c = 0; c < kTileOut; c++) wv[c] = (__m512bh)_mm512_loadu_si512(w[c] + k);
    for (int r = 0; r < R; r++) {
      const __m512bh xv = (__m512bh)_mm512_loadu_si512(x + r * in + k);
      for (int c = 0; c < kTileOut; c++) acc[r][c] = _mm512_dpbf16_ps(acc[r][c], xv, wv[c]);
    }
  }
  tile_sums<R>(acc, x, w, k, in, sums);
}

// n int8 weights as bf16, exactly (|q| <= 127 needs 7 bits of the 8 bf16 has)
inline void widen_to_bf16(const int8_t* q, at::BFloat16* out, int64_t n) {
  int64_t k = 0;
  for (; k + 32 <= n; k += 32) {
    const __m512 lo = _mm512_cvtepi32_ps(
        _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q + k))));
    const __m512 hi = _mm512_cvtepi32_ps(
        _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q + k + 16))));
    _mm512_storeu_si512(out + k, (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
  }
  for (; k < n; k++) out[k] = at::BFloat16((float)q[k]);
}

#pragma GCC push_options
#pragma GCC target("avx512vl")
// 4 outputs rounded to bf16 (nearest even) at once
inline void store4(at::BFloat16* y, __m128 v) {
  _mm_storel_epi64(reinterpret_cast<__m128i*>(y), (__m128i)_mm_cvtneps_pbh(v));
}
#pragma GCC pop_options

#pragma GCC pop_options

// a row's kTileOut outputs from its tile's sums: scale * sum in fp32, stored in y's dtype; a
// whole block in one vector (bf16 outputs so only where the rows are bf16, i.e. on AVX512-BF16),
// a last, partial one output by output. One by one, the rounding of 16 outputs a tile cost
// as much as the tile's products at 256 wide.
template <typename T, typename X>
inline void store_outputs(T* y, const float* sums, const float* s, int64_t valid) {
  if (valid == kTileOut) {
    const __m128 v = _mm_mul_ps(_mm_loadu_ps(sums), _mm_loadu_ps(s));
    if constexpr (std::is_same_v<T, float>) return _mm_storeu_ps(y, v);
    if constexpr (std::is_same_v<T, at::BFloat16> && std::is_same_v<X, at::BFloat16>) return store4(y, v);
  }
  for (int c = 0; c < valid; c++) y[c] = T(s[c] * sums[c]);
}

// X: fp32 rows (any weight), or bf16 rows with bf16 or int8 weights (the AVX512-BF16 tile)
template <typename T, typename W, typename X>
void rows_linear(const X* x, const W* w, const T* scale, T* y, int64_t rows, int64_t in, int64_t out) {
  using TileW = std::conditional_t<std::is_same_v<W, int8_t> && std::is_same_v<X, at::BFloat16>, at::BFloat16, W>;
  const int64_t blocks = (out + kTileOut - 1) / kTileOut;
  // one thread below ~1 MiB of weights: a parallel region's start costs more than it saves there
  const int64_t grain = std::max<int64_t>(4, (int64_t)(1 << 20) / std::max<int64_t>(1, in * (int64_t)sizeof(W) * 4));
  at::parallel_for(0, blocks, grain, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; b++) {
      const int64_t n = b * kTileOut, valid = std::min<int64_t>(kTileOut, out - n);
      const W* wr[kTileOut];  // a last, partial block repeats its last row
      for (int c = 0; c < kTileOut; c++) wr[c] = w + std::min<int64_t>(n + c, out - 1) * in;
      // int8 weights with bf16 rows: the block widened to bf16 once, into a panel that stays in
      // L1 for every row tile, and the pair tile (twice the fp32 rate of widening in each tile)
      const TileW* tw[kTileOut];
      if constexpr (std::is_same_v<TileW, W>) {
        std::copy(wr, wr + kTileOut, tw);
      } else {
        thread_local std::vector<TileW> panel;
        panel.resize(kTileOut * in);
        for (int c = 0; c < kTileOut; c++)
          widen_to_bf16(wr[c], panel.data() + c * in, in), tw[c] = panel.data() + c * in;
      }
      float s[kTileOut] = {1.f, 1.f, 1.f, 1.f};
      if (scale)
        for (int c = 0; c < valid; c++) s[c] = (float)scale[n + c];
      const void* next[kTileOut];  // the next block's rows, fetched during this block's first row tile
      for (int c = 0; c < kTileOut; c++) next[c] = w + std::min<int64_t>(n + kTileOut + c, out - 1) * in;
      for (int64_t r0 = 0; r0 < rows; r0 += 4) {
        float sums[4 * kTileOut];
        const X* xr = x + r0 * in;
        const void* const* fetch = r0 == 0 && b + 1 < b1 ? next : nullptr;
        switch (std::min<int64_t>(4, rows - r0)) {
          case 1: tile<1>(xr, tw, in, sums, fetch, sizeof(W)); break;
          case 2: tile<2>(xr, tw, in, sums, fetch, sizeof(W)); break;
          case 3: tile<3>(xr, tw, in, sums, fetch, sizeof(W)); break;
          default: tile<4>(xr, tw, in, sums, fetch, sizeof(W)); break;
        }
        for (int64_t r = r0; r < std::min<int64_t>(rows, r0 + 4); r++)
          store_outputs<T, X>(y + r * out + n, sums + (r - r0) * kTileOut, s, valid);
      }
    }
  });
}

#pragma GCC diagnostic pop
#pragma GCC pop_options

}  // namespace

bool kernels_rows_linear_cpu_supported() {
  static const bool ok = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                         __builtin_cpu_supports("avx512dq");
  return ok;
}

bool kernels_rows_linear_cpu_bf16_pairs() { return kernels_rows_linear_cpu_supported() && cpu_has_avx512_bf16(); }

// y (rows, out) = x (rows, in) @ w (out, in)^T, times scale (out,) when given; all contiguous; x,
// scale and y of one dtype (fp32 or bf16). The caller checks kernels_rows_linear_cpu_supported().
template <typename T, typename W>
void kernels_rows_linear_cpu(const T* x_in, const W* w, const T* scale, T* y, int64_t rows, int64_t in, int64_t out) {
  if constexpr (std::is_same_v<T, at::BFloat16> && !std::is_same_v<W, float>)
    if (kernels_rows_linear_cpu_bf16_pairs()) return rows_linear<T, W, T>(x_in, w, scale, y, rows, in, out);
  const float* x = reinterpret_cast<const float*>(x_in);
  thread_local std::vector<float> x_buf;
  if constexpr (!std::is_same_v<T, float>) {
    x_buf.resize(rows * in);
    to_float(x_in, x_buf.data(), rows * in);
    x = x_buf.data();
  }
  rows_linear<T, W, float>(x, w, scale, y, rows, in, out);
}
template void kernels_rows_linear_cpu(const float*, const float*, const float*, float*, int64_t, int64_t, int64_t);
template void kernels_rows_linear_cpu(const at::BFloat16*, const at::BFloat16*, const at::BFloat16*, at::BFloat16*,
                                      int64_t, int64_t, int64_t);
template void kernels_rows_linear_cpu(const float*, const int8_t*, const float*, float*, int64_t, int64_t, int64_t);
template void kernels_rows_linear_cpu(const at::BFloat16*, const int8_t*, const at::BFloat16*, at::BFloat16*, int64_t,
                                      int64_t, int64_t);

}  // namespace nanochat
