// AdamW's fused update against its reference (upstream's eager composition) over several steps, in
// fp32 and bf16, for sizes that end mid-vector, within a bound from the arithmetic; one step worked out by hand; and on CUDA where a
// GPU is present. The optimizer around it is tested in test_optim.cpp.
#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "adamw_rounding_bound.h"
#include "nanochat/kernels.h"
#include "test_kernels.h"

using namespace nanochat;
using namespace kernels_test;

namespace {

// the kernel and the reference side by side for `steps` steps from the same state and gradients;
// "" when every element of p and of both moments stays within the rounding bound
// (adamw_rounding_bound.h), else what is out. `kernel_lr_scale` gives the kernel a wrong learning
// rate, to show the bound is tight enough to see it.
std::string adamw_beyond_rounding(int64_t n, torch::ScalarType dtype, torch::Device dev, int steps,
                                  double kernel_lr_scale = 1.0) {
  const double lr = 0.004, b1 = 0.8, b2 = 0.95, eps = 1e-10, wd = 0.2;
  torch::manual_seed(31 + n);
  auto opts = torch::TensorOptions().dtype(dtype).device(dev);
  Tensor p = torch::randn({n}, opts), m = torch::zeros({n}, opts), v = torch::zeros({n}, opts);
  Tensor rp = p.clone(), rm = m.clone(), rv = v.clone();
  AdamWRoundingBound bound(n, dtype);
  for (int step = 1; step <= steps; step++) {
    Tensor g = torch::randn({n}, opts) * 0.1;
    const Tensor p0 = rp.clone(), m0 = rm.clone(), v0 = rv.clone();
    kernels_adamw_step(p, g, m, v, step, lr * kernel_lr_scale, b1, b2, eps, wd);
    kernels_adamw_step_reference(rp, g, rm, rv, step, lr, b1, b2, eps, wd);
    adamw_bound_step(bound, p0, m0, v0, g, rp, rm, rv, step, lr, b1, b2, eps, wd);
    for (auto [what, got, want, b] : {std::tuple{"p", p, rp, bound.p}, {"m", m, rm, bound.m}, {"v", v, rv, bound.v}}) {
      const std::string out = beyond_bound(got, want, b);
      if (!out.empty()) return std::string(what) + " at step " + std::to_string(step) + ": " + out;
    }
  }
  return "";
}

std::string case_name(torch::ScalarType dtype, int64_t n) {
  return std::string(c10::toString(dtype)) + " n " + std::to_string(n);
}

}  // namespace

// the same update as the reference, so apart only by rounding: each op may round differently from
// ATen's at each CPU capability (lerp as mul+add at DEFAULT, fma at AVX2/AVX-512; ATen's fp32 sqrt
// is not correctly rounded, the kernel's is)
TEST(AdamWKernel, CpuKernelMatchesTheReferenceWithinRounding) {
  for (auto dtype : {torch::kFloat, torch::kBFloat16})
    for (int64_t n : {1, 37, 4096 + 5})
      EXPECT_EQ(adamw_beyond_rounding(n, dtype, torch::kCPU, 5), "") << case_name(dtype, n);
}

// the bound is no blanket: a learning rate 1e-4 off (one step's worth of 1e-4 relative) leaves it
TEST(AdamWKernel, TheRoundingBoundSeesAWrongLearningRate) {
  for (auto dtype : {torch::kFloat, torch::kBFloat16})
    EXPECT_NE(adamw_beyond_rounding(4096 + 5, dtype, torch::kCPU, 5, dtype == torch::kFloat ? 1 + 1e-4 : 1 + 1e-1), "")
        << case_name(dtype, 4096 + 5);
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

// on a GPU nvcc may contract products into FMAs: fewer roundings, inside the same bound
TEST(AdamWKernel, CudaMatchesTheReferenceWithinRounding) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  for (auto dtype : {torch::kFloat, torch::kBFloat16})
    for (int64_t n : {1, 37, (1 << 20) + 5})
      EXPECT_EQ(adamw_beyond_rounding(n, dtype, torch::kCUDA, 5), "") << case_name(dtype, n);
}

// the self-check finds its CPU kernel in both dtypes
TEST(AdamWKernel, CpuKernelDtypes) { expect_cpu_kernel_in("adamw", {torch::kFloat, torch::kBFloat16}); }
