// defines: kernels_adamw_step
// AdamW's update fused into one pass over the four tensors, as upstream compiles its
// adamw_step_fused. Eagerly the same update is ~10 ATen ops, each a pass over memory (plus
// the fp32 copies of bf16 params and moments): on a d4 model on the CPU the optimizer step was
// a third of the training step. The reference is optim_adamw_step's ATen composition.
#include "nanochat/kernels.h"

#include <cmath>
#include <initializer_list>

#include <ATen/ATen.h>

#include "device_kernels.h"
#include "kernels_internal.h"

namespace nanochat {

bool kernels_adamw_step(torch::Tensor& p, const torch::Tensor& grad, torch::Tensor& exp_avg,
                        torch::Tensor& exp_avg_sq, int64_t step, double lr, double beta1, double beta2, double eps,
                        double weight_decay) {
  const auto t = p.scalar_type();
  if (!kernels_use_fused(p) || !(t == at::kFloat || t == at::kBFloat16)) return false;
  for (const torch::Tensor* x : std::initializer_list<const torch::Tensor*>{&grad, &exp_avg, &exp_avg_sq})
    if (x->scalar_type() != t || x->device() != p.device() || !x->is_contiguous() || x->numel() != p.numel())
      return false;
  if (!p.is_contiguous()) return false;
  // the scalars in fp32, exactly as optim_adamw_step computes them (upstream's 0-D fp32 tensors)
  const float b1 = (float)beta1, b2 = (float)beta2, step_f = (float)step;
  const float bias1 = 1.0f - std::pow(b1, step_f), bias2 = 1.0f - std::pow(b2, step_f);
  if (p.is_cuda())
    adamw_step_cuda(p, grad, exp_avg, exp_avg_sq, (float)lr, b1, b2, (float)eps, (float)weight_decay, bias1, bias2);
  else
    adamw_step_cpu(p, grad, exp_avg, exp_avg_sq, (float)lr, b1, b2, (float)eps, (float)weight_decay, bias1, bias2);
  return true;
}

}  // namespace nanochat
