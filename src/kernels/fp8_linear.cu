// defines: fp8_quantize_cuda
// The CUDA kernel of fp8_linear.cpp's quantisation: amax, the scale and the scaled, clamped cast
// to e4m3 or e5m2 in two passes over x (ATen's composition takes six: abs, max, cast, scale,
// clamp, cast). The bits are those of the composition (fp8_quantize_reference): the scale is
// fp8_max / max(amax, 1e-12) in double, rounded to fp32, each value is x * scale in fp32, clamped
// (a NaN stays a NaN) and rounded to nearest even. Untested on GPU.
#include "cuda_helpers.cuh"

#include <cuda_fp8.h>

#include <utility>

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

// pass 2: q = fp8(clamp(x * scale)), and 1/scale
template <typename T>
__global__ void fp8_cast_kernel(const T* __restrict__ x, int64_t n, const int* amax_bits, double fp8_max,
                                __nv_fp8_interpretation_t kind, __nv_fp8_storage_t* __restrict__ q,
                                float* __restrict__ inv_scale) {
  const double amax = (double)__int_as_float(*amax_bits);
  const float scale = (float)(fp8_max / (amax > 1e-12 || isnan(amax) ? amax : 1e-12));
  const float lim = (float)fp8_max;
  if (blockIdx.x == 0 && threadIdx.x == 0) *inv_scale = 1.0f / scale;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    float v = to_f32(x[i]) * scale;
    v = v < -lim ? -lim : (v > lim ? lim : v);  // as at::clamp: a NaN stays a NaN
    q[i] = __nv_cvt_float_to_fp8(v, __NV_SATFINITE, kind);
  }
}

}  // namespace

std::pair<Tensor, Tensor> fp8_quantize_cuda(const Tensor& x, at::ScalarType fp8) {
  const char* where = "fp8_quantize_cuda";
  const kernels_dtype dt = cuda_dtype(x, where);
  check_cuda(x, "x", x.scalar_type(), x.device(), where);
  if (fp8 != at::kFloat8_e4m3fn && fp8 != at::kFloat8_e5m2) fail("%s: e4m3fn or e5m2 only", where);
  const double fp8_max = fp8 == at::kFloat8_e4m3fn ? 448.0 : 57344.0;
  const c10::cuda::CUDAGuard guard(x.device());
  Tensor amax_bits = at::zeros({1}, x.options().dtype(at::kInt));
  Tensor q = at::empty(x.sizes(), x.options().dtype(fp8));
  Tensor inv = at::empty({}, x.options().dtype(at::kFloat));
  const int64_t n = x.numel();
  const unsigned blocks = elementwise_blocks(n);
  const cudaStream_t stream = stream_of(x);
  check_launch(with_dtype(dt, [&](auto tag) {
                 using T = decltype(tag);
                 const T* px = static_cast<const T*>(x.data_ptr());
                 fp8_amax_kernel<T><<<blocks, 256, 0, stream>>>(px, n, amax_bits.data_ptr<int>());
                 fp8_cast_kernel<T><<<blocks, 256, 0, stream>>>(
                     px, n, amax_bits.data_ptr<int>(), fp8_max, fp8 == at::kFloat8_e4m3fn ? __NV_E4M3 : __NV_E5M2,
                     static_cast<__nv_fp8_storage_t*>(q.data_ptr()), inv.data_ptr<float>());
                 return cudaGetLastError();
               }),
               where);
  return {q, inv};
}

}  // namespace nanochat
