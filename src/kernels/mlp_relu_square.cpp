// The MLP, relu(x @ w_fc^T)^2 @ w_proj^T. Eagerly, relu and square each write a 4C-wide
// tensor and autograd keeps both; the fused op writes relu(h)^2 in one pass, keeps only x
// and h, and recomputes relu(h)^2 in backward (one cheap pass) for w_proj's gradient.
#include "nanochat/kernels.h"

#include <array>
#include <cmath>
#include <ATen/ATen.h>
#include <torch/autograd.h>

#include "op_dispatch.h"
#include "nanochat/common/error.h"

namespace nanochat {

// the kernels (mlp_relu_square_cpu.cpp, mlp_relu_square.cu): y = relu(h)^2; backward turns dy
// into dh = 2 * relu(h) * dy in place
torch::Tensor relu_square_forward_cpu(const torch::Tensor& h);
void relu_square_backward_cpu(const torch::Tensor& h, torch::Tensor& dy);
torch::Tensor relu_square_forward_cuda(const torch::Tensor& h);
void relu_square_backward_cuda(const torch::Tensor& h, torch::Tensor& dy);

namespace {

using torch::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

Tensor relu_square(const Tensor& h) {
  return KERNELS_CUDA_OR_CPU(h.is_cuda(), relu_square_forward_cuda(h), relu_square_forward_cpu(h));
}

void relu_square_backward(const Tensor& h, Tensor& dy) {
  KERNELS_CUDA_OR_CPU(h.is_cuda(), relu_square_backward_cuda(h, dy), relu_square_backward_cpu(h, dy));
}

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
    relu_square_backward(h, dh);
    return {at::mm(dh, w_fc), at::mm(dh.t(), x), d_proj};
  }
};

}  // namespace

Tensor kernels_mlp_relu_square_reference(const Tensor& x, const Tensor& w_fc, const Tensor& w_proj) {
  return at::linear(at::relu(at::linear(x, w_fc)).square(), w_proj);
}

Tensor kernels_mlp_relu_square(const Tensor& x, const Tensor& w_fc, const Tensor& w_proj) {
  if (!kernels_use_fused("mlp_relu_square", x)) return kernels_mlp_relu_square_reference(x, w_fc, w_proj);
  if (w_fc.scalar_type() != x.scalar_type() || w_proj.scalar_type() != x.scalar_type() || w_fc.size(1) != x.size(-1))
    fail("mlp_relu_square: weights must be in x's dtype, w_fc (H, C) and w_proj (C, H)");
  std::vector<int64_t> out_shape = x.sizes().vec();
  out_shape.back() = w_proj.size(0);
  Tensor x2 = x.reshape({-1, x.size(-1)}).contiguous();
  return kernels_fault("mlp_relu_square", MlpReluSquare::apply(x2, w_fc, w_proj).view(out_shape));
}

namespace {

// the self-check: (2, 5, 16) through a 64-wide hidden layer, with the three gradients; on a GPU
// also one d24 sequence, (1, 2048, 1536) through 6144
std::vector<Tensor> mlp_relu_square_check(at::Device device, at::ScalarType dtype, bool fused) {
  std::vector<std::array<int64_t, 4>> shapes = {{2, 5, 16, 64}};  // B, T, C, hidden
  if (kernels_check_real_shapes(device)) shapes.push_back({1, d24::seq_len, d24::n_embd, d24::mlp_hidden});
  std::vector<Tensor> out;
  for (auto [B, T, C, H] : shapes) {
    auto gen = kernels_check_generator(device, 5);
    Tensor x = at::randn({B, T, C}, gen, at::device(device)).to(device, dtype).requires_grad_();
    Tensor w_fc =
        (at::randn({H, C}, gen, at::device(device)) / std::sqrt((double)C)).to(device, dtype).requires_grad_();
    Tensor w_proj =
        (at::randn({C, H}, gen, at::device(device)) / std::sqrt((double)H)).to(device, dtype).requires_grad_();
    Tensor y = fused ? kernels_mlp_relu_square(x, w_fc, w_proj) : kernels_mlp_relu_square_reference(x, w_fc, w_proj);
    auto grads = torch::autograd::grad({y}, {x, w_fc, w_proj},
                                       {at::randn(y.sizes(), gen, at::device(device)).to(device, dtype)});
    out.insert(out.end(), {y, grads[0], grads[1], grads[2]});
  }
  return out;
}
const bool mlp_relu_square_check_registered = kernels_register_check({"mlp_relu_square", mlp_relu_square_check});

}  // namespace

}  // namespace nanochat
