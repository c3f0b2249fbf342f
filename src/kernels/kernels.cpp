// defines: kernels_enabled, kernels_cpu_supported, kernels_use_fused, kernels_addmm_acc
// The switch between the fused kernels and their ATen references.
#include "nanochat/kernels.h"

#include <ATen/ATen.h>

#include "kernels_internal.h"
#include "nanochat/common/env.h"

namespace nanochat {

bool kernels_enabled() {
  static const bool enabled = env_get("NANOCHAT_KERNELS").value_or("1") != "0";
  return enabled;
}

bool kernels_cpu_supported() {
#if defined(__x86_64__) || defined(_M_X64)
  static const bool ok = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                         __builtin_cpu_supports("f16c");
  return ok;
#else
  return false;
#endif
}

bool kernels_use_fused(const torch::Tensor& x) {
  if (!kernels_enabled()) return false;
  const auto t = x.scalar_type();
  const bool reduced = t == at::kBFloat16 || t == at::kHalf;
  if (x.is_cuda()) return t == at::kFloat || reduced;
  return x.is_cpu() && kernels_cpu_supported() && (t == at::kFloat || t == at::kDouble || reduced);
}

void kernels_addmm_acc(torch::Tensor& acc, const torch::Tensor& a, const torch::Tensor& b) {
  if (a.scalar_type() == acc.scalar_type()) acc.addmm_(a, b);
  else if (a.is_cuda()) at::addmm_out(acc, acc, a, b, acc.scalar_type());  // fp32 accumulation in the GEMM
  else acc.add_(at::mm(a, b));
}

}  // namespace nanochat
