// The MLP's c_fc -> ReLU^2 -> c_proj fused against the reference: fp64 with finite differences,
// fp32 and bf16, and on CUDA where a GPU is present.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "nanochat/kernels.h"
#include "test_kernels.h"

using namespace nanochat;
using namespace kernels_test;

namespace {

Fn mlp(bool fused) {
  return [=](const std::vector<Tensor>& in) {
    return fused ? kernels_mlp_relu_square(in[0], in[1], in[2])
                 : kernels_mlp_relu_square_reference(in[0], in[1], in[2]);
  };
}

}  // namespace

TEST(MlpReluSquare, Fp64EqualsReferenceAndFiniteDifferences) {
  torch::manual_seed(4);
  auto f64 = torch::kDouble;
  std::vector<Tensor> in = {torch::randn({2, 3, 4}, f64), torch::randn({16, 4}, f64), torch::randn({4, 16}, f64)};
  expect_same(mlp(true), mlp(false), in, 1e-12, "fp64");
  expect_finite_differences(mlp(true), in, 1e-6);
}

TEST(MlpReluSquare, Fp32AndBf16EqualReference) {
  torch::manual_seed(5);
  const int64_t C = 128;
  std::vector<Tensor> in = {torch::randn({4, 64, C}), torch::randn({4 * C, C}) * 0.1, torch::randn({C, 4 * C}) * 0.1};
  expect_same(mlp(true), mlp(false), in, 1e-5, "fp32");
  for (Tensor& t : in) t = t.to(torch::kBFloat16);
  expect_same(mlp(true), mlp(false), in, 2e-2, "bf16");
}

TEST(MlpReluSquare, CudaEqualsReference) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const auto dev = torch::Device(torch::kCUDA);
  torch::manual_seed(8);
  for (auto [dtype, tol] : kCudaDtypes) {
    std::vector<Tensor> m = {torch::randn({8, 64, 128}, dev).to(dtype), (torch::randn({512, 128}, dev) * 0.1).to(dtype),
                             (torch::randn({128, 512}, dev) * 0.1).to(dtype)};
    expect_same(mlp(true), mlp(false), m, tol, "cuda mlp");
  }
}

// the self-check finds its CPU kernel in both dtypes
TEST(MlpReluSquare, CpuKernelDtypes) { expect_cpu_kernel_in("mlp_relu_square", {torch::kFloat, torch::kBFloat16}); }
