// defines: optim_adamw_step
// upstream optim.py's compiled adamw_step_fused. Hyperparameters are rounded to fp32 first and the
// scalar arithmetic (1 - lr*wd, beta**step, lr/bias1) is done in fp32, because upstream holds
// them in 0-D fp32 tensors; the tensor math is fp32 even for bf16 params (wte, value_embeds),
// whose moments stay bf16 (zeros_like) and are written back at the end.
#include "nanochat/optim.h"

#include <cmath>
#include <torch/torch.h>

#include "nanochat/kernels.h"

namespace nanochat {

void optim_adamw_step(torch::Tensor p, const torch::Tensor& grad, torch::Tensor exp_avg,
                      torch::Tensor exp_avg_sq, int64_t step, double lr, double beta1,
                      double beta2, double eps, double weight_decay) {
  if (kernels_adamw_step(p, grad, exp_avg, exp_avg_sq, step, lr, beta1, beta2, eps, weight_decay)) return;
  // the ATen composition: the fused kernel's reference, and the path for what it does not take
  const float lr_f = (float)lr, b1 = (float)beta1, b2 = (float)beta2, eps_f = (float)eps,
              wd_f = (float)weight_decay, step_f = (float)step;
  // .to(kFloat) is the tensor itself for fp32 (in place, like upstream's p.float())
  torch::Tensor p32 = p.to(torch::kFloat), m32 = exp_avg.to(torch::kFloat),
                v32 = exp_avg_sq.to(torch::kFloat), g32 = grad.to(torch::kFloat);
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

}  // namespace nanochat
