// y = x @ w^T for bf16 rows with bf16 or int8 weights repacked in pair panels (panel_linear.h):
// for each block of 16 outputs and each pair of inputs (k, k+1), the 16 outputs' two weights sit
// side by side in 64 bytes, the operand AVX512-BF16's dot instruction takes. One instruction then
// multiplies a row's pair (x[k], x[k+1]), broadcast, by 16 outputs' pairs and adds into 16 fp32
// sums, one per lane: a tile of R rows by 4 blocks (64 outputs) keeps R*4 vectors of sums, and
// at the end each lane is an output, stored as it is (no sums across lanes, which cost the
// row-major tiles of rows_linear_cpu.cpp almost as much as their products at 256 wide).
// int8 weights widen to bf16 exactly (|q| <= 127): as they load for a few rows, or a 64-output
// panel widened once and reused by every row tile when there are more rows than that pays for.
// Where the CPU has AMX (Intel, from Sapphire Rapids), two or more rows multiply on its tiles,
// whose second operand the panels already are (amx_tile below).
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstring>

#include <ATen/Parallel.h>

#include "cpu_helpers.h"
#include "nanochat/common/env.h"

namespace nanochat {
namespace {

constexpr int64_t kBlock = 16;   // outputs of a panel block: the lanes of one vector of sums
constexpr int kTileBlocks = 4;   // blocks a tile covers (64 outputs)
constexpr int kMaxTileRows = 6;  // 6 rows x 4 blocks = 24 vectors of sums, 4 of weights: 28 of 32 registers
// int8 weights: up to this many rows each tile widens its weights as it loads them (the widening
// costs 5 instructions a vector, shared by the tile's rows); beyond, a group's panel is widened once
constexpr int64_t kInt8MaxRowsWidenedInTiles = 16;
// AMX from this many rows: one row's Linears of a step, one after another, ran faster on AVX512-BF16
// (bench_serving --linears, 6 x 256 model: 371-404 against 426 us; 4 rows 468-498 against 424)
constexpr int64_t kAmxMinRows = 2;

// where a product goes: y (rows, out), each output times its scale (int8) and through relu^2
// when asked (the MLP's c_fc: one rounding to bf16 of relu(y)^2 instead of two ops after it)
struct Output {
  at::BFloat16* y;
  int64_t out;
  const at::BFloat16* scale;  // or null
  bool relu_square;
};

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl,avx512bf16")
// GCC 12 warns inside its own AVX-512 intrinsics (their _undefined_ operands)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

// one panel vector: 16 outputs' weight pairs, as bf16
inline __m512bh load_pairs(const at::BFloat16* p) { return (__m512bh)_mm512_loadu_si512(p); }
inline __m512bh load_pairs(const int8_t* p) {
  const __m512 lo = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
  const __m512 hi = _mm512_cvtepi32_ps(
      _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + kBlock))));
  return _mm512_cvtne2ps_pbh(hi, lo);
}

// 16 scales from `s` (fewer where `valid` < 16), as fp32
inline __m512 load_scales(const at::BFloat16* s, int64_t valid) {
  const __m256i bits = _mm256_maskz_loadu_epi16((__mmask16)((1u << valid) - 1), s);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(bits), 16));
}

// one row's 16 sums of the outputs from `n` (`valid` of them) times their scales `s`, through
// `o`'s epilogue, into row `r` of y
inline void store_sums(__m512 v, __m512 s, const Output& o, int64_t r, int64_t n, int64_t valid) {
  v = _mm512_mul_ps(v, s);
  if (o.relu_square) v = _mm512_max_ps(v, _mm512_setzero_ps()), v = _mm512_mul_ps(v, v);
  _mm256_mask_storeu_epi16(o.y + r * o.out + n, (__mmask16)((1u << valid) - 1),
                           (__m256i)_mm512_cvtneps_pbh(v));  // rounded to bf16, nearest even
}

// y (R rows, the C blocks' outputs from `o0`) = x (R rows of `in`) . the panel blocks `p` (each
// pairs * 32 values), through `o`'s epilogue. Not inlined, and its loops unrolled: the sums
// must stay in registers (inlined or rolled up, GCC kept them on the stack: a third of the rate)
template <int R, int C, typename W>
__attribute__((noinline)) void tile(const at::BFloat16* x, int64_t in, const W* p, int64_t pairs, const Output& o,
                                    int64_t o0) {
  __m512 acc[R][C];
#pragma GCC unroll 8
  for (int r = 0; r < R; r++)
#pragma GCC unroll 8
    for (int c = 0; c < C; c++) acc[r][c] = _mm512_setzero_ps();
  for (int64_t k = 0; k < pairs; k++) {
    __m512bh w[C];
#pragma GCC unroll 8
    for (int c = 0; c < C; c++) w[c] = load_pairs(p + (c * pairs + k) * 2 * kBlock);
#pragma GCC unroll 8
    for (int r = 0; r < R; r++) {
      int32_t pair;  // x[r][2k], x[r][2k+1]
      std::memcpy(&pair, x + r * in + 2 * k, sizeof(pair));
      const __m512bh xv = (__m512bh)_mm512_set1_epi32(pair);
#pragma GCC unroll 8
      for (int c = 0; c < C; c++) acc[r][c] = _mm512_dpbf16_ps(acc[r][c], xv, w[c]);
    }
  }
  for (int c = 0; c < C; c++) {
    const int64_t n = o0 + c * kBlock, valid = std::min<int64_t>(kBlock, o.out - n);
    const __m512 s = o.scale ? load_scales(o.scale + n, valid) : _mm512_set1_ps(1.f);
    for (int r = 0; r < R; r++) store_sums(acc[r][c], s, o, r, n, valid);
  }
}

// n panel vectors of int8 widened to bf16
inline void widen_panel(const int8_t* q, at::BFloat16* out, int64_t n) {
  for (int64_t i = 0; i < n; i++) _mm512_storeu_si512(out + i * 2 * kBlock, (__m512i)load_pairs(q + i * 2 * kBlock));
}

// a group's sums as AMX left them (m rows of 4 blocks' 16 fp32, a row 64 apart), through the epilogue
void store_tile_sums(const float* sums, int64_t m, int64_t blocks, const Output& o, int64_t o0) {
  for (int64_t c = 0; c < blocks; c++) {
    const int64_t n = o0 + c * kBlock, valid = std::min<int64_t>(kBlock, o.out - n);
    const __m512 s = o.scale ? load_scales(o.scale + n, valid) : _mm512_set1_ps(1.f);
    for (int64_t r = 0; r < m; r++)
      store_sums(_mm512_loadu_ps(sums + r * kTileBlocks * kBlock + c * kBlock), s, o, r, n, valid);
  }
}

#pragma GCC diagnostic pop
#pragma GCC pop_options

// AMX (Intel's tile unit, from Sapphire Rapids): the panels are its second operand as they are.
// 16 pair rows of a panel block (64 bytes each) are a tile of 32 inputs by 16 outputs in the
// layout TDPBF16PS takes, and one instruction adds up to 16 rows x 32 inputs x 16 outputs
// (8,192 products, each pair added to the fp32 sum twice as vdpbf16ps does) where vdpbf16ps
// makes 32 products: a step's 16 rows cost about what loading their weights does.
constexpr int64_t kAmxRows = 16;    // rows of a tile
constexpr int64_t kAmxInputs = 32;  // inputs of a tile: 16 pairs

struct TileConfig {  // LDTILECFG's 64 bytes, palette 1
  uint8_t palette = 1, start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t bytes_per_row[16] = {};
  uint8_t rows[16] = {};
};

// tiles 0-3: the sums of a group's 4 blocks (m rows of 16 fp32); 4: m rows of 32 inputs; 5-7: panel tiles
__attribute__((target("amx-tile"))) void amx_configure(int64_t m) {
  TileConfig cfg;
  for (int t = 0; t < 8; t++) cfg.bytes_per_row[t] = 64, cfg.rows[t] = (uint8_t)(t < 5 ? m : 16);
  asm volatile("" : : "r"(&cfg) : "memory");  // GCC 12's LDTILECFG asm does not say it reads cfg: the stores went
  _tile_loadconfig(&cfg);
}
__attribute__((target("amx-tile"))) void amx_release() { _tile_release(); }

// block c's next 16 pairs (from `pk`, blocks `block_values` apart) as a tile: bf16 panels as they
// are, int8 ones widened into `scratch` first
template <typename W>
__attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512bf16"))) inline const at::BFloat16* tile_pairs(
    const W* pk, int64_t c, int64_t block_values, at::BFloat16* scratch) {
  if constexpr (std::is_same_v<W, int8_t>) {
    // GCC 12's tile loads are volatile asm without a memory clobber: these fences keep the widened
    // stores after the previous load of `scratch` and before the next
    asm volatile("" : : : "memory");
    widen_panel(pk + c * block_values, scratch, kAmxInputs / 2);
    asm volatile("" : : "r"(scratch) : "memory");
    return scratch;
  } else {
    return pk + c * block_values;
  }
}

// sums (m rows, C blocks of 16, a row 64 floats apart) = x (m rows of `in`, in a multiple of 32)
// . the C panel blocks from `p`; tile numbers are immediates, so C is a template argument
template <int C, typename W>
__attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw,avx512dq,avx512vl,avx512bf16"), noinline)) void amx_tile(
    const at::BFloat16* x, int64_t in, const W* p, int64_t pairs, float* sums) {
  constexpr int64_t row_bytes = 2 * kBlock * sizeof(at::BFloat16);     // a pair row of a block
  alignas(64) at::BFloat16 scratch[kTileBlocks][kAmxInputs * kBlock];  // int8 tiles widened
  const int64_t block_values = pairs * 2 * kBlock;
  _tile_zero(0);
  if constexpr (C > 1) _tile_zero(1);
  if constexpr (C > 2) _tile_zero(2);
  if constexpr (C > 3) _tile_zero(3);
  for (int64_t k = 0; k < in; k += kAmxInputs) {
    _tile_loadd(4, x + k, in * sizeof(at::BFloat16));
    const W* pk = p + k * kBlock;  // pair k/2 of the first block: 32 values a pair
    _tile_loadd(5, tile_pairs(pk, 0, block_values, scratch[0]), row_bytes);
    _tile_dpbf16ps(0, 4, 5);
    if constexpr (C > 1) {
      _tile_loadd(6, tile_pairs(pk, 1, block_values, scratch[1]), row_bytes);
      _tile_dpbf16ps(1, 4, 6);
    }
    if constexpr (C > 2) {
      _tile_loadd(7, tile_pairs(pk, 2, block_values, scratch[2]), row_bytes);
      _tile_dpbf16ps(2, 4, 7);
    }
    if constexpr (C > 3) {
      _tile_loadd(5, tile_pairs(pk, 3, block_values, scratch[3]), row_bytes);
      _tile_dpbf16ps(3, 4, 5);
    }
  }
  constexpr int64_t stride = kTileBlocks * kBlock * sizeof(float);
  _tile_stored(0, sums, stride);
  if constexpr (C > 1) _tile_stored(1, sums + kBlock, stride);
  if constexpr (C > 2) _tile_stored(2, sums + 2 * kBlock, stride);
  if constexpr (C > 3) _tile_stored(3, sums + 3 * kBlock, stride);
  asm volatile("" : : "r"(sums) : "memory");  // (nor do its tile stores say they write sums)
}

// every row of x against one group of `blocks` panel blocks, 16 rows a tile; `configured`: the
// rows the thread's tiles are set for (0: none yet)
template <typename W>
void amx_rows_against_group(const at::BFloat16* x, int64_t rows, int64_t in, const W* p, int64_t pairs, int64_t blocks,
                            const Output& o, int64_t o0, int64_t& configured) {
  alignas(64) float sums[kAmxRows * kTileBlocks * kBlock];
  for (int64_t r = 0; r < rows; r += kAmxRows) {
    const int64_t m = std::min(kAmxRows, rows - r);
    if (m != configured) amx_configure(m), configured = m;
    const at::BFloat16* xr = x + r * in;
    switch (blocks) {
      case 1: amx_tile<1, W>(xr, in, p, pairs, sums); break;
      case 2: amx_tile<2, W>(xr, in, p, pairs, sums); break;
      case 3: amx_tile<3, W>(xr, in, p, pairs, sums); break;
      default: amx_tile<kTileBlocks, W>(xr, in, p, pairs, sums); break;
    }
    Output to = o;
    to.y += r * o.out;
    store_tile_sums(sums, m, blocks, to, o0);
  }
}

// AMX-TILE and AMX-BF16, and Linux's leave to use the tile data (5.16 on; asked once a process,
// as oneDNN also does)
bool cpu_has_amx_bf16() {
  static const bool ok = [] {
    if (!__builtin_cpu_supports("amx-tile") || !__builtin_cpu_supports("amx-bf16")) return false;
    constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
    return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
  }();
  return ok;
}

// NANOCHAT_AMX=0 keeps the rows on AVX512-BF16 where AMX is there; kernels_panel_linear_set_amx too
std::atomic<bool>& amx_wanted() {
  static std::atomic<bool> on{env_get("NANOCHAT_AMX").value_or("1") != "0"};
  return on;
}

template <int R, typename W>
void tile_of_blocks(int64_t blocks, const at::BFloat16* x, int64_t in, const W* p, int64_t pairs, const Output& o,
                    int64_t o0) {
  switch (blocks) {
    case 1: return tile<R, 1>(x, in, p, pairs, o, o0);
    case 2: return tile<R, 2>(x, in, p, pairs, o, o0);
    case 3: return tile<R, 3>(x, in, p, pairs, o, o0);
    default: return tile<R, kTileBlocks>(x, in, p, pairs, o, o0);
  }
}

// every row of x against one group of `blocks` panel blocks, in tiles of at most 6 rows, as even
// as they come (16 rows: 6 + 5 + 5)
template <typename W>
void rows_against_group(const at::BFloat16* x, int64_t rows, int64_t in, const W* p, int64_t pairs, int64_t blocks,
                        const Output& o, int64_t o0) {
  const int64_t tiles = (rows + kMaxTileRows - 1) / kMaxTileRows;
  for (int64_t t = 0, r = 0; t < tiles; t++) {
    const int64_t n = rows / tiles + (t < rows % tiles ? 1 : 0);
    const at::BFloat16* xr = x + r * in;
    Output to = o;
    to.y += r * o.out;
    switch (n) {
      case 1: tile_of_blocks<1>(blocks, xr, in, p, pairs, to, o0); break;
      case 2: tile_of_blocks<2>(blocks, xr, in, p, pairs, to, o0); break;
      case 3: tile_of_blocks<3>(blocks, xr, in, p, pairs, to, o0); break;
      case 4: tile_of_blocks<4>(blocks, xr, in, p, pairs, to, o0); break;
      case 5: tile_of_blocks<5>(blocks, xr, in, p, pairs, to, o0); break;
      default: tile_of_blocks<kMaxTileRows>(blocks, xr, in, p, pairs, to, o0); break;
    }
    r += n;
  }
}

}  // namespace

bool kernels_panel_linear_amx() { return cpu_has_amx_bf16() && amx_wanted().load(); }
bool kernels_panel_linear_set_amx(bool on) { return amx_wanted().exchange(on); }

// y (rows, out) = x (rows, in) @ w^T (* scale (out,) for int8 panels), then relu(y)^2 if asked;
// x's width even, panels (ceil(out/16), in/2, 16, 2). The caller checks the CPU
// (kernels_rows_linear_cpu_bf16_pairs()).
template <typename W>
void kernels_panel_linear_cpu(const at::BFloat16* x, const W* panels, const at::BFloat16* scale, at::BFloat16* y,
                              int64_t rows, int64_t in, int64_t out, bool relu_square) {
  const Output o{y, out, scale, relu_square};
  const bool amx = rows >= kAmxMinRows && in % kAmxInputs == 0 && kernels_panel_linear_amx();
  const int64_t pairs = in / 2, blocks = (out + kBlock - 1) / kBlock;
  const int64_t groups = (blocks + kTileBlocks - 1) / kTileBlocks, group_values = kTileBlocks * pairs * 2 * kBlock;
  // a thread takes at least ~1 MiB of weights (a few rows read them at the memory's rate) or ~1 M
  // multiply-adds (many rows: ~10 us at the pairs' rate): below either, a parallel region's start
  // costs more than it saves
  const int64_t by_bytes = (int64_t)(1 << 20) / std::max<int64_t>(1, group_values * (int64_t)sizeof(W));
  const int64_t by_work = (int64_t)(1 << 20) / std::max<int64_t>(1, rows * kTileBlocks * kBlock * in);
  const int64_t grain = std::max<int64_t>(1, std::min(by_bytes, by_work));
  at::parallel_for(0, groups, grain, [&](int64_t g0, int64_t g1) {
    int64_t amx_configured = 0;  // the rows this thread's tiles are set for
    for (int64_t g = g0; g < g1; g++) {
      const int64_t first = g * kTileBlocks, n = std::min<int64_t>(kTileBlocks, blocks - first);
      const W* w = panels + first * pairs * 2 * kBlock;
      auto every_row_against = [&](const auto* p) {  // bf16 panels, or int8 ones each tile widens as it loads
        if (amx) amx_rows_against_group(x, rows, in, p, pairs, n, o, first * kBlock, amx_configured);
        else rows_against_group(x, rows, in, p, pairs, n, o, first * kBlock);
      };
      if constexpr (std::is_same_v<W, int8_t>) {
        if (rows > kInt8MaxRowsWidenedInTiles) {  // the group's panel widened once for every row tile
          thread_local std::vector<at::BFloat16> widened;
          widened.resize(n * pairs * 2 * kBlock);
          widen_panel(w, widened.data(), n * pairs);
          every_row_against(static_cast<const at::BFloat16*>(widened.data()));
          continue;
        }
      }
      every_row_against(w);
    }
    if (amx_configured) amx_release();  // the thread's tile state need not be saved at its next switch
  });
}
template void kernels_panel_linear_cpu(const at::BFloat16*, const at::BFloat16*, const at::BFloat16*, at::BFloat16*,
                                       int64_t, int64_t, int64_t, bool);
template void kernels_panel_linear_cpu(const at::BFloat16*, const int8_t*, const at::BFloat16*, at::BFloat16*, int64_t,
                                       int64_t, int64_t, bool);

}  // namespace nanochat
