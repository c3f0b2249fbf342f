// AdamW's update fused into one pass over the four tensors, as upstream compiles its
// adamw_step_fused. Eagerly the same update is ~10 ATen ops, each a pass over memory (plus
// the fp32 copies of bf16 params and moments): on a d4 model on the CPU the optimizer step was
// a third of the training step. Hyperparameters are rounded to fp32 first and the scalar
// arithmetic (1 - lr*wd, beta**step, lr/bias1) is done in fp32, because upstream holds them in
// 0-D fp32 tensors; the tensor math is fp32 even for bf16 params (wte, value_embeds), whose
// moments stay bf16 and are written back at the end.
#include "nanochat/kernels.h"

#include <cmath>
#include <initializer_list>

#include <ATen/ATen.h>

#include "op_dispatch.h"

namespace nanochat {

// the kernels: adamw_cpu.cpp, adamw.cu; the scalars as the reference rounds them to fp32
void adamw_step_cpu(torch::Tensor& p, const torch::Tensor& grad, torch::Tensor& exp_avg, torch::Tensor& exp_avg_sq,
                    float lr, float beta1, float beta2, float eps, float weight_decay, float bias1, float bias2);
void adamw_step_cuda(torch::Tensor& p, const torch::Tensor& grad, torch::Tensor& exp_avg, torch::Tensor& exp_avg_sq,
                     float lr, float beta1, float beta2, float eps, float weight_decay, float bias1, float bias2);

void kernels_adamw_step_reference(torch::Tensor& p, const torch::Tensor& grad, torch::Tensor& exp_avg,
                                  torch::Tensor& exp_avg_sq, int64_t step, double lr, double beta1, double beta2,
                                  double eps, double weight_decay) {
  const float lr_f = (float)lr, b1 = (float)beta1, b2 = (float)beta2, eps_f = (float)eps, wd_f = (float)weight_decay,
              step_f = (float)step;
  // .to(kFloat) is the tensor itself for fp32 (in place, like upstream's p.float())
  torch::Tensor p32 = p.to(torch::kFloat), m32 = exp_avg.to(torch::kFloat), v32 = exp_avg_sq.to(torch::kFloat),
                g32 = grad.to(torch::kFloat);
  p32.mul_(1.0f - lr_f * wd_f);  // decoupled weight decay, before the update
  m32.lerp_(g32, 1.0f - b1);
  v32.lerp_(g32.square(), 1.0f - b2);
  const float bias1 = 1.0f - std::pow(b1, step_f), bias2 = 1.0f - std::pow(b2, step_f);
  torch::Tensor denom = (v32 / bias2).sqrt_().add_(eps_f);
  const float step_size = lr_f / bias1;
  p32.add_(m32 / denom, -step_size);
  // write back (no-ops when everything is fp32)
  if (!p32.is_same(p)) p.copy_(p32);
  if (!m32.is_same(exp_avg)) exp_avg.copy_(m32);
  if (!v32.is_same(exp_avg_sq)) exp_avg_sq.copy_(v32);
}

namespace {

// one dtype (fp32, or bf16 as wte's), one device, contiguous, one size
bool fusable(const torch::Tensor& p, const torch::Tensor& grad, const torch::Tensor& exp_avg,
             const torch::Tensor& exp_avg_sq) {
  const auto t = p.scalar_type();
  if (!(t == at::kFloat || t == at::kBFloat16) || !p.is_contiguous()) return false;
  for (const torch::Tensor* x : std::initializer_list<const torch::Tensor*>{&grad, &exp_avg, &exp_avg_sq})
    if (x->scalar_type() != t || x->device() != p.device() || !x->is_contiguous() || x->numel() != p.numel())
      return false;
  return true;
}

void adamw_step_fused(torch::Tensor& p, const torch::Tensor& grad, torch::Tensor& exp_avg, torch::Tensor& exp_avg_sq,
                      int64_t step, double lr, double beta1, double beta2, double eps, double weight_decay) {
  // the scalars in fp32, exactly as the reference computes them
  const float b1 = (float)beta1, b2 = (float)beta2, step_f = (float)step;
  const float bias1 = 1.0f - std::pow(b1, step_f), bias2 = 1.0f - std::pow(b2, step_f);
  KERNELS_CUDA_OR_CPU(
      p.is_cuda(),
      adamw_step_cuda(p, grad, exp_avg, exp_avg_sq, (float)lr, b1, b2, (float)eps, (float)weight_decay, bias1, bias2),
      adamw_step_cpu(p, grad, exp_avg, exp_avg_sq, (float)lr, b1, b2, (float)eps, (float)weight_decay, bias1, bias2));
  kernels_fault_("adamw", p);
}

// the self-check: three steps on a (37, 29) param (ragged against any vector width); on a GPU
// also on d24's embedding, (32768, 1536)
std::vector<torch::Tensor> adamw_check(at::Device device, at::ScalarType dtype, bool fused) {
  if (dtype != at::kFloat && dtype != at::kBFloat16) return {};
  std::vector<std::vector<int64_t>> shapes = {{37, 29}};
  if (kernels_check_real_shapes(device)) shapes.push_back({d24::vocab, d24::n_embd});
  std::vector<torch::Tensor> out;
  for (const std::vector<int64_t>& shape : shapes) {
    auto gen = kernels_check_generator(device, 7);
    auto rand = [&](double scale) { return (at::randn(shape, gen, at::device(device)) * scale).to(device, dtype); };
    torch::Tensor p = rand(1.0), m = at::zeros_like(p), v = at::zeros_like(p);
    for (int64_t step = 1; step <= 3; step++) {
      const torch::Tensor g = rand(0.1);
      if (fused) adamw_step_fused(p, g, m, v, step, 0.02, 0.8, 0.95, 1e-10, 0.1);
      else kernels_adamw_step_reference(p, g, m, v, step, 0.02, 0.8, 0.95, 1e-10, 0.1);
    }
    out.insert(out.end(), {p, m, v});
  }
  return out;
}
const bool adamw_check_registered = kernels_register_check({"adamw", adamw_check});

}  // namespace

void kernels_adamw_step(torch::Tensor& p, const torch::Tensor& grad, torch::Tensor& exp_avg, torch::Tensor& exp_avg_sq,
                        int64_t step, double lr, double beta1, double beta2, double eps, double weight_decay) {
  if (kernels_use_fused("adamw", p) && fusable(p, grad, exp_avg, exp_avg_sq))
    adamw_step_fused(p, grad, exp_avg, exp_avg_sq, step, lr, beta1, beta2, eps, weight_decay);
  else kernels_adamw_step_reference(p, grad, exp_avg, exp_avg_sq, step, lr, beta1, beta2, eps, weight_decay);
}

}  // namespace nanochat
