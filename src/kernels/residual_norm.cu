// The CUDA kernels of residual_norm.cpp: h = a*x + b*y and rms_norm(h). A row of up to 16 x 16
// bytes per lane (4096 bf16) is one warp's: 16-byte loads and stores, the row in registers,
// warp-shuffle sums, no barriers, h read once (backward). Other widths and alignments run the
// general kernel, one block per row. Untested on GPU.
#include "cuda_helpers.cuh"

#include <initializer_list>
#include <tuple>
#include <type_traits>

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <c10/cuda/CUDAGuard.h>

#include "nanochat/common/error.h"

namespace nanochat {
namespace {

using at::Tensor;

// ---- residual mixing + rms norm: the general kernels -----------------------------------------
// One block per row; each thread walks the row with a stride of blockDim.x, so any width or
// alignment
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

// ---- one warp per row ---------------------------------------------------------------------
// Lane l owns the 16-byte packs l, l+32, ... (< D/N, N = 16/sizeof(T)) of the row, VPL of them
// at most; the warps of a block have a row each and never wait for each other.
constexpr int rn_warps_per_block = 4;
constexpr int rn_max_packs_per_lane = 16;

template <typename T, int VPL>
__global__ void __launch_bounds__(32 * rn_warps_per_block)
    residual_norm_forward_warp_kernel(const T* __restrict__ x, const T* __restrict__ y, const float* a, const float* b,
                                      T* __restrict__ h, T* __restrict__ n, float* __restrict__ rstd, int64_t R, int D,
                                      float eps) {
  constexpr int N = 16 / sizeof(T);
  const int lane = threadIdx.x & 31;
  const int64_t row = (int64_t)blockIdx.x * rn_warps_per_block + (threadIdx.x >> 5);
  if (row >= R) return;  // the whole warp leaves together
  const int packs = D / N;
  const int64_t off = row * D;
  uint4 hv[VPL], yv[VPL];  // every load of the row in flight at once
#pragma unroll
  for (int k = 0; k < VPL; k++)
    if (lane + 32 * k < packs) hv[k] = vec_load(x + off, lane + 32 * k), yv[k] = vec_load(y + off, lane + 32 * k);
  // a lambda of 1 rounds nothing: round(1 * x) is x
  const float fa = a ? *a : 1.f, fb = b ? *b : 1.f;
  float ss = 0.f;
#pragma unroll
  for (int k = 0; k < VPL; k++) {
    if (lane + 32 * k >= packs) continue;
#pragma unroll
    for (int i = 0; i < N; i++) {
      const float v = round_to<T>(round_to<T>(fa * vec_get<T>(hv[k], i)) + round_to<T>(fb * vec_get<T>(yv[k], i)));
      vec_set<T>(hv[k], i, v);
      ss += v * v;
    }
    vec_store(h + off, lane + 32 * k, hv[k]);
  }
  const float r = rsqrtf(warp_sum(ss) / (float)D + eps);
  if (lane == 0) rstd[row] = r;
#pragma unroll
  for (int k = 0; k < VPL; k++) {
    if (lane + 32 * k >= packs) continue;
    uint4 nv{};
#pragma unroll
    for (int i = 0; i < N; i++) vec_set<T>(nv, i, vec_get<T>(hv[k], i) * r);
    vec_store(n + off, lane + 32 * k, nv);
  }
}

// g = dh + r*(dn - nh*mean(dn*nh)), nh = h*r: dn and h stay in registers across the sum
template <typename T, int VPL>
__global__ void __launch_bounds__(32 * rn_warps_per_block)
    residual_norm_backward_warp_kernel(const T* __restrict__ dh, const T* __restrict__ dn, const T* __restrict__ h,
                                       const float* __restrict__ rstd, const T* __restrict__ x, const T* __restrict__ y,
                                       const float* a, const float* b, T* __restrict__ dx, T* __restrict__ dy,
                                       float* __restrict__ ga_rows, float* __restrict__ gb_rows, int64_t R, int D) {
  constexpr int N = 16 / sizeof(T);
  const int lane = threadIdx.x & 31;
  const int64_t row = (int64_t)blockIdx.x * rn_warps_per_block + (threadIdx.x >> 5);
  if (row >= R) return;
  const int packs = D / N;
  const int64_t off = row * D;
  uint4 hv[VPL], dnv[VPL];
#pragma unroll
  for (int k = 0; k < VPL; k++)
    if (lane + 32 * k < packs) hv[k] = vec_load(h + off, lane + 32 * k), dnv[k] = vec_load(dn + off, lane + 32 * k);
  float dot = 0.f;
#pragma unroll
  for (int k = 0; k < VPL; k++) {
    if (lane + 32 * k >= packs) continue;
#pragma unroll
    for (int i = 0; i < N; i++) dot += vec_get<T>(dnv[k], i) * vec_get<T>(hv[k], i);
  }
  const float r = rstd[row];
  dot = warp_sum(dot) * r / (float)D;
  const float fa = a ? *a : 1.f, fb = b ? *b : 1.f;
  float sa = 0.f, sb = 0.f;  // stay 0 (unread) when their lambda is absent
#pragma unroll
  for (int k = 0; k < VPL; k++) {
    const int p = lane + 32 * k;
    if (p >= packs) continue;
    const uint4 dhv = vec_load(dh + off, p);
    const uint4 xv = ga_rows ? vec_load(x + off, p) : uint4{}, yv = gb_rows ? vec_load(y + off, p) : uint4{};
    uint4 dxv{}, dyv{};
#pragma unroll
    for (int i = 0; i < N; i++) {
      const float nh = vec_get<T>(hv[k], i) * r;
      const float g = vec_get<T>(dhv, i) + r * (vec_get<T>(dnv[k], i) - nh * dot);
      vec_set<T>(dxv, i, fa * g);
      vec_set<T>(dyv, i, fb * g);
      sa += g * vec_get<T>(xv, i);
      sb += g * vec_get<T>(yv, i);
    }
    vec_store(dx + off, p, dxv);
    if (dy) vec_store(dy + off, p, dyv);
  }
  if (ga_rows) {
    sa = warp_sum(sa);
    if (lane == 0) ga_rows[row] = sa;
  }
  if (gb_rows) {
    sb = warp_sum(sb);
    if (lane == 0) gb_rows[row] = sb;
  }
}

// the packs per lane of the warp kernels for a row of D elements of T whose pointers are all
// 16-byte aligned: the smallest of 1, 2, 4, 8, 16 that holds the row, or 0 (the general kernel)
template <typename T>
int rn_packs_per_lane(int64_t D, std::initializer_list<const void*> ptrs) {
  constexpr int N = 16 / sizeof(T);
  if (D % N != 0) return 0;
  for (const void* p : ptrs)
    if (p && !aligned16(p)) return 0;
  for (int vpl = 1; vpl <= rn_max_packs_per_lane; vpl *= 2)
    if (D / N <= 32 * vpl) return vpl;
  return 0;
}

// calls f(std::integral_constant<int, VPL>) for the runtime vpl (a power of two up to 16)
template <typename F>
cudaError_t with_packs_per_lane(int vpl, F&& f) {
  switch (vpl) {
    case 1: return f(std::integral_constant<int, 1>{});
    case 2: return f(std::integral_constant<int, 2>{});
    case 4: return f(std::integral_constant<int, 4>{});
    case 8: return f(std::integral_constant<int, 8>{});
    case 16: return f(std::integral_constant<int, 16>{});
  }
  return cudaErrorInvalidValue;
}

unsigned rn_warp_blocks(int64_t R) { return (unsigned)((R + rn_warps_per_block - 1) / rn_warps_per_block); }

cudaError_t launch_residual_norm_forward(const void* x, const void* y, const float* a, const float* b, void* h, void* n,
                                         float* rstd, int64_t R, int64_t D, float eps, kernels_dtype dtype,
                                         cudaStream_t stream) {
  if (R == 0) return cudaSuccess;
  if (D <= 0 || D > INT32_MAX || R > INT32_MAX) return cudaErrorInvalidValue;
  return with_dtype(dtype, [&](auto tag) {
    using E = decltype(tag);
    const int vpl = rn_packs_per_lane<E>(D, {x, y, h, n});
    if (vpl > 0)
      return with_packs_per_lane(vpl, [&](auto packs) {
        residual_norm_forward_warp_kernel<E, decltype(packs)::value>
            <<<rn_warp_blocks(R), 32 * rn_warps_per_block, 0, stream>>>(
                static_cast<const E*>(x), static_cast<const E*>(y), a, b, static_cast<E*>(h), static_cast<E*>(n), rstd,
                R, (int)D, eps);
        return cudaGetLastError();
      });
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
    const int vpl = rn_packs_per_lane<E>(D, {dh, dn, h, x, y, dx, dy});
    if (vpl > 0)
      return with_packs_per_lane(vpl, [&](auto packs) {
        residual_norm_backward_warp_kernel<E, decltype(packs)::value>
            <<<rn_warp_blocks(R), 32 * rn_warps_per_block, 0, stream>>>(
                static_cast<const E*>(dh), static_cast<const E*>(dn), static_cast<const E*>(h), rstd,
                static_cast<const E*>(x), static_cast<const E*>(y), a, b, static_cast<E*>(dx), static_cast<E*>(dy),
                ga_rows, gb_rows, R, (int)D);
        return cudaGetLastError();
      });
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
