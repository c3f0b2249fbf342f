// Causal attention with a left window on the CPU (contracts in attention.cpp). One task per
// (batch, head) -- per (batch, kv head) in backward, which sums a kv head's gradient over the
// query heads that share it -- split over the intra-op threads. A task walks its queries in
// blocks of kBlock rows; a block multiplies against only the keys its rows may see
// (c0 = first key of the block's first row's window, up to the block's last row), so causal
// attention does about half of the full T x T work and a window of W about T x (W + kBlock).
// The scores of a block are whole rows (kBlock x at most T, fp32, in L2 for T up to a few
// thousand): the softmax is exact per row, with no online rescaling. The GEMMs are MKL's
// with fp32 results (cpu_gemm.h); bf16 operands stay bf16, as in SDPA's flash kernel.
//
// Forward:  S = Q K^T, E = exp(scale*S - rowmax), O = (E V) / rowsum, lse = scale*rowmax + log(rowsum)
// Backward: P = exp(scale*S - lse), dP = dO V^T, dS = scale * P * (dP - rowsum(dO * O)),
//           dQ = dS K, dK += dS^T Q, dV += P^T dO (dK, dV summed in fp32)
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/Parallel.h>

#include "cpu_gemm.h"
#include "cpu_helpers.h"
#include "nanochat/common/error.h"

namespace nanochat {
namespace {

constexpr int64_t kBlock =
    64;  // query rows a block (at d8, T=512: 128 was as fast causal, slower with windows; 256 slower)

struct Geometry {
  int64_t B, T, H, Hkv, D, window;
  float scale;
  // the keys [c0, r1) that the query block [r0, r1) may see, and row t's own [lo, t]
  int64_t first_key(int64_t r0) const { return window < 0 ? 0 : std::max<int64_t>(0, r0 - window); }
  int64_t row_lo(int64_t t) const { return window < 0 ? 0 : std::max<int64_t>(0, t - window); }
};

Geometry geometry(const at::Tensor& q, const at::Tensor& k, int64_t window) {
  const int64_t D = q.size(3);
  return {q.size(0), q.size(1), q.size(2), k.size(2), D, window, (float)(1.0 / std::sqrt((double)D))};
}

template <typename T>
void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const T* A, int64_t lda, const T* Bm,
          int64_t ldb, float beta, float* C, int64_t ldc) {
  if (!cpu_gemm_f32(ta, tb, M, N, K, alpha, A, lda, Bm, ldb, beta, C, ldc))
    fail("attention_cpu: MKL's GEMM is not available (attention_cpu_supported() said it was)");
}

using Vec = at::vec::Vectorized<float>;

// row of scores s[0, n): keeps exp(scale * (s - max)) over [lo, hi], zero outside; returns
// (max, sum) of the kept row
std::pair<float, float> softmax_row(float* s, int64_t n, int64_t lo, int64_t hi, float scale) {
  Vec vmax(-std::numeric_limits<float>::infinity());
  int64_t j = lo;
  for (; j + Vec::size() <= hi + 1; j += Vec::size()) vmax = at::vec::maximum(vmax, Vec::loadu(s + j));
  float m = at::vec::vec_reduce_all<float>([](Vec a, Vec b) { return at::vec::maximum(a, b); }, vmax);
  for (; j <= hi; j++) m = std::max(m, s[j]);
  const Vec vscale(scale), vshift(-scale * m);
  Vec vsum(0);
  for (j = lo; j + Vec::size() <= hi + 1; j += Vec::size()) {
    Vec e = at::vec::fmadd(Vec::loadu(s + j), vscale, vshift).exp_u20();
    e.store(s + j);
    vsum += e;
  }
  float sum = at::vec::vec_reduce_all<float>([](Vec a, Vec b) { return a + b; }, vsum);
  for (; j <= hi; j++) {
    s[j] = std::exp(s[j] * scale - scale * m);
    sum += s[j];
  }
  std::fill(s, s + lo, 0.0f);
  std::fill(s + hi + 1, s + n, 0.0f);
  return {m, sum};
}

// P = exp(scale * s - lse) over [lo, hi], zero outside
void probabilities_row(float* s, int64_t n, int64_t lo, int64_t hi, float scale, float lse) {
  const Vec vscale(scale), vshift(-lse);
  int64_t j = lo;
  for (; j + Vec::size() <= hi + 1; j += Vec::size())
    at::vec::fmadd(Vec::loadu(s + j), vscale, vshift).exp_u20().store(s + j);
  for (; j <= hi; j++) s[j] = std::exp(s[j] * scale - lse);
  std::fill(s, s + lo, 0.0f);
  std::fill(s + hi + 1, s + n, 0.0f);
}

// dS = scale * P * (dP - delta) in place of dP, over the whole row (P is zero where masked)
void score_grad_row(const float* p, float* dp, int64_t n, float delta, float scale) {
  const Vec vdelta(delta), vscale(scale);
  int64_t j = 0;
  for (; j + Vec::size() <= n; j += Vec::size())
    (vscale * Vec::loadu(p + j) * (Vec::loadu(dp + j) - vdelta)).store(dp + j);
  for (; j < n; j++) dp[j] = scale * p[j] * (dp[j] - delta);
}

template <typename T>
void forward_head(const Geometry& g, const T* q, const T* k, const T* v, T* o, float* lse) {
  const int64_t ldq = g.H * g.D, ldk = g.Hkv * g.D;
  std::vector<float> S(kBlock * g.T), out(kBlock * g.D), inv_sum(kBlock);
  std::vector<T> Sc;
  for (int64_t r0 = 0; r0 < g.T; r0 += kBlock) {
    const int64_t r1 = std::min(g.T, r0 + kBlock), M = r1 - r0, c0 = g.first_key(r0), N = r1 - c0;
    gemm<T>(false, true, M, N, g.D, 1.0f, q + r0 * ldq, ldq, k + c0 * ldk, ldk, 0.0f, S.data(), N);
    for (int64_t i = 0; i < M; i++) {
      const int64_t t = r0 + i;
      auto [m, sum] = softmax_row(S.data() + i * N, N, g.row_lo(t) - c0, t - c0, g.scale);
      lse[t] = g.scale * m + std::log(sum);
      inv_sum[i] = 1.0f / sum;
    }
    gemm<T>(false, false, M, g.D, N, 1.0f, floats_as<T>(S.data(), M * N, Sc), N, v + c0 * ldk, ldk, 0.0f, out.data(),
            g.D);
    for (int64_t i = 0; i < M; i++) {
      float* orow = out.data() + i * g.D;
      for (int64_t d = 0; d < g.D; d++) orow[d] *= inv_sum[i];
      store_row<T>(orow, o + (r0 + i) * ldq, g.D);
    }
  }
}

// one kv head's dK and dV (fp32, (T, D)), summed over the query heads [h0, h0 + rep)
template <typename T>
void backward_kv_head(const Geometry& g, const T* q, const T* k, const T* v, const T* o, const T* dout,
                      const float* lse, T* dq, int64_t rep, float* dk, float* dv) {
  const int64_t ldq = g.H * g.D, ldk = g.Hkv * g.D;
  std::vector<float> S(kBlock * g.T), dP(kBlock * g.T), dqf(kBlock * g.D), delta(g.T), a, b;
  std::vector<T> Pc, dSc;
  for (int64_t r = 0; r < rep; r++) {
    const int64_t off = r * g.D;  // the query head's columns within a row of q, o, dout, dq
    const float* lse_h = lse + r * g.T;
    for (int64_t t = 0; t < g.T; t++) {  // delta = rowsum(dO * O), in fp32
      const float* x = row_as_acc(dout + t * ldq + off, g.D, a);
      const float* y = row_as_acc(o + t * ldq + off, g.D, b);
      delta[t] = dot_row(x, y, g.D);
    }
    for (int64_t r0 = 0; r0 < g.T; r0 += kBlock) {
      const int64_t r1 = std::min(g.T, r0 + kBlock), M = r1 - r0, c0 = g.first_key(r0), N = r1 - c0;
      const T* qb = q + r0 * ldq + off;
      const T* dob = dout + r0 * ldq + off;
      gemm<T>(false, true, M, N, g.D, 1.0f, qb, ldq, k + c0 * ldk, ldk, 0.0f, S.data(), N);
      for (int64_t i = 0; i < M; i++) {
        const int64_t t = r0 + i;
        probabilities_row(S.data() + i * N, N, g.row_lo(t) - c0, t - c0, g.scale, lse_h[t]);
      }
      gemm<T>(false, true, M, N, g.D, 1.0f, dob, ldq, v + c0 * ldk, ldk, 0.0f, dP.data(), N);
      for (int64_t i = 0; i < M; i++) score_grad_row(S.data() + i * N, dP.data() + i * N, N, delta[r0 + i], g.scale);
      const T* P = floats_as<T>(S.data(), M * N, Pc);
      const T* dS = floats_as<T>(dP.data(), M * N, dSc);
      gemm<T>(true, false, N, g.D, M, 1.0f, P, N, dob, ldq, 1.0f, dv + c0 * g.D, g.D);          // dV += P^T dO
      gemm<T>(true, false, N, g.D, M, 1.0f, dS, N, qb, ldq, 1.0f, dk + c0 * g.D, g.D);          // dK += dS^T Q
      gemm<T>(false, false, M, g.D, N, 1.0f, dS, N, k + c0 * ldk, ldk, 0.0f, dqf.data(), g.D);  // dQ = dS K
      for (int64_t i = 0; i < M; i++) store_row<T>(dqf.data() + i * g.D, dq + (r0 + i) * ldq + off, g.D);
    }
  }
}

void check_inputs(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  if (!q.is_contiguous() || !k.is_contiguous() || !v.is_contiguous() || q.dim() != 4 || !k.sizes().equals(v.sizes()) ||
      k.size(1) != q.size(1) || k.size(3) != q.size(3) || q.size(2) % k.size(2) != 0 ||
      q.scalar_type() != k.scalar_type() || q.scalar_type() != v.scalar_type())
    fail("attention_cpu: contiguous q (B,T,H,D) and k, v (B,T,Hkv,D) of one dtype expected");
}

// f(T{}) for the dtypes the kernel takes
template <typename F>
void with_attention_dtype(const at::Tensor& q, F f) {
  if (q.scalar_type() == at::kFloat) f(float{});
  else if (q.scalar_type() == at::kBFloat16) f(at::BFloat16{});
  else fail("attention_cpu: float32 or bfloat16 expected, not %s", c10::toString(q.scalar_type()));
}

}  // namespace

bool attention_cpu_supported(const at::Tensor& q) { return q.is_cpu() && cpu_gemm_f32_available(q.scalar_type()); }

std::pair<at::Tensor, at::Tensor> attention_forward_cpu(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                                        int64_t window) {
  check_inputs(q, k, v);
  const Geometry g = geometry(q, k, window);
  at::Tensor o = at::empty_like(q);
  at::Tensor lse = at::empty({g.B, g.H, g.T}, q.options().dtype(at::kFloat));
  with_attention_dtype(q, [&](auto zero) {
    using T = decltype(zero);
    const T *Q = q.data_ptr<T>(), *K = k.data_ptr<T>(), *V = v.data_ptr<T>();
    T* O = o.data_ptr<T>();
    float* L = lse.data_ptr<float>();
    const int64_t rep = g.H / g.Hkv;
    at::parallel_for(0, g.B * g.H, 1, [&](int64_t begin, int64_t end) {
      for (int64_t task = begin; task < end; task++) {
        const int64_t b = task / g.H, h = task % g.H, hk = h / rep;
        const int64_t qoff = b * g.T * g.H * g.D + h * g.D, koff = b * g.T * g.Hkv * g.D + hk * g.D;
        forward_head<T>(g, Q + qoff, K + koff, V + koff, O + qoff, L + (b * g.H + h) * g.T);
      }
    });
  });
  return {o, lse};
}

std::vector<at::Tensor> attention_backward_cpu(const at::Tensor& dout, const at::Tensor& q, const at::Tensor& k,
                                               const at::Tensor& v, const at::Tensor& o, const at::Tensor& lse,
                                               int64_t window) {
  check_inputs(q, k, v);
  if (!dout.is_contiguous() || !o.is_contiguous() || !dout.sizes().equals(q.sizes()) || !o.sizes().equals(q.sizes()) ||
      dout.scalar_type() != q.scalar_type() || o.scalar_type() != q.scalar_type())
    fail("attention_backward_cpu: contiguous dout and o shaped like q, of its dtype, expected");
  const Geometry g = geometry(q, k, window);
  at::Tensor dq = at::empty_like(q), dk = at::empty_like(k), dv = at::empty_like(v);
  with_attention_dtype(q, [&](auto zero) {
    using T = decltype(zero);
    const T *Q = q.data_ptr<T>(), *K = k.data_ptr<T>(), *V = v.data_ptr<T>();
    const T *O = o.data_ptr<T>(), *dO = dout.data_ptr<T>();
    T *dQ = dq.data_ptr<T>(), *dK = dk.data_ptr<T>(), *dV = dv.data_ptr<T>();
    const float* L = lse.data_ptr<float>();
    const int64_t rep = g.H / g.Hkv, ldk = g.Hkv * g.D;
    at::parallel_for(0, g.B * g.Hkv, 1, [&](int64_t begin, int64_t end) {
      std::vector<float> dkf(g.T * g.D), dvf(g.T * g.D);
      for (int64_t task = begin; task < end; task++) {
        const int64_t b = task / g.Hkv, hk = task % g.Hkv, h0 = hk * rep;
        std::fill(dkf.begin(), dkf.end(), 0.0f);
        std::fill(dvf.begin(), dvf.end(), 0.0f);
        const int64_t qoff = b * g.T * g.H * g.D + h0 * g.D, koff = b * g.T * ldk + hk * g.D;
        backward_kv_head<T>(g, Q + qoff, K + koff, V + koff, O + qoff, dO + qoff, L + (b * g.H + h0) * g.T, dQ + qoff,
                            rep, dkf.data(), dvf.data());
        for (int64_t t = 0; t < g.T; t++) {
          store_row<T>(dkf.data() + t * g.D, dK + koff + t * ldk, g.D);
          store_row<T>(dvf.data() + t * g.D, dV + koff + t * ldk, g.D);
        }
      }
    });
  });
  return {dq, dk, dv};
}

}  // namespace nanochat
