// The CUDA kernels of muon.cpp: Muon's passes over one (rows, cols) matrix a launch.
#include "cuda_helpers.cuh"

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <c10/cuda/CUDAGuard.h>

#include "nanochat/common/error.h"

namespace nanochat {
namespace {

using at::Tensor;

// ---- Muon (kernels_muon_prepare / _finish) ------------------------------------------------
// One (rows, cols) matrix a launch. Params, grads and buffers are fp32, X of T; the row
// kernels are one block per row (block_sum), the column sums a block per 32 columns.

template <typename T>
__global__ void muon_nesterov_kernel(const float* __restrict__ g, float* __restrict__ buf, T* __restrict__ X,
                                     float* __restrict__ row_sumsq, int cols, float mu) {
  __shared__ float shared[32];
  const int64_t off = (int64_t)blockIdx.x * cols;
  float ss = 0.f;
  for (int j = threadIdx.x; j < cols; j += blockDim.x) {
    const float gj = g[off + j], b = lerp_f(buf[off + j], gj, 1.0f - mu);
    buf[off + j] = b;
    const T x = from_f32<T>(lerp_f(gj, b, mu));
    X[off + j] = x;
    ss += to_f32(x) * to_f32(x);
  }
  ss = block_sum(ss, shared);
  if (threadIdx.x == 0) row_sumsq[blockIdx.x] = ss;
}

template <typename T>
__global__ void muon_scale_rows_kernel(T* __restrict__ X, const float* __restrict__ scale, int64_t n, int cols) {
  const int64_t start = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = start; i < n; i += stride) X[i] = from_f32<T>(to_f32(X[i]) * scale[i / cols]);
}

template <typename T>
__global__ void muon_row_sumsq_kernel(const T* __restrict__ X, float* __restrict__ out, int cols) {
  __shared__ float shared[32];
  const int64_t off = (int64_t)blockIdx.x * cols;
  float ss = 0.f;
  for (int j = threadIdx.x; j < cols; j += blockDim.x) ss += to_f32(X[off + j]) * to_f32(X[off + j]);
  ss = block_sum(ss, shared);
  if (threadIdx.x == 0) out[blockIdx.x] = ss;
}

// a block of 32 columns x 8 row lanes: lane y sums rows y, y+8, ... of its column (a warp reads
// 32 neighbouring columns of a row: coalesced), then the 8 partial sums meet in shared memory.
// Eight lanes a column put 8x the warps to work on a wide matrix's few thousand columns.
constexpr int col_sumsq_lanes = 8;
template <typename T>
__global__ void muon_col_sumsq_kernel(const T* __restrict__ X, float* __restrict__ out, int rows, int cols) {
  __shared__ float partial[col_sumsq_lanes][32];
  const int c = blockIdx.x * 32 + threadIdx.x;
  float ss = 0.f;
  if (c < cols)
    for (int r = threadIdx.y; r < rows; r += col_sumsq_lanes) {
      const float x = to_f32(X[(int64_t)r * cols + c]);
      ss += x * x;
    }
  partial[threadIdx.y][threadIdx.x] = ss;
  __syncthreads();
  if (threadIdx.y == 0 && c < cols) {
    float total = 0.f;
#pragma unroll
    for (int y = 0; y < col_sumsq_lanes; y++) total += partial[y][threadIdx.x];
    out[c] = total;
  }
}

// g = X * line_scale[row or column]; p -= g*lr + p*lr_wd*[g*p >= 0], as the reference rounds it
template <typename T>
__global__ void muon_update_kernel(const T* __restrict__ X, float* __restrict__ p, const float* __restrict__ line_scale,
                                   int64_t n, int cols, bool by_row, float lr, float lr_wd) {
  const int64_t start = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = start; i < n; i += stride) {
    const float g = to_f32(X[i]) * line_scale[by_row ? i / cols : i % cols], pi = p[i];
    const float decay = g * pi >= 0.f ? pi * lr_wd : 0.f;
    p[i] = pi - (__fmul_rn(g, lr) + decay);
  }
}

cudaError_t launch_muon_nesterov(const float* grad, float* buf, void* X, float* row_sumsq, int64_t rows, int64_t cols,
                                 float mu, kernels_dtype x_dtype, cudaStream_t stream) {
  if (rows == 0 || cols == 0) return cudaSuccess;
  return with_dtype(x_dtype, [&](auto tag) {
    using T = decltype(tag);
    muon_nesterov_kernel<T>
        <<<(unsigned)rows, threads_for(cols), 0, stream>>>(grad, buf, static_cast<T*>(X), row_sumsq, (int)cols, mu);
    return cudaGetLastError();
  });
}

cudaError_t launch_muon_scale_rows(void* X, const float* scale, int64_t rows, int64_t cols, kernels_dtype x_dtype,
                                   cudaStream_t stream) {
  const int64_t n = rows * cols;
  if (n == 0) return cudaSuccess;
  return with_dtype(x_dtype, [&](auto tag) {
    using T = decltype(tag);
    muon_scale_rows_kernel<T><<<elementwise_blocks(n), 256, 0, stream>>>(static_cast<T*>(X), scale, n, (int)cols);
    return cudaGetLastError();
  });
}

cudaError_t launch_muon_sumsq(const void* X, float* out, int64_t rows, int64_t cols, bool by_row, kernels_dtype x_dtype,
                              cudaStream_t stream) {
  if (rows == 0 || cols == 0) return cudaSuccess;
  return with_dtype(x_dtype, [&](auto tag) {
    using T = decltype(tag);
    if (by_row)
      muon_row_sumsq_kernel<T>
          <<<(unsigned)rows, threads_for(cols), 0, stream>>>(static_cast<const T*>(X), out, (int)cols);
    else
      muon_col_sumsq_kernel<T><<<(unsigned)((cols + 31) / 32), dim3(32, col_sumsq_lanes), 0, stream>>>(
          static_cast<const T*>(X), out, (int)rows, (int)cols);
    return cudaGetLastError();
  });
}

cudaError_t launch_muon_update(const void* X, float* p, const float* line_scale, int64_t rows, int64_t cols,
                               bool by_row, float lr, float lr_wd, kernels_dtype x_dtype, cudaStream_t stream) {
  const int64_t n = rows * cols;
  if (n == 0) return cudaSuccess;
  return with_dtype(x_dtype, [&](auto tag) {
    using T = decltype(tag);
    muon_update_kernel<T><<<elementwise_blocks(n), 256, 0, stream>>>(static_cast<const T*>(X), p, line_scale, n,
                                                                     (int)cols, by_row, lr, lr_wd);
    return cudaGetLastError();
  });
}

}  // namespace

void muon_nesterov_cuda(const Tensor& grad, Tensor& buf, Tensor& X, Tensor& row_sumsq, double mu) {
  const char* where = "muon_nesterov_cuda";
  const int64_t rows = X.size(-2), cols = X.size(-1);
  const kernels_dtype dt = cuda_dtype(X, where);
  check_cuda(grad, "grad", at::kFloat, X.device(), where);
  check_cuda(buf, "buf", at::kFloat, X.device(), where);
  check_cuda(X, "X", X.scalar_type(), X.device(), where);
  check_cuda(row_sumsq, "row_sumsq", at::kFloat, X.device(), where);
  if (grad.numel() != rows * cols || buf.numel() != rows * cols || row_sumsq.numel() != rows)
    fail("%s: grad, buf (%lld x %lld) and row_sumsq (%lld) do not match", where, (long long)rows, (long long)cols,
         (long long)rows);
  check_grid_rows(rows, where);
  const c10::cuda::CUDAGuard guard(X.device());
  check_launch(launch_muon_nesterov(grad.data_ptr<float>(), buf.data_ptr<float>(), X.data_ptr(),
                                    row_sumsq.data_ptr<float>(), rows, cols, (float)mu, dt, stream_of(X)),
               where);
}

void muon_scale_rows_cuda(Tensor& X, const Tensor& scale) {
  const char* where = "muon_scale_rows_cuda";
  const int64_t rows = X.size(-2), cols = X.size(-1);
  const kernels_dtype dt = cuda_dtype(X, where);
  check_cuda(X, "X", X.scalar_type(), X.device(), where);
  check_cuda(scale, "scale", at::kFloat, X.device(), where);
  if (scale.numel() != rows)
    fail("%s: %lld row scales for %lld rows", where, (long long)scale.numel(), (long long)rows);
  const c10::cuda::CUDAGuard guard(X.device());
  check_launch(launch_muon_scale_rows(X.data_ptr(), scale.data_ptr<float>(), rows, cols, dt, stream_of(X)), where);
}

void muon_sumsq_cuda(const Tensor& X, bool by_row, Tensor& out) {
  const char* where = "muon_sumsq_cuda";
  const int64_t rows = X.size(-2), cols = X.size(-1);
  const kernels_dtype dt = cuda_dtype(X, where);
  check_cuda(X, "X", X.scalar_type(), X.device(), where);
  check_cuda(out, "out", at::kFloat, X.device(), where);
  if (out.numel() != (by_row ? rows : cols)) fail("%s: out has %lld sums", where, (long long)out.numel());
  check_grid_rows(rows, where);
  const c10::cuda::CUDAGuard guard(X.device());
  check_launch(launch_muon_sumsq(X.data_ptr(), out.data_ptr<float>(), rows, cols, by_row, dt, stream_of(X)), where);
}

void muon_update_cuda(const Tensor& X, Tensor& p, const Tensor& line_scale, bool by_row, double lr, double lr_wd) {
  const char* where = "muon_update_cuda";
  const int64_t rows = X.size(-2), cols = X.size(-1);
  const kernels_dtype dt = cuda_dtype(X, where);
  check_cuda(X, "X", X.scalar_type(), X.device(), where);
  check_cuda(p, "p", at::kFloat, X.device(), where);
  check_cuda(line_scale, "line_scale", at::kFloat, X.device(), where);
  if (p.numel() != rows * cols || line_scale.numel() != (by_row ? rows : cols))
    fail("%s: p (%lld) or line_scale (%lld) does not match X", where, (long long)p.numel(),
         (long long)line_scale.numel());
  const c10::cuda::CUDAGuard guard(X.device());
  check_launch(launch_muon_update(X.data_ptr(), p.data_ptr<float>(), line_scale.data_ptr<float>(), rows, cols, by_row,
                                  (float)lr, (float)lr_wd, dt, stream_of(X)),
               where);
}

}  // namespace nanochat
