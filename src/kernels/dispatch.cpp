// The switch between the fused kernels and their ATen references, the same for every op.
#include "nanochat/kernels.h"

#include <mutex>

#include <ATen/ATen.h>

#include "op_dispatch.h"
#include "nanochat/common/env.h"
#include "nanochat/common/error.h"
#include "nanochat/common/log.h"

namespace nanochat {

namespace {

// NANOCHAT_KERNELS: "0" runs the references, "strict" makes a failed self-check fatal,
// anything else (or unset) runs the kernels that pass their check; read once
std::string kernels_mode() {
  static const std::string mode = env_get("NANOCHAT_KERNELS").value_or("1");
  return mode;
}

bool device_has_kernels(const torch::Tensor& x) {
  const auto t = x.scalar_type();
  const bool reduced = t == at::kBFloat16 || t == at::kHalf;
  if (x.is_cuda()) {
    if (kernels_cuda_built()) return t == at::kFloat || reduced;
    static std::once_flag warned;
    std::call_once(warned, [] {
      log_warn(
          "this nanochat was built without its CUDA kernels (no nvcc when it was configured): the fused "
          "ops run their ATen references on the GPU, slower and with more memory");
    });
    return false;
  }
  return x.is_cpu() && kernels_cpu_supported() && (t == at::kFloat || t == at::kDouble || reduced);
}

}  // namespace

bool kernels_enabled() { return kernels_mode() != "0"; }
bool kernels_strict() { return kernels_mode() == "strict"; }

bool kernels_use_fused(const char* op, const torch::Tensor& x) { return kernels_use_fused(op, x, x.scalar_type()); }

bool kernels_use_fused_aten_on_cuda(const char* op, const torch::Tensor& x) {
  const auto t = x.scalar_type();
  if (x.is_cuda() && (t == at::kFloat || t == at::kBFloat16 || t == at::kHalf))
    return kernels_check_passed(op, x.device(), t);
  return kernels_use_fused(op, x);
}

bool kernels_use_fused(const char* op, const torch::Tensor& x, at::ScalarType checked_dtype) {
  return device_has_kernels(x) && kernels_check_passed(op, x.device(), checked_dtype);
}

namespace {

// NANOCHAT_KERNELS_FAULT_RANK=<r> puts the fault on that rank alone (RANK; 0 in one process)
bool fault_in(const char* op) {
  static const std::string faulty = env_get("NANOCHAT_KERNELS_FAULT").value_or("");
  static const bool this_rank = [] {
    const auto only = env_get("NANOCHAT_KERNELS_FAULT_RANK");
    return !only || *only == env_get("RANK").value_or("0");
  }();
  return this_rank && !faulty.empty() && faulty == op;
}

// half the tensor's largest magnitude plus a half: past every tolerance of the self-check
torch::Tensor fault_offset(const torch::Tensor& t) {
  torch::NoGradGuard no_grad;
  return (t.detach().abs().max() + 1) * 0.5;
}

}  // namespace

torch::Tensor kernels_fault(const char* op, const torch::Tensor& out) {
  if (!fault_in(op)) return out;
  return out + fault_offset(out).to(out.scalar_type());
}

void kernels_fault_(const char* op, torch::Tensor& t) {
  if (!fault_in(op)) return;
  torch::NoGradGuard no_grad;
  t.add_(fault_offset(t).to(t.scalar_type()));
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

bool kernels_cuda_built() {
#ifdef NANOCHAT_CUDA_KERNELS
  return true;
#else
  return false;
#endif
}

}  // namespace nanochat
