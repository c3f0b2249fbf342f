// What the CPU kernels of the ops (<op>_cpu.cpp) share: conversions between bf16/fp16 rows and
// fp32 scratch, a vectorised dot product, the row check. Included only by the *_cpu.cpp files,
// which are compiled for AVX2+FMA+F16C (CMakeLists.txt; kernels_cpu_supported() guards every
// call), inside their anonymous namespace's reach.
#pragma once
#include <immintrin.h>

#include <algorithm>
#include <cfloat>
#include <cstdint>
#include <type_traits>
#include <vector>

#include <ATen/cpu/vec/functional.h>
#include <ATen/cpu/vec/vec.h>
#include <ATen/core/Tensor.h>

#include "nanochat/common/error.h"

namespace nanochat {
namespace {

using at::vec::Vectorized;

inline void check_rows(const at::Tensor& t, int64_t rows, const char* what) {
  if (!t.is_contiguous() || t.size(0) != rows)
    fail("%s: expected a contiguous tensor of %lld rows", what, (long long)rows);
}

// 8 bf16 -> 8 fp32 (exact): each value's bits shifted into the high half of its lane. (The
// target attributes say what the *_cpu.cpp files' flags already give, for a file without them.)
__attribute__((target("avx2"))) inline __m256 widen8_bf16(const at::BFloat16* p) {
  return _mm256_castsi256_ps(
      _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), 16));
}

// 16 bf16 -> 16 fp32 (exact), the same on AVX-512 (the maskz forms: GCC 12 warns of an
// uninitialised operand inside the unmasked ones)
__attribute__((target("avx512f"))) inline __m512 widen16_bf16(const at::BFloat16* p) {
  const __mmask16 all = 0xFFFF;
  const __m512i wide = _mm512_maskz_cvtepu16_epi32(all, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(all, wide, 16));
}

// the sum of a's 8 lanes
__attribute__((target("avx"))) inline float sum8(__m256 a) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}

// {sum of a's lanes, of b's, of c's, of d's}: four dot products' accumulators reduced together
__attribute__((target("avx512f,avx512dq"))) inline __m256 halves_added(__m512 v) {
  return _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_maskz_extractf32x8_ps((__mmask8)0xFF, v, 1));
}
__attribute__((target("avx512f,avx512dq"))) inline __m128 lane_sums4(__m512 a, __m512 b, __m512 c, __m512 d) {
  const __m256 ab = _mm256_hadd_ps(halves_added(a), halves_added(b));  // a01 a23 b01 b23 | a45 a67 b45 b67
  const __m256 cd = _mm256_hadd_ps(halves_added(c), halves_added(d));
  const __m256 abcd = _mm256_hadd_ps(ab, cd);  // a0-3 b0-3 c0-3 d0-3 | a4-7 b4-7 c4-7 d4-7
  return _mm_add_ps(_mm256_castps256_ps128(abcd), _mm256_extractf128_ps(abcd, 1));
}

template <typename T>
using acc_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

// bf16/fp16 to and from fp32, 16 lanes at a time (at::vec::convert's generic loop is scalar)
template <typename T>
void to_float(const T* src, float* dst, int64_t n) {
  using V = Vectorized<T>;
  int64_t j = 0;
  for (; j + V::size() <= n; j += V::size()) {
    auto [a, b] = at::vec::convert_to_float<T>(V::loadu(src + j));
    a.store(dst + j);
    b.store(dst + j + Vectorized<float>::size());
  }
  for (; j < n; j++) dst[j] = (float)src[j];
}

// fp32 -> bf16 32 values at a time through AVX512-BF16's one rounding instruction (the
// portable conversion takes ~6 instructions for 8). The instruction flushes denormals and
// keeps NaN payloads, so a block holding either is left to the portable path: the bits are
// always c10::BFloat16's (round to nearest even). Returns how many values it converted.
__attribute__((target("avx512f,avx512bf16"))) inline int64_t from_float_bf16_avx512(const float* src, at::BFloat16* dst,
                                                                                    int64_t n) {
  const __m512 min_normal = _mm512_set1_ps(FLT_MIN), zero = _mm512_setzero_ps();
  int64_t j = 0;
  for (; j + 32 <= n; j += 32) {
    const __m512 lo = _mm512_loadu_ps(src + j), hi = _mm512_loadu_ps(src + j + 16);
    // lanes that are NaN, or nonzero and below the smallest normal (not >= FLT_MIN, not == 0)
    const __m512 alo = _mm512_abs_ps(lo), ahi = _mm512_abs_ps(hi);
    const __mmask16 special_lo = _mm512_cmp_ps_mask(alo, min_normal, _CMP_NGE_UQ) &
                                 _mm512_cmp_ps_mask(alo, zero, _CMP_NEQ_UQ);
    const __mmask16 special_hi = _mm512_cmp_ps_mask(ahi, min_normal, _CMP_NGE_UQ) &
                                 _mm512_cmp_ps_mask(ahi, zero, _CMP_NEQ_UQ);
    if (special_lo | special_hi) {
      for (int64_t i = j; i < j + 32; i++) dst[i] = at::BFloat16(src[i]);
      continue;
    }
    _mm512_storeu_si512(reinterpret_cast<void*>(dst + j), (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
  }
  return j;
}

inline bool cpu_has_avx512_bf16() {
  static const bool ok = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bf16");
  return ok;
}

template <typename T>
void from_float(const float* src, T* dst, int64_t n) {
  using F = Vectorized<float>;
  int64_t j = 0;
  if constexpr (std::is_same_v<T, at::BFloat16>)
    if (cpu_has_avx512_bf16()) j = from_float_bf16_avx512(src, dst, n);
  for (; j + Vectorized<T>::size() <= n; j += Vectorized<T>::size())
    at::vec::convert_from_float<T>(F::loadu(src + j), F::loadu(src + j + F::size())).store(dst + j);
  for (; j < n; j++) dst[j] = T(src[j]);
}

// a row as acc_t: the row itself when it is already acc_t, else converted into `scratch`
template <typename T>
const acc_t<T>* row_as_acc(const T* row, int64_t n, std::vector<acc_t<T>>& scratch) {
  if constexpr (std::is_same_v<T, acc_t<T>>) {
    return row;
  } else {
    scratch.resize(n);
    to_float(row, scratch.data(), n);
    return scratch.data();
  }
}

// the reverse: fp32 values as T, the values themselves for float, else converted into `scratch`
// (an fp32 result as the next bf16 GEMM's operand)
template <typename T>
const T* floats_as(const float* src, int64_t n, std::vector<T>& scratch) {
  if constexpr (std::is_same_v<T, float>) {
    return src;
  } else {
    scratch.resize(n);
    from_float(src, scratch.data(), n);
    return scratch.data();
  }
}

template <typename T>
void store_row(const acc_t<T>* src, T* dst, int64_t n) {
  if constexpr (std::is_same_v<T, acc_t<T>>) {
    if (src != dst) std::copy(src, src + n, dst);
  } else {
    from_float(src, dst, n);
  }
}

// a row of acc_t values rounded to T and back in place: the rounding an eager op of dtype T
// applies to its result (nothing for fp32/fp64)
template <typename T>
void round_row(acc_t<T>* v, int64_t n, std::vector<T>& scratch) {
  if constexpr (!std::is_same_v<T, acc_t<T>>) {
    scratch.resize(n);
    from_float(v, scratch.data(), n);
    to_float(scratch.data(), v, n);
  }
}

// sum of a[j] * b[j], vectorised
template <typename acc>
acc dot_row(const acc* a, const acc* b, int64_t n) {
  using V = Vectorized<acc>;
  V vs(0);
  int64_t j = 0;
  for (; j + V::size() <= n; j += V::size()) vs += V::loadu(a + j) * V::loadu(b + j);
  acc s = at::vec::vec_reduce_all<acc>([](V u, V w) { return u + w; }, vs);
  for (; j < n; j++) s += a[j] * b[j];
  return s;
}

}  // namespace
}  // namespace nanochat
