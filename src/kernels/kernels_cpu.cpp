// defines: softcap_ce_forward_cpu, softcap_ce_backward_cpu, softcap_ce_forward_backward_cpu,
//          adamw_step_cpu, relu_square_forward_cpu,
//          relu_square_backward_cpu, rotary_norm_forward_cpu, rotary_norm_backward_cpu,
//          residual_norm_forward_cpu, residual_norm_backward_cpu, cast_float_bfloat16_cpu,
//          cpu_kernel_threads
// The CPU kernels of the fused ops (contracts in device_kernels.h). Each is one pass over
// memory, split over rows with at::parallel_for and vectorised with at::vec. This file alone
// is compiled for AVX2+FMA (CMakeLists.txt); kernels_cpu_supported() guards every call, and
// a CPU without AVX2 runs the ATen references instead.
//
// Reduced precision (bf16/fp16) rows are converted to an fp32 scratch row first: the math is
// in fp32 as ATen's own kernels do it, and a row of even a 65536 vocab stays in L2.
#include "device_kernels.h"

#include <atomic>
#include <cmath>
#include <limits>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <ATen/cpu/vec/functional.h>
#include <ATen/cpu/vec/vec.h>

#include "kernels_cpu_vec.h"
#include "nanochat/common/error.h"

namespace nanochat {
namespace {

void check_rows(const torch::Tensor& t, int64_t rows, const char* what) {
  if (!t.is_contiguous() || t.size(0) != rows) fail("%s: expected a contiguous tensor of %lld rows", what, (long long)rows);
}

// tanh(u) = 1 - 2 / (exp(2u) + 1) through at::vec's fast exp (exp_u20, the one inductor's
// softmax uses: ~1e-6 relative): one cheap exp instead of Sleef's tanh, and exp(2u) -> inf
// or 0 gives exactly +-1. The CUDA kernel computes it the same way.
template <typename V>
V fast_tanh(V u) {
  return V(1) - V(2) / ((u + u).exp_u20() + V(1));
}

// One row of the softcapped cross-entropy, l its logits as acc_t (the first `vocab` count).
// z = cap*tanh(l/cap) lies in [-cap, cap], so exp(z) cannot overflow for any sane cap: the
// log-sum-exp needs no running max, and the row is read once.
template <typename acc>
acc row_lse(const acc* l, int64_t vocab, acc c, acc inv_c) {
  using V = Vectorized<acc>;
  V vsum(0);
  int64_t j = 0;
  for (; j + V::size() <= vocab; j += V::size()) vsum += (fast_tanh(V::loadu(l + j) * V(inv_c)) * V(c)).exp_u20();
  acc sum = at::vec::vec_reduce_all<acc>([](V a, V b) { return a + b; }, vsum);
  for (; j < vocab; j++) sum += std::exp(c * std::tanh(l[j] * inv_c));
  return std::log(sum);
}

// d loss / d l for the row's gradient g into out[0, ld): g * (softmax(z) - onehot(t)) * (1 - tanh^2),
// 0 in the padded columns
template <typename acc>
void row_grad(const acc* l, int64_t vocab, int64_t ld, int64_t t, acc lse, acc g, acc c, acc inv_c, acc* out) {
  using V = Vectorized<acc>;
  const V vg(g), vlse(lse), vc(c), vinv(inv_c), one(1);
  int64_t j = 0;
  for (; j + V::size() <= vocab; j += V::size()) {
    V th = fast_tanh(V::loadu(l + j) * vinv);
    V p = (th * vc - vlse).exp_u20();
    (vg * p * (one - th * th)).store(out + j);
  }
  for (; j < vocab; j++) {
    acc th = std::tanh(l[j] * inv_c);
    out[j] = g * std::exp(th * c - lse) * (1 - th * th);
  }
  const acc tht = std::tanh(l[t] * inv_c);
  out[t] -= g * (1 - tht * tht);
  std::fill(out + vocab, out + ld, acc(0));
}

// forward and backward of one row at once, for a gradient known up front: the first sweep
// keeps tanh(l/c) in `out` and exp(z) in `e` while it sums, the second only multiplies --
// one tanh and one exp an element instead of two of each. Returns the log-sum-exp.
template <typename acc>
acc row_lse_and_grad(const acc* l, int64_t vocab, int64_t ld, int64_t t, acc g, acc c, acc inv_c, acc* e, acc* out) {
  using V = Vectorized<acc>;
  V vsum(0);
  int64_t j = 0;
  for (; j + V::size() <= vocab; j += V::size()) {
    V th = fast_tanh(V::loadu(l + j) * V(inv_c)), ez = (th * V(c)).exp_u20();
    th.store(out + j);
    ez.store(e + j);
    vsum += ez;
  }
  acc sum = at::vec::vec_reduce_all<acc>([](V a, V b) { return a + b; }, vsum);
  for (; j < vocab; j++) {
    out[j] = std::tanh(l[j] * inv_c);
    e[j] = std::exp(c * out[j]);
    sum += e[j];
  }
  const acc lse = std::log(sum), gp = g / sum;  // g * softmax = g * exp(z) / sum
  const acc tht = out[t];
  j = 0;
  for (; j + V::size() <= vocab; j += V::size()) {
    V th = V::loadu(out + j);
    (V(gp) * V::loadu(e + j) * (V(1) - th * th)).store(out + j);
  }
  for (; j < vocab; j++) out[j] = gp * e[j] * (1 - out[j] * out[j]);
  out[t] -= g * (1 - tht * tht);
  std::fill(out + vocab, out + ld, acc(0));
  return lse;
}

// -1 is the ignore index (as the reference's cross_entropy); any other target must be a token
void check_target(int64_t t, int64_t vocab) {
  if (t < -1 || t >= vocab)
    fail("cross-entropy: target %lld is outside the vocab of %lld (-1 marks an ignored position)", (long long)t,
         (long long)vocab);
}

// the row loop of the three entry points below: forward (loss, lse), backward (logits become
// their gradient for grad_loss), or both while the row is in cache (grad_loss then known
// up front, as for a mean loss)
void softcap_ce_rows(torch::Tensor& logits, const torch::Tensor& targets, int64_t vocab, double cap,
                     torch::Tensor* loss, torch::Tensor* lse, const torch::Tensor* lse_in, const torch::Tensor* grad_loss) {
  const int64_t n = logits.size(0), ld = logits.size(1);
  check_rows(logits, n, "softcap_ce");
  check_rows(targets, n, "softcap_ce targets");
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, logits.scalar_type(), "softcap_ce", [&] {
    using acc = acc_t<scalar_t>;
    scalar_t* L = logits.data_ptr<scalar_t>();
    const int64_t* tg = targets.data_ptr<int64_t>();
    acc* out_loss = loss ? loss->data_ptr<acc>() : nullptr;
    acc* out_lse = lse ? lse->data_ptr<acc>() : nullptr;
    const acc* in_lse = lse_in ? lse_in->data_ptr<acc>() : nullptr;
    const acc* grad = grad_loss ? grad_loss->data_ptr<acc>() : nullptr;
    const acc c = (acc)cap, inv_c = (acc)(1.0 / cap);
    const bool at_once = grad && !in_lse;  // forward and backward in one visit of the row
    at::parallel_for(0, n, 1, [&](int64_t begin, int64_t end) {
      std::vector<acc> scratch, out(grad ? ld : 0), e(at_once ? vocab : 0);
      for (int64_t i = begin; i < end; i++) {
        scalar_t* row = L + i * ld;
        const int64_t t = tg[i];
        check_target(t, vocab);
        const acc* l = row_as_acc(row, vocab, scratch);
        if (at_once && t != -1) {
          const acc lse_value = row_lse_and_grad(l, vocab, ld, t, grad[i], c, inv_c, e.data(), out.data());
          out_lse[i] = lse_value;
          out_loss[i] = lse_value - c * std::tanh(l[t] * inv_c);
          store_row<scalar_t>(out.data(), row, ld);
          continue;
        }
        const acc row_lse_value = in_lse ? in_lse[i] : row_lse(l, vocab, c, inv_c);
        if (out_lse) out_lse[i] = row_lse_value;
        if (out_loss) out_loss[i] = t == -1 ? acc(0) : row_lse_value - c * std::tanh(l[t] * inv_c);
        if (!grad) continue;
        if (t == -1) {  // an ignored position contributes nothing
          std::fill(row, row + ld, scalar_t(0));
          continue;
        }
        row_grad(l, vocab, ld, t, row_lse_value, grad[i], c, inv_c, out.data());
        store_row<scalar_t>(out.data(), row, ld);
      }
    });
  });
}

}  // namespace

void softcap_ce_forward_cpu(const torch::Tensor& logits, const torch::Tensor& targets, int64_t vocab,
                            double cap, torch::Tensor& loss, torch::Tensor& lse) {
  torch::Tensor l = logits;  // read only: no gradient is asked for
  softcap_ce_rows(l, targets, vocab, cap, &loss, &lse, nullptr, nullptr);
}

void softcap_ce_backward_cpu(torch::Tensor& logits, const torch::Tensor& targets, const torch::Tensor& lse,
                             const torch::Tensor& grad_loss, int64_t vocab, double cap) {
  softcap_ce_rows(logits, targets, vocab, cap, nullptr, nullptr, &lse, &grad_loss);
}

void softcap_ce_forward_backward_cpu(torch::Tensor& logits, const torch::Tensor& targets, const torch::Tensor& grad_loss,
                                     int64_t vocab, double cap, torch::Tensor& loss, torch::Tensor& lse) {
  softcap_ce_rows(logits, targets, vocab, cap, &loss, &lse, nullptr, &grad_loss);
}

namespace {

// out[i] = f(a[i], b[i]) over n elements of T, in blocks converted to acc_t: one conversion
// each way per element (at::vec's bf16 arithmetic converts around every single op)
template <typename T, typename F>
void map2_acc(const T* a, const T* b, T* out, int64_t n, F f) {
  using acc = acc_t<T>;
  using V = Vectorized<acc>;
  at::parallel_for(0, n, 32768, [&](int64_t begin, int64_t end) {
    constexpr int64_t block = 4096;
    std::vector<acc> sa, sb, so(block);
    for (int64_t i0 = begin; i0 < end; i0 += block) {
      const int64_t m = std::min(block, end - i0);
      const acc* va = row_as_acc(a + i0, m, sa);
      const acc* vb = b ? row_as_acc(b + i0, m, sb) : va;
      int64_t j = 0;
      for (; j + V::size() <= m; j += V::size()) f(V::loadu(va + j), V::loadu(vb + j)).store(so.data() + j);
      if (j < m) f(V::loadu(va + j, m - j), V::loadu(vb + j, m - j)).store(so.data() + j, m - j);
      store_row<T>(so.data(), out + i0, m);
    }
  });
}

}  // namespace

torch::Tensor relu_square_forward_cpu(const torch::Tensor& h) {
  torch::Tensor y = at::empty_like(h);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, h.scalar_type(), "relu_square_forward", [&] {
    using V = Vectorized<acc_t<scalar_t>>;
    map2_acc<scalar_t>(h.data_ptr<scalar_t>(), nullptr, y.data_ptr<scalar_t>(), h.numel(), [](V x, V) {
      V r = at::vec::clamp_min(x, V(0));
      return r * r;
    });
  });
  return y;
}

void relu_square_backward_cpu(const torch::Tensor& h, torch::Tensor& dy) {
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, h.scalar_type(), "relu_square_backward", [&] {
    using V = Vectorized<acc_t<scalar_t>>;
    scalar_t* g = dy.data_ptr<scalar_t>();
    map2_acc<scalar_t>(h.data_ptr<scalar_t>(), g, g, h.numel(),
                       [](V x, V d) { return V(2) * at::vec::clamp_min(x, V(0)) * d; });
  });
}

// Rows of D = 2*half channels; row r sits at position (r / H) % T of the (B,T,H,D) tensor.
std::pair<torch::Tensor, torch::Tensor> rotary_norm_forward_cpu(const torch::Tensor& x, const torch::Tensor& cos,
                                                                const torch::Tensor& sin, int64_t T, int64_t H,
                                                                double scale, double eps) {
  const int64_t R = x.size(0), D = x.size(1), half = D / 2;
  torch::Tensor y = at::empty_like(x);
  torch::Tensor rstd = at::empty({R}, x.options().dtype(x.scalar_type() == at::kDouble ? at::kDouble : at::kFloat));
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, x.scalar_type(), "rotary_norm_forward", [&] {
    using acc = acc_t<scalar_t>;
    const scalar_t* X = x.data_ptr<scalar_t>();
    const scalar_t* C = cos.data_ptr<scalar_t>();
    const scalar_t* S = sin.data_ptr<scalar_t>();
    scalar_t* Y = y.data_ptr<scalar_t>();
    acc* out_rstd = rstd.data_ptr<acc>();
    at::parallel_for(0, R, 64, [&](int64_t begin, int64_t end) {
      std::vector<acc> r(D);
      for (int64_t i = begin; i < end; i++) {
        const scalar_t* xr = X + i * D;
        const int64_t pos = (i / H) % T;
        acc ss = 0;
        for (int64_t j = 0; j < half; j++) {
          const acc x1 = xr[j], x2 = xr[j + half], c = C[pos * half + j], s = S[pos * half + j];
          r[j] = x1 * c + x2 * s;
          r[j + half] = -x1 * s + x2 * c;
          ss += r[j] * r[j] + r[j + half] * r[j + half];
        }
        const acc inv = acc(1) / std::sqrt(ss / (acc)D + (acc)eps);
        out_rstd[i] = inv;
        const acc k = (acc)scale * inv;
        for (int64_t j = 0; j < D; j++) Y[i * D + j] = scalar_t(r[j] * k);
      }
    });
  });
  return {y, rstd};
}

// n = y/scale (the normed row), dn = scale*dy: dr = rstd*(dn - n*mean(dn*n)), then the
// rotation transposed: dx1 = dr1*c - dr2*s, dx2 = dr1*s + dr2*c
torch::Tensor rotary_norm_backward_cpu(const torch::Tensor& dy, const torch::Tensor& y, const torch::Tensor& rstd,
                                       const torch::Tensor& cos, const torch::Tensor& sin, int64_t T, int64_t H,
                                       double scale) {
  const int64_t R = y.size(0), D = y.size(1), half = D / 2;
  torch::Tensor dx = at::empty_like(y);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, y.scalar_type(), "rotary_norm_backward", [&] {
    using acc = acc_t<scalar_t>;
    const scalar_t* DY = dy.data_ptr<scalar_t>();
    const scalar_t* Y = y.data_ptr<scalar_t>();
    const scalar_t* C = cos.data_ptr<scalar_t>();
    const scalar_t* S = sin.data_ptr<scalar_t>();
    const acc* in_rstd = rstd.data_ptr<acc>();
    scalar_t* DX = dx.data_ptr<scalar_t>();
    const acc sc = (acc)scale, inv_sc = acc(1) / (acc)scale;
    at::parallel_for(0, R, 64, [&](int64_t begin, int64_t end) {
      std::vector<acc> dn(D), nn(D);
      for (int64_t i = begin; i < end; i++) {
        acc dot = 0;
        for (int64_t j = 0; j < D; j++) {
          nn[j] = (acc)Y[i * D + j] * inv_sc;
          dn[j] = (acc)DY[i * D + j] * sc;
          dot += dn[j] * nn[j];
        }
        dot /= (acc)D;
        const acc inv = in_rstd[i];
        const int64_t pos = (i / H) % T;
        for (int64_t j = 0; j < half; j++) {
          const acc dr1 = inv * (dn[j] - nn[j] * dot), dr2 = inv * (dn[j + half] - nn[j + half] * dot);
          const acc c = C[pos * half + j], s = S[pos * half + j];
          DX[i * D + j] = scalar_t(dr1 * c - dr2 * s);
          DX[i * D + j + half] = scalar_t(dr1 * s + dr2 * c);
        }
      }
    });
  });
  return dx;
}

namespace {

template <typename T>
const acc_t<T>* scalar_ptr(const torch::Tensor& t) {
  return t.defined() ? t.data_ptr<acc_t<T>>() : nullptr;
}

}  // namespace

// Each row goes through fp32 scratch rows (as the other kernels): convert, the products and
// the sum each rounded back through T as the eager ops round them, then the norm.
ResidualNormOut residual_norm_forward_cpu(const torch::Tensor& x, const torch::Tensor& y, const torch::Tensor& a,
                                          const torch::Tensor& b, double eps) {
  const int64_t R = x.size(0), D = x.size(1);
  check_rows(y, R, "residual_norm_forward_cpu: y");
  ResidualNormOut out{at::empty_like(x), at::empty_like(x),
                      at::empty({R}, x.options().dtype(x.scalar_type() == at::kDouble ? at::kDouble : at::kFloat))};
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, x.scalar_type(), "residual_norm_forward", [&] {
    using acc = acc_t<scalar_t>;
    const scalar_t *X = x.data_ptr<scalar_t>(), *Y = y.data_ptr<scalar_t>();
    const acc *A = scalar_ptr<scalar_t>(a), *B = scalar_ptr<scalar_t>(b);
    scalar_t *H = out.h.data_ptr<scalar_t>(), *N = out.n.data_ptr<scalar_t>();
    acc* RSTD = out.rstd.data_ptr<acc>();
    at::parallel_for(0, R, 16, [&](int64_t begin, int64_t end) {
      std::vector<acc> xs(D), ys(D), hs(D);
      std::vector<scalar_t> rounding;
      for (int64_t i = begin; i < end; i++) {
        const acc* xr = row_as_acc(X + i * D, D, xs);
        const acc* yr = row_as_acc(Y + i * D, D, ys);
        if (A) {  // a*x, rounded
          for (int64_t j = 0; j < D; j++) xs[j] = *A * xr[j];
          round_row<scalar_t>(xs.data(), D, rounding);
          xr = xs.data();
        }
        if (B) {  // b*y, rounded
          for (int64_t j = 0; j < D; j++) ys[j] = *B * yr[j];
          round_row<scalar_t>(ys.data(), D, rounding);
          yr = ys.data();
        }
        for (int64_t j = 0; j < D; j++) hs[j] = xr[j] + yr[j];
        round_row<scalar_t>(hs.data(), D, rounding);  // h as stored
        const acc rstd = acc(1) / std::sqrt(dot_row(hs.data(), hs.data(), D) / (acc)D + (acc)eps);
        RSTD[i] = rstd;
        store_row<scalar_t>(hs.data(), H + i * D, D);
        for (int64_t j = 0; j < D; j++) hs[j] *= rstd;
        store_row<scalar_t>(hs.data(), N + i * D, D);
      }
    });
  });
  return out;
}

ResidualNormGrads residual_norm_backward_cpu(const torch::Tensor& dh, const torch::Tensor& dn, const torch::Tensor& h,
                                             const torch::Tensor& rstd, const torch::Tensor& x, const torch::Tensor& y,
                                             const torch::Tensor& a, const torch::Tensor& b) {
  const int64_t R = h.size(0), D = h.size(1);
  check_rows(dh, R, "residual_norm_backward_cpu: dh");
  check_rows(dn, R, "residual_norm_backward_cpu: dn");
  const auto acc_options = h.options().dtype(h.scalar_type() == at::kDouble ? at::kDouble : at::kFloat);
  ResidualNormGrads g;
  g.dx = at::empty_like(h);
  g.dy = a.defined() || b.defined() ? at::empty_like(h) : g.dx;
  if (a.defined()) g.ga_rows = at::empty({R}, acc_options);
  if (b.defined()) g.gb_rows = at::empty({R}, acc_options);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, h.scalar_type(), "residual_norm_backward", [&] {
    using acc = acc_t<scalar_t>;
    const scalar_t *DH = dh.data_ptr<scalar_t>(), *DN = dn.data_ptr<scalar_t>(), *H = h.data_ptr<scalar_t>();
    const scalar_t* X = a.defined() ? x.data_ptr<scalar_t>() : nullptr;
    const scalar_t* Y = b.defined() ? y.data_ptr<scalar_t>() : nullptr;
    const acc *A = scalar_ptr<scalar_t>(a), *B = scalar_ptr<scalar_t>(b), *RSTD = rstd.data_ptr<acc>();
    scalar_t *DX = g.dx.data_ptr<scalar_t>(), *DY = g.dy.data_ptr<scalar_t>();
    acc* GA = a.defined() ? g.ga_rows.data_ptr<acc>() : nullptr;
    acc* GB = b.defined() ? g.gb_rows.data_ptr<acc>() : nullptr;
    at::parallel_for(0, R, 16, [&](int64_t begin, int64_t end) {
      std::vector<acc> s_dh(D), s_dn(D), s_h(D), s_in(D), gr(D), out(D);
      for (int64_t i = begin; i < end; i++) {
        const acc r = RSTD[i];
        const acc* dhr = row_as_acc(DH + i * D, D, s_dh);
        const acc* dnr = row_as_acc(DN + i * D, D, s_dn);
        const acc* hr = row_as_acc(H + i * D, D, s_h);
        const acc dot = r * dot_row(dnr, hr, D) / (acc)D;  // mean(dn * nh), nh = h * rstd
        for (int64_t j = 0; j < D; j++) gr[j] = dhr[j] + r * (dnr[j] - hr[j] * r * dot);
        if (A) {
          for (int64_t j = 0; j < D; j++) out[j] = *A * gr[j];
          store_row<scalar_t>(out.data(), DX + i * D, D);
          GA[i] = dot_row(gr.data(), row_as_acc(X + i * D, D, s_in), D);
        } else {
          store_row<scalar_t>(gr.data(), DX + i * D, D);
        }
        if (B) {
          for (int64_t j = 0; j < D; j++) out[j] = *B * gr[j];
          store_row<scalar_t>(out.data(), DY + i * D, D);
          GB[i] = dot_row(gr.data(), row_as_acc(Y + i * D, D, s_in), D);
        } else if (A) {
          store_row<scalar_t>(gr.data(), DY + i * D, D);
        }
      }
    });
  });
  return g;
}

// AdamW in one pass, blocks of 4096 elements through fp32 scratch: the same operations in
// the same order as optim_adamw_step's ATen composition, so the same bits -- lerp as ATen's
// vectorised kernel computes it (fma(w, b-a, a) for w < 0.5, else fma(w-1, b-a, b)) and the
// final add with alpha as an fma.
namespace {

template <typename T>
void adamw_step_impl(T* P, const T* G, T* M, T* S, int64_t n, float lr, float beta1, float beta2, float eps,
                     float weight_decay, float bias1, float bias2) {
  using F = Vectorized<float>;
  const float decay = 1.0f - lr * weight_decay, w1 = 1.0f - beta1, w2 = 1.0f - beta2, step_size = lr / bias1;
  auto lerp = [](F a, F b, float w) {
    return w < 0.5f ? at::vec::fmadd(F(w), b - a, a) : at::vec::fmadd(F(w - 1.0f), b - a, b);
  };
  auto lerp1 = [](float a, float b, float w) { return w < 0.5f ? std::fma(w, b - a, a) : std::fma(w - 1.0f, b - a, b); };
  constexpr int64_t kBlock = 512;
  at::parallel_for(0, (n + kBlock - 1) / kBlock, 1, [&](int64_t b0, int64_t b1) {
    std::vector<float> scratch(std::is_same_v<T, float> ? 0 : 4 * kBlock);
    for (int64_t b = b0; b < b1; b++) {
      const int64_t off = b * kBlock, len = std::min(kBlock, n - off);
      float *pp, *mp, *sp;
      const float* gp;
      if constexpr (std::is_same_v<T, float>) {
        pp = P + off, mp = M + off, sp = S + off, gp = G + off;
      } else {
        pp = scratch.data(), mp = pp + kBlock, sp = mp + kBlock;
        float* g = sp + kBlock;
        to_float(P + off, pp, len), to_float(M + off, mp, len), to_float(S + off, sp, len), to_float(G + off, g, len);
        gp = g;
      }
      int64_t j = 0;
      for (; j + F::size() <= len; j += F::size()) {
        F pv = F::loadu(pp + j) * F(decay), g = F::loadu(gp + j);
        F m = lerp(F::loadu(mp + j), g, w1), v = lerp(F::loadu(sp + j), g * g, w2);
        F denom = (v / F(bias2)).sqrt() + F(eps);
        at::vec::fmadd(F(-step_size), m / denom, pv).store(pp + j);
        m.store(mp + j);
        v.store(sp + j);
      }
      for (; j < len; j++) {
        const float g = gp[j], m = lerp1(mp[j], g, w1), v = lerp1(sp[j], g * g, w2);
        pp[j] = std::fma(-step_size, m / (std::sqrt(v / bias2) + eps), pp[j] * decay);
        mp[j] = m;
        sp[j] = v;
      }
      if constexpr (!std::is_same_v<T, float>) {
        from_float(pp, P + off, len), from_float(mp, M + off, len), from_float(sp, S + off, len);
      }
    }
  });
}

}  // namespace

void adamw_step_cpu(torch::Tensor& p, const torch::Tensor& grad, torch::Tensor& exp_avg, torch::Tensor& exp_avg_sq,
                    float lr, float beta1, float beta2, float eps, float weight_decay, float bias1, float bias2) {
  if (p.scalar_type() == at::kFloat)
    adamw_step_impl(p.data_ptr<float>(), grad.data_ptr<float>(), exp_avg.data_ptr<float>(),
                    exp_avg_sq.data_ptr<float>(), p.numel(), lr, beta1, beta2, eps, weight_decay, bias1, bias2);
  else if (p.scalar_type() == at::kBFloat16)
    adamw_step_impl(p.data_ptr<at::BFloat16>(), grad.data_ptr<at::BFloat16>(), exp_avg.data_ptr<at::BFloat16>(),
                    exp_avg_sq.data_ptr<at::BFloat16>(), p.numel(), lr, beta1, beta2, eps, weight_decay, bias1, bias2);
  else
    fail("adamw_step_cpu: float32 or bfloat16 params expected, not %s", c10::toString(p.scalar_type()));
}

// fp32 <-> bf16 in parallel blocks through the row conversions every kernel here uses: their
// bits checked against ATen's .to() by the tests (the model itself casts with ATen's copy
// kernel, which streams faster)
torch::Tensor cast_float_bfloat16_cpu(const torch::Tensor& x) {
  const bool down = x.scalar_type() == at::kFloat;
  if (!(down || x.scalar_type() == at::kBFloat16) || !x.is_contiguous())
    fail("cast_float_bfloat16_cpu: a contiguous float32 or bfloat16 tensor expected, got %s", c10::toString(x.scalar_type()));
  torch::Tensor y = at::empty_like(x, x.options().dtype(down ? at::kBFloat16 : at::kFloat));
  at::parallel_for(0, x.numel(), 65536, [&](int64_t begin, int64_t end) {
    if (down) from_float(x.data_ptr<float>() + begin, y.data_ptr<at::BFloat16>() + begin, end - begin);
    else to_float(x.data_ptr<at::BFloat16>() + begin, y.data_ptr<float>() + begin, end - begin);
  });
  return y;
}

int cpu_kernel_threads() {
  std::atomic<int> chunks{0};
  const int n = std::max(1, at::get_num_threads());
  at::parallel_for(0, n, 1, [&](int64_t, int64_t) { chunks++; });  // one chunk per thread that ran
  return chunks.load();
}

}  // namespace nanochat
