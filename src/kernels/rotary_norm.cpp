// defines: kernels_rotary_norm, kernels_rotary_norm_reference
// q and k after their projections: rotary, RMSNorm without weight, then x1.2 ("sharper
// attention"). Eagerly that is ~8 kernels for the rotary (narrow, 4 products, 2 sums, cat),
// the norm, and the scale, each keeping tensors for backward; fused it is one pass that
// keeps only its output (which attention keeps anyway) and one fp32 rstd per row.
#include "nanochat/kernels.h"

#include <cfloat>

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

struct RotaryNorm : public torch::autograd::Function<RotaryNorm> {
  // x (B,T,H,D) contiguous; cos, sin (T, D/2) contiguous
  static Tensor forward(AutogradContext* ctx, const Tensor& x, const Tensor& cos, const Tensor& sin, double scale) {
    const int64_t T = x.size(1), H = x.size(2), D = x.size(3);
    // at::rms_norm's default eps: the epsilon of its accumulation type (fp32 for bf16/fp16)
    const double eps = x.scalar_type() == at::kDouble ? DBL_EPSILON : FLT_EPSILON;
    Tensor rows = x.view({-1, D});
    auto [y, rstd] = x.is_cuda() ? rotary_norm_forward_cuda(rows, cos, sin, T, H, scale, eps)
                                 : rotary_norm_forward_cpu(rows, cos, sin, T, H, scale, eps);
    ctx->save_for_backward({y, rstd, cos, sin});
    ctx->saved_data["scale"] = scale;
    ctx->saved_data["T"] = T;
    ctx->saved_data["H"] = H;
    return y.view(x.sizes());
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    const Tensor &y = saved[0], &rstd = saved[1], &cos = saved[2], &sin = saved[3];
    const double scale = ctx->saved_data["scale"].toDouble();
    const int64_t T = ctx->saved_data["T"].toInt(), H = ctx->saved_data["H"].toInt();
    const Tensor dy = grads[0].contiguous().view(y.sizes());
    Tensor dx = dy.is_cuda() ? rotary_norm_backward_cuda(dy, y, rstd, cos, sin, T, H, scale)
                             : rotary_norm_backward_cpu(dy, y, rstd, cos, sin, T, H, scale);
    return {dx.view(grads[0].sizes()), Tensor(), Tensor(), Tensor()};
  }
};

}  // namespace

Tensor kernels_rotary_norm_reference(const Tensor& x, const Tensor& cos, const Tensor& sin, double scale) {
  const int64_t d = x.size(3) / 2;
  Tensor x1 = x.narrow(3, 0, d), x2 = x.narrow(3, d, d);
  Tensor r = at::cat({x1 * cos + x2 * sin, -x1 * sin + x2 * cos}, 3);
  return at::rms_norm(r, {r.size(-1)}, std::nullopt, std::nullopt) * scale;
}

Tensor kernels_rotary_norm(const Tensor& x, const Tensor& cos, const Tensor& sin, double scale) {
  if (!kernels_use_fused(x) || (x.is_cuda() && !rotary_norm_cuda_takes(x.size(-1))))
    return kernels_rotary_norm_reference(x, cos, sin, scale);
  const int64_t T = x.size(1), D = x.size(3);
  if (x.dim() != 4 || D % 2 != 0 || cos.numel() != T * (D / 2) || sin.numel() != T * (D / 2) ||
      cos.scalar_type() != x.scalar_type() || sin.scalar_type() != x.scalar_type())
    fail("rotary_norm: x (B,T,H,D) with D even and cos, sin (1,T,1,D/2) in x's dtype expected");
  return RotaryNorm::apply(x.contiguous(), cos.reshape({T, D / 2}).contiguous(), sin.reshape({T, D / 2}).contiguous(),
                           scale);
}

}  // namespace nanochat
