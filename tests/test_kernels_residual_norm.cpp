// The residual stream's a*x + b*y into an RMSNorm, fused against the reference: fp64 with finite
// differences (the lambdas' gradients too), fp32 and bf16 on model shapes, a row by hand, the
// eager composition's bf16 rounding, and on CUDA where a GPU is present.
#include <cmath>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "nanochat/kernels.h"
#include "test_kernels.h"

using namespace nanochat;
using namespace kernels_test;

namespace {

// residual_norm's two outputs as one tensor; `lambdas`: a = in[2], b = in[3] (else both 1);
// `backout`: a = 1, b = in[3] (the model's x - lambda * x_backout)
enum class Mix { plain, lambdas, backout };
Fn residual_norm(bool fused, Mix mix) {
  return [=](const std::vector<Tensor>& in) {
    const Tensor a = mix == Mix::lambdas ? in[2] : Tensor(), b = mix == Mix::plain ? Tensor() : in[3];
    auto [h, n] = fused ? kernels_residual_norm(in[0], in[1], a, b)
                        : kernels_residual_norm_reference(in[0], in[1], a, b);
    return torch::cat({h.flatten(), n.flatten()});
  };
}

}  // namespace

TEST(ResidualNorm, Fp64EqualsReferenceAndFiniteDifferences) {
  torch::manual_seed(9);
  auto f64 = torch::kDouble;
  std::vector<Tensor> in = {torch::randn({2, 3, 8}, f64), torch::randn({2, 3, 8}, f64), torch::tensor(0.7, f64),
                            torch::tensor(-0.3, f64)};
  for (Mix mix : {Mix::plain, Mix::lambdas, Mix::backout}) {
    expect_same(residual_norm(true, mix), residual_norm(false, mix), in, 1e-12, "fp64");
    expect_finite_differences(residual_norm(true, mix), in, 1e-6);  // a's and b's gradients too
  }
}

TEST(ResidualNorm, Fp32AndBf16EqualReferenceOnModelShapes) {
  torch::manual_seed(10);
  for (auto dtype : {torch::kFloat, torch::kBFloat16}) {
    // as in the model: activations in the compute dtype, the lambdas fp32 parameters
    std::vector<Tensor> in = {torch::randn({4, 256, 384}).to(dtype), torch::randn({4, 256, 384}).to(dtype),
                              torch::tensor(0.91f), torch::tensor(0.13f)};
    for (Mix mix : {Mix::plain, Mix::lambdas, Mix::backout})
      expect_same(residual_norm(true, mix), residual_norm(false, mix), in, dtype == torch::kFloat ? 1e-5 : 2e-2,
                  dtype == torch::kFloat ? "fp32" : "bf16");
  }
}

TEST(ResidualNorm, HandComputedRowAndEagerRounding) {
  // h = 2*[3, 4] - 1*[1, 0] = [5, 8]; mean(h^2) = 44.5; n = h / sqrt(44.5 + FLT_EPSILON)
  auto [h, n] = kernels_residual_norm(torch::tensor({3.f, 4.f}), torch::tensor({1.f, 0.f}), torch::tensor(2.f),
                                      torch::tensor(-1.f));
  EXPECT_FLOAT_EQ(h[0].item<float>(), 5.f);
  EXPECT_FLOAT_EQ(h[1].item<float>(), 8.f);
  EXPECT_NEAR(n[0].item<double>(), 5 / std::sqrt(44.5 + 1.1920929e-7), 1e-6);
  EXPECT_NEAR(n[1].item<double>(), 8 / std::sqrt(44.5 + 1.1920929e-7), 1e-6);
  // in bf16 the residual comes out with the eager composition's bits: the fp32 lambdas
  // rounded to bf16, each product and the sum rounded to bf16
  torch::manual_seed(11);
  Tensor x = torch::randn({64, 96}).to(torch::kBFloat16), y = torch::randn({64, 96}).to(torch::kBFloat16);
  Tensor a = torch::tensor(0.9137f), b = torch::tensor(0.2291f);
  EXPECT_TRUE(torch::equal(kernels_residual_norm(x, y, a, b).first, a * x + b * y));
  EXPECT_TRUE(torch::equal(kernels_residual_norm(x, y, Tensor(), Tensor()).first, x + y));
}

TEST(ResidualNorm, CudaEqualsReference) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const auto dev = torch::Device(torch::kCUDA);
  torch::manual_seed(8);
  for (auto [dtype, tol] : kCudaDtypes) {
    std::vector<Tensor> rn = {torch::randn({3, 200, 1280}, dev).to(dtype), torch::randn({3, 200, 1280}, dev).to(dtype),
                              torch::tensor(0.91f, dev), torch::tensor(0.13f, dev)};
    for (Mix mix : {Mix::plain, Mix::lambdas, Mix::backout})
      expect_same(residual_norm(true, mix), residual_norm(false, mix), rn, tol, "cuda residual_norm");
  }
}

// every path of the CUDA kernels: a warp per row at 1, 2, 4, 8 and 16 packs a lane (24, 512, 1536,
// 2048, 4096 wide in bf16), the general kernel for a width that is not whole packs (1283), one
// wider than a warp's registers (4104) and rows that start off 16 bytes (a tensor at an odd offset)
TEST(ResidualNorm, CudaEveryWidthAndAlignment) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const auto dev = torch::Device(torch::kCUDA);
  torch::manual_seed(10);
  for (auto [dtype, tol] : kCudaDtypes)
    for (int64_t D : {24, 512, 1283, 1536, 2048, 4096, 4104})
      for (bool offset : {false, true}) {
        auto rows = [&] {  // (5, 7, D), contiguous, at element 1 of its storage when `offset`
          Tensor flat = torch::randn({5 * 7 * D + 1}, dev).to(dtype);
          return flat.narrow(0, offset ? 1 : 0, 5 * 7 * D).view({5, 7, D});
        };
        std::vector<Tensor> rn = {rows(), rows(), torch::tensor(0.91f, dev), torch::tensor(0.13f, dev)};
        for (Mix mix : {Mix::plain, Mix::lambdas})
          expect_same(residual_norm(true, mix), residual_norm(false, mix), rn, tol,
                      ("cuda residual_norm D=" + std::to_string(D) + (offset ? " offset" : "")).c_str());
      }
}

// the self-check finds its CPU kernel in both dtypes
TEST(ResidualNorm, CpuKernelDtypes) { expect_cpu_kernel_in("residual_norm", {torch::kFloat, torch::kBFloat16}); }
