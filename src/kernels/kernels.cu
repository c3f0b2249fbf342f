// defines: the CUDA kernels of the kernels module and their launchers (kernels_cuda_launch.h):
//          softcap cross-entropy forward/backward, relu^2 forward/backward, rotary+norm
//          forward/backward, residual+norm forward/backward, AdamW, Muon's passes
// Plain CUDA, no torch headers: nvcc compiles this file alone in seconds. Every kernel reads
// the compute dtype (fp32, bf16, fp16), does its math in fp32 and rounds once on the store.
// Row kernels (softcap CE) use one block per row sized to the row; the element-wise ones
// move 16 bytes per load and store when the pointers allow it.
#include "kernels_cuda_launch.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

namespace nanochat {
namespace {

// ---- element types -----------------------------------------------------------------------
__device__ __forceinline__ float to_f32(float x) { return x; }
__device__ __forceinline__ float to_f32(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_f32(__half x) { return __half2float(x); }

template <typename T> __device__ __forceinline__ T from_f32(float x);
template <> __device__ __forceinline__ float from_f32<float>(float x) { return x; }
template <> __device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }
template <> __device__ __forceinline__ __half from_f32<__half>(float x) { return __float2half_rn(x); }

// N elements moved as one load/store: N = 16 / sizeof(T) on the vector path, 1 otherwise
template <typename T, int N>
struct alignas(sizeof(T) * N) pack_t {
  T v[N];
};

// calls f(T{}) with T the C++ type of dtype, so one generic lambda launches every dtype
template <typename F>
cudaError_t with_dtype(kernels_dtype dtype, F&& f) {
  switch (dtype) {
    case kernels_dtype_f32: return f(float{});
    case kernels_dtype_bf16: return f(__nv_bfloat16{});
    case kernels_dtype_f16: return f(__half{});
  }
  return cudaErrorInvalidValue;
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// a power of two in [32, 512] covering `work` items, one per thread
int threads_for(int64_t work) {
  int t = 32;
  while (t < work && t < 512) t *= 2;
  return t;
}

constexpr unsigned full_mask = 0xffffffffu;
__device__ __forceinline__ float f32_inf() { return __int_as_float(0x7f800000); }
__device__ __forceinline__ float f32_nan() { return __int_as_float(0x7fffffff); }

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(full_mask, v, o);
  return v;
}

// ---- softcapped cross-entropy ------------------------------------------------------------
// z = cap * tanh(l / cap), with tanh(u) = 1 - 2 / (exp(2u) + 1): one fast exp and one fast
// reciprocal instead of tanhf's polynomial; exp(2u) -> inf or 0 gives exactly +-1. The
// absolute error on z is ~cap * 1e-7, far below the logits' bf16 rounding.
__device__ __forceinline__ float softcap_tanh(float l, float inv_cap) {
  const float e = __expf(2.f * l * inv_cap);
  return 1.f - __fdividef(2.f, e + 1.f);
}

// (m, s) stands for s * exp(m), a partial sum of exp(z); merging keeps the larger m
__device__ __forceinline__ void lse_merge(float& m, float& s, float m2, float s2) {
  const float mx = fmaxf(m, m2);
  if (mx == -f32_inf()) return;  // both empty
  s = s * expf(m - mx) + s2 * expf(m2 - mx);
  m = mx;
}

// reduces every thread's (m, s) of the block; thread 0 gets the result
__device__ void block_lse_reduce(float& m, float& s) {
  __shared__ float sh_m[32], sh_s[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float m2 = __shfl_xor_sync(full_mask, m, o), s2 = __shfl_xor_sync(full_mask, s, o);
    lse_merge(m, s, m2, s2);
  }
  if (nwarps == 1) return;
  if (lane == 0) sh_m[warp] = m, sh_s[warp] = s;
  __syncthreads();
  if (warp == 0) {
    m = lane < nwarps ? sh_m[lane] : -f32_inf();
    s = lane < nwarps ? sh_s[lane] : 0.f;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      const float m2 = __shfl_xor_sync(full_mask, m, o), s2 = __shfl_xor_sync(full_mask, s, o);
      lse_merge(m, s, m2, s2);
    }
  }
}

// one block per row: each thread keeps an online (max, sum of exp) over its packs of the
// row, rescaling its sum once per pack when the max grows; then a block reduce.
// lse = m + log(s); loss = lse - z[target].
template <typename T, int N>
__global__ void softcap_ce_forward_kernel(const T* __restrict__ logits, const int64_t* __restrict__ targets,
                                          int64_t ld, int64_t vocab, float cap, float* __restrict__ loss,
                                          float* __restrict__ lse) {
  const int64_t row = blockIdx.x;
  const T* x = logits + row * ld;
  const float inv_cap = 1.f / cap;
  const int64_t npacks = (vocab + N - 1) / N;  // the last pack may run past vocab (not past ld)
  float m = -f32_inf(), s = 0.f;
  for (int64_t p = threadIdx.x; p < npacks; p += blockDim.x) {
    const pack_t<T, N> pk = reinterpret_cast<const pack_t<T, N>*>(x)[p];
    float z[N], mz = -f32_inf();
#pragma unroll
    for (int i = 0; i < N; i++) {
      z[i] = p * N + i < vocab ? cap * softcap_tanh(to_f32(pk.v[i]), inv_cap) : -f32_inf();
      mz = fmaxf(mz, z[i]);
    }
    if (mz > m) {
      s *= __expf(m - mz);
      m = mz;
    }
#pragma unroll
    for (int i = 0; i < N; i++) s += __expf(z[i] - m);
  }
  block_lse_reduce(m, s);
  if (threadIdx.x == 0) {
    const float row_lse = m + logf(s);
    const int64_t t = targets[row];
    // -1 is the ignore index; any other target outside the vocab gives NaN (no host sync to raise)
    float row_loss = 0.f;
    if (t != -1) row_loss = t >= 0 && t < vocab ? row_lse - cap * softcap_tanh(to_f32(x[t]), inv_cap) : f32_nan();
    lse[row] = row_lse;
    loss[row] = row_loss;
  }
}

// one block per row, in place over all ld columns:
// dl = g * (exp(z - lse) - [j == target]) * (1 - tanh^2), 0 past vocab and in ignored rows (target -1)
template <typename T, int N>
__global__ void softcap_ce_backward_kernel(T* __restrict__ logits, const int64_t* __restrict__ targets,
                                           const float* __restrict__ lse, const float* __restrict__ grad_loss,
                                           int64_t grad_stride, int64_t ld, int64_t vocab, float cap) {
  const int64_t row = blockIdx.x;
  T* x = logits + row * ld;
  const float inv_cap = 1.f / cap;
  const int64_t t = targets[row];
  const bool live = t != -1;
  const float g = live ? grad_loss[row * grad_stride] : 0.f;
  const float row_lse = lse[row];
  const int64_t npacks = ld / N;  // ld % N == 0 on the vector path
  for (int64_t p = threadIdx.x; p < npacks; p += blockDim.x) {
    pack_t<T, N> pk = reinterpret_cast<const pack_t<T, N>*>(x)[p];
#pragma unroll
    for (int i = 0; i < N; i++) {
      const int64_t j = p * N + i;
      float d = 0.f;
      if (live && j < vocab) {
        const float th = softcap_tanh(to_f32(pk.v[i]), inv_cap);
        const float prob = __expf(cap * th - row_lse);
        d = g * (prob - (j == t ? 1.f : 0.f)) * (1.f - th * th);
      }
      pk.v[i] = from_f32<T>(d);
    }
    reinterpret_cast<pack_t<T, N>*>(x)[p] = pk;
  }
}

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

// ---- AdamW -------------------------------------------------------------------------------
// one element per thread (grid-stride), fp32 math in optim_adamw_step's order: decay, the two
// lerps (ATen's formula), sqrt(v/bias2) + eps, then p - step_size * m/denom as an fma
__device__ __forceinline__ float lerp_f(float a, float b, float w) {
  return w < 0.5f ? fmaf(w, b - a, a) : fmaf(w - 1.0f, b - a, b);
}

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

// ---- residual mixing + rms norm ---------------------------------------------------------
// One block per row; each thread walks the row with a stride of blockDim.x, so any width
// works. The row is read twice (the sum of squares, then the store), the second time from cache.

// the sum of v over the block, returned to every thread; `shared` holds one float per warp
__device__ float block_sum(float v, float* shared) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
  v = warp_sum(v);
  __syncthreads();  // `shared` may still be read from the previous call
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = threadIdx.x < warps ? shared[threadIdx.x] : 0.f;
  if (warp == 0) v = warp_sum(v);
  if (threadIdx.x == 0) shared[0] = v;
  __syncthreads();
  return shared[0];
}

// v rounded to T and back: what an eager op of dtype T stores
template <typename T>
__device__ __forceinline__ float round_to(float v) {
  return to_f32(from_f32<T>(v));
}

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

// ---- rotary + rms norm -------------------------------------------------------------------
// One warp per row of D <= 256: lane l owns the pairs i = l, l+32, ... (< D/2), each pair
// being (x[i], x[i + D/2]), so the row stays in registers between the reduce and the store.
constexpr int rot_warps_per_block = 8;
constexpr int rot_pairs_per_lane = (int)(kernels_rotary_norm_max_dim / 2 / 32);

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

// blocks for a grid-stride loop over `work` items of 256 threads: enough to fill any GPU
// several times over, few enough that each thread does a handful of items
unsigned elementwise_blocks(int64_t work) {
  const int64_t b = (work + 255) / 256;
  return (unsigned)(b < 4096 ? (b > 0 ? b : 1) : 4096);
}

}  // namespace

// ---- launchers ---------------------------------------------------------------------------
cudaError_t kernels_launch_softcap_ce_forward(const void* logits, const int64_t* targets, int64_t n,
                                              int64_t ld, int64_t vocab, float cap, float* loss,
                                              float* lse, kernels_dtype dtype, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  return with_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    constexpr int V = 16 / sizeof(T);
    const T* p = static_cast<const T*>(logits);
    if (aligned16(p) && ld % V == 0) {
      softcap_ce_forward_kernel<T, V><<<(unsigned)n, threads_for((vocab + V - 1) / V), 0, stream>>>(
          p, targets, ld, vocab, cap, loss, lse);
    } else {
      softcap_ce_forward_kernel<T, 1><<<(unsigned)n, threads_for(vocab), 0, stream>>>(p, targets, ld, vocab,
                                                                                      cap, loss, lse);
    }
    return cudaGetLastError();
  });
}

cudaError_t kernels_launch_softcap_ce_backward(void* logits, const int64_t* targets, const float* lse,
                                               const float* grad_loss, int64_t grad_stride, int64_t n,
                                               int64_t ld, int64_t vocab, float cap, kernels_dtype dtype,
                                               cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  return with_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    constexpr int V = 16 / sizeof(T);
    T* p = static_cast<T*>(logits);
    if (aligned16(p) && ld % V == 0) {
      softcap_ce_backward_kernel<T, V><<<(unsigned)n, threads_for(ld / V), 0, stream>>>(
          p, targets, lse, grad_loss, grad_stride, ld, vocab, cap);
    } else {
      softcap_ce_backward_kernel<T, 1><<<(unsigned)n, threads_for(ld), 0, stream>>>(
          p, targets, lse, grad_loss, grad_stride, ld, vocab, cap);
    }
    return cudaGetLastError();
  });
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

cudaError_t kernels_launch_relu_square_forward(const void* h, void* y, int64_t numel, kernels_dtype dtype,
                                               cudaStream_t stream) {
  if (numel == 0) return cudaSuccess;
  return with_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    return launch_elementwise<T>(relu_square_forward_kernel<T, 16 / sizeof(T)>, relu_square_forward_kernel<T, 1>,
                                 static_cast<const T*>(h), static_cast<T*>(y), numel, stream);
  });
}

cudaError_t kernels_launch_relu_square_backward(const void* h, void* dy, int64_t numel, kernels_dtype dtype,
                                                cudaStream_t stream) {
  if (numel == 0) return cudaSuccess;
  return with_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    return launch_elementwise<T>(relu_square_backward_kernel<T, 16 / sizeof(T)>, relu_square_backward_kernel<T, 1>,
                                 static_cast<const T*>(h), static_cast<T*>(dy), numel, stream);
  });
}

cudaError_t kernels_launch_rotary_norm_forward(const void* x, const void* cos, const void* sin, void* y,
                                               float* rstd, int64_t R, int64_t D, int64_t T, int64_t H,
                                               float scale, float eps, kernels_dtype dtype,
                                               cudaStream_t stream) {
  if (R == 0) return cudaSuccess;
  if (D % 2 != 0 || D > kernels_rotary_norm_max_dim || T <= 0 || H <= 0) return cudaErrorInvalidValue;
  const unsigned blocks = (unsigned)((R + rot_warps_per_block - 1) / rot_warps_per_block);
  return with_dtype(dtype, [&](auto tag) {
    using E = decltype(tag);
    rotary_norm_forward_kernel<E><<<blocks, 32 * rot_warps_per_block, 0, stream>>>(
        static_cast<const E*>(x), static_cast<const E*>(cos), static_cast<const E*>(sin), static_cast<E*>(y), rstd,
        R, (int)D, T, H, scale, eps);
    return cudaGetLastError();
  });
}

cudaError_t kernels_launch_rotary_norm_backward(const void* dy, const void* y, const float* rstd,
                                                const void* cos, const void* sin, void* dx, int64_t R,
                                                int64_t D, int64_t T, int64_t H, float scale,
                                                kernels_dtype dtype, cudaStream_t stream) {
  if (R == 0) return cudaSuccess;
  if (D % 2 != 0 || D > kernels_rotary_norm_max_dim || T <= 0 || H <= 0) return cudaErrorInvalidValue;
  const unsigned blocks = (unsigned)((R + rot_warps_per_block - 1) / rot_warps_per_block);
  return with_dtype(dtype, [&](auto tag) {
    using E = decltype(tag);
    rotary_norm_backward_kernel<E><<<blocks, 32 * rot_warps_per_block, 0, stream>>>(
        static_cast<const E*>(dy), static_cast<const E*>(y), rstd, static_cast<const E*>(cos),
        static_cast<const E*>(sin), static_cast<E*>(dx), R, (int)D, T, H, scale);
    return cudaGetLastError();
  });
}

cudaError_t kernels_launch_residual_norm_forward(const void* x, const void* y, const float* a, const float* b, void* h,
                                                 void* n, float* rstd, int64_t R, int64_t D, float eps,
                                                 kernels_dtype dtype, cudaStream_t stream) {
  if (R == 0) return cudaSuccess;
  if (D <= 0 || D > INT32_MAX || R > INT32_MAX) return cudaErrorInvalidValue;
  return with_dtype(dtype, [&](auto tag) {
    using E = decltype(tag);
    residual_norm_forward_kernel<E><<<(unsigned)R, threads_for(D), 0, stream>>>(
        static_cast<const E*>(x), static_cast<const E*>(y), a, b, static_cast<E*>(h), static_cast<E*>(n), rstd, (int)D,
        eps);
    return cudaGetLastError();
  });
}

cudaError_t kernels_launch_residual_norm_backward(const void* dh, const void* dn, const void* h, const float* rstd,
                                                  const void* x, const void* y, const float* a, const float* b,
                                                  void* dx, void* dy, float* ga_rows, float* gb_rows, int64_t R,
                                                  int64_t D, kernels_dtype dtype, cudaStream_t stream) {
  if (R == 0) return cudaSuccess;
  if (D <= 0 || D > INT32_MAX || R > INT32_MAX) return cudaErrorInvalidValue;
  return with_dtype(dtype, [&](auto tag) {
    using E = decltype(tag);
    residual_norm_backward_kernel<E><<<(unsigned)R, threads_for(D), 0, stream>>>(
        static_cast<const E*>(dh), static_cast<const E*>(dn), static_cast<const E*>(h), rstd,
        static_cast<const E*>(x), static_cast<const E*>(y), a, b, static_cast<E*>(dx), static_cast<E*>(dy), ga_rows,
        gb_rows, (int)D);
    return cudaGetLastError();
  });
}

cudaError_t kernels_launch_adamw_step(void* p, const void* grad, void* exp_avg, void* exp_avg_sq, int64_t n,
                                     float lr, float beta1, float beta2, float eps, float weight_decay, float bias1,
                                     float bias2, kernels_dtype dtype, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  return with_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    adamw_step_kernel<T><<<elementwise_blocks(n), 256, 0, stream>>>(
        static_cast<T*>(p), static_cast<const T*>(grad), static_cast<T*>(exp_avg), static_cast<T*>(exp_avg_sq), n,
        1.0f - lr * weight_decay, 1.0f - beta1, 1.0f - beta2, lr / bias1, bias2, eps);
    return cudaGetLastError();
  });
}

cudaError_t kernels_launch_muon_nesterov(const float* grad, float* buf, void* X, float* row_sumsq, int64_t rows,
                                         int64_t cols, float mu, kernels_dtype x_dtype, cudaStream_t stream) {
  if (rows == 0 || cols == 0) return cudaSuccess;
  return with_dtype(x_dtype, [&](auto tag) {
    using T = decltype(tag);
    muon_nesterov_kernel<T><<<(unsigned)rows, threads_for(cols), 0, stream>>>(grad, buf, static_cast<T*>(X), row_sumsq,
                                                                              (int)cols, mu);
    return cudaGetLastError();
  });
}

cudaError_t kernels_launch_muon_scale_rows(void* X, const float* scale, int64_t rows, int64_t cols,
                                           kernels_dtype x_dtype, cudaStream_t stream) {
  const int64_t n = rows * cols;
  if (n == 0) return cudaSuccess;
  return with_dtype(x_dtype, [&](auto tag) {
    using T = decltype(tag);
    muon_scale_rows_kernel<T><<<elementwise_blocks(n), 256, 0, stream>>>(static_cast<T*>(X), scale, n, (int)cols);
    return cudaGetLastError();
  });
}

cudaError_t kernels_launch_muon_sumsq(const void* X, float* out, int64_t rows, int64_t cols, bool by_row,
                                      kernels_dtype x_dtype, cudaStream_t stream) {
  if (rows == 0 || cols == 0) return cudaSuccess;
  return with_dtype(x_dtype, [&](auto tag) {
    using T = decltype(tag);
    if (by_row)
      muon_row_sumsq_kernel<T><<<(unsigned)rows, threads_for(cols), 0, stream>>>(static_cast<const T*>(X), out, (int)cols);
    else
      muon_col_sumsq_kernel<T><<<(unsigned)((cols + 31) / 32), dim3(32, col_sumsq_lanes), 0, stream>>>(
          static_cast<const T*>(X), out, (int)rows, (int)cols);
    return cudaGetLastError();
  });
}

cudaError_t kernels_launch_muon_update(const void* X, float* p, const float* line_scale, int64_t rows, int64_t cols,
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

}  // namespace nanochat
