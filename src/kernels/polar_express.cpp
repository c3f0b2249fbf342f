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
#include <vector>

#include "cpu_gemm.h"
#include "op_dispatch.h"
#include "nanochat/common/error.h"

namespace nanochat {

// the CPU kernel (polar_express_cpu.cpp): the same iterations on a contiguous fp32 copy of X
torch::Tensor polar_express_cpu(const torch::Tensor& X, const std::vector<std::array<double, 3>>& coeffs, int steps);

namespace {

// one thread per matrix pays when the batch splits evenly across the threads (or is large):
// otherwise the reference's multi-threaded GEMMs leave no thread idle. With MKL there and both
// sides within int (every GEMM's sizes and strides are rows or cols), no cpu_gemm_f32 call
// above can return false, so their results go unchecked.
bool fused_polar_express(const torch::Tensor& X) {
  if (!X.is_cpu() || X.scalar_type() != at::kFloat || !kernels_use_fused("polar_express", X) ||
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
  return kernels_fault("polar_express", polar_express_cpu(X, coeffs, steps));
}

namespace {

// the self-check: five iterations of the quintic Newton-Schulz step (its singular values stay in
// about [0.7, 1.2]) on a wide and a tall stack of 4 matrices each, normalised as Muon hands them
// over (the CPU in fp32 only)
std::vector<torch::Tensor> polar_express_check(at::Device device, at::ScalarType dtype, bool fused) {
  if (!device.is_cpu() || dtype != at::kFloat) return {};
  const std::vector<std::array<double, 3>> coeffs(5, {3.4445, -4.7750, 2.0315});
  auto gen = kernels_check_generator(device, 19);
  std::vector<torch::Tensor> out;
  for (auto shape : {std::vector<int64_t>{4, 24, 40}, std::vector<int64_t>{4, 40, 24}}) {
    torch::Tensor X = at::randn(shape, gen, at::device(device));
    X = X / (at::linalg_vector_norm(X, 2, std::vector<int64_t>{-2, -1}, true, c10::nullopt) * 1.01 + 1e-6);
    out.push_back(fused ? kernels_polar_express(X, coeffs, 5) : kernels_polar_express_reference(X, coeffs, 5));
  }
  return out;
}
const bool polar_express_check_registered = kernels_register_check({"polar_express", polar_express_check});

}  // namespace

}  // namespace nanochat
