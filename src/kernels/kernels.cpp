// defines: kernels_enabled, kernels_cpu_supported, kernels_use_fused, kernels_addmm_acc
// The switch between the fused kernels and their ATen references.
#include "nanochat/kernels.h"

#include <ATen/ATen.h>

#include "cpu_gemm.h"
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

namespace {

// a 2-D CPU matrix as BLAS sees it: rows contiguous (ld = stride(0)), or a transposed view of
// such a matrix (ld = stride(1)); false for other strides
bool blas_layout(const torch::Tensor& m, bool& transposed, int64_t& ld) {
  if (m.stride(1) == 1 && m.stride(0) >= std::max<int64_t>(1, m.size(1))) {
    transposed = false, ld = m.stride(0);
    return true;
  }
  if (m.stride(0) == 1 && m.stride(1) >= std::max<int64_t>(1, m.size(0))) {
    transposed = true, ld = m.stride(1);
    return true;
  }
  return false;
}

// acc (fp32, contiguous) += a @ b for bf16 a and b on the CPU, accumulated in the GEMM
bool cpu_addmm_bf16_into_f32(torch::Tensor& acc, const torch::Tensor& a, const torch::Tensor& b) {
  bool ta, tb;
  int64_t lda, ldb;
  if (a.scalar_type() != at::kBFloat16 || b.scalar_type() != at::kBFloat16 || acc.scalar_type() != at::kFloat ||
      !acc.is_contiguous() || !blas_layout(a, ta, lda) || !blas_layout(b, tb, ldb))
    return false;
  return cpu_gemm_f32(ta, tb, a.size(0), b.size(1), a.size(1), 1.0f, a.data_ptr<at::BFloat16>(), lda,
                      b.data_ptr<at::BFloat16>(), ldb, 1.0f, acc.data_ptr<float>(), acc.size(1));
}

}  // namespace

void kernels_addmm_acc(torch::Tensor& acc, const torch::Tensor& a, const torch::Tensor& b) {
  if (a.scalar_type() == acc.scalar_type()) acc.addmm_(a, b);
  else if (a.is_cuda()) at::addmm_out(acc, acc, a, b, acc.scalar_type());  // fp32 accumulation in the GEMM
  else if (!cpu_addmm_bf16_into_f32(acc, a, b)) acc.add_(at::mm(a, b));    // ATen: a bf16 product, then the add
}

}  // namespace nanochat
