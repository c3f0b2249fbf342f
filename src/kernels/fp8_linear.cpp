// FP8 training's linear layer, as upstream fp8.py's Float8Linear (tensorwise recipe):
// forward quantizes the input and the weight to e4m3 with one dynamic scale per tensor and
// multiplies them with at::_scaled_mm (fast accumulation); backward quantizes the output's
// gradient to e5m2 (wider range, for gradients) and runs two more scaled matmuls for the
// input's and the weight's gradients. Only the fp8 tensors and their scales are kept for
// backward, as the transposed copies its column-major operands need (written by the quantising
// pass on a GPU). The master weight stays fp32 and gets an fp32 gradient. q, k and v share one
// input: kernels_fp8_linear_shared quantizes it once for all three (upstream quantizes it per
// Linear: the same bits three times).
#include "nanochat/kernels.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <mutex>
#include <tuple>
#include <unordered_map>
#include <ATen/ATen.h>
#include <torch/autograd.h>

#include "op_dispatch.h"
#include "nanochat/common/device.h"
#include "nanochat/common/error.h"

namespace nanochat {
namespace {

using torch::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

}  // namespace

// fp8_linear.cu: (q, q^T when `transposed`, 1/scale)
std::tuple<Tensor, Tensor, Tensor> fp8_quantize_cuda(const Tensor& x, at::ScalarType fp8, bool transposed);
// mlp_relu_square_cpu.cpp, mlp_relu_square.cu: y = relu(h)^2; dy turned into 2 * relu(h) * dy in place
Tensor relu_square_forward_cpu(const Tensor& h);
void relu_square_backward_cpu(const Tensor& h, Tensor& dy);
Tensor relu_square_forward_cuda(const Tensor& h);
void relu_square_backward_cuda(const Tensor& h, Tensor& dy);

// LibTorch's CPU _scaled_mm is a plain reference loop (~20 MFLOP/s here): on the CPU the fp8
// operands are widened to fp32, where every e4m3 and e5m2 value is exact, and multiplied by
// the fast fp32 GEMM -- the same products and fp32 sums, only summed in another order
Tensor kernels_fp8_mm(const Tensor& a8, const Tensor& b8, const Tensor& a_inv, const Tensor& b_inv,
                      at::ScalarType out_dtype, bool use_fast_accum) {
  if (a8.is_cuda()) return at::_scaled_mm(a8, b8, a_inv, b_inv, std::nullopt, std::nullopt, out_dtype, use_fast_accum);
  return (at::mm(a8.to(at::kFloat), b8.to(at::kFloat)) * (a_inv * b_inv)).to(out_dtype);
}

namespace {

// the reference of the quantisation (upstream's _to_fp8): six passes of ATen ops, and one more
// for the transposed copy
std::tuple<Tensor, Tensor, Tensor> fp8_quantize_reference(const Tensor& x, at::ScalarType fp8, bool transposed) {
  const double fp8_max = fp8 == at::kFloat8_e4m3fn ? 448.0 : 57344.0;
  Tensor amax = x.abs().max().to(at::kDouble);
  Tensor scale = (fp8_max / at::clamp_min(amax, 1e-12)).to(at::kFloat);
  Tensor q = at::clamp(x.to(at::kFloat) * scale, -fp8_max, fp8_max).to(fp8);
  return {q, transposed ? q.t().contiguous() : Tensor(), scale.reciprocal()};
}

// the two passes of fp8_linear.cu where the kernel passed its check on this GPU in x's dtype
// (kernels_use_fused admits on a GPU only the dtypes the CUDA kernels read: fp32, bf16, fp16)
bool fp8_quantize_fused(const Tensor& x) {
  return x.is_cuda() && x.is_contiguous() && kernels_use_fused("fp8_quantize", x);
}

Fp8Quantized fp8_quantize(const Tensor& x, at::ScalarType fp8, bool transposed, bool fused) {
  auto [q, q_t, inv] = KERNELS_CUDA_OR_CPU(fused, fp8_quantize_cuda(x, fp8, transposed),
                                           fp8_quantize_reference(x, fp8, transposed));
  return {q, q_t, fused ? kernels_fault("fp8_quantize", inv) : inv};
}

// The weights' FP8 copies (e4m3, with the transpose), made once per optimizer step: the masters
// change there only, so the micro-steps between share one quantisation. An entry holds while the
// weight lives, its version is the same (ATen's in-place ops move it: a checkpoint load) and no
// step has come (kernels_fp8_weights_changed: the optimizer's kernels and all-gathers write past
// the version counter).
struct WeightFp8 {
  c10::weak_intrusive_ptr<c10::TensorImpl> owner;
  int64_t version;
  Fp8Quantized q;
};
std::mutex weight_fp8_mutex;
std::unordered_map<const c10::TensorImpl*, WeightFp8> weight_fp8;

Fp8Quantized weight_quantized(const Tensor& weight) {
  std::lock_guard<std::mutex> lock(weight_fp8_mutex);
  const c10::TensorImpl* impl = weight.unsafeGetTensorImpl();
  auto it = weight_fp8.find(impl);
  if (it != weight_fp8.end() && !it->second.owner.expired() && it->second.version == (int64_t)weight._version())
    return it->second.q;
  for (auto e = weight_fp8.begin(); e != weight_fp8.end();)  // the self-check's weights, gone
    e = e->second.owner.expired() ? weight_fp8.erase(e) : std::next(e);
  WeightFp8 entry{c10::weak_intrusive_ptr<c10::TensorImpl>(weight.getIntrusivePtr()), (int64_t)weight._version(),
                  kernels_fp8_quantize_transposed(weight, at::kFloat8_e4m3fn)};
  weight_fp8.erase(impl);  // a dead weight's entry at the same address
  weight_fp8.emplace(impl, entry);
  return entry.q;
}

// x (N, in) in the compute dtype through each fp32 master weight (out_i, in): one output per
// weight, x quantized once. _scaled_mm wants its second operand column-major: forward reads
// w8 (out, in) row-major as w8^T; backward reads the transposed copies x8^T and w8^T.
struct Fp8Linear : public torch::autograd::Function<Fp8Linear> {
  // (weights must reach apply() as an at::TensorList: autograd counts its tensors as inputs,
  // where a std::vector would be one non-tensor argument)
  static variable_list forward(AutogradContext* ctx, const Tensor& x, at::TensorList weights) {
    // backward quantizes the gradients (x's dtype, made contiguous) by the path x took: it asks
    // no dispatch, since on a GPU it runs on autograd's device thread, where a first call would
    // wait for the self-check that is waiting for this very backward
    const bool fused = fp8_quantize_fused(x);
    const Fp8Quantized xq = fp8_quantize(x, at::kFloat8_e4m3fn, /*transposed=*/true, fused);
    ctx->saved_data["quantize_fused"] = fused;
    variable_list outs, saved = {xq.q_t, xq.inv};
    for (const Tensor& weight : weights) {
      const Fp8Quantized wq = weight_quantized(weight);
      outs.push_back(kernels_fp8_mm(xq.q, wq.q.t(), xq.inv, wq.inv, x.scalar_type(), /*use_fast_accum=*/true));
      saved.insert(saved.end(), {wq.q_t, wq.inv});
    }
    ctx->save_for_backward(saved);
    ctx->set_materialize_grads(false);  // an output the loss does not use: no zeros to quantize
    ctx->saved_data["weight_dtype"] = (int64_t)weights[0].scalar_type();  // the masters share one
    return outs;
  }

  // grad_x sums the weights' terms in their order, in the compute dtype, as autograd sums the
  // three Linears' (the order of a sum of rounded terms matters in the last bits)
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const Tensor &x8_t = saved[0], &x_inv = saved[1];
    const auto weight_dtype = (at::ScalarType)ctx->saved_data["weight_dtype"].toInt();
    Tensor grad_x;
    variable_list out = {Tensor()};
    for (size_t i = 0; i < grads.size(); i++) {
      const Tensor &w8_t = saved[2 + 2 * i], &w_inv = saved[3 + 2 * i];
      if (!grads[i].defined()) {  // this output was not used
        out.push_back(Tensor());
        continue;
      }
      const Fp8Quantized gq = fp8_quantize(grads[i].contiguous(), at::kFloat8_e5m2, /*transposed=*/true,
                                           ctx->saved_data["quantize_fused"].toBool());
      const Tensor term = kernels_fp8_mm(gq.q, w8_t.t(), gq.inv, w_inv, grads[i].scalar_type(), false);
      grad_x = grad_x.defined() ? grad_x + term : term;
      out.push_back(kernels_fp8_mm(gq.q_t, x8_t.t(), gq.inv, x_inv, at::kFloat, false).to(weight_dtype));
    }
    out[0] = grad_x;
    return out;
  }
};

// relu(h)^2 through mlp_relu_square's kernels where `fused`, else ATen's relu and square (the same
// bits: each rounds r*r once); backward turns dy into dh = 2 * relu(h) * dy in place
Tensor mlp_relu_square_of(const Tensor& h, bool fused) {
  if (!fused) return at::relu(h).square();
  return KERNELS_CUDA_OR_CPU(h.is_cuda(), relu_square_forward_cuda(h), relu_square_forward_cpu(h));
}
void mlp_relu_square_backward_of(const Tensor& h, Tensor& dy, bool fused) {
  if (!fused) {
    dy.mul_(at::relu(h) * 2);
    return;
  }
  KERNELS_CUDA_OR_CPU(h.is_cuda(), relu_square_backward_cuda(h, dy), relu_square_backward_cpu(h, dy));
}

// The MLP with both linears in FP8: x (N, C) -> h = x8 @ w_fc8^T -> a = relu(h)^2 (one pass) ->
// out = a8 @ w_proj8^T. Saved: x8 and its transpose, a8^T and the scales (1 byte an element);
// backward recomputes h from x8 (one FP8 GEMM) instead of keeping the (N, 4C) activation in
// the compute dtype (eagerly relu's output is kept: 2 bytes an element, 336 MB a layer at d20, B=16).
struct Fp8Mlp : public torch::autograd::Function<Fp8Mlp> {
  static Tensor forward(AutogradContext* ctx, const Tensor& x, const Tensor& w_fc, const Tensor& w_proj,
                        bool quantize_fused, bool relu_fused) {
    const Fp8Quantized xq = fp8_quantize(x, at::kFloat8_e4m3fn, /*transposed=*/true, quantize_fused);
    const Fp8Quantized fc = weight_quantized(w_fc), proj = weight_quantized(w_proj);
    const Tensor h = kernels_fp8_mm(xq.q, fc.q.t(), xq.inv, fc.inv, x.scalar_type(), /*use_fast_accum=*/true);
    const Fp8Quantized aq = fp8_quantize(mlp_relu_square_of(h, relu_fused), at::kFloat8_e4m3fn, true, quantize_fused);
    Tensor out = kernels_fp8_mm(aq.q, proj.q.t(), aq.inv, proj.inv, x.scalar_type(), /*use_fast_accum=*/true);
    ctx->save_for_backward({xq.q, xq.q_t, xq.inv, aq.q_t, aq.inv, fc.q, fc.q_t, fc.inv, proj.q_t, proj.inv});
    ctx->saved_data["quantize_fused"] = quantize_fused;
    ctx->saved_data["relu_fused"] = relu_fused;
    ctx->saved_data["fc_dtype"] = (int64_t)w_fc.scalar_type();
    ctx->saved_data["proj_dtype"] = (int64_t)w_proj.scalar_type();
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto s = ctx->get_saved_variables();
    const Tensor &x8 = s[0], &x8_t = s[1], &x_inv = s[2], &a8_t = s[3], &a_inv = s[4];
    const Tensor &fc8 = s[5], &fc8_t = s[6], &fc_inv = s[7], &proj8_t = s[8], &proj_inv = s[9];
    const bool quantize_fused = ctx->saved_data["quantize_fused"].toBool();
    const auto dtype = grads[0].scalar_type();
    const Fp8Quantized gq = fp8_quantize(grads[0].contiguous(), at::kFloat8_e5m2, true, quantize_fused);
    const Tensor d_proj = kernels_fp8_mm(gq.q_t, a8_t.t(), gq.inv, a_inv, at::kFloat, false)
                              .to((at::ScalarType)ctx->saved_data["proj_dtype"].toInt());
    Tensor dh = kernels_fp8_mm(gq.q, proj8_t.t(), gq.inv, proj_inv, dtype, false);  // d a, made d h in place
    // the forward's h again: the same operands and accumulation
    const Tensor h = kernels_fp8_mm(x8, fc8.t(), x_inv, fc_inv, dtype, /*use_fast_accum=*/true);
    mlp_relu_square_backward_of(h, dh, ctx->saved_data["relu_fused"].toBool());
    const Fp8Quantized hq = fp8_quantize(dh, at::kFloat8_e5m2, true, quantize_fused);
    const Tensor dx = kernels_fp8_mm(hq.q, fc8_t.t(), hq.inv, fc_inv, dtype, false);
    const Tensor d_fc = kernels_fp8_mm(hq.q_t, x8_t.t(), hq.inv, x_inv, at::kFloat, false)
                            .to((at::ScalarType)ctx->saved_data["fc_dtype"].toInt());
    return {dx, d_fc, d_proj, Tensor(), Tensor()};
  }
};

}  // namespace

void kernels_fp8_weights_changed() {
  std::lock_guard<std::mutex> lock(weight_fp8_mutex);
  weight_fp8.clear();
}

std::pair<Tensor, Tensor> kernels_fp8_quantize(const Tensor& x, at::ScalarType fp8) {
  Fp8Quantized r = fp8_quantize(x, fp8, /*transposed=*/false, fp8_quantize_fused(x));
  return {r.q, r.inv};
}

Fp8Quantized kernels_fp8_quantize_transposed(const Tensor& x, at::ScalarType fp8) {
  if (x.dim() != 2) fail("fp8 quantize: the transposed copy is of a 2-D tensor (got %lld dims)", (long long)x.dim());
  return fp8_quantize(x, fp8, /*transposed=*/true, fp8_quantize_fused(x));
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

// x (..., in) as (N, in) rows through each weight (out_i, in), each output back to (..., out_i),
// the shapes checked
template <typename F>
std::vector<Tensor> on_rows(const Tensor& x, const std::vector<Tensor>& weights, F&& linear) {
  const int64_t in = x.size(-1);
  for (const Tensor& w : weights)
    if (w.size(1) != in || in % 16 != 0 || w.size(0) % 16 != 0)
      fail("fp8 linear: dimensions must be multiples of 16 and match the input's %lld (got %lld x %lld)", (long long)in,
           (long long)w.size(0), (long long)w.size(1));
  std::vector<Tensor> outs = linear(x.reshape({-1, in}).contiguous());
  for (size_t i = 0; i < outs.size(); i++) {
    std::vector<int64_t> shape = x.sizes().vec();
    shape.back() = weights[i].size(0);
    outs[i] = outs[i].view(shape);
  }
  return outs;
}

std::vector<Tensor> fp8_linear_emulation(const Tensor& x, const std::vector<Tensor>& weights) {
  return on_rows(x, weights, [&](const Tensor& rows) {
    std::vector<Tensor> outs;
    for (const Tensor& w : weights) outs.push_back(Fp8LinearEmulation::apply(rows, w));
    return outs;
  });
}

}  // namespace

std::vector<Tensor> kernels_fp8_linear_shared(const Tensor& x, const std::vector<Tensor>& weights) {
  // on a GPU _scaled_mm is all it takes: no CUDA kernels of ours, so no nvcc in the build
  if (!kernels_use_fused_aten_on_cuda("fp8_linear", x)) return fp8_linear_emulation(x, weights);
  std::vector<Tensor> outs = on_rows(
      x, weights, [&](const Tensor& rows) { return Fp8Linear::apply(rows, at::TensorList(weights)); });
  for (Tensor& o : outs) o = kernels_fault("fp8_linear", o);
  return outs;
}

Tensor kernels_fp8_linear_reference(const Tensor& x, const Tensor& weight) {
  return fp8_linear_emulation(x, {weight})[0];
}

Tensor kernels_fp8_linear(const Tensor& x, const Tensor& weight) { return kernels_fp8_linear_shared(x, {weight})[0]; }

Tensor kernels_fp8_mlp_reference(const Tensor& x, const Tensor& w_fc, const Tensor& w_proj) {
  return kernels_fp8_linear_reference(at::relu(kernels_fp8_linear_reference(x, w_fc)).square(), w_proj);
}

Tensor kernels_fp8_mlp(const Tensor& x, const Tensor& w_fc, const Tensor& w_proj) {
  // where the FP8 linears or this op failed a check: the linears one by one, each on its own path
  if (!kernels_use_fused_aten_on_cuda("fp8_linear", x) || !kernels_use_fused_aten_on_cuda("fp8_mlp", x))
    return kernels_fp8_linear(at::relu(kernels_fp8_linear(x, w_fc)).square(), w_proj);
  const int64_t C = x.size(-1);
  if (w_fc.dim() != 2 || w_proj.dim() != 2 || w_fc.size(1) != C || w_proj.size(1) != w_fc.size(0) || C % 16 != 0 ||
      w_fc.size(0) % 16 != 0 || w_proj.size(0) % 16 != 0)
    fail(
        "fp8 mlp: w_fc (H, C) and w_proj (C', H) with every dimension a multiple of 16 and C = x's %lld, got %s and %s",
        (long long)C, c10::str(w_fc.sizes()).c_str(), c10::str(w_proj.sizes()).c_str());
  const Tensor rows = x.reshape({-1, C}).contiguous();
  std::vector<int64_t> shape = x.sizes().vec();
  shape.back() = w_proj.size(0);
  // the paths are picked here: backward runs on autograd's device thread, where a first
  // dispatch would wait for the self-check that waits for this backward
  Tensor out = Fp8Mlp::apply(rows, w_fc, w_proj, fp8_quantize_fused(rows), kernels_use_fused("mlp_relu_square", rows));
  return kernels_fault("fp8_mlp", out).view(shape);
}

namespace {

// the self-check: (2, 16, 32) rows through a (48, 32) and a (16, 32) fp32 master weight sharing
// the input, as q and k do (on a GPU also one d24 sequence through the MLP's (6144, 1536));
// _scaled_mm needs a GPU of compute capability 8.9 or more, below that FP8 training is refused
// before it starts
bool fp8_checkable(at::Device device, at::ScalarType dtype) {
  if (dtype == at::kDouble) return false;
  if (!device.is_cuda()) return true;
  auto infos = cuda_device_infos(device.index(), /*with_memory=*/false);
  return !infos.empty() && infos[0].major * 10 + infos[0].minor >= 89;
}

std::vector<Tensor> fp8_linear_check(at::Device device, at::ScalarType dtype, bool fused) {
  if (!fp8_checkable(device, dtype)) return {};
  struct Shape {
    int64_t B, T, in;
    std::vector<int64_t> features;  // one weight each, sharing the input
  };
  std::vector<Shape> shapes = {{2, 16, 32, {48, 16}}};
  if (kernels_check_real_shapes(device)) shapes.push_back({1, d24::seq_len, d24::n_embd, {d24::mlp_hidden}});
  std::vector<Tensor> out;
  for (const Shape& s : shapes) {
    auto gen = kernels_check_generator(device, 23);
    Tensor x = at::randn({s.B, s.T, s.in}, gen, at::device(device)).to(device, dtype).requires_grad_();
    std::vector<Tensor> ws, ys, gos;
    for (int64_t f : s.features)
      ws.push_back((at::randn({f, s.in}, gen, at::device(device)) * 0.05).to(device).requires_grad_());
    if (fused) ys = kernels_fp8_linear_shared(x, ws);
    else
      for (const Tensor& w : ws) ys.push_back(kernels_fp8_linear_reference(x, w));
    for (int64_t f : s.features)
      gos.push_back((at::randn({s.B, s.T, f}, gen, at::device(device)) * 1e-3).to(device, dtype));
    std::vector<Tensor> wrt = {x};
    wrt.insert(wrt.end(), ws.begin(), ws.end());
    auto grads = torch::autograd::grad(ys, wrt, gos);
    out.insert(out.end(), ys.begin(), ys.end());
    out.insert(out.end(), grads.begin(), grads.end());
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
const bool fp8_linear_check_registered = kernels_register_check(
    {"fp8_linear", fp8_linear_check, fp8_linear_tolerance, /*cuda_without_nvcc=*/true});

// the FP8 MLP: (2, 16, 32) rows through a (64, 32) and a (32, 64) fp32 master weight, with the
// three gradients; on a GPU also one d24 sequence through (6144, 1536) and back
std::vector<Tensor> fp8_mlp_check(at::Device device, at::ScalarType dtype, bool fused) {
  if (!fp8_checkable(device, dtype)) return {};
  std::vector<std::array<int64_t, 4>> shapes = {{2, 16, 32, 64}};  // B, T, C, hidden
  if (kernels_check_real_shapes(device)) shapes.push_back({1, d24::seq_len, d24::n_embd, d24::mlp_hidden});
  std::vector<Tensor> out;
  for (auto [B, T, C, H] : shapes) {
    auto gen = kernels_check_generator(device, 29);
    Tensor x = at::randn({B, T, C}, gen, at::device(device)).to(device, dtype).requires_grad_();
    Tensor w_fc = (at::randn({H, C}, gen, at::device(device)) / std::sqrt((double)C)).to(device).requires_grad_();
    Tensor w_proj = (at::randn({C, H}, gen, at::device(device)) / std::sqrt((double)H)).to(device).requires_grad_();
    Tensor y = fused ? kernels_fp8_mlp(x, w_fc, w_proj) : kernels_fp8_mlp_reference(x, w_fc, w_proj);
    auto grads = torch::autograd::grad({y}, {x, w_fc, w_proj},
                                       {(at::randn(y.sizes(), gen, at::device(device)) * 1e-3).to(device, dtype)});
    out.insert(out.end(), {y, grads[0], grads[1], grads[2]});
  }
  return out;
}
const bool fp8_mlp_check_registered = kernels_register_check(
    {"fp8_mlp", fp8_mlp_check, fp8_linear_tolerance, /*cuda_without_nvcc=*/true, /*part_of=*/"fp8_linear"});

// the quantisation kernel (CUDA only): e4m3 and e5m2 of a ragged (37, 29) tensor and of d24's
// activations (2048, 1536), alone and with the transposed copy: bits and 1/scale against the
// reference's (the same roundings: exact)
std::vector<Tensor> fp8_quantize_check(at::Device device, at::ScalarType dtype, bool fused) {
  if (!device.is_cuda() || dtype == at::kDouble) return {};
  std::vector<Tensor> out;
  for (auto shape : {std::vector<int64_t>{37, 29}, std::vector<int64_t>{d24::seq_len, d24::n_embd}}) {
    auto gen = kernels_check_generator(device, 31);
    const Tensor x = (at::randn(shape, gen, at::device(device)) * 3).to(device, dtype);
    for (at::ScalarType fp8 : {at::kFloat8_e4m3fn, at::kFloat8_e5m2}) {
      if (fused) {
        auto [q, inv] = kernels_fp8_quantize(x, fp8);
        const Fp8Quantized t = kernels_fp8_quantize_transposed(x, fp8);
        out.insert(out.end(), {q.to(at::kFloat), inv, t.q.to(at::kFloat), t.q_t.to(at::kFloat), t.inv});
      } else {
        auto [q, q_t, inv] = fp8_quantize_reference(x, fp8, /*transposed=*/true);
        out.insert(out.end(), {q.to(at::kFloat), inv, q.to(at::kFloat), q_t.to(at::kFloat), inv});
      }
    }
  }
  return out;
}
const bool fp8_quantize_check_registered = kernels_register_check(
    {"fp8_quantize", fp8_quantize_check, nullptr, /*cuda_without_nvcc=*/false, /*part_of=*/"fp8_linear"});

}  // namespace

}  // namespace nanochat
