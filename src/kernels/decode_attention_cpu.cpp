// The CPU kernel of decode attention (contracts in decode_attention.cpp): a few new queries of
// each row over that row's keys in the KV cache. One task per row, or per group of a row's kv
// heads (decode_all), split over the intra-op threads; a task takes every query that reads its kv
// heads (the query heads sharing each, times the Tq new positions), so each cached key and value
// is read from memory once:
//   pass 1: s[i][j] = q_i . k_j over the keys some query of the row may see (fp32 sums),
//   then each query's softmax over its own keys (its position, its window) in fp32, in place,
//   pass 2: o_i = sum_j p[i][j] v_j, divided by the softmax's sum and rounded once to q's dtype.
// bf16 values are widened to fp32 (exact): with bf16 q every product is exact and only the sums
// round. The inner loops come in three builds: AVX-512F, AVX2+FMA and plain C++; the caller picks
// one from ATen's CPU capability.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/Parallel.h>

#include "cpu_helpers.h"
#include "nanochat/common/error.h"

namespace nanochat {
namespace {

using bf16 = at::BFloat16;

inline float widen(float x) { return x; }
inline float widen(bf16 x) { return (float)x; }

// A task reads its heads' values of each position, positions Hkv*D values apart: the vector
// loops ask for the block kAhead positions on themselves (the hardware prefetchers do not run
// ahead across such strides)
constexpr int64_t kAhead = 8;
template <typename T>
inline void prefetch_row(const T* row, int64_t D) {
  for (int64_t b = 0; b < D * (int64_t)sizeof(T); b += 64)
    _mm_prefetch(reinterpret_cast<const char*>(row) + b, _MM_HINT_T0);
}

// ---- plain C++ ------------------------------------------------------------------------------

template <typename T>
void scores_plain(const float* q, int64_t nq, int64_t per_head, const T* k, int64_t k_pos, int64_t L, int64_t D,
                  float* s) {
  for (int64_t j = 0; j < L; j++) {
    for (int64_t i = 0; i < nq; i++) {
      const T* kj = k + j * k_pos + i / per_head * D;
      float acc = 0.f;
      for (int64_t d = 0; d < D; d++) acc += q[i * D + d] * widen(kj[d]);
      s[i * L + j] = acc;
    }
  }
}

template <typename T>
void values_plain(const float* p, int64_t nq, int64_t per_head, const T* v, int64_t v_pos, int64_t L, int64_t D,
                  float* o) {
  for (int64_t j = 0; j < L; j++) {
    for (int64_t i = 0; i < nq; i++) {
      const float pij = p[i * L + j];
      if (pij == 0.f) continue;  // a key this query may not see
      const T* vj = v + j * v_pos + i / per_head * D;
      for (int64_t d = 0; d < D; d++) o[i * D + d] += pij * widen(vj[d]);
    }
  }
}

// ---- AVX2 + FMA -----------------------------------------------------------------------------

inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 load8(const bf16* p) { return widen8_bf16(p); }

template <typename T>
float dot_avx2(const float* q, const T* k, int64_t D) {
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
  int64_t d = 0;
  for (; d + 16 <= D; d += 16) {
    a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + d), load8(k + d), a0);
    a1 = _mm256_fmadd_ps(_mm256_loadu_ps(q + d + 8), load8(k + d + 8), a1);
  }
  for (; d + 8 <= D; d += 8) a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + d), load8(k + d), a0);
  float s = sum8(_mm256_add_ps(a0, a1));
  for (; d < D; d++) s += q[d] * widen(k[d]);
  return s;
}

template <typename T>
void scores_avx2(const float* q, int64_t nq, int64_t per_head, const T* k, int64_t k_pos, int64_t L, int64_t D,
                 float* s) {
  for (int64_t j = 0; j < L; j++) {
    prefetch_row(k + (j + kAhead) * k_pos, nq / per_head * D);  // (past the cache's end: never faults)
    for (int64_t i = 0; i < nq; i++) s[i * L + j] = dot_avx2(q + i * D, k + j * k_pos + i / per_head * D, D);
  }
}

template <typename T>
void values_avx2(const float* p, int64_t nq, int64_t per_head, const T* v, int64_t v_pos, int64_t L, int64_t D,
                 float* o) {
  for (int64_t j = 0; j < L; j++) {
    prefetch_row(v + (j + kAhead) * v_pos, nq / per_head * D);
    for (int64_t i = 0; i < nq; i++) {
      const float pij = p[i * L + j];
      if (pij == 0.f) continue;
      const T* vj = v + j * v_pos + i / per_head * D;
      float* oi = o + i * D;
      const __m256 pv = _mm256_set1_ps(pij);
      int64_t d = 0;
      for (; d + 8 <= D; d += 8) _mm256_storeu_ps(oi + d, _mm256_fmadd_ps(pv, load8(vj + d), _mm256_loadu_ps(oi + d)));
      for (; d < D; d++) oi[d] += pij * widen(vj[d]);
    }
  }
}

// ---- AVX-512F -------------------------------------------------------------------------------

__attribute__((target("avx512f"))) inline __m512 load16(const float* p) { return _mm512_loadu_ps(p); }
__attribute__((target("avx512f"))) inline __m512 load16(const bf16* p) { return widen16_bf16(p); }

template <typename T>
__attribute__((target("avx512f"))) float dot_avx512(const float* q, const T* k, int64_t D) {
  __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
  int64_t d = 0;
  for (; d + 32 <= D; d += 32) {
    a0 = _mm512_fmadd_ps(_mm512_loadu_ps(q + d), load16(k + d), a0);
    a1 = _mm512_fmadd_ps(_mm512_loadu_ps(q + d + 16), load16(k + d + 16), a1);
  }
  for (; d + 16 <= D; d += 16) a0 = _mm512_fmadd_ps(_mm512_loadu_ps(q + d), load16(k + d), a0);
  // halves added down to 8 lanes (not _mm512_reduce_add_ps: GCC 12 warns inside it)
  const __m512d a = _mm512_castps_pd(_mm512_add_ps(a0, a1));
  float s = sum8(_mm256_add_ps(_mm256_castpd_ps(_mm512_maskz_extractf64x4_pd((__mmask8)0xF, a, 0)),
                               _mm256_castpd_ps(_mm512_maskz_extractf64x4_pd((__mmask8)0xF, a, 1))));
  for (; d < D; d++) s += q[d] * widen(k[d]);
  return s;
}

template <typename T>
__attribute__((target("avx512f"))) void scores_avx512(const float* q, int64_t nq, int64_t per_head, const T* k,
                                                      int64_t k_pos, int64_t L, int64_t D, float* s) {
  for (int64_t j = 0; j < L; j++) {
    prefetch_row(k + (j + kAhead) * k_pos, nq / per_head * D);  // (past the cache's end: never faults)
    for (int64_t i = 0; i < nq; i++) s[i * L + j] = dot_avx512(q + i * D, k + j * k_pos + i / per_head * D, D);
  }
}

template <typename T>
__attribute__((target("avx512f"))) void values_avx512(const float* p, int64_t nq, int64_t per_head, const T* v,
                                                      int64_t v_pos, int64_t L, int64_t D, float* o) {
  for (int64_t j = 0; j < L; j++) {
    prefetch_row(v + (j + kAhead) * v_pos, nq / per_head * D);
    for (int64_t i = 0; i < nq; i++) {
      const float pij = p[i * L + j];
      if (pij == 0.f) continue;
      const T* vj = v + j * v_pos + i / per_head * D;
      float* oi = o + i * D;
      const __m512 pv = _mm512_set1_ps(pij);
      int64_t d = 0;
      for (; d + 16 <= D; d += 16)
        _mm512_storeu_ps(oi + d, _mm512_fmadd_ps(pv, load16(vj + d), _mm512_loadu_ps(oi + d)));
      for (; d < D; d++) oi[d] += pij * widen(vj[d]);
    }
  }
}

// GCC 12 warns inside its own AVX-512 intrinsics (their _undefined_ operands)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

// ---- AVX-512F, for heads of 64 and 128 ------------------------------------------------------
// Scores a query at a time: its head in registers, 4 keys a pass, their 4 sums reduced across
// lanes together. bf16 keys on AVX512-BF16 multiply bf16 pairs (q is bf16 widened: back to bf16
// exactly; each pair's products exact in fp32, as the FMAs' are, and as many fp32 additions).
// Values two queries at a time, position by position: both queries' D/16 output vectors stay in
// registers over all the keys (the loops above load and store them at every key, in the same
// order of sums), and a row's adjacent heads are read as one stream; a head at a time made them
// as many strided streams, ~30% slower where the caches come from L3 or memory.

template <int NV, typename T>
__attribute__((target("avx512f,avx512dq"))) void scores_by_query(const float* q, int64_t nq, int64_t per_head,
                                                                 const T* k, int64_t k_pos, int64_t L, float* s) {
  constexpr int64_t D = NV * 16;
  for (int64_t i = 0; i < nq; i++) {
    __m512 qv[NV];
    for (int c = 0; c < NV; c++) qv[c] = _mm512_loadu_ps(q + i * D + 16 * c);
    const T* kh = k + i / per_head * D;
    float* si = s + i * L;
    int64_t j = 0;
    for (; j + 4 <= L; j += 4) {
      for (int jj = 0; jj < 4; jj++) prefetch_row(kh + (j + jj + kAhead) * k_pos, D);
      __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
      for (int c = 0; c < NV; c++)
        for (int jj = 0; jj < 4; jj++)
          acc[jj] = _mm512_fmadd_ps(qv[c], load16(kh + (j + jj) * k_pos + 16 * c), acc[jj]);
      _mm_storeu_ps(si + j, lane_sums4(acc[0], acc[1], acc[2], acc[3]));
    }
    for (; j < L; j++) si[j] = dot_avx512(q + i * D, kh + j * k_pos, D);
  }
}

template <int NP>  // NP = D/32 vectors of bf16 pairs
__attribute__((target("avx512f,avx512dq,avx512bf16"))) void scores_by_query_pairs(const float* q, int64_t nq,
                                                                                  int64_t per_head, const bf16* k,
                                                                                  int64_t k_pos, int64_t L, float* s) {
  constexpr int64_t D = NP * 32;
  for (int64_t i = 0; i < nq; i++) {
    __m512bh qv[NP];
    for (int c = 0; c < NP; c++)
      qv[c] = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(q + i * D + 32 * c + 16), _mm512_loadu_ps(q + i * D + 32 * c));
    const bf16* kh = k + i / per_head * D;
    float* si = s + i * L;
    int64_t j = 0;
    for (; j + 4 <= L; j += 4) {
      for (int jj = 0; jj < 4; jj++) prefetch_row(kh + (j + jj + kAhead) * k_pos, D);
      __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
      for (int c = 0; c < NP; c++)
        for (int jj = 0; jj < 4; jj++)
          acc[jj] = _mm512_dpbf16_ps(acc[jj], qv[c], (__m512bh)_mm512_loadu_si512(kh + (j + jj) * k_pos + 32 * c));
      _mm_storeu_ps(si + j, lane_sums4(acc[0], acc[1], acc[2], acc[3]));
    }
    for (; j < L; j++) si[j] = dot_avx512(q + i * D, kh + j * k_pos, D);
  }
}

template <int NV, typename T>
__attribute__((target("avx512f"))) void values_by_position(const float* p, int64_t nq, int64_t per_head, const T* v,
                                                           int64_t v_pos, int64_t L, float* o) {
  constexpr int64_t D = NV * 16;
  for (int64_t i = 0; i < nq; i += 2) {
    const int64_t i1 = std::min(i + 1, nq - 1);  // an odd last query pairs with itself, stored twice
    const T* v0 = v + i / per_head * D;
    const T* v1 = v + i1 / per_head * D;
    const int64_t heads = i1 / per_head - i / per_head + 1;
    const float *p0 = p + i * L, *p1 = p + i1 * L;
    __m512 a0[NV], a1[NV];
    for (int c = 0; c < NV; c++) a0[c] = a1[c] = _mm512_setzero_ps();
    for (int64_t j = 0; j < L; j++) {
      prefetch_row(v0 + (j + kAhead) * v_pos, heads * D);
      if (p0[j] != 0.f) {  // a key this query may not see: skipped
        const __m512 pv = _mm512_set1_ps(p0[j]);
        for (int c = 0; c < NV; c++) a0[c] = _mm512_fmadd_ps(pv, load16(v0 + j * v_pos + 16 * c), a0[c]);
      }
      if (p1[j] != 0.f) {
        const __m512 pv = _mm512_set1_ps(p1[j]);
        for (int c = 0; c < NV; c++) a1[c] = _mm512_fmadd_ps(pv, load16(v1 + j * v_pos + 16 * c), a1[c]);
      }
    }
    for (int c = 0; c < NV; c++) _mm512_storeu_ps(o + i * D + 16 * c, a0[c]);
    for (int c = 0; c < NV; c++) _mm512_storeu_ps(o + i1 * D + 16 * c, a1[c]);
  }
}

#pragma GCC diagnostic pop

// the passes above where they apply (AVX-512, heads of 64 or 128); false: the caller's loops run
template <typename T>
bool scores_fast(const float* q, int64_t nq, int64_t per_head, const T* k, int64_t k_pos, int64_t L, int64_t D,
                 float* s) {
  if constexpr (std::is_same_v<T, bf16>) {
    if (cpu_has_avx512_bf16() && D == 128) return scores_by_query_pairs<4>(q, nq, per_head, k, k_pos, L, s), true;
    if (cpu_has_avx512_bf16() && D == 64) return scores_by_query_pairs<2>(q, nq, per_head, k, k_pos, L, s), true;
  }
  if (D == 128) return scores_by_query<8>(q, nq, per_head, k, k_pos, L, s), true;
  if (D == 64) return scores_by_query<4>(q, nq, per_head, k, k_pos, L, s), true;
  return false;
}

template <typename T>
bool values_fast(const float* p, int64_t nq, int64_t per_head, const T* v, int64_t v_pos, int64_t L, int64_t D,
                 float* o) {
  if (D == 128) return values_by_position<8>(p, nq, per_head, v, v_pos, L, o), true;
  if (D == 64) return values_by_position<4>(p, nq, per_head, v, v_pos, L, o), true;
  return false;
}

// ---- the softmax of one query's scores, shared ------------------------------------------------

using Vec = at::vec::Vectorized<float>;

// s[0, L): exp(scale * (s - max)) over its keys [lo, hi), zero outside; returns their sum
float softmax_row(float* s, int64_t L, int64_t lo, int64_t hi, float scale, bool vector) {
  float m = -std::numeric_limits<float>::infinity();
  int64_t j = lo;
  if (vector) {
    Vec vmax(m);
    for (; j + Vec::size() <= hi; j += Vec::size()) vmax = at::vec::maximum(vmax, Vec::loadu(s + j));
    m = at::vec::vec_reduce_all<float>([](Vec a, Vec b) { return at::vec::maximum(a, b); }, vmax);
  }
  for (; j < hi; j++) m = std::max(m, s[j]);
  float sum = 0.f;
  j = lo;
  if (vector) {
    const Vec vscale(scale), vshift(-scale * m);
    Vec vsum(0);
    for (; j + Vec::size() <= hi; j += Vec::size()) {
      Vec e = at::vec::fmadd(Vec::loadu(s + j), vscale, vshift).exp_u20();
      e.store(s + j);
      vsum += e;
    }
    sum = at::vec::vec_reduce_all<float>([](Vec a, Vec b) { return a + b; }, vsum);
  }
  for (; j < hi; j++) sum += (s[j] = std::exp(s[j] * scale - scale * m));
  std::fill(s, s + lo, 0.0f);
  std::fill(s + hi, s + L, 0.0f);
  return sum;
}

// a head's D values into fp32: the vectorised conversion for bf16 (to_float in cpu_helpers.h,
// on the AVX2 build and up), a copy for fp32; store_row is the way back
template <typename T>
void to_floats(const T* src, float* dst, int64_t n) {
  if constexpr (std::is_same_v<T, float>) std::copy(src, src + n, dst);
  else to_float(src, dst, n);
}

struct Task {
  int64_t Tq, H, Hkv, D, window, isa;
  float scale;
};

// one row and kv heads [h0, h0 + nh): the per = (H / Hkv) * Tq queries of each, query i of
// kv head h0 + i / per at (t, query head (h0 + i / per) * rep + r) with i % per = t * rep + r.
// q, k, v and out point at head h0 (h0 * rep for q and out) of the row.
template <typename T>
void decode_task(const Task& g, const T* q, const T* k, const T* v, T* out, int64_t n_keys, int64_t nh, int64_t k_pos,
                 int64_t v_pos) {
  const int64_t rep = g.H / g.Hkv, per = rep * g.Tq, nq = nh * per, D = g.D;
  // keys [j0, n_keys): the first query's window start to the last key
  const int64_t j0 = g.window < 0 ? 0 : std::max<int64_t>(0, n_keys - g.Tq - g.window), L = n_keys - j0;
  thread_local std::vector<float> qf, s, o, inv_sum;
  qf.resize(nq * D);
  s.resize(nq * L);
  o.assign(nq * D, 0.f);
  inv_sum.resize(nq);
  auto offset = [&](int64_t i) {  // query i's (t, query head) in q and out, from head h0 * rep
    const int64_t hh = i / per, t = i % per / rep, r = i % rep;
    return t * g.H * D + (hh * rep + r) * D;
  };
  for (int64_t i = 0; i < nq; i++) to_floats(q + offset(i), qf.data() + i * D, D);
  const T* k0 = k + j0 * k_pos;
  const T* v0 = v + j0 * v_pos;
  if (g.isa == 2) {
    if (!scores_fast(qf.data(), nq, per, k0, k_pos, L, D, s.data()))
      scores_avx512(qf.data(), nq, per, k0, k_pos, L, D, s.data());
  } else if (g.isa == 1) scores_avx2(qf.data(), nq, per, k0, k_pos, L, D, s.data());
  else scores_plain(qf.data(), nq, per, k0, k_pos, L, D, s.data());
  for (int64_t i = 0; i < nq; i++) {
    const int64_t pos = n_keys - g.Tq + i % per / rep;  // this query's position: it sees [lo, pos]
    const int64_t lo = g.window < 0 ? 0 : std::max<int64_t>(0, pos - g.window);
    inv_sum[i] = 1.f / softmax_row(s.data() + i * L, L, lo - j0, pos + 1 - j0, g.scale, g.isa > 0);
  }
  if (g.isa == 2) {
    if (!values_fast(s.data(), nq, per, v0, v_pos, L, D, o.data()))
      values_avx512(s.data(), nq, per, v0, v_pos, L, D, o.data());
  } else if (g.isa == 1) values_avx2(s.data(), nq, per, v0, v_pos, L, D, o.data());
  else values_plain(s.data(), nq, per, v0, v_pos, L, D, o.data());
  for (int64_t i = 0; i < nq; i++) {
    float* oi = o.data() + i * D;
    for (int64_t d = 0; d < D; d++) oi[d] *= inv_sum[i];
    store_row<T>(oi, out + offset(i), D);
  }
}

// Tasks of a row and a group of its kv heads, walked position by position, so that a task reads
// each position's heads as one contiguous block (a stream the prefetchers follow, where one
// head's 2*D bytes a position apart were not): whole rows when there are rows enough for the
// threads, else each row's heads split in as many groups as threads.
template <typename T>
void decode_all(const Task& g, const at::Tensor& q, const at::Tensor& kc, const at::Tensor& vc,
                const std::vector<int64_t>& key_counts, at::Tensor& out) {
  const int64_t B = q.size(0), D = g.D, rep = g.H / g.Hkv;
  const T* qp = q.data_ptr<T>();
  const T* kp = kc.data_ptr<T>();
  const T* vp = vc.data_ptr<T>();
  T* op = out.data_ptr<T>();
  int64_t keys = 0;
  for (int64_t b = 0; b < B; b++) keys += key_counts.size() == 1 ? key_counts[0] : key_counts[b];
  // a parallel region costs a few us to start: one thread below ~256 KB of keys and values
  const int64_t threads = 2 * keys * g.Hkv * D * (int64_t)sizeof(T) < (1 << 18) ? 1 : at::get_num_threads();
  const int64_t groups = std::min(g.Hkv, (threads + B - 1) / B), per_group = (g.Hkv + groups - 1) / groups;
  at::parallel_for(0, B * groups, 1, [&](int64_t begin, int64_t end) {
    for (int64_t task = begin; task < end; task++) {
      const int64_t b = task / groups, h0 = task % groups * per_group, nh = std::min(per_group, g.Hkv - h0);
      if (nh <= 0) continue;
      const int64_t n = key_counts.size() == 1 ? key_counts[0] : key_counts[b];
      decode_task<T>(g, qp + b * q.stride(0) + h0 * rep * D, kp + b * kc.stride(0) + h0 * D,
                     vp + b * vc.stride(0) + h0 * D, op + b * out.stride(0) + h0 * rep * D, n, nh, kc.stride(1),
                     vc.stride(1));
    }
  });
}

}  // namespace

// q (B,Tq,H,D) contiguous; k_cache and v_cache (B,Tmax,Hkv,D) of q's dtype (fp32 or bf16), each
// (Hkv,D) position contiguous; key_counts one per row or one for all, each in [Tq, Tmax]
// (checked by the caller). isa: 0 plain C++, 1 AVX2+FMA, 2 AVX-512F. Returns (B,Tq,H,D).
at::Tensor decode_attention_cpu(const at::Tensor& q, const at::Tensor& k_cache, const at::Tensor& v_cache,
                                const std::vector<int64_t>& key_counts, int64_t window, int isa) {
  const int64_t D = q.size(3);
  const Task g{q.size(1), q.size(2), k_cache.size(2), D, window, isa, (float)(1.0 / std::sqrt((double)D))};
  at::Tensor out = at::empty(q.sizes(), q.options());
  if (q.scalar_type() == at::kFloat) decode_all<float>(g, q, k_cache, v_cache, key_counts, out);
  else if (q.scalar_type() == at::kBFloat16) decode_all<bf16>(g, q, k_cache, v_cache, key_counts, out);
  else fail("decode_attention_cpu: fp32 or bf16 expected, got %s", c10::toString(q.scalar_type()));
  return out;
}

}  // namespace nanochat
