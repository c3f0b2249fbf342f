// defines: kernels_mlp_relu_square, kernels_mlp_relu_square_reference
// The MLP, relu(x @ w_fc^T)^2 @ w_proj^T. Eagerly, relu and square each write a 4C-wide
// tensor and autograd keeps both; the fused op writes relu(h)^2 in one pass, keeps only x
// and h, and recomputes relu(h)^2 in backward (one cheap pass) for w_proj's gradient.
#include "nanochat/kernels.h"

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

Tensor relu_square(const Tensor& h) { return h.is_cuda() ? relu_square_forward_cuda(h) : relu_square_forward_cpu(h); }

struct MlpReluSquare : public torch::autograd::Function<MlpReluSquare> {
  // x (N, C), w_fc (4C, C), w_proj (C, 4C)
  static Tensor forward(AutogradContext* ctx, const Tensor& x, const Tensor& w_fc, const Tensor& w_proj) {
    Tensor h = at::mm(x, w_fc.t());
    Tensor out = at::mm(relu_square(h), w_proj.t());
    ctx->save_for_backward({x, w_fc, w_proj, h});
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    const Tensor &x = saved[0], &w_fc = saved[1], &w_proj = saved[2], &h = saved[3];
    const Tensor g = grads[0].contiguous();
    Tensor d_proj = at::mm(g.t(), relu_square(h));
    Tensor dh = at::mm(g, w_proj);  // d y, turned into d h in place
    if (dh.is_cuda()) relu_square_backward_cuda(h, dh);
    else relu_square_backward_cpu(h, dh);
    return {at::mm(dh, w_fc), at::mm(dh.t(), x), d_proj};
  }
};

}  // namespace

Tensor kernels_mlp_relu_square_reference(const Tensor& x, const Tensor& w_fc, const Tensor& w_proj) {
  return at::linear(at::relu(at::linear(x, w_fc)).square(), w_proj);
}

Tensor kernels_mlp_relu_square(const Tensor& x, const Tensor& w_fc, const Tensor& w_proj) {
  if (!kernels_use_fused(x)) return kernels_mlp_relu_square_reference(x, w_fc, w_proj);
  if (w_fc.scalar_type() != x.scalar_type() || w_proj.scalar_type() != x.scalar_type() || w_fc.size(1) != x.size(-1))
    fail("mlp_relu_square: weights must be in x's dtype, w_fc (H, C) and w_proj (C, H)");
  std::vector<int64_t> out_shape = x.sizes().vec();
  out_shape.back() = w_proj.size(0);
  Tensor x2 = x.reshape({-1, x.size(-1)}).contiguous();
  return MlpReluSquare::apply(x2, w_fc, w_proj).view(out_shape);
}

}  // namespace nanochat
