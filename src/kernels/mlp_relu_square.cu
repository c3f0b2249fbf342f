// The CUDA kernels of mlp_relu_square.cpp: relu(h)^2 and its backward, element-wise, 16 bytes
// per load and store when the pointers allow it.
#include "cuda_helpers.cuh"

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <c10/cuda/CUDAGuard.h>

#include "nanochat/common/error.h"

namespace nanochat {
namespace {

using at::Tensor;

// ---- relu^2 ------------------------------------------------------------------------------
// relu that keeps NaN (as at::relu does): NaN < 0 is false
__device__ __forceinline__ float relu_f(float h) { return h < 0.f ? 0.f : h; }

// grid-stride over packs of N, then over the < N leftover elements
template <typename T, int N>
__global__ void relu_square_forward_kernel(const T* __restrict__ h, T* __restrict__ y, int64_t numel) {
  const int64_t start = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, stride = (int64_t)gridDim.x * blockDim.x;
  const int64_t npacks = numel / N;
  for (int64_t p = start; p < npacks; p += stride) {
    const pack_t<T, N> a = reinterpret_cast<const pack_t<T, N>*>(h)[p];
    pack_t<T, N> b;
#pragma unroll
    for (int i = 0; i < N; i++) {
      const float r = relu_f(to_f32(a.v[i]));
      b.v[i] = from_f32<T>(r * r);
    }
    reinterpret_cast<pack_t<T, N>*>(y)[p] = b;
  }
  for (int64_t i = npacks * N + start; i < numel; i += stride) {
    const float r = relu_f(to_f32(h[i]));
    y[i] = from_f32<T>(r * r);
  }
}

template <typename T, int N>
__global__ void relu_square_backward_kernel(const T* __restrict__ h, T* __restrict__ dy, int64_t numel) {
  const int64_t start = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, stride = (int64_t)gridDim.x * blockDim.x;
  const int64_t npacks = numel / N;
  for (int64_t p = start; p < npacks; p += stride) {
    const pack_t<T, N> a = reinterpret_cast<const pack_t<T, N>*>(h)[p];
    pack_t<T, N> g = reinterpret_cast<const pack_t<T, N>*>(dy)[p];
#pragma unroll
    for (int i = 0; i < N; i++) g.v[i] = from_f32<T>(2.f * relu_f(to_f32(a.v[i])) * to_f32(g.v[i]));
    reinterpret_cast<pack_t<T, N>*>(dy)[p] = g;
  }
  for (int64_t i = npacks * N + start; i < numel; i += stride)
    dy[i] = from_f32<T>(2.f * relu_f(to_f32(h[i])) * to_f32(dy[i]));
}

// relu^2's element-wise launch: 16-byte packs when both pointers allow, else one element a thread
template <typename T, typename In, typename Out>
cudaError_t launch_elementwise(void (*packed)(In, Out, int64_t), void (*single)(In, Out, int64_t), In in, Out out,
                               int64_t numel, cudaStream_t stream) {
  constexpr int V = 16 / sizeof(T);
  const bool use_packed = aligned16(in) && aligned16(out);
  auto kernel = use_packed ? packed : single;
  kernel<<<elementwise_blocks(use_packed ? numel / V : numel), 256, 0, stream>>>(in, out, numel);
  return cudaGetLastError();
}

cudaError_t launch_relu_square_forward(const void* h, void* y, int64_t numel, kernels_dtype dtype,
                                       cudaStream_t stream) {
  if (numel == 0) return cudaSuccess;
  return with_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    return launch_elementwise<T>(relu_square_forward_kernel<T, 16 / sizeof(T)>, relu_square_forward_kernel<T, 1>,
                                 static_cast<const T*>(h), static_cast<T*>(y), numel, stream);
  });
}

cudaError_t launch_relu_square_backward(const void* h, void* dy, int64_t numel, kernels_dtype dtype,
                                        cudaStream_t stream) {
  if (numel == 0) return cudaSuccess;
  return with_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    return launch_elementwise<T>(relu_square_backward_kernel<T, 16 / sizeof(T)>, relu_square_backward_kernel<T, 1>,
                                 static_cast<const T*>(h), static_cast<T*>(dy), numel, stream);
  });
}

}  // namespace

Tensor relu_square_forward_cuda(const Tensor& h) {
  const char* where = "relu_square_forward_cuda";
  const kernels_dtype dt = cuda_dtype(h, where);
  check_cuda(h, "h", h.scalar_type(), h.device(), where);
  Tensor y = at::empty_like(h, at::MemoryFormat::Contiguous);
  const c10::cuda::CUDAGuard guard(h.device());
  check_launch(launch_relu_square_forward(h.data_ptr(), y.data_ptr(), h.numel(), dt, stream_of(h)), where);
  return y;
}

void relu_square_backward_cuda(const Tensor& h, Tensor& dy) {
  const char* where = "relu_square_backward_cuda";
  const kernels_dtype dt = cuda_dtype(h, where);
  check_cuda(h, "h", h.scalar_type(), h.device(), where);
  check_cuda(dy, "dy", h.scalar_type(), h.device(), where);
  if (!dy.sizes().equals(h.sizes())) fail("%s: dy and h differ in shape", where);
  const c10::cuda::CUDAGuard guard(h.device());
  check_launch(launch_relu_square_backward(h.data_ptr(), dy.data_ptr(), h.numel(), dt, stream_of(h)), where);
}

}  // namespace nanochat
