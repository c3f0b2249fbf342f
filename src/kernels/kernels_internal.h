// defines: kernels_use_fused, kernels_cpu_supported, kernels_addmm_acc
// What the fused ops of the kernels module share: whether a tensor's op runs fused, and the
// matmul accumulation into an fp32 gradient.
#pragma once
#include <torch/types.h>

namespace nanochat {

// the CPU kernels are compiled for AVX2+FMA+F16C: true when this CPU has them
bool kernels_cpu_supported();
// kernels_enabled(), and a device and dtype that the fused kernels handle (fp64 on the CPU
// only: it is there for gradient checks)
bool kernels_use_fused(const torch::Tensor& x);
// acc += a @ b, with acc in fp32/fp64 and a, b in the compute dtype: bf16 into fp32 in the GEMM
// itself on CUDA and, through MKL (cpu_gemm.h), on the CPU; elsewhere a product then an add
void kernels_addmm_acc(torch::Tensor& acc, const torch::Tensor& a, const torch::Tensor& b);

}  // namespace nanochat
