// defines: kernels_gram, kernels_gram_reference
// Polar Express's Gram matrix: symmetric, so on the CPU in fp32 only the row blocks' products
// on and above the diagonal are computed (MKL, straight into the result), and the blocks below
// are copied from them transposed. With 128-row blocks and n = 512 that is 10 of 16 blocks;
// measured on the d8 Muon groups (fp32, 5 iterations) 306 -> 276 ms for the MLP outputs'
// (8, 512, 2048), 325 -> 294 ms for the inputs', 461 -> 446 ms for attention's (32, 512, 512).
// bf16 keeps ATen's batched GEMM: its blocks were slower than the whole product.
#include "nanochat/kernels.h"

#include <algorithm>

#include <ATen/ATen.h>

#include "cpu_gemm.h"
#include "kernels_internal.h"
#include "nanochat/common/error.h"

namespace nanochat {
namespace {

constexpr int64_t kGramBlock = 128;

// the upper block triangle of one (n, n) Gram matrix a of x (r, c) row-major: tall (r > c)
// gives x^T x (rows of the product are columns of x), else x x^T. False: no MKL.
bool gram_upper_blocks(const float* x, int64_t r, int64_t c, float* a) {
  const bool tall = r > c;
  const int64_t n = tall ? c : r, k = tall ? r : c;
  for (int64_t i0 = 0; i0 < n; i0 += kGramBlock) {
    const int64_t m = std::min(kGramBlock, n - i0);
    const float* rows = tall ? x + i0 : x + i0 * c;  // rows i0.. of the product's left factor
    if (!cpu_gemm_f32(tall, !tall, m, n - i0, k, 1.0f, rows, c, rows, c, 0.0f, a + i0 * n + i0, n)) return false;
  }
  return true;
}

}  // namespace

torch::Tensor kernels_gram_reference(const torch::Tensor& X) {
  if (X.dim() != 3) fail("kernels_gram: a batch of matrices (b, rows, cols) expected");
  return X.size(1) > X.size(2) ? at::matmul(X.mT(), X) : at::matmul(X, X.mT());
}

torch::Tensor kernels_gram(const torch::Tensor& X) {
  if (X.dim() != 3) fail("kernels_gram: a batch of matrices (b, rows, cols) expected");
  if (!kernels_enabled() || !X.is_cpu() || X.scalar_type() != at::kFloat || !X.is_contiguous())
    return kernels_gram_reference(X);
  const int64_t r = X.size(1), c = X.size(2), n = std::min(r, c);
  torch::Tensor A = at::empty({X.size(0), n, n}, X.options());
  for (int64_t b = 0; b < X.size(0); b++) {
    if (!gram_upper_blocks(X[b].data_ptr<float>(), r, c, A[b].data_ptr<float>())) return kernels_gram_reference(X);
    torch::Tensor Ab = A[b];
    for (int64_t i0 = kGramBlock; i0 < n; i0 += kGramBlock) {  // block row i0's left part = column i0's upper part^T
      const int64_t m = std::min(kGramBlock, n - i0);
      Ab.narrow(0, i0, m).narrow(1, 0, i0).copy_(Ab.narrow(0, 0, i0).narrow(1, i0, m).t());
    }
  }
  return A;
}

}  // namespace nanochat
