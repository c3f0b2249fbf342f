// The CPU kernel of polar_express.cpp (fp32): each matrix runs all its iterations on one thread,
// the batch split across the threads, with single-threaded MKL GEMMs on data that stays in cache.
#include <ATen/core/Tensor.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <vector>

#include "cpu_gemm.h"

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
void polar_express_one(float* x, int64_t r, int64_t c, const std::vector<std::array<double, 3>>& coeffs, int steps,
                       float* a, float* b, float* y) {
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
    if (tall) cpu_gemm_f32(false, false, r, c, c, 1.0f, in, c, b, c, ca, out, c);  // a X + X B
    else cpu_gemm_f32(false, false, r, c, r, 1.0f, b, r, in, c, ca, out, c);       // a X + B X
    in = out;
  }
  if (in != x) std::memcpy(x, in, r * c * sizeof(float));
}

}  // namespace

at::Tensor polar_express_cpu(const at::Tensor& X, const std::vector<std::array<double, 3>>& coeffs, int steps) {
  const int64_t r = X.size(1), c = X.size(2), n = std::min(r, c);
  at::Tensor out = X.clone(at::MemoryFormat::Contiguous);
  at::parallel_for(0, out.size(0), 1, [&](int64_t begin, int64_t end) {
    std::vector<float> a(n * n), b(n * n), y(r * c);  // scratch, per thread
    for (int64_t i = begin; i < end; i++)
      polar_express_one(out.data_ptr<float>() + i * r * c, r, c, coeffs, steps, a.data(), b.data(), y.data());
  });
  return out;
}

}  // namespace nanochat
