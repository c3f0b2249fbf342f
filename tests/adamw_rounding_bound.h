// How far apart two correct implementations of upstream's AdamW step may land, element by element,
// from an error analysis of the operations rather than from one machine. Two implementations (the
// fused kernel and the ATen reference, or the optimizer and a plain loop) do the same fp32
// arithmetic, but each CPU capability may round differently: ATen's DEFAULT kernels compute
// lerp as a multiply and an add where AVX2/AVX-512 use an fma, and ATen's fp32 sqrt is not
// correctly rounded. So each operation is charged one ulp of its own result (2^-23 relative,
// which covers any faithfully rounded op), on both sides, and the difference carried from the
// previous step is propagated through the update's exact derivatives:
//   m' = lerp(m, g, 1-b1)              dm' <= b1 dm + 2 ulp (2|g-m| + |m'|)
//   v' = lerp(v, g^2, 1-b2)            dv' <= b2 dv + 2 ulp (g^2 + 2|g^2-v| + |v'|)
//   d  = sqrt(v'/bias2) + eps          dd  <= min(dq/sqrt(q), sqrt(dq)) + 2 ulp (2 sqrt(q) + d), q = v'/bias2
//   r  = m'/d                          dr  <= (dm' + |r| dd)/d + 2 ulp |r|
//   p' = p (1 - lr wd) - (lr/bias1) r  dp' <= decay dp + s dr + 2 ulp (|p| decay + s |r| + |p'|)
// plus, for bf16 params and moments, each side's rounding of the stored result (2^-8 relative).
// The bounds are in ulps of the inputs of each operation, not of its result: where weight decay and
// the step nearly cancel, p' is tiny but p and s r are not. The fp32 scalars (decay, bias1, bias2,
// s) are the same bits on both sides, so they carry no error. First order in ulp: the neglected
// terms are ulp^2 relative.
#pragma once
#include <algorithm>
#include <cmath>
#include <sstream>
#include <string>

#include <gtest/gtest.h>
#include <torch/torch.h>

struct AdamWRoundingBound {
  torch::Tensor p, m, v;  // per element, float64: how far the two sides may be apart now
  double store_u = 0;     // unit roundoff of the stored dtype beyond fp32 (bf16: 2^-8)

  explicit AdamWRoundingBound(int64_t n, torch::ScalarType dtype)
      : p(torch::zeros({n}, torch::kDouble)),
        m(torch::zeros({n}, torch::kDouble)),
        v(torch::zeros({n}, torch::kDouble)),
        store_u(dtype == torch::kBFloat16 ? std::ldexp(1.0, -8) : 0.0) {}
};

// one step, from the reference's state before (p0, m0, v0) and after (p1, m1, v1) the step with
// gradient g; the hyperparameters as the step got them (rounded to fp32 here, as both sides do)
inline void adamw_bound_step(AdamWRoundingBound& b, const torch::Tensor& p0, const torch::Tensor& m0,
                             const torch::Tensor& v0, const torch::Tensor& g, const torch::Tensor& p1,
                             const torch::Tensor& m1, const torch::Tensor& v1, int64_t step, double lr, double beta1,
                             double beta2, double eps, double weight_decay) {
  auto d64 = [](const torch::Tensor& t) { return t.detach().to(torch::kCPU, torch::kDouble).reshape({-1}); };
  const double ulp = std::ldexp(1.0, -23);
  const float lr_f = (float)lr, b1 = (float)beta1, b2 = (float)beta2, wd_f = (float)weight_decay;
  const double decay = 1.0f - lr_f * wd_f, bias1 = 1.0f - std::pow(b1, (float)step),
               bias2 = 1.0f - std::pow(b2, (float)step), s = lr_f / (float)bias1;
  const torch::Tensor P0 = d64(p0), M0 = d64(m0), V0 = d64(v0), G = d64(g), P1 = d64(p1).abs(), M1 = d64(m1),
                      V1 = d64(v1), G2 = G * G;

  const torch::Tensor dm = b.m * (double)b1 + 2 * ulp * (2 * (G - M0).abs() + M1.abs()) + 2 * b.store_u * M1.abs();
  const torch::Tensor dv = b.v * (double)b2 + 2 * ulp * (G2 + 2 * (G2 - V0).abs() + V1.abs()) +
                           2 * b.store_u * V1.abs();

  const torch::Tensor q = V1 / bias2, sq = q.sqrt(), dq = dv / bias2;
  const torch::Tensor d = sq + (double)(float)eps;
  const torch::Tensor through_sqrt = torch::where(sq > 0, torch::minimum(dq / sq, dq.sqrt()), dq.sqrt());
  const torch::Tensor dd = through_sqrt + 2 * ulp * (2 * sq + d);
  const torch::Tensor r = M1.abs() / d;
  const torch::Tensor dr = (dm + r * dd) / d + 2 * ulp * r;

  b.p = b.p * decay + s * dr + 2 * ulp * (P0.abs() * decay + s * r + P1) + 2 * b.store_u * P1;
  b.m = dm;
  b.v = dv;
}

// "" when every element of `got` is within `bound` of `want`; else how many are out, and the worst
// element with its bound
inline std::string beyond_bound(const torch::Tensor& got, const torch::Tensor& want, const torch::Tensor& bound) {
  const torch::Tensor diff = (got.detach().to(torch::kCPU, torch::kDouble).reshape({-1}) -
                              want.detach().to(torch::kCPU, torch::kDouble).reshape({-1}))
                                 .abs();
  const int64_t n_out = (diff > bound).sum().item<int64_t>();
  if (n_out == 0) return "";
  const int64_t worst = (diff - bound).argmax().item<int64_t>();
  std::ostringstream os;
  os << n_out << " of " << diff.numel() << " elements beyond their rounding bound; element " << worst << " is "
     << diff[worst].item<double>() << " apart, bound " << bound[worst].item<double>();
  return os.str();
}
