// defines: kernels_gram, kernels_gram_reference, kernels_gram_square, kernels_gram_square_reference
// Polar Express's Gram matrix: symmetric, so on the CPU in fp32 only the row blocks' products
// on and above the diagonal are computed (MKL, straight into the result), and the blocks below
// are copied from them transposed. With 128-row blocks and n = 512 that is 10 of 16 blocks;
// measured on the d8 Muon groups (fp32, 5 iterations) 306 -> 276 ms for the MLP outputs'
// (8, 512, 2048), 325 -> 294 ms for the inputs', 461 -> 446 ms for attention's (32, 512, 512).
// The same goes for A @ A of a symmetric A: it is A's own Gram matrix (kernels_gram_square).
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

// the upper block triangle of a = alpha * G + beta * a for one (n, n) Gram matrix G of x (r, c)
// row-major: tall (r > c) gives x^T x (rows of the product are columns of x), else x x^T.
// False: no MKL.
bool gram_upper_blocks(const float* x, int64_t r, int64_t c, float alpha, float beta, float* a) {
  const bool tall = r > c;
  const int64_t n = tall ? c : r, k = tall ? r : c;
  for (int64_t i0 = 0; i0 < n; i0 += kGramBlock) {
    const int64_t m = std::min(kGramBlock, n - i0);
    const float* rows = tall ? x + i0 : x + i0 * c;  // rows i0.. of the product's left factor
    if (!cpu_gemm_f32(tall, !tall, m, n - i0, k, alpha, rows, c, rows, c, beta, a + i0 * n + i0, n)) return false;
  }
  return true;
}

bool fused_gram(const torch::Tensor& X) {
  if (X.dim() != 3) fail("kernels_gram: a batch of matrices (b, rows, cols) expected");
  return kernels_enabled() && X.is_cpu() && X.scalar_type() == at::kFloat && X.is_contiguous();
}

// out = alpha * gram(X) + beta * out (out read only when beta != 0), one matrix at a time: the
// blocks on and above the diagonal, then the mirror. False: no MKL (out is then undefined).
bool gram_into(const torch::Tensor& X, float alpha, float beta, torch::Tensor& out) {
  const int64_t r = X.size(1), c = X.size(2), n = std::min(r, c);
  for (int64_t b = 0; b < X.size(0); b++) {
    torch::Tensor Ab = out[b];
    if (!gram_upper_blocks(X[b].data_ptr<float>(), r, c, alpha, beta, Ab.data_ptr<float>())) return false;
    for (int64_t i0 = kGramBlock; i0 < n; i0 += kGramBlock) {  // block row i0's left part = column i0's upper part^T
      const int64_t m = std::min(kGramBlock, n - i0);
      Ab.narrow(0, i0, m).narrow(1, 0, i0).copy_(Ab.narrow(0, 0, i0).narrow(1, i0, m).t());
    }
  }
  return true;
}

}  // namespace

torch::Tensor kernels_gram_reference(const torch::Tensor& X) {
  if (X.dim() != 3) fail("kernels_gram: a batch of matrices (b, rows, cols) expected");
  return X.size(1) > X.size(2) ? at::matmul(X.mT(), X) : at::matmul(X, X.mT());
}

torch::Tensor kernels_gram(const torch::Tensor& X) {
  if (!fused_gram(X)) return kernels_gram_reference(X);
  const int64_t n = std::min(X.size(1), X.size(2));
  torch::Tensor A = at::empty({X.size(0), n, n}, X.options());
  return gram_into(X, 1.0f, 0.0f, A) ? A : kernels_gram_reference(X);
}

torch::Tensor kernels_gram_square_reference(const torch::Tensor& A, double b, double c) {
  return at::baddbmm(A, A, A, b, c);
}

torch::Tensor kernels_gram_square(const torch::Tensor& A, double b, double c) {
  if (!fused_gram(A) || A.size(1) != A.size(2)) return kernels_gram_square_reference(A, b, c);
  torch::Tensor B = A.clone();  // beta * B reads A's upper blocks
  return gram_into(A, (float)c, (float)b, B) ? B : kernels_gram_square_reference(A, b, c);
}

}  // namespace nanochat
