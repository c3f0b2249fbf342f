// defines: kernels_polar_express, kernels_polar_express_reference
// Polar Express, Muon's orthogonalisation: ns_steps times X <- a X + (b A + c A@A) X with
// A = X X^T (X <- a X + X (b A + c A@A) with A = X^T X for tall X).
//
// On the CPU in fp32 each matrix runs all its iterations on one thread, the batch split across
// the threads, with single-threaded MKL GEMMs on data that stays in cache (a 512x512 matrix
// and its two Gram matrices are 3 MB): batched, every product was split across the threads
// and every iteration streamed the whole batch through memory three times. A and A@A (= A A^T,
// A symmetric) come from the 128-row blocks on and above the diagonal, mirrored: 10 of 16
// blocks at n = 512. Measured on the d8 Muon stacks (bench_kernels, fp32, 5 iterations, 2
// threads) against the batched reference: attention's (32, 512, 512) 573 -> 326 ms, the MLP's
// (8, 2048, 512) 387 -> 270 ms and (8, 512, 2048) 376 -> 272 ms. bf16 keeps the reference:
// ATen's batched bf16 GEMM beat these blocks run batched, and nothing else was tried in bf16.
// The reference is the batched matmul / baddbmm composition upstream runs.
#include "nanochat/kernels.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <vector>

#include "cpu_gemm.h"
#include "kernels_internal.h"
#include "nanochat/common/error.h"

namespace nanochat {
namespace {

constexpr int64_t kGramBlock = 128;

// a = alpha * G + beta * a for the (n, n) Gram matrix G of x (r, c) row-major: x^T x when tall
// (r > c), else x x^T. The block rows on and above the diagonal are multiplied, then the lower
// triangle is copied from the upper, so that a is exactly symmetric.
void gram_into(const float* x, int64_t r, int64_t c, float alpha, float beta, float* a) {
  const bool tall = r > c;
  const int64_t n = tall ? c : r, k = tall ? r : c;
  for (int64_t i0 = 0; i0 < n; i0 += kGramBlock) {
    const int64_t m = std::min(kGramBlock, n - i0);
    const float* rows = tall ? x + i0 : x + i0 * c;  // rows i0.. of the product's left factor
    cpu_gemm_f32(tall, !tall, m, n - i0, k, alpha, rows, c, rows, c, beta, a + i0 * n + i0, n);
  }
  for (int64_t i = 1; i < n; i++)
    for (int64_t j = 0; j < i; j++) a[i * n + j] = a[j * n + i];
}

// all iterations on one matrix x (r, c), in place; a, b (n, n) and y (r, c) are scratch
void polar_express_one(float* x, int64_t r, int64_t c, const std::vector<std::array<double, 3>>& coeffs,
                       int steps, float* a, float* b, float* y) {
  const bool tall = r > c;
  const int64_t n = tall ? c : r;
  float* in = x;
  for (int i = 0; i < steps; i++) {
    const float ca = (float)coeffs[i][0], cb = (float)coeffs[i][1], cc = (float)coeffs[i][2];
    gram_into(in, r, c, 1.0f, 0.0f, a);  // A
    std::memcpy(b, a, n * n * sizeof(float));
    gram_into(a, n, n, cc, cb, b);  // B = b A + c A A^T
    float* out = in == x ? y : x;
    std::memcpy(out, in, r * c * sizeof(float));
    if (tall)
      cpu_gemm_f32(false, false, r, c, c, 1.0f, in, c, b, c, ca, out, c);  // a X + X B
    else
      cpu_gemm_f32(false, false, r, c, r, 1.0f, b, r, in, c, ca, out, c);  // a X + B X
    in = out;
  }
  if (in != x) std::memcpy(x, in, r * c * sizeof(float));
}

// one thread per matrix pays when the batch splits evenly across the threads (or is large):
// otherwise the reference's multi-threaded GEMMs leave no thread idle. With MKL there and both
// sides within int (every GEMM's sizes and strides are rows or cols), no cpu_gemm_f32 call
// above can return false, so their results go unchecked.
bool fused_polar_express(const torch::Tensor& X) {
  if (!kernels_enabled() || !X.is_cpu() || X.scalar_type() != at::kFloat || !kernels_cpu_supported() ||
      !cpu_gemm_f32_available(at::kFloat) || X.size(1) > INT_MAX || X.size(2) > INT_MAX)
    return false;
  const int64_t threads = at::get_num_threads();
  return X.size(0) % threads == 0 || X.size(0) >= 4 * threads;
}

}  // namespace

torch::Tensor kernels_polar_express_reference(torch::Tensor X, const std::vector<std::array<double, 3>>& coeffs,
                                              int steps) {
  const bool tall = X.size(1) > X.size(2);
  for (int i = 0; i < steps; i++) {
    const double a = coeffs[i][0], b = coeffs[i][1], c = coeffs[i][2];
    torch::Tensor A = tall ? at::matmul(X.mT(), X) : at::matmul(X, X.mT());
    // the scaled sums in the GEMMs' epilogue, not two more passes over X
    torch::Tensor B = at::baddbmm(A, A, A, b, c);
    X = tall ? at::baddbmm(X, X, B, a, 1.0) : at::baddbmm(X, B, X, a, 1.0);
  }
  return X;
}

torch::Tensor kernels_polar_express(const torch::Tensor& X, const std::vector<std::array<double, 3>>& coeffs,
                                    int steps) {
  if (X.dim() != 3) fail("kernels_polar_express: a batch of matrices (b, rows, cols) expected");
  if (steps < 0 || steps > (int)coeffs.size())
    fail("kernels_polar_express: %d steps with %zu coefficient triples", steps, coeffs.size());
  if (!fused_polar_express(X)) return kernels_polar_express_reference(X, coeffs, steps);
  const int64_t r = X.size(1), c = X.size(2), n = std::min(r, c);
  torch::Tensor out = X.clone(at::MemoryFormat::Contiguous);
  at::parallel_for(0, out.size(0), 1, [&](int64_t begin, int64_t end) {
    std::vector<float> a(n * n), b(n * n), y(r * c);  // scratch, per thread
    for (int64_t i = begin; i < end; i++)
      polar_express_one(out.data_ptr<float>() + i * r * c, r, c, coeffs, steps, a.data(), b.data(), y.data());
  });
  return out;
}

}  // namespace nanochat
