// The CUDA kernel of adamw.cpp: AdamW's update of one tensor in one pass, fp32 math.
#include "cuda_helpers.cuh"

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <c10/cuda/CUDAGuard.h>

#include "nanochat/common/error.h"

namespace nanochat {
namespace {

using at::Tensor;

// ---- AdamW -------------------------------------------------------------------------------
// one element per thread (grid-stride), fp32 math in kernels_adamw_step_reference's order: decay, the two
// lerps (ATen's formula), sqrt(v/bias2) + eps, then p - step_size * m/denom as an fma
template <typename T>
__global__ void adamw_step_kernel(T* __restrict__ p, const T* __restrict__ g, T* __restrict__ m, T* __restrict__ v,
                                  int64_t n, float decay, float w1, float w2, float step_size, float bias2, float eps) {
  const int64_t start = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = start; i < n; i += stride) {
    const float gi = to_f32(g[i]);
    const float mi = lerp_f(to_f32(m[i]), gi, w1), vi = lerp_f(to_f32(v[i]), gi * gi, w2);
    const float pi = fmaf(-step_size, mi / (sqrtf(vi / bias2) + eps), to_f32(p[i]) * decay);
    p[i] = from_f32<T>(pi);
    m[i] = from_f32<T>(mi);
    v[i] = from_f32<T>(vi);
  }
}

cudaError_t launch_adamw_step(void* p, const void* grad, void* exp_avg, void* exp_avg_sq, int64_t n, float lr,
                              float beta1, float beta2, float eps, float weight_decay, float bias1, float bias2,
                              kernels_dtype dtype, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  return with_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    adamw_step_kernel<T><<<elementwise_blocks(n), 256, 0, stream>>>(
        static_cast<T*>(p), static_cast<const T*>(grad), static_cast<T*>(exp_avg), static_cast<T*>(exp_avg_sq), n,
        1.0f - lr * weight_decay, 1.0f - beta1, 1.0f - beta2, lr / bias1, bias2, eps);
    return cudaGetLastError();
  });
}

}  // namespace

void adamw_step_cuda(Tensor& p, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq, float lr, float beta1,
                     float beta2, float eps, float weight_decay, float bias1, float bias2) {
  const char* where = "adamw_step_cuda";
  const kernels_dtype dt = cuda_dtype(p, where);
  for (auto [t, name] : {std::pair<const Tensor*, const char*>{&p, "p"},
                         {&grad, "grad"},
                         {&exp_avg, "exp_avg"},
                         {&exp_avg_sq, "exp_avg_sq"}}) {
    check_cuda(*t, name, p.scalar_type(), p.device(), where);
    if (t->numel() != p.numel())
      fail("%s: %s has %lld elements, p %lld", where, name, (long long)t->numel(), (long long)p.numel());
  }
  const c10::cuda::CUDAGuard guard(p.device());
  check_launch(launch_adamw_step(p.data_ptr(), grad.data_ptr(), exp_avg.data_ptr(), exp_avg_sq.data_ptr(), p.numel(),
                                 lr, beta1, beta2, eps, weight_decay, bias1, bias2, dt, stream_of(p)),
               where);
}

}  // namespace nanochat
