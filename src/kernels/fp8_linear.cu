// The CUDA kernel of fp8_linear.cpp's quantisation: amax, the scale and the scaled, clamped cast
// to e4m3 or e5m2 in two passes over x (ATen's composition takes six: abs, max, cast, scale,
// clamp, cast), the second also writing the transposed copy (cols, rows) that the backward's
// _scaled_mm reads column-major (ATen: one more pass). The bits are those of the composition
// (fp8_quantize_reference): the scale is fp8_max / max(amax, 1e-12) in double, rounded to fp32,
// each value is x * scale in fp32, clamped (a NaN stays a NaN) and rounded to nearest even.
// Untested on GPU.
#include "cuda_helpers.cuh"

#include <cuda_fp8.h>

#include <tuple>

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <c10/cuda/CUDAGuard.h>

#include "nanochat/common/error.h"

namespace nanochat {
namespace {

using at::Tensor;

// pass 1: max |x| into *amax_bits, as ints: the bits of non-negative floats order as the floats
// do, and a NaN's (above +inf's) wins, as in ATen's max
template <typename T>
__global__ void fp8_amax_kernel(const T* __restrict__ x, int64_t n, int* amax_bits) {
  __shared__ int shared[32];
  int best = 0;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    best = max(best, __float_as_int(fabsf(to_f32(x[i]))));
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) best = max(best, __shfl_xor_sync(full_mask, best, o));
  if ((threadIdx.x & 31) == 0) shared[threadIdx.x >> 5] = best;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < (int)(blockDim.x >> 5); w++) best = max(best, shared[w]);
    atomicMax(amax_bits, best);
  }
}

// the scale from amax: fp8_max / max(amax, 1e-12) in double, rounded to fp32
__device__ __forceinline__ float fp8_scale(const int* amax_bits, double fp8_max) {
  const double amax = (double)__int_as_float(*amax_bits);
  return (float)(fp8_max / (amax > 1e-12 || isnan(amax) ? amax : 1e-12));
}

template <typename T>
__device__ __forceinline__ __nv_fp8_storage_t fp8_cast(T x, float scale, float lim, __nv_fp8_interpretation_t kind) {
  float v = to_f32(x) * scale;
  v = v < -lim ? -lim : (v > lim ? lim : v);  // as at::clamp: a NaN stays a NaN
  return __nv_cvt_float_to_fp8(v, __NV_SATFINITE, kind);
}

// pass 2: q = fp8(clamp(x * scale)), and 1/scale
template <typename T>
__global__ void fp8_cast_kernel(const T* __restrict__ x, int64_t n, const int* amax_bits, double fp8_max,
                                __nv_fp8_interpretation_t kind, __nv_fp8_storage_t* __restrict__ q,
                                float* __restrict__ inv_scale) {
  const float scale = fp8_scale(amax_bits, fp8_max), lim = (float)fp8_max;
  if (blockIdx.x == 0 && threadIdx.x == 0) *inv_scale = 1.0f / scale;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    q[i] = fp8_cast(x[i], scale, lim, kind);
}

// pass 2 with the transpose: one 32 x 32 tile of x (rows, cols) per block of 32 x 8 threads,
// read and written to q along rows, then through shared memory written to q_t (cols, rows) along
// its rows, so both stores are coalesced. Row tiles on grid x (up to 2^31 - 1), column tiles on
// grid y (65535 tiles: 2M columns). The tile's rows are 36 bytes apart: a warp's reads of the
// transposed phase (4 bytes down a column, 8 row groups) then fall in 8 distinct banks, where 33
// put two groups in one bank. Each thread stores 4 bytes of q_t at once (one 32-bit store) where
// the row is long enough and aligned, bytes one by one at a ragged edge.
constexpr int kTile = 32, kTileRows = 8, kTileStride = kTile + 4;
template <typename T>
__global__ void fp8_cast_transpose_kernel(const T* __restrict__ x, int64_t rows, int64_t cols, const int* amax_bits,
                                          double fp8_max, __nv_fp8_interpretation_t kind,
                                          __nv_fp8_storage_t* __restrict__ q, __nv_fp8_storage_t* __restrict__ q_t,
                                          float* __restrict__ inv_scale) {
  __shared__ __align__(4) __nv_fp8_storage_t tile[kTile][kTileStride];
  const float scale = fp8_scale(amax_bits, fp8_max), lim = (float)fp8_max;
  if (blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0 && threadIdx.y == 0) *inv_scale = 1.0f / scale;
  const int64_t r0 = (int64_t)blockIdx.x * kTile, c0 = (int64_t)blockIdx.y * kTile;
  for (int i = threadIdx.y; i < kTile; i += kTileRows) {
    const int64_t r = r0 + i, c = c0 + threadIdx.x;
    if (r < rows && c < cols) {
      const __nv_fp8_storage_t v = fp8_cast(x[r * cols + c], scale, lim, kind);
      q[r * cols + c] = v;
      tile[i][threadIdx.x] = v;
    }
  }
  __syncthreads();
  // thread t writes q_t row c0 + t / 8, its bytes r0 + 4 (t % 8) .. + 3
  const int t = threadIdx.y * kTile + threadIdx.x, i = t / 8, j = 4 * (t % 8);
  const int64_t c = c0 + i, r = r0 + j;
  if (c >= cols) return;
  __nv_fp8_storage_t* out = q_t + c * rows + r;
  if (rows % 4 == 0 && r + 3 < rows) {  // 4-byte aligned: rows a multiple of 4, r one of 32
    const uint32_t packed = (uint32_t)tile[j][i] | ((uint32_t)tile[j + 1][i] << 8) | ((uint32_t)tile[j + 2][i] << 16) |
                            ((uint32_t)tile[j + 3][i] << 24);
    *reinterpret_cast<uint32_t*>(out) = packed;
  } else {
    for (int k = 0; k < 4 && r + k < rows; k++) out[k] = tile[j + k][i];
  }
}

}  // namespace

// (q, q_t, 1/scale): q_t, the transpose of a 2-D x, only when `transposed`
std::tuple<Tensor, Tensor, Tensor> fp8_quantize_cuda(const Tensor& x, at::ScalarType fp8, bool transposed) {
  const char* where = "fp8_quantize_cuda";
  const kernels_dtype dt = cuda_dtype(x, where);
  check_cuda(x, "x", x.scalar_type(), x.device(), where);
  if (fp8 != at::kFloat8_e4m3fn && fp8 != at::kFloat8_e5m2) fail("%s: e4m3fn or e5m2 only", where);
  if (x.numel() == 0) fail("%s: an empty tensor has no scale", where);  // as the reference's max()
  if (transposed && x.dim() != 2)
    fail("%s: the transposed copy is of a 2-D tensor (got %lld dims)", where, (long long)x.dim());
  const double fp8_max = fp8 == at::kFloat8_e4m3fn ? 448.0 : 57344.0;
  const __nv_fp8_interpretation_t kind = fp8 == at::kFloat8_e4m3fn ? __NV_E4M3 : __NV_E5M2;
  const c10::cuda::CUDAGuard guard(x.device());
  Tensor amax_bits = at::zeros({1}, x.options().dtype(at::kInt));
  Tensor q = at::empty(x.sizes(), x.options().dtype(fp8));
  Tensor q_t = transposed ? at::empty({x.size(1), x.size(0)}, x.options().dtype(fp8)) : Tensor();
  Tensor inv = at::empty({}, x.options().dtype(at::kFloat));
  const int64_t n = x.numel();
  const unsigned blocks = elementwise_blocks(n);
  const cudaStream_t stream = stream_of(x);
  const int64_t row_tiles = transposed ? (x.size(0) + kTile - 1) / kTile : 0;
  const int64_t col_tiles = transposed ? (x.size(1) + kTile - 1) / kTile : 0;
  if (row_tiles > 2147483647 || col_tiles > 65535)
    fail("%s: %lld x %lld is too large to transpose", where, (long long)x.size(0), (long long)x.size(1));
  check_launch(
      with_dtype(dt,
                 [&](auto tag) {
                   using T = decltype(tag);
                   const T* px = static_cast<const T*>(x.data_ptr());
                   auto* pq = static_cast<__nv_fp8_storage_t*>(q.data_ptr());
                   fp8_amax_kernel<T><<<blocks, 256, 0, stream>>>(px, n, amax_bits.data_ptr<int>());
                   if (transposed)
                     fp8_cast_transpose_kernel<T>
                         <<<dim3((unsigned)row_tiles, (unsigned)col_tiles), dim3(kTile, kTileRows), 0, stream>>>(
                             px, x.size(0), x.size(1), amax_bits.data_ptr<int>(), fp8_max, kind, pq,
                             static_cast<__nv_fp8_storage_t*>(q_t.data_ptr()), inv.data_ptr<float>());
                   else
                     fp8_cast_kernel<T><<<blocks, 256, 0, stream>>>(px, n, amax_bits.data_ptr<int>(), fp8_max, kind, pq,
                                                                    inv.data_ptr<float>());
                   return cudaGetLastError();
                 }),
      where);
  return {q, q_t, inv};
}

}  // namespace nanochat
