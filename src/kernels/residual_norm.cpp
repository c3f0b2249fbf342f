// defines: kernels_residual_norm, kernels_residual_norm_reference
// The residual stream meets an RMSNorm three times per layer pair: the per-layer lambdas
// (x = a*x + b*x0, then the attention's norm), the add before the MLP's norm, and the final
// "backout". Eagerly each is 2-3 element-wise kernels plus the norm's two passes, and autograd
// keeps x, x0 and h; fused it is one pass forward and one backward, keeping h and one fp32
// rstd per row (x and y only when a lambda needs its gradient).
#include "nanochat/kernels.h"

#include <cfloat>
#include <optional>

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include "device_kernels.h"
#include "kernels_internal.h"
#include "nanochat/common/error.h"

namespace nanochat {
namespace {

using torch::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct ResidualNorm : public torch::autograd::Function<ResidualNorm> {
  // x, y (R, D) contiguous of one dtype; a, b 0-dim in the accumulation dtype, or absent
  // (optional: autograd takes no undefined tensor as an input)
  static variable_list forward(AutogradContext* ctx, const Tensor& x, const Tensor& y,
                               const std::optional<Tensor>& a_opt, const std::optional<Tensor>& b_opt) {
    const Tensor a = a_opt.value_or(Tensor()), b = b_opt.value_or(Tensor());
    // at::rms_norm's default eps: the epsilon of its accumulation type (fp32 for bf16/fp16)
    const double eps = x.scalar_type() == at::kDouble ? DBL_EPSILON : FLT_EPSILON;
    ResidualNormOut out = x.is_cuda() ? residual_norm_forward_cuda(x, y, a, b, eps)
                                      : residual_norm_forward_cpu(x, y, a, b, eps);
    // x and y are only read back for the lambdas' gradients
    ctx->save_for_backward({out.h, out.rstd, a.defined() ? x : Tensor(), b.defined() ? y : Tensor(), a, b});
    return {out.h, out.n};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    const Tensor &h = saved[0], &rstd = saved[1], &x = saved[2], &y = saved[3], &a = saved[4], &b = saved[5];
    const Tensor dh = grads[0].contiguous(), dn = grads[1].contiguous();
    ResidualNormGrads g = h.is_cuda() ? residual_norm_backward_cuda(dh, dn, h, rstd, x, y, a, b)
                                      : residual_norm_backward_cpu(dh, dn, h, rstd, x, y, a, b);
    return {g.dx, g.dy, a.defined() ? g.ga_rows.sum() : Tensor(), b.defined() ? g.gb_rows.sum() : Tensor()};
  }
};

// a lambda as the fused op reads it: 0-dim, in the accumulation dtype, on x's device; first
// rounded to x's dtype, as the eager a*x rounds a 0-dim operand to the tensor's dtype
std::optional<Tensor> as_scalar(const Tensor& s, const Tensor& x) {
  if (!s.defined()) return std::nullopt;
  if (s.numel() != 1) fail("residual_norm: a and b must be single values, got %lld elements", (long long)s.numel());
  return s.reshape({}).to(x.device(), x.scalar_type()).to(x.scalar_type() == at::kDouble ? at::kDouble : at::kFloat);
}

}  // namespace

std::pair<Tensor, Tensor> kernels_residual_norm_reference(const Tensor& x, const Tensor& y, const Tensor& a,
                                                          const Tensor& b) {
  Tensor h = (a.defined() ? a * x : x) + (b.defined() ? b * y : y);
  return {h, at::rms_norm(h, {h.size(-1)}, std::nullopt, std::nullopt)};
}

std::pair<Tensor, Tensor> kernels_residual_norm(const Tensor& x, const Tensor& y, const Tensor& a, const Tensor& b) {
  if (!kernels_use_fused(x)) return kernels_residual_norm_reference(x, y, a, b);
  if (!x.sizes().equals(y.sizes()) || x.scalar_type() != y.scalar_type() || x.dim() < 1)
    fail("residual_norm: x and y must have one shape and dtype, got %s %s and %s %s", c10::toString(x.scalar_type()),
         c10::str(x.sizes()).c_str(), c10::toString(y.scalar_type()), c10::str(y.sizes()).c_str());
  const int64_t D = x.size(-1);
  variable_list out = ResidualNorm::apply(x.contiguous().view({-1, D}), y.contiguous().view({-1, D}), as_scalar(a, x),
                                          as_scalar(b, x));
  return {out[0].view(x.sizes()), out[1].view(x.sizes())};
}

}  // namespace nanochat
