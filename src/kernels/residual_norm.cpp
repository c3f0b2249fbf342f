// The residual stream meets an RMSNorm three times per layer pair: the per-layer lambdas
// (x = a*x + b*x0, then the attention's norm), the add before the MLP's norm, and the final
// "backout". Eagerly each is 2-3 element-wise kernels plus the norm's two passes, and autograd
// keeps x, x0 and h; fused it is one pass forward and one backward, keeping h and one fp32
// rstd per row (x and y only when a lambda needs its gradient).
#include "nanochat/kernels.h"

#include <cfloat>
#include <optional>
#include <tuple>

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include "op_dispatch.h"
#include "nanochat/common/error.h"

namespace nanochat {

// the kernels (residual_norm_cpu.cpp, residual_norm.cu): x, y (R, D); a, b 0-dim in the
// accumulation dtype (fp32; fp64 for fp64 x) on x's device, or undefined for 1. Forward returns
// (h, n, rstd): h = round(round(a*x) + round(b*y)) and n = round(h*rstd) in x's dtype (round: to
// x's dtype), rstd (R,) = 1/sqrt(mean(h^2) + eps). Backward, from dh and dn (R, D): g = dh +
// rstd*(dn - nh*mean(dn*nh)) with nh = h*rstd; returns (dx, dy, ga_rows, gb_rows): dx = a*g and
// dy = b*g in x's dtype (dy is dx itself when a and b are both undefined), per row sum(g*x) and
// sum(g*y) (accumulation dtype) when a, b are defined.
using ResidualNormOut = std::tuple<torch::Tensor, torch::Tensor, torch::Tensor>;
using ResidualNormGrads = std::tuple<torch::Tensor, torch::Tensor, torch::Tensor, torch::Tensor>;
ResidualNormOut residual_norm_forward_cpu(const torch::Tensor& x, const torch::Tensor& y, const torch::Tensor& a,
                                          const torch::Tensor& b, double eps);
ResidualNormGrads residual_norm_backward_cpu(const torch::Tensor& dh, const torch::Tensor& dn, const torch::Tensor& h,
                                             const torch::Tensor& rstd, const torch::Tensor& x, const torch::Tensor& y,
                                             const torch::Tensor& a, const torch::Tensor& b);
ResidualNormOut residual_norm_forward_cuda(const torch::Tensor& x, const torch::Tensor& y, const torch::Tensor& a,
                                           const torch::Tensor& b, double eps);
ResidualNormGrads residual_norm_backward_cuda(const torch::Tensor& dh, const torch::Tensor& dn, const torch::Tensor& h,
                                              const torch::Tensor& rstd, const torch::Tensor& x, const torch::Tensor& y,
                                              const torch::Tensor& a, const torch::Tensor& b);

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
    auto [h, n, rstd] = KERNELS_CUDA_OR_CPU(x.is_cuda(), residual_norm_forward_cuda(x, y, a, b, eps),
                                            residual_norm_forward_cpu(x, y, a, b, eps));
    // x and y are only read back for the lambdas' gradients
    ctx->save_for_backward({h, rstd, a.defined() ? x : Tensor(), b.defined() ? y : Tensor(), a, b});
    return {h, n};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    const Tensor &h = saved[0], &rstd = saved[1], &x = saved[2], &y = saved[3], &a = saved[4], &b = saved[5];
    const Tensor dh = grads[0].contiguous(), dn = grads[1].contiguous();
    auto [dx, dy, ga_rows, gb_rows] = KERNELS_CUDA_OR_CPU(h.is_cuda(),
                                                          residual_norm_backward_cuda(dh, dn, h, rstd, x, y, a, b),
                                                          residual_norm_backward_cpu(dh, dn, h, rstd, x, y, a, b));
    return {dx, dy, a.defined() ? ga_rows.sum() : Tensor(), b.defined() ? gb_rows.sum() : Tensor()};
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
                                                          const Tensor& b, double eps) {
  Tensor h = (a.defined() ? a * x : x) + (b.defined() ? b * y : y);
  return {h, at::rms_norm(h, {h.size(-1)}, std::nullopt, eps > 0 ? std::optional<double>(eps) : std::nullopt)};
}

std::pair<Tensor, Tensor> kernels_residual_norm(const Tensor& x, const Tensor& y, const Tensor& a, const Tensor& b) {
  if (!kernels_use_fused("residual_norm", x)) return kernels_residual_norm_reference(x, y, a, b);
  if (!x.sizes().equals(y.sizes()) || x.scalar_type() != y.scalar_type() || x.dim() < 1)
    fail("residual_norm: x and y must have one shape and dtype, got %s %s and %s %s", c10::toString(x.scalar_type()),
         c10::str(x.sizes()).c_str(), c10::toString(y.scalar_type()), c10::str(y.sizes()).c_str());
  const int64_t D = x.size(-1);
  variable_list out = ResidualNorm::apply(x.contiguous().view({-1, D}), y.contiguous().view({-1, D}), as_scalar(a, x),
                                          as_scalar(b, x));
  return {kernels_fault("residual_norm", out[0]).view(x.sizes()), out[1].view(x.sizes())};
}

namespace {

// the self-check: (3, 7, 24) rows, with the lambdas (fp32 parameters, as the model's) and without;
// on a GPU also one d24 sequence, (1, 2048, 1536)
std::vector<Tensor> residual_norm_check(at::Device device, at::ScalarType dtype, bool fused) {
  std::vector<std::vector<int64_t>> shapes = {{3, 7, 24}};
  if (kernels_check_real_shapes(device)) shapes.push_back({1, d24::seq_len, d24::n_embd});
  const auto acc = dtype == at::kDouble ? at::kDouble : at::kFloat;
  std::vector<Tensor> out;
  for (const std::vector<int64_t>& shape : shapes) {
    auto gen = kernels_check_generator(device, 13);
    Tensor x = at::randn(shape, gen, at::device(device)).to(device, dtype).requires_grad_();
    Tensor y = at::randn(shape, gen, at::device(device)).to(device, dtype).requires_grad_();
    Tensor a = (at::rand({}, gen, at::device(device)) + 0.5).to(device, acc).requires_grad_();
    Tensor b = (at::rand({}, gen, at::device(device)) * 0.5).to(device, acc).requires_grad_();
    Tensor dh = at::randn(shape, gen, at::device(device)).to(device, dtype),
           dn = at::randn(shape, gen, at::device(device)).to(device, dtype);
    for (bool lambdas : {true, false}) {
      const Tensor la = lambdas ? a : Tensor(), lb = lambdas ? b : Tensor();
      auto [h, n] = fused ? kernels_residual_norm(x, y, la, lb) : kernels_residual_norm_reference(x, y, la, lb);
      std::vector<Tensor> inputs = {x, y};
      if (lambdas) inputs.insert(inputs.end(), {a, b});
      auto grads = torch::autograd::grad({h, n}, inputs, {dh, dn});
      out.insert(out.end(), {h, n});
      out.insert(out.end(), grads.begin(), grads.end());
    }
  }
  return out;
}
const bool residual_norm_check_registered = kernels_register_check({"residual_norm", residual_norm_check});

}  // namespace

}  // namespace nanochat
