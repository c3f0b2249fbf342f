// A few rows (decode) times a bf16 weight on the CPU: y = x @ w^T with fp32 accumulation. LibTorch
// sends such a product to oneDNN, which builds its descriptors and memory objects on every call
// (~15-20 us), so a 256-wide layer costs three times its fp32 twin; this reads the weight once
// and does nothing else. AVX512-BF16 multiplies bf16 pairs directly, AVX2 widens them first.
// The int8 matvec below does the same for int8 weights (inference's --dtype int8).
#include <immintrin.h>

#include <cstring>

#include <ATen/Parallel.h>

#include "cpu_helpers.h"

namespace nanochat {
namespace {

using bf16 = at::BFloat16;

// Long weight rows go kRowsAtOnce at a time: their x no longer stays in L1 beside the weights
// streaming through, and reloading it for every row made a 1280x5120 matvec 1.5-2x slower than
// a plain read of its weights on one Zen 4 core (bench_cpu_dtypes --matvecs). Shorter rows go
// one at a time: at 2048 wide (x 8 KB) eight rows at once were up to 2x slower (d32's shapes),
// eight rows' streams each a few cache lines long slowing the prefetcher.
constexpr int kRowsAtOnce = 8;
constexpr int64_t kLongRow = 4096;

inline float bits_to_float(uint16_t b) {
  uint32_t u = (uint32_t)b << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// the sum of x[k] * w[k] over k from `from` to n, one by one (the tails)
inline float dot_tail(const bf16* x, const bf16* w, int64_t from, int64_t n) {
  float s = 0.f;
  for (int64_t k = from; k < n; k++) s += bits_to_float(x[k].x) * bits_to_float(w[k].x);
  return s;
}

__attribute__((target("avx512f,avx512bf16"))) float dot_avx512_bf16(const bf16* x, const bf16* w, int64_t n) {
  __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
  int64_t k = 0;
  for (; k + 64 <= n; k += 64) {
    a0 = _mm512_dpbf16_ps(a0, (__m512bh)_mm512_loadu_si512(x + k), (__m512bh)_mm512_loadu_si512(w + k));
    a1 = _mm512_dpbf16_ps(a1, (__m512bh)_mm512_loadu_si512(x + k + 32), (__m512bh)_mm512_loadu_si512(w + k + 32));
  }
  for (; k + 32 <= n; k += 32)
    a0 = _mm512_dpbf16_ps(a0, (__m512bh)_mm512_loadu_si512(x + k), (__m512bh)_mm512_loadu_si512(w + k));
  float lanes[16];  // (not _mm512_reduce_add_ps: GCC 12 warns inside it)
  _mm512_storeu_ps(lanes, _mm512_add_ps(a0, a1));
  float s = 0.f;
  for (float v : lanes) s += v;
  return s + dot_tail(x, w, k, n);
}

// kRowsAtOnce weight rows (each `in` long) against one x: every x load serves them all
__attribute__((target("avx512f,avx512bf16"))) void dots_avx512_bf16(const bf16* x, const bf16* w, int64_t in,
                                                                    float* sums) {
  __m512 a[kRowsAtOnce];
  for (int r = 0; r < kRowsAtOnce; r++) a[r] = _mm512_setzero_ps();
  int64_t k = 0;
  for (; k + 32 <= in; k += 32) {
    const __m512bh xv = (__m512bh)_mm512_loadu_si512(x + k);
    for (int r = 0; r < kRowsAtOnce; r++)
      a[r] = _mm512_dpbf16_ps(a[r], xv, (__m512bh)_mm512_loadu_si512(w + r * in + k));
  }
  for (int r = 0; r < kRowsAtOnce; r++) {
    float lanes[16];
    _mm512_storeu_ps(lanes, a[r]);
    float s = 0.f;
    for (float v : lanes) s += v;
    sums[r] = s + dot_tail(x, w + r * in, k, in);
  }
}

float dot_avx2(const bf16* x, const bf16* w, int64_t n) {
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
  int64_t k = 0;
  for (; k + 16 <= n; k += 16) {
    a0 = _mm256_fmadd_ps(widen8_bf16(x + k), widen8_bf16(w + k), a0);
    a1 = _mm256_fmadd_ps(widen8_bf16(x + k + 8), widen8_bf16(w + k + 8), a1);
  }
  return sum8(_mm256_add_ps(a0, a1)) + dot_tail(x, w, k, n);
}

}  // namespace

void kernels_bf16_matvec_cpu(const bf16* x, const bf16* w, bf16* y, int64_t rows, int64_t in, int64_t out,
                             bool allow_avx512) {
  const bool avx512 = allow_avx512 && cpu_has_avx512_bf16();
  // one thread below ~1 MiB of weights: a parallel region's start costs more than it saves there
  const int64_t grain = std::max<int64_t>(16, (int64_t)(1 << 19) / std::max<int64_t>(1, in));
  at::parallel_for(0, out, grain, [&](int64_t n0, int64_t n1) {
    int64_t n = n0;
    for (; avx512 && in >= kLongRow && n + kRowsAtOnce <= n1; n += kRowsAtOnce)
      for (int64_t r = 0; r < rows; r++) {
        float sums[kRowsAtOnce];
        dots_avx512_bf16(x + r * in, w + n * in, in, sums);
        for (int i = 0; i < kRowsAtOnce; i++) y[r * out + n + i] = bf16(sums[i]);
      }
    for (; n < n1; n++) {
      const bf16* wn = w + n * in;
      for (int64_t r = 0; r < rows; r++)
        y[r * out + n] = bf16(avx512 ? dot_avx512_bf16(x + r * in, wn, in) : dot_avx2(x + r * in, wn, in));
    }
  });
}

}  // namespace nanochat

// int8 weights (per output channel scales) times a few fp32 rows: y = scale * (x @ q^T), the
// int8 widened to fp32 (exact products), fp32 sums. LibTorch's _weight_int8pack_mm reads them
// at a quarter of the bandwidth a bf16 weight gets here.
namespace nanochat {
namespace {

// the accumulator's lanes summed, plus x[k] * q[k] from `from` to n one by one
inline float lanes_plus_i8_tail(const float* lanes, int count, const float* x, const int8_t* q, int64_t from,
                                int64_t n) {
  float s = 0.f;
  for (int i = 0; i < count; i++) s += lanes[i];
  for (int64_t k = from; k < n; k++) s += x[k] * (float)q[k];
  return s;
}

// GCC 12 warns inside its own AVX-512 conversion intrinsics (their _undefined_ operands)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
__attribute__((target("avx512f"))) float dot_i8_avx512(const float* x, const int8_t* q, int64_t n) {
  __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
  int64_t k = 0;
  for (; k + 32 <= n; k += 32) {
    const __m128i b0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + k));
    const __m128i b1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + k + 16));
    a0 = _mm512_fmadd_ps(_mm512_loadu_ps(x + k), _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(b0)), a0);
    a1 = _mm512_fmadd_ps(_mm512_loadu_ps(x + k + 16), _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(b1)), a1);
  }
  float lanes[16];
  _mm512_storeu_ps(lanes, _mm512_add_ps(a0, a1));
  return lanes_plus_i8_tail(lanes, 16, x, q, k, n);
}

// kRowsAtOnce weight rows (each `in` long) against one x: every x load serves them all
__attribute__((target("avx512f"))) void dots_i8_avx512(const float* x, const int8_t* q, int64_t in, float* sums) {
  __m512 a[kRowsAtOnce];
  for (int r = 0; r < kRowsAtOnce; r++) a[r] = _mm512_setzero_ps();
  int64_t k = 0;
  for (; k + 16 <= in; k += 16) {
    const __m512 xv = _mm512_loadu_ps(x + k);
    for (int r = 0; r < kRowsAtOnce; r++) {
      const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + r * in + k));
      a[r] = _mm512_fmadd_ps(xv, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(b)), a[r]);
    }
  }
  for (int r = 0; r < kRowsAtOnce; r++) {
    float lanes[16];
    _mm512_storeu_ps(lanes, a[r]);
    sums[r] = lanes_plus_i8_tail(lanes, 16, x, q + r * in, k, in);
  }
}
#pragma GCC diagnostic pop

float dot_i8_avx2(const float* x, const int8_t* q, int64_t n) {
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
  int64_t k = 0;
  for (; k + 16 <= n; k += 16) {
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + k));
    a0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + k), _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b)), a0);
    a1 = _mm256_fmadd_ps(_mm256_loadu_ps(x + k + 8), _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(b, 8))),
                         a1);
  }
  float lanes[8];
  _mm256_storeu_ps(lanes, _mm256_add_ps(a0, a1));
  return lanes_plus_i8_tail(lanes, 8, x, q, k, n);
}

void dots_i8_avx2(const float* x, const int8_t* q, int64_t in, float* sums) {
  __m256 a[kRowsAtOnce];
  for (int r = 0; r < kRowsAtOnce; r++) a[r] = _mm256_setzero_ps();
  int64_t k = 0;
  for (; k + 8 <= in; k += 8) {
    const __m256 xv = _mm256_loadu_ps(x + k);
    for (int r = 0; r < kRowsAtOnce; r++) {
      const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(q + r * in + k));
      a[r] = _mm256_fmadd_ps(xv, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b)), a[r]);
    }
  }
  for (int r = 0; r < kRowsAtOnce; r++) {
    float lanes[8];
    _mm256_storeu_ps(lanes, a[r]);
    sums[r] = lanes_plus_i8_tail(lanes, 8, x, q + r * in, k, in);
  }
}

}  // namespace

// T (fp32 or bf16) is the dtype of x, the scales and y alike: the step converts nothing around
// the call (each LibTorch conversion costs a few us, three a Linear, 121 Linears a d20 step)
template <typename T>
void kernels_int8_matvec_cpu(const T* x_in, const int8_t* q, const T* scale, T* y, int64_t rows, int64_t in,
                             int64_t out, bool allow_avx512) {
  const bool avx512 = allow_avx512 && __builtin_cpu_supports("avx512f");
  thread_local std::vector<float> x_buf;
  const float* x = reinterpret_cast<const float*>(x_in);
  if constexpr (!std::is_same_v<T, float>) {
    // on a cache line's start, as LibTorch allocates: x's 64-byte loads then never straddle two
    // (they share the load ports with the weights' and the matvec is bound by them)
    x_buf.resize(rows * in + 16);
    float* aligned = x_buf.data() + (16 - reinterpret_cast<uintptr_t>(x_buf.data()) / sizeof(float) % 16) % 16;
    to_float(x_in, aligned, rows * in);
    x = aligned;
  }
  const int64_t grain = std::max<int64_t>(16, (int64_t)(1 << 20) / std::max<int64_t>(1, in));  // ~1 MiB a thread
  at::parallel_for(0, out, grain, [&](int64_t n0, int64_t n1) {
    int64_t n = n0;
    for (; in >= kLongRow && n + kRowsAtOnce <= n1; n += kRowsAtOnce)
      for (int64_t r = 0; r < rows; r++) {
        float sums[kRowsAtOnce];
        if (avx512) dots_i8_avx512(x + r * in, q + n * in, in, sums);
        else dots_i8_avx2(x + r * in, q + n * in, in, sums);
        for (int i = 0; i < kRowsAtOnce; i++) y[r * out + n + i] = T((float)scale[n + i] * sums[i]);
      }
    for (; n < n1; n++) {
      const int8_t* qn = q + n * in;
      for (int64_t r = 0; r < rows; r++)
        y[r * out + n] = T((float)scale[n] *
                           (avx512 ? dot_i8_avx512(x + r * in, qn, in) : dot_i8_avx2(x + r * in, qn, in)));
    }
  });
}
template void kernels_int8_matvec_cpu(const float*, const int8_t*, const float*, float*, int64_t, int64_t, int64_t,
                                      bool);
template void kernels_int8_matvec_cpu(const at::BFloat16*, const int8_t*, const at::BFloat16*, at::BFloat16*, int64_t,
                                      int64_t, int64_t, bool);

}  // namespace nanochat
