// The host-side checks every CUDA kernel's wrapper makes (cuda_helpers.cuh).
#include "cuda_helpers.cuh"

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <c10/cuda/CUDAStream.h>

#include "nanochat/common/error.h"

namespace nanochat {

using at::Tensor;

// the launchers' dtype tag; float64 has no CUDA kernel (it exists for CPU gradient checks)
kernels_dtype cuda_dtype(const Tensor& t, const char* where) {
  switch (t.scalar_type()) {
    case at::kFloat: return kernels_dtype_f32;
    case at::kBFloat16: return kernels_dtype_bf16;
    case at::kHalf: return kernels_dtype_f16;
    default:
      fail("%s: the CUDA kernel takes float32, bfloat16 or float16, not %s (float64 runs on the CPU only)", where,
           c10::toString(t.scalar_type()));
  }
}

// t is a contiguous CUDA tensor of `dtype` on `device`
void check_cuda(const Tensor& t, const char* name, at::ScalarType dtype, at::Device device, const char* where) {
  if (!t.defined()) fail("%s: %s is undefined", where, name);
  if (!t.is_cuda()) fail("%s: %s is on %s, expected a CUDA device", where, name, t.device().str().c_str());
  if (t.device() != device)
    fail("%s: %s is on %s, expected %s", where, name, t.device().str().c_str(), device.str().c_str());
  if (t.scalar_type() != dtype)
    fail("%s: %s is %s, expected %s", where, name, c10::toString(t.scalar_type()), c10::toString(dtype));
  if (!t.is_contiguous()) fail("%s: %s must be contiguous", where, name);
}

void check_launch(cudaError_t err, const char* where) {
  if (err != cudaSuccess) fail("%s: CUDA kernel launch failed: %s", where, cudaGetErrorString(err));
}

// one block per row: a grid of at most 2^31 - 1 blocks
void check_grid_rows(int64_t n, const char* where) {
  if (n > INT32_MAX) fail("%s: %lld rows is more than one launch takes; use smaller chunks", where, (long long)n);
}

cudaStream_t stream_of(const Tensor& t) { return c10::cuda::getCurrentCUDAStream(t.device().index()).stream(); }

// (n,) float32 output: written in place when the caller passes one (e.g. a slice of the
// whole batch's losses), else allocated
void fp32_rows_out(Tensor& out, int64_t n, at::Device device, const char* name, const char* where) {
  if (!out.defined()) {
    out = at::empty({n}, at::TensorOptions().dtype(at::kFloat).device(device));
    return;
  }
  check_cuda(out, name, at::kFloat, device, where);
  if (out.numel() != n)
    fail("%s: %s has %lld elements, expected %lld", where, name, (long long)out.numel(), (long long)n);
}

}  // namespace nanochat
