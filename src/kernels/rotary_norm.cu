// The CUDA kernels of rotary_norm.cpp: rotary then RMSNorm of q or k. A head of 128 bf16 is
// two halves of eight 16-byte packs: eight lanes take a row, pack i of each half (x1 and x2
// meet in one lane, as do cos and sin), so a warp holds four rows in registers and sums each
// with three shuffles; no barriers. Heads whose halves are not whole packs, or unaligned
// tensors, run the general kernels, one warp per row of 2-byte loads. Untested on GPU.
#include "cuda_helpers.cuh"

#include <initializer_list>

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <c10/cuda/CUDAGuard.h>

#include "nanochat/common/error.h"

namespace nanochat {
namespace {

using at::Tensor;

// the widest head the kernels take: a row lives in one warp's registers
constexpr int64_t rotary_norm_max_dim = 256;

// ---- rotary + rms norm: the general kernels --------------------------------------------------
// One warp per row of D <= 256: lane l owns the pairs i = l, l+32, ... (< D/2), each pair
// being (x[i], x[i + D/2]), so the row stays in registers between the reduce and the store.
constexpr int rot_warps_per_block = 8;
constexpr int rot_pairs_per_lane = (int)(rotary_norm_max_dim / 2 / 32);

// r1 = x1*cos + x2*sin, r2 = -x1*sin + x2*cos; y = scale * r * rstd, rstd = 1/sqrt(mean(r^2)+eps)
template <typename T>
__global__ void rotary_norm_forward_kernel(const T* __restrict__ x, const T* __restrict__ cos,
                                           const T* __restrict__ sin, T* __restrict__ y, float* __restrict__ rstd,
                                           int64_t R, int D, int64_t T_len, int64_t H, float scale, float eps) {
  const int lane = threadIdx.x & 31;
  const int64_t row = (int64_t)blockIdx.x * rot_warps_per_block + (threadIdx.x >> 5);
  if (row >= R) return;  // the whole warp leaves together
  const int half = D / 2;
  const int64_t pos = (row / H) % T_len;
  const T* xr = x + row * D;
  const T* c = cos + pos * half;
  const T* sn = sin + pos * half;
  float r1[rot_pairs_per_lane], r2[rot_pairs_per_lane], ss = 0.f;
#pragma unroll
  for (int k = 0; k < rot_pairs_per_lane; k++) {
    const int i = lane + 32 * k;
    r1[k] = r2[k] = 0.f;
    if (i < half) {
      const float a = to_f32(xr[i]), b = to_f32(xr[i + half]), cs = to_f32(c[i]), si = to_f32(sn[i]);
      r1[k] = a * cs + b * si;
      r2[k] = b * cs - a * si;
      ss += r1[k] * r1[k] + r2[k] * r2[k];
    }
  }
  const float inv = 1.f / sqrtf(warp_sum(ss) / (float)D + eps);
  const float f = scale * inv;
  T* yr = y + row * D;
#pragma unroll
  for (int k = 0; k < rot_pairs_per_lane; k++) {
    const int i = lane + 32 * k;
    if (i < half) {
      yr[i] = from_f32<T>(f * r1[k]);
      yr[i + half] = from_f32<T>(f * r2[k]);
    }
  }
  if (lane == 0) rstd[row] = inv;
}

// With n = r * rstd = y / scale (the normalised row) and g = dy:
//   dr = scale * rstd * (g - n * mean(g . n))        (rms norm)
//   dx1 = dr1*cos - dr2*sin, dx2 = dr1*sin + dr2*cos  (the rotation's transpose)
template <typename T>
__global__ void rotary_norm_backward_kernel(const T* __restrict__ dy, const T* __restrict__ y,
                                            const float* __restrict__ rstd, const T* __restrict__ cos,
                                            const T* __restrict__ sin, T* __restrict__ dx, int64_t R, int D,
                                            int64_t T_len, int64_t H, float scale) {
  const int lane = threadIdx.x & 31;
  const int64_t row = (int64_t)blockIdx.x * rot_warps_per_block + (threadIdx.x >> 5);
  if (row >= R) return;
  const int half = D / 2;
  const int64_t pos = (row / H) % T_len;
  const float inv_scale = scale != 0.f ? 1.f / scale : 0.f;  // scale 0: y = 0 and dx = 0
  const T* gr = dy + row * D;
  const T* yr = y + row * D;
  float g1[rot_pairs_per_lane], g2[rot_pairs_per_lane], n1[rot_pairs_per_lane], n2[rot_pairs_per_lane];
  float dot = 0.f;
#pragma unroll
  for (int k = 0; k < rot_pairs_per_lane; k++) {
    const int i = lane + 32 * k;
    g1[k] = g2[k] = n1[k] = n2[k] = 0.f;
    if (i < half) {
      g1[k] = to_f32(gr[i]), g2[k] = to_f32(gr[i + half]);
      n1[k] = to_f32(yr[i]) * inv_scale, n2[k] = to_f32(yr[i + half]) * inv_scale;
      dot += g1[k] * n1[k] + g2[k] * n2[k];
    }
  }
  const float mean_gn = warp_sum(dot) / (float)D;
  const float f = scale * rstd[row];
  const T* c = cos + pos * half;
  const T* sn = sin + pos * half;
  T* dxr = dx + row * D;
#pragma unroll
  for (int k = 0; k < rot_pairs_per_lane; k++) {
    const int i = lane + 32 * k;
    if (i < half) {
      const float dr1 = f * (g1[k] - n1[k] * mean_gn), dr2 = f * (g2[k] - n2[k] * mean_gn);
      const float cs = to_f32(c[i]), si = to_f32(sn[i]);
      dxr[i] = from_f32<T>(dr1 * cs - dr2 * si);
      dxr[i + half] = from_f32<T>(dr1 * si + dr2 * cs);
    }
  }
}

// ---- packed: G lanes per row, one 16-byte pack of each half per lane ------------------------
// G = the halves' packs rounded up to a power of two (<= 32): a warp holds 32/G rows, and the
// shuffles of a sum stay inside a row's lanes (xor offsets below G)
__device__ __forceinline__ float group_sum(float v, int G) {
  for (int o = G / 2; o > 0; o >>= 1) v += __shfl_xor_sync(full_mask, v, o);
  return v;
}

template <typename T>
__global__ void __launch_bounds__(32 * rot_warps_per_block)
    rotary_norm_forward_packed_kernel(const T* __restrict__ x, const T* __restrict__ cos, const T* __restrict__ sin,
                                      T* __restrict__ y, float* __restrict__ rstd, int64_t R, int D, int G,
                                      int64_t T_len, int64_t H, float scale, float eps) {
  constexpr int N = 16 / sizeof(T);
  const int half = D / 2, p = threadIdx.x & (G - 1);
  const int64_t row = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / G;
  // lanes past the last row or the half's packs still take part in the shuffles, with zeros
  const bool active = row < R && p < half / N;
  const int64_t pos = (row / H) % T_len;
  uint4 a{}, b{}, c{}, sn{};
  if (active) {
    a = vec_load(x + row * D, p), b = vec_load(x + row * D + half, p);
    c = vec_load(cos + pos * half, p), sn = vec_load(sin + pos * half, p);
  }
  float r1[N], r2[N], ss = 0.f;
#pragma unroll
  for (int i = 0; i < N; i++) {
    const float x1 = vec_get<T>(a, i), x2 = vec_get<T>(b, i), cs = vec_get<T>(c, i), si = vec_get<T>(sn, i);
    r1[i] = x1 * cs + x2 * si;
    r2[i] = x2 * cs - x1 * si;
    ss += r1[i] * r1[i] + r2[i] * r2[i];
  }
  const float inv = 1.f / sqrtf(group_sum(ss, G) / (float)D + eps);
  if (!active) return;
  const float f = scale * inv;
#pragma unroll
  for (int i = 0; i < N; i++) vec_set<T>(a, i, f * r1[i]), vec_set<T>(b, i, f * r2[i]);
  vec_store(y + row * D, p, a);
  vec_store(y + row * D + half, p, b);
  if (p == 0) rstd[row] = inv;
}

// the backward of the general kernel below, a pack of each half per lane
template <typename T>
__global__ void __launch_bounds__(32 * rot_warps_per_block)
    rotary_norm_backward_packed_kernel(const T* __restrict__ dy, const T* __restrict__ y,
                                       const float* __restrict__ rstd, const T* __restrict__ cos,
                                       const T* __restrict__ sin, T* __restrict__ dx, int64_t R, int D, int G,
                                       int64_t T_len, int64_t H, float scale) {
  constexpr int N = 16 / sizeof(T);
  const int half = D / 2, p = threadIdx.x & (G - 1);
  const int64_t row = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / G;
  const bool active = row < R && p < half / N;
  const int64_t pos = (row / H) % T_len;
  const float inv_scale = scale != 0.f ? 1.f / scale : 0.f;  // scale 0: y = 0 and dx = 0
  uint4 g1{}, g2{}, n1{}, n2{}, c{}, sn{};
  if (active) {
    g1 = vec_load(dy + row * D, p), g2 = vec_load(dy + row * D + half, p);
    n1 = vec_load(y + row * D, p), n2 = vec_load(y + row * D + half, p);
    c = vec_load(cos + pos * half, p), sn = vec_load(sin + pos * half, p);
  }
  float dot = 0.f;
#pragma unroll
  for (int i = 0; i < N; i++)
    dot += vec_get<T>(g1, i) * (vec_get<T>(n1, i) * inv_scale) + vec_get<T>(g2, i) * (vec_get<T>(n2, i) * inv_scale);
  const float mean_gn = group_sum(dot, G) / (float)D;
  if (!active) return;
  const float f = scale * rstd[row];
#pragma unroll
  for (int i = 0; i < N; i++) {
    const float dr1 = f * (vec_get<T>(g1, i) - (vec_get<T>(n1, i) * inv_scale) * mean_gn);
    const float dr2 = f * (vec_get<T>(g2, i) - (vec_get<T>(n2, i) * inv_scale) * mean_gn);
    const float cs = vec_get<T>(c, i), si = vec_get<T>(sn, i);
    vec_set<T>(g1, i, dr1 * cs - dr2 * si);
    vec_set<T>(g2, i, dr1 * si + dr2 * cs);
  }
  vec_store(dx + row * D, p, g1);
  vec_store(dx + row * D + half, p, g2);
}

// the lanes per row of the packed kernels for heads of D elements of T whose pointers are all
// 16-byte aligned, or 0 (the general kernels): each half whole packs, at most 32 of them
template <typename T>
int rot_lanes_per_row(int64_t D, std::initializer_list<const void*> ptrs) {
  constexpr int N = 16 / sizeof(T);
  if (D % (2 * N) != 0 || D / 2 / N > 32) return 0;
  for (const void* p : ptrs)
    if (!aligned16(p)) return 0;
  int G = 1;
  while (G < D / 2 / N) G *= 2;
  return G;
}

unsigned rot_packed_blocks(int64_t R, int G) {
  const int64_t rows_per_block = 32 * rot_warps_per_block / G;
  return (unsigned)((R + rows_per_block - 1) / rows_per_block);
}

cudaError_t launch_rotary_norm_forward(const void* x, const void* cos, const void* sin, void* y, float* rstd, int64_t R,
                                       int64_t D, int64_t T, int64_t H, float scale, float eps, kernels_dtype dtype,
                                       cudaStream_t stream) {
  if (R == 0) return cudaSuccess;
  if (D % 2 != 0 || D > rotary_norm_max_dim || T <= 0 || H <= 0) return cudaErrorInvalidValue;
  const unsigned blocks = (unsigned)((R + rot_warps_per_block - 1) / rot_warps_per_block);
  return with_dtype(dtype, [&](auto tag) {
    using E = decltype(tag);
    if (const int G = rot_lanes_per_row<E>(D, {x, cos, sin, y})) {
      rotary_norm_forward_packed_kernel<E><<<rot_packed_blocks(R, G), 32 * rot_warps_per_block, 0, stream>>>(
          static_cast<const E*>(x), static_cast<const E*>(cos), static_cast<const E*>(sin), static_cast<E*>(y), rstd, R,
          (int)D, G, T, H, scale, eps);
      return cudaGetLastError();
    }
    rotary_norm_forward_kernel<E><<<blocks, 32 * rot_warps_per_block, 0, stream>>>(
        static_cast<const E*>(x), static_cast<const E*>(cos), static_cast<const E*>(sin), static_cast<E*>(y), rstd, R,
        (int)D, T, H, scale, eps);
    return cudaGetLastError();
  });
}

cudaError_t launch_rotary_norm_backward(const void* dy, const void* y, const float* rstd, const void* cos,
                                        const void* sin, void* dx, int64_t R, int64_t D, int64_t T, int64_t H,
                                        float scale, kernels_dtype dtype, cudaStream_t stream) {
  if (R == 0) return cudaSuccess;
  if (D % 2 != 0 || D > rotary_norm_max_dim || T <= 0 || H <= 0) return cudaErrorInvalidValue;
  const unsigned blocks = (unsigned)((R + rot_warps_per_block - 1) / rot_warps_per_block);
  return with_dtype(dtype, [&](auto tag) {
    using E = decltype(tag);
    if (const int G = rot_lanes_per_row<E>(D, {dy, y, cos, sin, dx})) {
      rotary_norm_backward_packed_kernel<E><<<rot_packed_blocks(R, G), 32 * rot_warps_per_block, 0, stream>>>(
          static_cast<const E*>(dy), static_cast<const E*>(y), rstd, static_cast<const E*>(cos),
          static_cast<const E*>(sin), static_cast<E*>(dx), R, (int)D, G, T, H, scale);
      return cudaGetLastError();
    }
    rotary_norm_backward_kernel<E><<<blocks, 32 * rot_warps_per_block, 0, stream>>>(
        static_cast<const E*>(dy), static_cast<const E*>(y), rstd, static_cast<const E*>(cos),
        static_cast<const E*>(sin), static_cast<E*>(dx), R, (int)D, T, H, scale);
    return cudaGetLastError();
  });
}

// x, dy, y: R rows of D (the last dim); cos, sin: T*D/2 values; R a multiple of T*H
void check_rotary(const Tensor& x, const Tensor& cos, const Tensor& sin, int64_t T, int64_t H, const char* where) {
  check_cuda(cos, "cos", x.scalar_type(), x.device(), where);
  check_cuda(sin, "sin", x.scalar_type(), x.device(), where);
  if (x.dim() < 1) fail("%s: x must have at least one dimension", where);
  const int64_t D = x.size(-1);
  if (D % 2 != 0 || D <= 0 || D > rotary_norm_max_dim)
    fail("%s: head dim %lld must be even and at most %lld on CUDA", where, (long long)D,
         (long long)rotary_norm_max_dim);
  if (T <= 0 || H <= 0 || x.numel() % (T * H * D) != 0)
    fail("%s: %lld values are not whole (T=%lld, H=%lld, D=%lld) blocks", where, (long long)x.numel(), (long long)T,
         (long long)H, (long long)D);
  if (cos.numel() != T * (D / 2) || sin.numel() != T * (D / 2))
    fail("%s: cos and sin must hold (T=%lld, D/2=%lld) values", where, (long long)T, (long long)(D / 2));
}

}  // namespace

bool rotary_norm_cuda_takes(int64_t head_dim) { return head_dim <= rotary_norm_max_dim; }

std::pair<Tensor, Tensor> rotary_norm_forward_cuda(const Tensor& x, const Tensor& cos, const Tensor& sin, int64_t T,
                                                   int64_t H, double scale, double eps) {
  const char* where = "rotary_norm_forward_cuda";
  const kernels_dtype dt = cuda_dtype(x, where);
  check_cuda(x, "x", x.scalar_type(), x.device(), where);
  check_rotary(x, cos, sin, T, H, where);
  const int64_t D = x.size(-1), R = x.numel() / D;
  Tensor y = at::empty_like(x, at::MemoryFormat::Contiguous);
  Tensor rstd = at::empty({R}, x.options().dtype(at::kFloat));
  const c10::cuda::CUDAGuard guard(x.device());
  check_launch(
      launch_rotary_norm_forward(x.data_ptr(), cos.data_ptr(), sin.data_ptr(), y.data_ptr(), rstd.data_ptr<float>(), R,
                                 D, T, H, (float)scale, (float)eps, dt, stream_of(x)),
      where);
  return {y, rstd};
}

Tensor rotary_norm_backward_cuda(const Tensor& dy, const Tensor& y, const Tensor& rstd, const Tensor& cos,
                                 const Tensor& sin, int64_t T, int64_t H, double scale) {
  const char* where = "rotary_norm_backward_cuda";
  const kernels_dtype dt = cuda_dtype(y, where);
  check_cuda(y, "y", y.scalar_type(), y.device(), where);
  check_cuda(dy, "dy", y.scalar_type(), y.device(), where);
  if (dy.numel() != y.numel() || dy.size(-1) != y.size(-1)) fail("%s: dy and y differ in shape", where);
  check_rotary(y, cos, sin, T, H, where);
  const int64_t D = y.size(-1), R = y.numel() / D;
  check_cuda(rstd, "rstd", at::kFloat, y.device(), where);
  if (rstd.numel() != R) fail("%s: rstd has %lld values for %lld rows", where, (long long)rstd.numel(), (long long)R);
  Tensor dx = at::empty_like(dy, at::MemoryFormat::Contiguous);
  const c10::cuda::CUDAGuard guard(y.device());
  check_launch(launch_rotary_norm_backward(dy.data_ptr(), y.data_ptr(), rstd.data_ptr<float>(), cos.data_ptr(),
                                           sin.data_ptr(), dx.data_ptr(), R, D, T, H, (float)scale, dt, stream_of(y)),
               where);
  return dx;
}

}  // namespace nanochat
