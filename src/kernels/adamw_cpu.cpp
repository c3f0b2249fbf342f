// The CPU kernel of adamw.cpp.
#include <ATen/core/Tensor.h>
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>

#include "cpu_helpers.h"
#include "nanochat/common/error.h"

namespace nanochat {

// AdamW in one pass, blocks of 512 elements through fp32 scratch: the same operations in the
// same order as kernels_adamw_step_reference's ATen composition, so the same bits -- lerp as
// ATen's vectorised kernel computes it (fma(w, b-a, a) for w < 0.5, else fma(w-1, b-a, b)) and
// the final add with alpha as an fma. One exception: the sqrt here is IEEE's, correctly rounded,
// and ATen's fp32 sqrt on the CPU is not (0.6% of uniform inputs differ from IEEE's in the last
// bit, at every CPU capability; MKL's, by all signs).
namespace {

template <typename T>
void adamw_step_impl(T* P, const T* G, T* M, T* S, int64_t n, float lr, float beta1, float beta2, float eps,
                     float weight_decay, float bias1, float bias2) {
  using F = Vectorized<float>;
  const float decay = 1.0f - lr * weight_decay, w1 = 1.0f - beta1, w2 = 1.0f - beta2, step_size = lr / bias1;
  auto lerp = [](F a, F b, float w) {
    return w < 0.5f ? at::vec::fmadd(F(w), b - a, a) : at::vec::fmadd(F(w - 1.0f), b - a, b);
  };
  auto lerp1 = [](float a, float b, float w) {
    return w < 0.5f ? std::fma(w, b - a, a) : std::fma(w - 1.0f, b - a, b);
  };
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

void adamw_step_cpu(at::Tensor& p, const at::Tensor& grad, at::Tensor& exp_avg, at::Tensor& exp_avg_sq, float lr,
                    float beta1, float beta2, float eps, float weight_decay, float bias1, float bias2) {
  if (p.scalar_type() == at::kFloat)
    adamw_step_impl(p.data_ptr<float>(), grad.data_ptr<float>(), exp_avg.data_ptr<float>(),
                    exp_avg_sq.data_ptr<float>(), p.numel(), lr, beta1, beta2, eps, weight_decay, bias1, bias2);
  else if (p.scalar_type() == at::kBFloat16)
    adamw_step_impl(p.data_ptr<at::BFloat16>(), grad.data_ptr<at::BFloat16>(), exp_avg.data_ptr<at::BFloat16>(),
                    exp_avg_sq.data_ptr<at::BFloat16>(), p.numel(), lr, beta1, beta2, eps, weight_decay, bias1, bias2);
  else fail("adamw_step_cpu: float32 or bfloat16 params expected, not %s", c10::toString(p.scalar_type()));
}

}  // namespace nanochat
