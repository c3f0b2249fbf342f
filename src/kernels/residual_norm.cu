// The CUDA kernels of residual_norm.cpp: h = a*x + b*y and rms_norm(h), one block per row.
#include "cuda_helpers.cuh"

#include <tuple>

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <c10/cuda/CUDAGuard.h>

#include "nanochat/common/error.h"

namespace nanochat {
namespace {

using at::Tensor;

// ---- residual mixing + rms norm ---------------------------------------------------------
// One block per row; each thread walks the row with a stride of blockDim.x, so any width
template <typename T>
__device__ __forceinline__ float residual_mix(T x, T y, const float* a, const float* b) {
  const float ax = a ? round_to<T>(*a * to_f32(x)) : to_f32(x);
  const float by = b ? round_to<T>(*b * to_f32(y)) : to_f32(y);
  return round_to<T>(ax + by);
}

template <typename T>
__global__ void residual_norm_forward_kernel(const T* __restrict__ x, const T* __restrict__ y, const float* a,
                                             const float* b, T* __restrict__ h, T* __restrict__ n,
                                             float* __restrict__ rstd, int D, float eps) {
  __shared__ float shared[32];
  const int64_t off = (int64_t)blockIdx.x * D;
  float ss = 0.f;
  for (int j = threadIdx.x; j < D; j += blockDim.x) {
    const float v = residual_mix(x[off + j], y[off + j], a, b);
    h[off + j] = from_f32<T>(v);
    ss += v * v;
  }
  const float r = rsqrtf(block_sum(ss, shared) / (float)D + eps);
  if (threadIdx.x == 0) rstd[blockIdx.x] = r;
  for (int j = threadIdx.x; j < D; j += blockDim.x) n[off + j] = from_f32<T>(to_f32(h[off + j]) * r);
}

template <typename T>
__global__ void residual_norm_backward_kernel(const T* __restrict__ dh, const T* __restrict__ dn,
                                              const T* __restrict__ h, const float* __restrict__ rstd,
                                              const T* __restrict__ x, const T* __restrict__ y, const float* a,
                                              const float* b, T* __restrict__ dx, T* __restrict__ dy,
                                              float* __restrict__ ga_rows, float* __restrict__ gb_rows, int D) {
  __shared__ float shared[32];
  const int64_t off = (int64_t)blockIdx.x * D;
  const float r = rstd[blockIdx.x];
  float dot = 0.f;
  for (int j = threadIdx.x; j < D; j += blockDim.x) dot += to_f32(dn[off + j]) * to_f32(h[off + j]) * r;
  dot = block_sum(dot, shared) / (float)D;
  const float fa = a ? *a : 1.f, fb = b ? *b : 1.f;
  float sa = 0.f, sb = 0.f;
  for (int j = threadIdx.x; j < D; j += blockDim.x) {
    const float nh = to_f32(h[off + j]) * r;
    const float g = to_f32(dh[off + j]) + r * (to_f32(dn[off + j]) - nh * dot);
    dx[off + j] = from_f32<T>(fa * g);
    if (dy) dy[off + j] = from_f32<T>(fb * g);
    if (ga_rows) sa += g * to_f32(x[off + j]);
    if (gb_rows) sb += g * to_f32(y[off + j]);
  }
  if (ga_rows) {
    sa = block_sum(sa, shared);
    if (threadIdx.x == 0) ga_rows[blockIdx.x] = sa;
  }
  if (gb_rows) {
    sb = block_sum(sb, shared);
    if (threadIdx.x == 0) gb_rows[blockIdx.x] = sb;
  }
}

cudaError_t launch_residual_norm_forward(const void* x, const void* y, const float* a, const float* b, void* h, void* n,
                                         float* rstd, int64_t R, int64_t D, float eps, kernels_dtype dtype,
                                         cudaStream_t stream) {
  if (R == 0) return cudaSuccess;
  if (D <= 0 || D > INT32_MAX || R > INT32_MAX) return cudaErrorInvalidValue;
  return with_dtype(dtype, [&](auto tag) {
    using E = decltype(tag);
    residual_norm_forward_kernel<E>
        <<<(unsigned)R, threads_for(D), 0, stream>>>(static_cast<const E*>(x), static_cast<const E*>(y), a, b,
                                                     static_cast<E*>(h), static_cast<E*>(n), rstd, (int)D, eps);
    return cudaGetLastError();
  });
}

cudaError_t launch_residual_norm_backward(const void* dh, const void* dn, const void* h, const float* rstd,
                                          const void* x, const void* y, const float* a, const float* b, void* dx,
                                          void* dy, float* ga_rows, float* gb_rows, int64_t R, int64_t D,
                                          kernels_dtype dtype, cudaStream_t stream) {
  if (R == 0) return cudaSuccess;
  if (D <= 0 || D > INT32_MAX || R > INT32_MAX) return cudaErrorInvalidValue;
  return with_dtype(dtype, [&](auto tag) {
    using E = decltype(tag);
    residual_norm_backward_kernel<E><<<(unsigned)R, threads_for(D), 0, stream>>>(
        static_cast<const E*>(dh), static_cast<const E*>(dn), static_cast<const E*>(h), rstd, static_cast<const E*>(x),
        static_cast<const E*>(y), a, b, static_cast<E*>(dx), static_cast<E*>(dy), ga_rows, gb_rows, (int)D);
    return cudaGetLastError();
  });
}

// a lambda's device pointer: null (for 1) when undefined, else a 0-dim fp32 tensor on `device`
const float* lambda_ptr(const Tensor& s, at::Device device, const char* name, const char* where) {
  if (!s.defined()) return nullptr;
  check_cuda(s, name, at::kFloat, device, where);
  if (s.numel() != 1) fail("%s: %s must hold one value", where, name);
  return s.data_ptr<float>();
}

// (R, D) rows of the compute dtype on the device of `like`
void check_rows_like(const Tensor& t, const Tensor& like, const char* name, const char* where) {
  check_cuda(t, name, like.scalar_type(), like.device(), where);
  if (!t.sizes().equals(like.sizes())) fail("%s: %s differs in shape from the rows", where, name);
}

}  // namespace

// (h, n, rstd)
std::tuple<Tensor, Tensor, Tensor> residual_norm_forward_cuda(const Tensor& x, const Tensor& y, const Tensor& a,
                                                              const Tensor& b, double eps) {
  const char* where = "residual_norm_forward_cuda";
  const kernels_dtype dt = cuda_dtype(x, where);
  check_cuda(x, "x", x.scalar_type(), x.device(), where);
  check_rows_like(y, x, "y", where);
  if (x.dim() != 2) fail("%s: x must be (rows, dim)", where);
  const int64_t R = x.size(0), D = x.size(1);
  check_grid_rows(R, where);
  Tensor h = at::empty_like(x), n = at::empty_like(x), rstd = at::empty({R}, x.options().dtype(at::kFloat));
  const c10::cuda::CUDAGuard guard(x.device());
  check_launch(launch_residual_norm_forward(x.data_ptr(), y.data_ptr(), lambda_ptr(a, x.device(), "a", where),
                                            lambda_ptr(b, x.device(), "b", where), h.data_ptr(), n.data_ptr(),
                                            rstd.data_ptr<float>(), R, D, (float)eps, dt, stream_of(x)),
               where);
  return {h, n, rstd};
}

// (dx, dy, ga_rows, gb_rows)
std::tuple<Tensor, Tensor, Tensor, Tensor> residual_norm_backward_cuda(const Tensor& dh, const Tensor& dn,
                                                                       const Tensor& h, const Tensor& rstd,
                                                                       const Tensor& x, const Tensor& y,
                                                                       const Tensor& a, const Tensor& b) {
  const char* where = "residual_norm_backward_cuda";
  const kernels_dtype dt = cuda_dtype(h, where);
  check_cuda(h, "h", h.scalar_type(), h.device(), where);
  check_rows_like(dh, h, "dh", where);
  check_rows_like(dn, h, "dn", where);
  if (a.defined()) check_rows_like(x, h, "x", where);
  if (b.defined()) check_rows_like(y, h, "y", where);
  const int64_t R = h.size(0), D = h.size(1);
  check_cuda(rstd, "rstd", at::kFloat, h.device(), where);
  if (rstd.numel() != R) fail("%s: rstd has %lld values for %lld rows", where, (long long)rstd.numel(), (long long)R);
  check_grid_rows(R, where);
  Tensor dx = at::empty_like(h), ga_rows, gb_rows;
  Tensor dy = a.defined() || b.defined() ? at::empty_like(h) : dx;
  if (a.defined()) ga_rows = at::empty({R}, h.options().dtype(at::kFloat));
  if (b.defined()) gb_rows = at::empty({R}, h.options().dtype(at::kFloat));
  const c10::cuda::CUDAGuard guard(h.device());
  check_launch(
      launch_residual_norm_backward(dh.data_ptr(), dn.data_ptr(), h.data_ptr(), rstd.data_ptr<float>(),
                                    a.defined() ? x.data_ptr() : nullptr, b.defined() ? y.data_ptr() : nullptr,
                                    lambda_ptr(a, h.device(), "a", where), lambda_ptr(b, h.device(), "b", where),
                                    dx.data_ptr(), a.defined() || b.defined() ? dy.data_ptr() : nullptr,
                                    a.defined() ? ga_rows.data_ptr<float>() : nullptr,
                                    b.defined() ? gb_rows.data_ptr<float>() : nullptr, R, D, dt, stream_of(h)),
      where);
  return {dx, dy, ga_rows, gb_rows};
}

}  // namespace nanochat
