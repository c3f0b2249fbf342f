// Rotary embedding + QK RMSNorm (x1.2) fused against the reference: fp64 with finite
// differences at a decode-style offset, fp32 and bf16 on model shapes, the rows' RMS, and on
// CUDA where a GPU is present.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "nanochat/kernels.h"
#include "test_kernels.h"

using namespace nanochat;
using namespace kernels_test;

namespace {

Fn rotary_norm(bool fused, double scale) {
  return [=](const std::vector<Tensor>& in) {
    return fused ? kernels_rotary_norm(in[0], in[1], in[2], scale)
                 : kernels_rotary_norm_reference(in[0], in[1], in[2], scale);
  };
}

}  // namespace

TEST(RotaryNorm, Fp64EqualsReferenceAndFiniteDifferences) {
  torch::manual_seed(6);
  auto [c, s] = rotary_tables(3, 5, 8, torch::kDouble);  // positions 3..7: a decode-style offset
  std::vector<Tensor> in = {torch::randn({2, 5, 3, 8}, torch::kDouble), c, s};
  expect_same(rotary_norm(true, 1.2), rotary_norm(false, 1.2), in, 1e-12, "fp64", 1);  // cos, sin: constants
  expect_finite_differences(rotary_norm(true, 1.2), in, 1e-6, 1);
}

TEST(RotaryNorm, Fp32AndBf16EqualReferenceOnModelShapes) {
  torch::manual_seed(7);
  for (auto dtype : {torch::kFloat, torch::kBFloat16}) {
    // the model hands cos/sin as a narrowed view of its long table
    auto [c, s] = rotary_tables(0, 1024, 128, dtype);
    std::vector<Tensor> in = {torch::randn({2, 256, 6, 128}).to(dtype), c.narrow(1, 100, 256), s.narrow(1, 100, 256)};
    expect_same(rotary_norm(true, 1.2), rotary_norm(false, 1.2), in, dtype == torch::kFloat ? 1e-5 : 2e-2,
                dtype == torch::kFloat ? "fp32" : "bf16", 1);
  }
}

TEST(RotaryNorm, OutputRowsHaveRmsEqualToScale) {
  auto [c, s] = rotary_tables(0, 4, 16, torch::kFloat);
  Tensor y = kernels_rotary_norm(torch::randn({1, 4, 2, 16}) * 10, c, s, 1.2);
  Tensor rms = y.pow(2).mean(-1).sqrt();
  EXPECT_LE((rms - 1.2).abs().max().item<double>(), 1e-5);
}

TEST(RotaryNorm, CudaEqualsReference) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const auto dev = torch::Device(torch::kCUDA);
  torch::manual_seed(8);
  for (auto [dtype, tol] : kCudaDtypes) {
    auto [c, s] = rotary_tables(0, 256, 128, dtype);
    std::vector<Tensor> r = {torch::randn({2, 256, 6, 128}, dev).to(dtype), c.to(dev), s.to(dev)};
    expect_same(rotary_norm(true, 1.2), rotary_norm(false, 1.2), r, tol, "cuda rotary_norm", 1);
    auto [cw, sw] = rotary_tables(0, 16, 512, dtype);  // wider than the kernel's registers: the reference runs
    std::vector<Tensor> rw = {torch::randn({2, 16, 2, 512}, dev).to(dtype), cw.to(dev), sw.to(dev)};
    expect_same(rotary_norm(true, 1.2), rotary_norm(false, 1.2), rw, tol, "cuda rotary_norm, head dim 512", 1);
  }
}

// every path of the CUDA kernels: the packed one at 1 to 16 lanes a row (head dims 16, 64, 96,
// 128, 256; 96's 6 packs a half leave two lanes of 8 idle), the general one for halves that are not
// whole packs (72 in bf16, 10) and for rows off 16 bytes (x at an odd offset)
TEST(RotaryNorm, CudaEveryHeadDimAndAlignment) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const auto dev = torch::Device(torch::kCUDA);
  torch::manual_seed(11);
  for (auto [dtype, tol] : kCudaDtypes)
    for (int64_t D : {10, 16, 64, 72, 96, 128, 256})
      for (bool offset : {false, true}) {
        auto [c, s] = rotary_tables(0, 33, D, dtype);
        Tensor flat = torch::randn({3 * 33 * 5 * D + 1}, dev).to(dtype);
        Tensor x = flat.narrow(0, offset ? 1 : 0, 3 * 33 * 5 * D).view({3, 33, 5, D});
        std::vector<Tensor> r = {x, c.to(dev), s.to(dev)};
        expect_same(rotary_norm(true, 1.2), rotary_norm(false, 1.2), r, tol,
                    ("cuda rotary_norm D=" + std::to_string(D) + (offset ? " offset" : "")).c_str(), 1);
      }
}

// the self-check finds its CPU kernel in both dtypes
TEST(RotaryNorm, CpuKernelDtypes) { expect_cpu_kernel_in("rotary_norm", {torch::kFloat, torch::kBFloat16}); }
