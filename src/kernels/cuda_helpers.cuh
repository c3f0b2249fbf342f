// What the CUDA kernels of the ops (<op>.cu) share: the element types and their fp32 math,
// warp and block reductions, launch sizes, and on the host the checks of the tensors handed
// to a kernel (device, dtype, contiguity) with the stream to launch on. Every kernel reads
// the compute dtype (fp32, bf16, fp16), does its math in fp32 and rounds once on the store.
// Only the .cu files include this header; they are compiled when nvcc is found (CMakeLists.txt).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include <ATen/core/Tensor.h>

namespace nanochat {

enum kernels_dtype { kernels_dtype_f32, kernels_dtype_bf16, kernels_dtype_f16 };

// ---- host side: the tensors a kernel is handed ----------------------------------------------
// the kernels' dtype tag of t; float64 has no CUDA kernel (it exists for CPU gradient checks)
kernels_dtype cuda_dtype(const at::Tensor& t, const char* where);
// t is a contiguous CUDA tensor of `dtype` on `device`, else one error line naming it
void check_cuda(const at::Tensor& t, const char* name, at::ScalarType dtype, at::Device device, const char* where);
void check_launch(cudaError_t err, const char* where);
// one block per row: a grid of at most 2^31 - 1 blocks
void check_grid_rows(int64_t n, const char* where);
cudaStream_t stream_of(const at::Tensor& t);
// (n,) float32 output: checked when the caller passes one (e.g. a slice of the whole batch's
// losses), else allocated
void fp32_rows_out(at::Tensor& out, int64_t n, at::Device device, const char* name, const char* where);

namespace {

// ---- element types -----------------------------------------------------------------------
__device__ __forceinline__ float to_f32(float x) { return x; }
__device__ __forceinline__ float to_f32(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_f32(__half x) { return __half2float(x); }

template <typename T>
__device__ __forceinline__ T from_f32(float x);
template <>
__device__ __forceinline__ float from_f32<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}
template <>
__device__ __forceinline__ __half from_f32<__half>(float x) {
  return __float2half_rn(x);
}

// N elements moved as one load/store: N = 16 / sizeof(T) on the vector path, 1 otherwise
template <typename T, int N>
struct alignas(sizeof(T) * N) pack_t {
  T v[N];
};

// 16 bytes held in registers as four 32-bit words, element i of T (a constant once unrolled)
// read and written with bit operations: a row kept this way between two passes stays packed
// (4 registers per 16 bytes) where an array of T tends to be widened to floats or put on the stack
template <typename T>
__device__ __forceinline__ float word_half(uint32_t w, int hi);
template <>
__device__ __forceinline__ float word_half<__nv_bfloat16>(uint32_t w, int hi) {
  return __uint_as_float(hi ? (w & 0xffff0000u) : (w << 16));
}
template <>
__device__ __forceinline__ float word_half<__half>(uint32_t w, int hi) {
  return __half2float(__ushort_as_half((unsigned short)(hi ? w >> 16 : w & 0xffffu)));
}
template <typename T>
__device__ __forceinline__ uint32_t half_bits(float v);
template <>
__device__ __forceinline__ uint32_t half_bits<__nv_bfloat16>(float v) {
  return __bfloat16_as_ushort(__float2bfloat16_rn(v));
}
template <>
__device__ __forceinline__ uint32_t half_bits<__half>(float v) {
  return __half_as_ushort(__float2half_rn(v));
}
template <typename T>
__device__ __forceinline__ float vec_get(const uint4& u, int i) {
  if constexpr (sizeof(T) == 4) return __uint_as_float((&u.x)[i]);
  else return word_half<T>((&u.x)[i / 2], i % 2);
}
// element i of u = v rounded to T
template <typename T>
__device__ __forceinline__ void vec_set(uint4& u, int i, float v) {
  if constexpr (sizeof(T) == 4) {
    (&u.x)[i] = __float_as_uint(v);
  } else {
    uint32_t& w = (&u.x)[i / 2];
    w = i % 2 ? (w & 0xffffu) | (half_bits<T>(v) << 16) : (w & 0xffff0000u) | half_bits<T>(v);
  }
}
// the 16-byte pack p of a row (p counts packs, 16 / sizeof(T) elements each)
template <typename T>
__device__ __forceinline__ uint4 vec_load(const T* row, int64_t p) {
  return reinterpret_cast<const uint4*>(row)[p];
}
template <typename T>
__device__ __forceinline__ void vec_store(T* row, int64_t p, const uint4& u) {
  reinterpret_cast<uint4*>(row)[p] = u;
}

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

inline bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// a power of two in [32, 512] covering `work` items, one per thread
inline int threads_for(int64_t work) {
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

// ATen's lerp: fma(w, b-a, a) for w < 0.5, else fma(w-1, b-a, b) (AdamW and Muon round as it does)
__device__ __forceinline__ float lerp_f(float a, float b, float w) {
  return w < 0.5f ? fmaf(w, b - a, a) : fmaf(w - 1.0f, b - a, b);
}

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

// blocks for a grid-stride loop over `work` items of 256 threads: enough to fill any GPU
// several times over, few enough that each thread does a handful of items
inline unsigned elementwise_blocks(int64_t work) {
  const int64_t b = (work + 255) / 256;
  return (unsigned)(b < 4096 ? (b > 0 ? b : 1) : 4096);
}

}  // namespace
}  // namespace nanochat
