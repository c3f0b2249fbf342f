// defines: kernels_fp8_linear, kernels_fp8_quantize, kernels_fp8_mm
// FP8 training's linear layer, as upstream fp8.py's Float8Linear (tensorwise recipe):
// forward quantizes the input and the weight to e4m3 with one dynamic scale per tensor and
// multiplies them with at::_scaled_mm (fast accumulation); backward quantizes the output's
// gradient to e5m2 (wider range, for gradients) and runs two more scaled matmuls for the
// input's and the weight's gradients. Only the fp8 tensors and their scales are kept for
// backward. The master weight stays fp32 and gets an fp32 gradient.
#include "nanochat/kernels.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <ATen/ATen.h>
#include <torch/autograd.h>

#include "kernels_internal.h"
#include "nanochat/common/device.h"
#include "nanochat/common/error.h"

namespace nanochat {
namespace {

using torch::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// _scaled_mm wants its second operand column-major
Tensor column_major(const Tensor& t) { return t.t().contiguous().t(); }

}  // namespace

#ifdef NANOCHAT_CUDA_KERNELS
std::pair<Tensor, Tensor> fp8_quantize_cuda(const Tensor& x, at::ScalarType fp8);  // fp8_linear.cu
#endif

// LibTorch's CPU _scaled_mm is a plain reference loop (~20 MFLOP/s here): on the CPU the fp8
// operands are widened to fp32, where every e4m3 and e5m2 value is exact, and multiplied by
// the fast fp32 GEMM -- the same products and fp32 sums, only summed in another order
Tensor kernels_fp8_mm(const Tensor& a8, const Tensor& b8, const Tensor& a_inv, const Tensor& b_inv,
                      at::ScalarType out_dtype, bool use_fast_accum) {
  if (a8.is_cuda())
    return at::_scaled_mm(a8, b8, a_inv, b_inv, std::nullopt, std::nullopt, out_dtype, use_fast_accum);
  return (at::mm(a8.to(at::kFloat), b8.to(at::kFloat)) * (a_inv * b_inv)).to(out_dtype);
}

namespace {

struct Fp8Linear : public torch::autograd::Function<Fp8Linear> {
  // x (N, in) in the compute dtype, weight (out, in) the fp32 master
  static Tensor forward(AutogradContext* ctx, const Tensor& x, const Tensor& weight) {
    auto [x8, x_inv] = kernels_fp8_quantize(x, at::kFloat8_e4m3fn);
    auto [w8, w_inv] = kernels_fp8_quantize(weight, at::kFloat8_e4m3fn);
    Tensor out = kernels_fp8_mm(x8, w8.t(), x_inv, w_inv, x.scalar_type(), /*use_fast_accum=*/true);
    ctx->save_for_backward({x8, x_inv, w8, w_inv});
    ctx->saved_data["weight_dtype"] = (int64_t)weight.scalar_type();
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    const Tensor &x8 = saved[0], &x_inv = saved[1], &w8 = saved[2], &w_inv = saved[3];
    const Tensor& go = grads[0];
    auto [g8, g_inv] = kernels_fp8_quantize(go.contiguous(), at::kFloat8_e5m2);
    Tensor grad_x = kernels_fp8_mm(g8, column_major(w8), g_inv, w_inv, go.scalar_type(), false);
    Tensor grad_w = kernels_fp8_mm(g8.t().contiguous(), column_major(x8), g_inv, x_inv, at::kFloat, false);
    return {grad_x, grad_w.to((at::ScalarType)ctx->saved_data["weight_dtype"].toInt())};
  }
};

}  // namespace

namespace {

// the reference of the quantisation (upstream's _to_fp8): six passes of ATen ops
std::pair<Tensor, Tensor> fp8_quantize_reference(const Tensor& x, at::ScalarType fp8) {
  const double fp8_max = fp8 == at::kFloat8_e4m3fn ? 448.0 : 57344.0;
  Tensor amax = x.abs().max().to(at::kDouble);
  Tensor scale = (fp8_max / at::clamp_min(amax, 1e-12)).to(at::kFloat);
  Tensor q = at::clamp(x.to(at::kFloat) * scale, -fp8_max, fp8_max).to(fp8);
  return {q, scale.reciprocal()};
}

}  // namespace

std::pair<Tensor, Tensor> kernels_fp8_quantize(const Tensor& x, at::ScalarType fp8) {
#ifdef NANOCHAT_CUDA_KERNELS
  // two passes (fp8_linear.cu) where the kernel passed its check on this GPU in x's dtype
  const auto t = x.scalar_type();
  if (x.is_cuda() && x.is_contiguous() && (t == at::kFloat || t == at::kBFloat16 || t == at::kHalf) &&
      kernels_use_fused("fp8_quantize", x)) {
    auto [q, inv] = fp8_quantize_cuda(x, fp8);
    return {q, kernels_fault("fp8_quantize", inv)};
  }
#endif
  return fp8_quantize_reference(x, fp8);
}

namespace {

// upstream's _to_fp8 written out, and back: amax, scale = max/amax, clamp, cast, / scale (fp32)
Tensor quantize_dequantize(const Tensor& x, at::ScalarType fp8) {
  const double fp8_max = fp8 == at::kFloat8_e4m3fn ? 448.0 : 57344.0;
  const Tensor scale = (fp8_max / at::clamp_min(x.abs().max().to(at::kDouble), 1e-12)).to(at::kFloat);
  return at::clamp(x.to(at::kFloat) * scale, -fp8_max, fp8_max).to(fp8).to(at::kFloat) / scale;
}

// the reference: every operand rounded through its fp8 format and back, the products in fp32
struct Fp8LinearEmulation : public torch::autograd::Function<Fp8LinearEmulation> {
  static Tensor forward(AutogradContext* ctx, const Tensor& x, const Tensor& weight) {
    const Tensor xq = quantize_dequantize(x, at::kFloat8_e4m3fn), wq = quantize_dequantize(weight, at::kFloat8_e4m3fn);
    ctx->save_for_backward({xq, wq});
    ctx->saved_data["x_dtype"] = (int64_t)x.scalar_type();
    ctx->saved_data["weight_dtype"] = (int64_t)weight.scalar_type();
    return at::mm(xq, wq.t()).to(x.scalar_type());
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    const Tensor gq = quantize_dequantize(grads[0], at::kFloat8_e5m2);
    return {at::mm(gq, saved[1]).to((at::ScalarType)ctx->saved_data["x_dtype"].toInt()),
            at::mm(gq.t(), saved[0]).to((at::ScalarType)ctx->saved_data["weight_dtype"].toInt())};
  }
};

// x (..., in) as (N, in) rows and back, with the shapes checked
template <typename F>
Tensor on_rows(const Tensor& x, const Tensor& weight, F&& linear) {
  const int64_t in = weight.size(1), out = weight.size(0);
  if (x.size(-1) != in || in % 16 != 0 || out % 16 != 0)
    fail("fp8 linear: dimensions must be multiples of 16 (got %lld x %lld)", (long long)out, (long long)in);
  std::vector<int64_t> shape = x.sizes().vec();
  shape.back() = out;
  return linear(x.reshape({-1, in}).contiguous()).view(shape);
}

}  // namespace

Tensor kernels_fp8_linear_reference(const Tensor& x, const Tensor& weight) {
  return on_rows(x, weight, [&](const Tensor& rows) { return Fp8LinearEmulation::apply(rows, weight); });
}

Tensor kernels_fp8_linear(const Tensor& x, const Tensor& weight) {
  // on a GPU _scaled_mm is all it takes: no CUDA kernels of ours, so no nvcc in the build
  if (!kernels_use_fused_aten_on_cuda("fp8_linear", x)) return kernels_fp8_linear_reference(x, weight);
  return kernels_fault("fp8_linear",
                       on_rows(x, weight, [&](const Tensor& rows) { return Fp8Linear::apply(rows, weight); }));
}

namespace {

// the self-check: (2, 16, 32) rows through a (48, 32) fp32 master weight (on a GPU also one d24
// sequence through the MLP's (6144, 1536)); _scaled_mm needs a GPU
// of compute capability 8.9 or more, below that FP8 training is refused before it starts
std::vector<Tensor> fp8_linear_check(at::Device device, at::ScalarType dtype, bool fused) {
  if (dtype == at::kDouble) return {};
  if (device.is_cuda()) {
    auto infos = cuda_device_infos(device.index(), /*with_memory=*/false);
    if (infos.empty() || infos[0].major * 10 + infos[0].minor < 89) return {};
  }
  std::vector<std::array<int64_t, 4>> shapes = {{2, 16, 32, 48}};  // B, T, in, out
  if (kernels_check_real_shapes(device)) shapes.push_back({1, d24::seq_len, d24::n_embd, d24::mlp_hidden});
  std::vector<Tensor> out;
  for (auto [B, T, in, features] : shapes) {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(23);
    Tensor x = at::randn({B, T, in}, gen).to(device, dtype).requires_grad_();
    Tensor w = (at::randn({features, in}, gen) * 0.05).to(device).requires_grad_();
    Tensor y = fused ? kernels_fp8_linear(x, w) : kernels_fp8_linear_reference(x, w);
    auto grads = torch::autograd::grad({y}, {x, w}, {(at::randn({B, T, features}, gen) * 1e-3).to(device, dtype)});
    out.insert(out.end(), {y, grads[0], grads[1]});
  }
  return out;
}
// On a GPU the forward's _scaled_mm runs with fast accumulation, as upstream's: Hopper's FP8
// tensor cores then keep about 14 significant bits in their sums (DeepSeek-V3's report, 3.3.2),
// so a sum of K products is off by about 2^-14 * sqrt(K) of its size -- 2.4e-3 at d24's
// K = 1536, past the fp32 tolerance. Its check there takes 1e-2 in every dtype. On the CPU the
// sums are fp32 and the dtype's tolerance holds.
double fp8_linear_tolerance(at::Device device, at::ScalarType dtype) {
  return device.is_cuda() ? std::max(kernels_check_tolerance(dtype), 1e-2) : kernels_check_tolerance(dtype);
}
const bool registered =
    kernels_register_check({"fp8_linear", fp8_linear_check, fp8_linear_tolerance, /*cuda_without_nvcc=*/true});

// the quantisation kernel (CUDA only): e4m3 and e5m2 of a ragged (37, 29) tensor and of d24's
// activations (2048, 1536), bits and 1/scale against the reference's (the same roundings: exact)
std::vector<Tensor> fp8_quantize_check(at::Device device, at::ScalarType dtype, bool fused) {
  if (!device.is_cuda() || dtype == at::kDouble) return {};
  std::vector<Tensor> out;
  for (auto shape : {std::vector<int64_t>{37, 29}, std::vector<int64_t>{d24::seq_len, d24::n_embd}}) {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(31);
    const Tensor x = (at::randn(shape, gen) * 3).to(device, dtype);
    for (at::ScalarType fp8 : {at::kFloat8_e4m3fn, at::kFloat8_e5m2}) {
      auto [q, inv] = fused ? kernels_fp8_quantize(x, fp8) : fp8_quantize_reference(x, fp8);
      out.insert(out.end(), {q.to(at::kFloat), inv});
    }
  }
  return out;
}
const bool registered_quantize = kernels_register_check({"fp8_quantize", fp8_quantize_check});

}  // namespace

}  // namespace nanochat
