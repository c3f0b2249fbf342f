// AdamW's fused update against its reference (upstream's eager composition) over several steps, in
// fp32 and bf16, for sizes that end mid-vector; one step worked out by hand; and on CUDA where a
// GPU is present. The optimizer around it is tested in test_optim.cpp.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "nanochat/kernels.h"
#include "test_kernels.h"

using namespace nanochat;
using namespace kernels_test;

namespace {

// the largest difference over `steps` steps, relative to the reference's largest value, of each
// of the param and its two moments
struct AdamErrors {
  double p = 0, m = 0, v = 0;
};

AdamErrors adamw_errors(int64_t n, torch::ScalarType dtype, torch::Device dev, int steps) {
  torch::manual_seed(31 + n);
  auto opts = torch::TensorOptions().dtype(dtype).device(dev);
  Tensor p = torch::randn({n}, opts), m = torch::zeros({n}, opts), v = torch::zeros({n}, opts);
  Tensor rp = p.clone(), rm = m.clone(), rv = v.clone();
  auto rel = [](const Tensor& a, const Tensor& b) {
    Tensor x = a.to(torch::kDouble), y = b.to(torch::kDouble);
    return (x - y).abs().max().item<double>() / std::max(1e-30, y.abs().max().item<double>());
  };
  AdamErrors e;
  for (int step = 1; step <= steps; step++) {
    Tensor g = torch::randn({n}, opts) * 0.1;
    kernels_adamw_step(p, g, m, v, step, 0.004, 0.8, 0.95, 1e-10, 0.2);
    kernels_adamw_step_reference(rp, g, rm, rv, step, 0.004, 0.8, 0.95, 1e-10, 0.2);
    e.p = std::max(e.p, rel(p, rp)), e.m = std::max(e.m, rel(m, rm)), e.v = std::max(e.v, rel(v, rv));
  }
  return e;
}

}  // namespace

// the same operations in the same order as the reference, so the moments have its very bits. The
// param may not: ATen's fp32 sqrt on the CPU is not correctly rounded (0.6% of inputs are a last
// bit off IEEE's, which the kernel uses), and where the weight decay and the step nearly cancel
// that bit is a few of p's (seen: 1 element of 4101 over 5 steps, 6e-11 of max|p|)
TEST(AdamWKernel, CpuKernelHasTheReferencesBits) {
  for (auto dtype : {torch::kFloat, torch::kBFloat16})
    for (int64_t n : {1, 37, 4096 + 5}) {
      const AdamErrors e = adamw_errors(n, dtype, torch::kCPU, 5);
      const std::string what = std::string(c10::toString(dtype)) + " n " + std::to_string(n);
      EXPECT_EQ(e.m, 0.0) << what;
      EXPECT_EQ(e.v, 0.0) << what;
      EXPECT_LE(e.p, 1e-9) << what;
    }
}

// step 1 from zero moments: m = (1-b1) g and v = (1-b2) g^2, and the bias corrections undo the
// factors, so p' = p (1 - lr wd) - lr g / (|g| + eps)
TEST(AdamWKernel, FirstStepByHand) {
  const double lr = 0.01, wd = 0.5, eps = 1e-8;
  const std::vector<float> p0 = {1.0f, -2.0f, 0.5f}, g0 = {0.3f, -0.02f, 0.0f};
  Tensor p = torch::tensor(p0), g = torch::tensor(g0), m = torch::zeros({3}), v = torch::zeros({3});
  kernels_adamw_step(p, g, m, v, 1, lr, 0.9, 0.99, eps, wd);
  for (int i = 0; i < 3; i++) {
    const double want = p0[i] * (1 - lr * wd) - lr * g0[i] / (std::abs(g0[i]) + eps);
    EXPECT_NEAR(p[i].item<double>(), want, 1e-6) << "element " << i;
    EXPECT_NEAR(m[i].item<double>(), 0.1 * g0[i], 1e-7) << "element " << i;
    EXPECT_NEAR(v[i].item<double>(), 0.01 * g0[i] * g0[i], 1e-9) << "element " << i;
  }
}

// on a GPU nvcc may contract other products into FMAs: close, not bitwise
TEST(AdamWKernel, CudaEqualsReference) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  for (auto dtype : {torch::kFloat, torch::kBFloat16})
    for (int64_t n : {1, 37, (1 << 20) + 5}) {
      const AdamErrors e = adamw_errors(n, dtype, torch::kCUDA, 5);
      const double tol = dtype == torch::kFloat ? 1e-5 : 1e-2;
      const std::string what = std::string(c10::toString(dtype)) + " n " + std::to_string(n);
      EXPECT_LE(e.p, tol) << what;
      EXPECT_LE(e.m, tol) << what;
      EXPECT_LE(e.v, tol) << what;
    }
}
