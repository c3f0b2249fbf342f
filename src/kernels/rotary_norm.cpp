// q and k after their projections: rotary, RMSNorm without weight, then x1.2 ("sharper
// attention"). Eagerly that is ~8 kernels for the rotary (narrow, 4 products, 2 sums, cat),
// the norm, and the scale, each keeping tensors for backward; fused it is one pass that
// keeps only its output (which attention keeps anyway) and one fp32 rstd per row.
#include "nanochat/kernels.h"

#include <cfloat>

#include <array>
#include <cmath>
#include <ATen/ATen.h>
#include <torch/autograd.h>

#include "op_dispatch.h"
#include "nanochat/common/error.h"

namespace nanochat {

// the kernels (rotary_norm_cpu.cpp, rotary_norm.cu): x (R, D) rows of q or k (R = B*T*H), cos and
// sin (T, D/2) contiguous, row r at position (r / H) % T. Forward returns y (R, D) in x's dtype =
// scale * r / rms(r) with r the rotated row, and rstd (R,) fp32 (fp64 for fp64); backward gives dx
// from dy, y and rstd. The CUDA kernel holds a row in a warp's registers: rotary_norm_cuda_takes
// says whether a head is narrow enough, wider ones run the reference.
std::pair<torch::Tensor, torch::Tensor> rotary_norm_forward_cpu(const torch::Tensor& x, const torch::Tensor& cos,
                                                                const torch::Tensor& sin, int64_t T, int64_t H,
                                                                double scale, double eps);
torch::Tensor rotary_norm_backward_cpu(const torch::Tensor& dy, const torch::Tensor& y, const torch::Tensor& rstd,
                                       const torch::Tensor& cos, const torch::Tensor& sin, int64_t T, int64_t H,
                                       double scale);
bool rotary_norm_cuda_takes(int64_t head_dim);
std::pair<torch::Tensor, torch::Tensor> rotary_norm_forward_cuda(const torch::Tensor& x, const torch::Tensor& cos,
                                                                 const torch::Tensor& sin, int64_t T, int64_t H,
                                                                 double scale, double eps);
torch::Tensor rotary_norm_backward_cuda(const torch::Tensor& dy, const torch::Tensor& y, const torch::Tensor& rstd,
                                        const torch::Tensor& cos, const torch::Tensor& sin, int64_t T, int64_t H,
                                        double scale);

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
    auto [y, rstd] = KERNELS_CUDA_OR_CPU(x.is_cuda(), rotary_norm_forward_cuda(rows, cos, sin, T, H, scale, eps),
                                         rotary_norm_forward_cpu(rows, cos, sin, T, H, scale, eps));
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
    Tensor dx = KERNELS_CUDA_OR_CPU(dy.is_cuda(), rotary_norm_backward_cuda(dy, y, rstd, cos, sin, T, H, scale),
                                    rotary_norm_backward_cpu(dy, y, rstd, cos, sin, T, H, scale));
    return {dx.view(grads[0].sizes()), Tensor(), Tensor(), Tensor()};
  }
};

}  // namespace

Tensor kernels_rotary_norm_reference(const Tensor& x, const Tensor& cos, const Tensor& sin, double scale, double eps) {
  const int64_t d = x.size(3) / 2;
  Tensor x1 = x.narrow(3, 0, d), x2 = x.narrow(3, d, d);
  Tensor r = at::cat({x1 * cos + x2 * sin, -x1 * sin + x2 * cos}, 3);
  return at::rms_norm(r, {r.size(-1)}, std::nullopt, eps > 0 ? std::optional<double>(eps) : std::nullopt) * scale;
}

Tensor kernels_rotary_norm(const Tensor& x, const Tensor& cos, const Tensor& sin, double scale) {
  if (!kernels_use_fused("rotary_norm", x)) return kernels_rotary_norm_reference(x, cos, sin, scale);
  // the CUDA kernel takes the head dims it was instantiated for; others run the reference
  if (KERNELS_CUDA_OR_CPU(x.is_cuda(), !rotary_norm_cuda_takes(x.size(-1)), false))
    return kernels_rotary_norm_reference(x, cos, sin, scale);
  const int64_t T = x.size(1), D = x.size(3);
  if (x.dim() != 4 || D % 2 != 0 || cos.numel() != T * (D / 2) || sin.numel() != T * (D / 2) ||
      cos.scalar_type() != x.scalar_type() || sin.scalar_type() != x.scalar_type())
    fail("rotary_norm: x (B,T,H,D) with D even and cos, sin (1,T,1,D/2) in x's dtype expected");
  return kernels_fault("rotary_norm", RotaryNorm::apply(x.contiguous(), cos.reshape({T, D / 2}).contiguous(),
                                                        sin.reshape({T, D / 2}).contiguous(), scale));
}

namespace {

// the self-check: (2, 6, 3, 16) at positions 0..5 (the model's cos/sin of base 10000), scale 1.2;
// on a GPU also one d24 sequence, (1, 2048, 12, 128)
std::vector<Tensor> rotary_norm_check(at::Device device, at::ScalarType dtype, bool fused) {
  std::vector<std::array<int64_t, 4>> shapes = {{2, 6, 3, 16}};  // B, T, H, D
  if (kernels_check_real_shapes(device)) shapes.push_back({1, d24::seq_len, d24::n_head, d24::head_dim});
  std::vector<Tensor> out;
  for (auto [B, T, H, D] : shapes) {
    auto gen = kernels_check_generator(device, 9);
    Tensor x = at::randn({B, T, H, D}, gen, at::device(device)).to(device, dtype).requires_grad_();
    Tensor freqs = at::outer(at::arange(T, at::kDouble),
                             at::pow(10000.0, -at::arange(0, D, 2, at::kDouble) / (double)D));
    Tensor cos = freqs.cos().view({1, T, 1, D / 2}).to(device, dtype);
    Tensor sin = freqs.sin().view({1, T, 1, D / 2}).to(device, dtype);
    Tensor y = fused ? kernels_rotary_norm(x, cos, sin, 1.2) : kernels_rotary_norm_reference(x, cos, sin, 1.2);
    auto grads = torch::autograd::grad({y}, {x}, {at::randn(y.sizes(), gen, at::device(device)).to(device, dtype)});
    out.insert(out.end(), {y, grads[0]});
  }
  return out;
}
const bool rotary_norm_check_registered = kernels_register_check({"rotary_norm", rotary_norm_check});

}  // namespace

}  // namespace nanochat
