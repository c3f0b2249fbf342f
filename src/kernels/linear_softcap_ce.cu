// The CUDA kernels of linear_softcap_ce.cpp: the softcapped cross-entropy of one chunk of logits
// rows, forward (loss, log-sum-exp) and backward (the logits turned into their gradient in place),
// and both in one pass for a gradient known up front (the training mean).
// Every kernel reads the compute dtype and does its math in fp32. Untested on GPU until a run
// of doctor --kernels on one says otherwise.
#include "cuda_helpers.cuh"

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <c10/cuda/CUDAGuard.h>

#include "nanochat/common/error.h"

namespace nanochat {
namespace {

using at::Tensor;

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

// one pack's share of a row's online (max, sum of exp) of z = cap * tanh(l / cap) over its
// columns below vocab, rescaling the sum once when the max grows; a pack of padding only adds
// nothing
template <typename T, int N>
__device__ __forceinline__ void lse_add_pack(const pack_t<T, N>& pk, int64_t first_col, int64_t vocab, float cap,
                                             float inv_cap, float& m, float& s) {
  float z[N], mz = -f32_inf();
#pragma unroll
  for (int i = 0; i < N; i++) {
    z[i] = first_col + i < vocab ? cap * softcap_tanh(to_f32(pk.v[i]), inv_cap) : -f32_inf();
    mz = fmaxf(mz, z[i]);
  }
  if (mz == -f32_inf()) return;
  if (mz > m) {
    s *= __expf(m - mz);
    m = mz;
  }
#pragma unroll
  for (int i = 0; i < N; i++) s += __expf(z[i] - m);
}

// one block per row: each thread keeps an online (max, sum of exp) over its packs of the
// row, rescaling its sum once per pack when the max grows; then a block reduce.
// lse = m + log(s); loss = lse - z[target].
template <typename T, int N>
__global__ void softcap_ce_forward_kernel(const T* __restrict__ logits, const int64_t* __restrict__ targets, int64_t ld,
                                          int64_t vocab, float cap, float* __restrict__ loss, float* __restrict__ lse) {
  const int64_t row = blockIdx.x;
  const T* x = logits + row * ld;
  const float inv_cap = 1.f / cap;
  const int64_t npacks = (vocab + N - 1) / N;  // the last pack may run past vocab (not past ld)
  float m = -f32_inf(), s = 0.f;
  for (int64_t p = threadIdx.x; p < npacks; p += blockDim.x)
    lse_add_pack(reinterpret_cast<const pack_t<T, N>*>(x)[p], p * N, vocab, cap, inv_cap, m, s);
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

// forward and backward in one pass, for a gradient known up front: one block per row, which it
// holds in registers (up to P packs a thread), so the logits are read once and written once
// where the two kernels above read them twice. The loss and lse are the forward's; the row
// becomes g * (exp(z - lse) - [j == target]) * (1 - tanh^2) as in the backward.
template <typename T, int N, int P>
__global__ void __launch_bounds__(512)
    softcap_ce_forward_backward_kernel(T* __restrict__ logits, const int64_t* __restrict__ targets,
                                       const float* __restrict__ grad_loss, int64_t grad_stride, int64_t ld,
                                       int64_t vocab, float cap, float* __restrict__ loss, float* __restrict__ lse) {
  const int64_t row = blockIdx.x;
  T* x = logits + row * ld;
  const float inv_cap = 1.f / cap;
  const int64_t npacks = ld / N, t = targets[row];
  pack_t<T, N> pk[P];
  float m = -f32_inf(), s = 0.f;
#pragma unroll
  for (int k = 0; k < P; k++) {
    const int64_t p = threadIdx.x + (int64_t)k * blockDim.x;
    if (p >= npacks) break;
    pk[k] = reinterpret_cast<const pack_t<T, N>*>(x)[p];
    lse_add_pack(pk[k], p * N, vocab, cap, inv_cap, m, s);
  }
  block_lse_reduce(m, s);
  __shared__ float row_lse_shared;
  if (threadIdx.x == 0) {
    const float row_lse = m + logf(s);
    float row_loss = 0.f;  // as the forward kernel: NaN for a target outside the vocab
    if (t != -1) row_loss = t >= 0 && t < vocab ? row_lse - cap * softcap_tanh(to_f32(x[t]), inv_cap) : f32_nan();
    lse[row] = row_lse;
    loss[row] = row_loss;
    row_lse_shared = row_lse;
  }
  __syncthreads();  // the lse for every thread, and thread 0's read of x[t] before any write
  const float row_lse = row_lse_shared;
  const bool live = t != -1;
  const float g = live ? grad_loss[row * grad_stride] : 0.f;
#pragma unroll
  for (int k = 0; k < P; k++) {
    const int64_t p = threadIdx.x + (int64_t)k * blockDim.x;
    if (p >= npacks) break;
#pragma unroll
    for (int i = 0; i < N; i++) {
      const int64_t j = p * N + i;
      float d = 0.f;
      if (live && j < vocab) {
        const float th = softcap_tanh(to_f32(pk[k].v[i]), inv_cap);
        d = g * (__expf(cap * th - row_lse) - (j == t ? 1.f : 0.f)) * (1.f - th * th);
      }
      pk[k].v[i] = from_f32<T>(d);
    }
    reinterpret_cast<pack_t<T, N>*>(x)[p] = pk[k];
  }
}

// packs a thread holds in the one-pass kernel: 16 x 16 bytes, 64 registers (512 threads: a
// bf16 row of 65,536 columns, an fp32 row of 32,768)
constexpr int kOnePassPacks = 16;

cudaError_t launch_softcap_ce_forward(const void* logits, const int64_t* targets, int64_t n, int64_t ld, int64_t vocab,
                                      float cap, float* loss, float* lse, kernels_dtype dtype, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  return with_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    constexpr int V = 16 / sizeof(T);
    const T* p = static_cast<const T*>(logits);
    if (aligned16(p) && ld % V == 0) {
      softcap_ce_forward_kernel<T, V>
          <<<(unsigned)n, threads_for((vocab + V - 1) / V), 0, stream>>>(p, targets, ld, vocab, cap, loss, lse);
    } else {
      softcap_ce_forward_kernel<T, 1>
          <<<(unsigned)n, threads_for(vocab), 0, stream>>>(p, targets, ld, vocab, cap, loss, lse);
    }
    return cudaGetLastError();
  });
}

cudaError_t launch_softcap_ce_backward(void* logits, const int64_t* targets, const float* lse, const float* grad_loss,
                                       int64_t grad_stride, int64_t n, int64_t ld, int64_t vocab, float cap,
                                       kernels_dtype dtype, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  return with_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    constexpr int V = 16 / sizeof(T);
    T* p = static_cast<T*>(logits);
    if (aligned16(p) && ld % V == 0) {
      softcap_ce_backward_kernel<T, V>
          <<<(unsigned)n, threads_for(ld / V), 0, stream>>>(p, targets, lse, grad_loss, grad_stride, ld, vocab, cap);
    } else {
      softcap_ce_backward_kernel<T, 1>
          <<<(unsigned)n, threads_for(ld), 0, stream>>>(p, targets, lse, grad_loss, grad_stride, ld, vocab, cap);
    }
    return cudaGetLastError();
  });
}

// launched = false (nothing launched) when a row does not fit the one-pass kernel's registers
// or its 16-byte packs
cudaError_t launch_softcap_ce_forward_backward(void* logits, const int64_t* targets, const float* grad_loss,
                                               int64_t grad_stride, int64_t n, int64_t ld, int64_t vocab, float cap,
                                               float* loss, float* lse, kernels_dtype dtype, cudaStream_t stream,
                                               bool& launched) {
  launched = false;
  return with_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    constexpr int V = 16 / sizeof(T);
    T* p = static_cast<T*>(logits);
    const int threads = threads_for(ld / V);
    if (!aligned16(p) || ld % V != 0 || ld / V > (int64_t)threads * kOnePassPacks) return cudaSuccess;
    launched = true;
    if (n == 0) return cudaSuccess;
    softcap_ce_forward_backward_kernel<T, V, kOnePassPacks>
        <<<(unsigned)n, threads, 0, stream>>>(p, targets, grad_loss, grad_stride, ld, vocab, cap, loss, lse);
    return cudaGetLastError();
  });
}

// what both softcap CE kernels take: logits (n, ld) contiguous in a compute dtype, one int64
// target per row, 0 < vocab <= ld, a positive cap, n rows for one launch; returns (n, ld)
std::pair<int64_t, int64_t> check_logits_rows(const Tensor& logits, const Tensor& targets, int64_t vocab, double cap,
                                              const char* where) {
  const at::Device dev = logits.device();
  check_cuda(logits, "logits", logits.scalar_type(), dev, where);
  if (logits.dim() != 2) fail("%s: logits must be (n, ld), got %lld dims", where, (long long)logits.dim());
  const int64_t n = logits.size(0), ld = logits.size(1);
  check_cuda(targets, "targets", at::kLong, dev, where);
  if (targets.numel() != n) fail("%s: %lld targets for %lld rows", where, (long long)targets.numel(), (long long)n);
  if (vocab <= 0 || vocab > ld) fail("%s: vocab %lld outside (0, %lld]", where, (long long)vocab, (long long)ld);
  if (!(cap > 0)) fail("%s: the softcap must be > 0, got %g", where, cap);
  check_grid_rows(n, where);
  return {n, ld};
}

// d loss_i for n rows: float32 (n,) on the logits' device, any stride (a broadcast scalar from
// loss.sum() has stride 0)
void check_grad_loss(const Tensor& grad_loss, int64_t n, at::Device dev, const char* where) {
  if (!grad_loss.defined() || grad_loss.device() != dev || grad_loss.scalar_type() != at::kFloat ||
      grad_loss.dim() != 1 || grad_loss.size(0) != n)
    fail("%s: grad_loss must be a float32 (%lld,) tensor on %s", where, (long long)n, dev.str().c_str());
}

}  // namespace

void softcap_ce_forward_cuda(const Tensor& logits, const Tensor& targets, int64_t vocab, double cap, Tensor& loss,
                             Tensor& lse) {
  const char* where = "softcap_ce_forward_cuda";
  const kernels_dtype dt = cuda_dtype(logits, where);
  const at::Device dev = logits.device();
  const auto [n, ld] = check_logits_rows(logits, targets, vocab, cap, where);
  fp32_rows_out(loss, n, dev, "loss", where);
  fp32_rows_out(lse, n, dev, "lse", where);
  const c10::cuda::CUDAGuard guard(dev);
  check_launch(launch_softcap_ce_forward(logits.data_ptr(), targets.data_ptr<int64_t>(), n, ld, vocab, (float)cap,
                                         loss.data_ptr<float>(), lse.data_ptr<float>(), dt, stream_of(logits)),
               where);
}

bool softcap_ce_forward_backward_cuda(Tensor& logits, const Tensor& targets, const Tensor& grad_loss, int64_t vocab,
                                      double cap, Tensor& loss, Tensor& lse) {
  const char* where = "softcap_ce_forward_backward_cuda";
  const kernels_dtype dt = cuda_dtype(logits, where);
  const at::Device dev = logits.device();
  const auto [n, ld] = check_logits_rows(logits, targets, vocab, cap, where);
  fp32_rows_out(loss, n, dev, "loss", where);
  fp32_rows_out(lse, n, dev, "lse", where);
  check_grad_loss(grad_loss, n, dev, where);
  const c10::cuda::CUDAGuard guard(dev);
  bool launched;
  check_launch(
      launch_softcap_ce_forward_backward(logits.data_ptr(), targets.data_ptr<int64_t>(), grad_loss.data_ptr<float>(),
                                         grad_loss.stride(0), n, ld, vocab, (float)cap, loss.data_ptr<float>(),
                                         lse.data_ptr<float>(), dt, stream_of(logits), launched),
      where);
  return launched;
}

void softcap_ce_backward_cuda(Tensor& logits, const Tensor& targets, const Tensor& lse, const Tensor& grad_loss,
                              int64_t vocab, double cap) {
  const char* where = "softcap_ce_backward_cuda";
  const kernels_dtype dt = cuda_dtype(logits, where);
  const at::Device dev = logits.device();
  const auto [n, ld] = check_logits_rows(logits, targets, vocab, cap, where);
  check_cuda(lse, "lse", at::kFloat, dev, where);
  if (lse.numel() != n) fail("%s: lse has %lld entries for %lld rows", where, (long long)lse.numel(), (long long)n);
  check_grad_loss(grad_loss, n, dev, where);
  const c10::cuda::CUDAGuard guard(dev);
  check_launch(launch_softcap_ce_backward(logits.data_ptr(), targets.data_ptr<int64_t>(), lse.data_ptr<float>(),
                                          grad_loss.data_ptr<float>(), grad_loss.stride(0), n, ld, vocab, (float)cap,
                                          dt, stream_of(logits)),
               where);
}

}  // namespace nanochat
