// lm_head + softcap + cross-entropy fused in row chunks (and its mean) against the reference:
// fp64 with finite differences, fp32 over several chunks, bf16, losses worked out by hand, the
// ignored targets, and on CUDA where a GPU is present.
#include <cmath>
#include <exception>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "nanochat/kernels.h"
#include "test_kernels.h"

using namespace nanochat;
using namespace kernels_test;

namespace {

Fn softcap_ce(bool fused, int64_t vocab, double cap, int64_t chunk_rows = 0) {
  return [=](const std::vector<Tensor>& in) {
    return fused ? kernels_linear_softcap_ce(in[0], in[1], in[2], vocab, cap, chunk_rows)
                 : kernels_linear_softcap_ce_reference(in[0], in[1], in[2], vocab, cap);
  };
}

Fn softcap_ce_mean(bool fused, int64_t vocab, double cap, int64_t chunk_rows = 0) {
  return [=](const std::vector<Tensor>& in) {
    return fused ? kernels_linear_softcap_ce_mean(in[0], in[1], in[2], vocab, cap, chunk_rows)
                 : kernels_linear_softcap_ce_mean_reference(in[0], in[1], in[2], vocab, cap);
  };
}

}  // namespace

TEST(LinearSoftcapCE, Fp64EqualsReferenceAndFiniteDifferences) {
  torch::manual_seed(1);
  const int64_t N = 7, C = 5, Vp = 16, vocab = 13;
  auto f64 = torch::kDouble;
  std::vector<Tensor> in = {torch::randn({N, C}, f64), torch::randn({Vp, C}, f64) * 2, targets_with_ignored(N, vocab)};
  expect_same(softcap_ce(true, vocab, 3.0), softcap_ce(false, vocab, 3.0), in, 1e-12, "fp64");
  expect_finite_differences(softcap_ce(true, vocab, 3.0), in, 1e-6);
  // the padded rows of the weight get exactly zero gradient
  Tensor gw = grads_of(softcap_ce(true, vocab, 3.0), in)[1];
  EXPECT_EQ(gw.narrow(0, vocab, Vp - vocab).abs().max().item<double>(), 0.0);
}

TEST(LinearSoftcapCE, Fp32OverSeveralChunksEqualsReference) {
  torch::manual_seed(2);
  // chunks of 256 rows: 600 rows take three, the last one short
  const int64_t N = 600, C = 32, Vp = 32768, vocab = 32700;
  std::vector<Tensor> in = {torch::randn({N, C}), torch::randn({Vp, C}) * 0.5, targets_with_ignored(N, vocab)};
  expect_same(softcap_ce(true, vocab, 15.0, 256), softcap_ce(false, vocab, 15.0), in, 2e-5, "fp32");
}

TEST(LinearSoftcapCE, Bf16EqualsReference) {
  torch::manual_seed(3);
  const int64_t N = 300, C = 64, Vp = 8192, vocab = 8190;
  std::vector<Tensor> in = {torch::randn({N, C}).to(torch::kBFloat16), torch::randn({Vp, C}) * 0.2,
                            targets_with_ignored(N, vocab)};
  expect_same(softcap_ce(true, vocab, 15.0), softcap_ce(false, vocab, 15.0), in, 2e-2, "bf16");
}

// the mean's gradients come from its forward: the same values as the reference's backward
TEST(LinearSoftcapCE, MeanEqualsReferenceAndFiniteDifferences) {
  torch::manual_seed(12);
  const int64_t N = 9, C = 5, Vp = 16, vocab = 14;
  std::vector<Tensor> in = {torch::randn({N, C}, torch::kDouble), torch::randn({Vp, C}, torch::kDouble) * 2,
                            targets_with_ignored(N, vocab)};
  expect_same(softcap_ce_mean(true, vocab, 3.0), softcap_ce_mean(false, vocab, 3.0), in, 1e-12, "fp64 mean");
  expect_finite_differences(softcap_ce_mean(true, vocab, 3.0), in, 1e-6);
  torch::manual_seed(13);
  std::vector<Tensor> big = {torch::randn({600, 32}), torch::randn({32768, 32}) * 0.5,
                             targets_with_ignored(600, 32700)};
  expect_same(softcap_ce_mean(true, 32700, 15.0, 256), softcap_ce_mean(false, 32700, 15.0), big, 2e-5, "fp32 mean");
  big[0] = big[0].to(torch::kBFloat16);
  expect_same(softcap_ce_mean(true, 32700, 15.0, 256), softcap_ce_mean(false, 32700, 15.0), big, 2e-2, "bf16 mean");
}

TEST(LinearSoftcapCE, LossOfHandComputedLogits) {
  // x = identity rows, so the logits are the weight's rows: loss = lse(z) - z[t], z = cap*tanh(w/cap)
  const double cap = 2.0;
  Tensor x = torch::eye(3, torch::kDouble);
  Tensor w = torch::tensor({1.0, -2.0, 0.5, 3.0, 0.0, -1.0, 0.25, 4.0, 2.0}, torch::kDouble).view({3, 3});
  Tensor t = torch::tensor({2, 0, -1}, torch::kLong);
  Tensor loss = kernels_linear_softcap_ce(x, w.t().contiguous(), t, 3, cap);
  auto z = [&](double v) { return cap * std::tanh(v / cap); };
  // weight = w^T makes the logits x @ weight^T = w: row i of the logits is w's row i
  double r0 = std::log(std::exp(z(1.0)) + std::exp(z(-2.0)) + std::exp(z(0.5))) - z(0.5);
  double r1 = std::log(std::exp(z(3.0)) + std::exp(z(0.0)) + std::exp(z(-1.0))) - z(3.0);
  EXPECT_NEAR(loss[0].item<double>(), r0, 1e-12);
  EXPECT_NEAR(loss[1].item<double>(), r1, 1e-12);
  EXPECT_EQ(loss[2].item<double>(), 0.0);
}

TEST(LinearSoftcapCE, OnlyMinusOneIsIgnoredAsInTheReference) {
  // the reference's cross_entropy ignores -1 alone and refuses other negative or too-large targets
  Tensor x = torch::randn({3, 4}), w = torch::randn({5, 4});
  for (int64_t bad : {-2, 5}) {
    Tensor t = torch::tensor({int64_t(1), bad, int64_t(-1)}, torch::kLong);
    EXPECT_THROW(kernels_linear_softcap_ce_reference(x, w, t, 5, 15.0), std::exception) << bad;
    EXPECT_THROW(kernels_linear_softcap_ce(x, w, t, 5, 15.0), std::exception) << bad;
    EXPECT_THROW(kernels_linear_softcap_ce_mean(x, w, t, 5, 15.0), std::exception) << bad;
  }
}

// on a GPU: rows of whole vector packs and rows that take the scalar loads
TEST(LinearSoftcapCE, CudaEqualsReference) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const auto dev = torch::Device(torch::kCUDA);
  torch::manual_seed(8);
  for (auto [dtype, tol] : kCudaDtypes) {
    const int64_t N = 3000, C = 64, vocab = 32700;
    for (int64_t Vp : {32768, 32767}) {
      std::vector<Tensor> ce = {torch::randn({N, C}, dev).to(dtype), torch::randn({Vp, C}, dev) * 0.3,
                                targets_with_ignored(N, vocab).to(dev)};
      expect_same(softcap_ce(true, vocab, 15.0), softcap_ce(false, vocab, 15.0), ce, tol, "cuda softcap_ce");
    }
    // a target outside the vocab other than -1 cannot raise without a sync: its loss is NaN
    Tensor loss = kernels_linear_softcap_ce(torch::randn({3, 64}, dev).to(dtype), torch::randn({128, 64}, dev),
                                            torch::tensor({1, -2, -1}).to(torch::kLong).to(dev), 100, 15.0);
    EXPECT_TRUE(std::isfinite(loss[0].item<double>()));
    EXPECT_TRUE(std::isnan(loss[1].item<double>()));
    EXPECT_EQ(loss[2].item<double>(), 0.0);
  }
}

// on a GPU: the training mean through the one-pass kernel (NANOCHAT_CE_PASSES=1) equals the
// reference, values and gradients, on whole-pack rows of 32768 and on the padded vocab; its
// own check (linear_softcap_ce_one_pass) passes in fp32 and bf16
TEST(LinearSoftcapCE, CudaOnePassMeanEqualsReference) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const auto dev = torch::Device(torch::kCUDA);
  torch::manual_seed(9);
  setenv("NANOCHAT_CE_PASSES", "1", 1);
  for (auto [dtype, tol] : kCudaDtypes) {
    if (dtype == torch::kHalf) continue;  // fp16 keeps the recompute path
    bool checked = false;
    for (const nanochat::kernels_check_result& r : nanochat::kernels_self_check(dev, dtype))
      if (r.op == "linear_softcap_ce_one_pass") {
        checked = true;
        EXPECT_TRUE(r.applies && r.ok) << r.dtype << ": max error " << r.max_error << " " << r.detail;
      }
    EXPECT_TRUE(checked);
    for (auto [Vp, vocab] : {std::pair<int64_t, int64_t>{32768, 32768}, {32768, 32700}}) {
      const int64_t N = 700, C = 64;
      std::vector<Tensor> ce = {torch::randn({N, C}, dev).to(dtype), torch::randn({Vp, C}, dev) * 0.3,
                                targets_with_ignored(N, vocab).to(dev)};
      Fn fused = [&](const std::vector<Tensor>& in) {
        return kernels_linear_softcap_ce_mean(in[0], in[1], in[2], vocab, 15.0, 256);
      };
      Fn ref = [&](const std::vector<Tensor>& in) {
        return kernels_linear_softcap_ce_mean_reference(in[0], in[1], in[2], vocab, 15.0);
      };
      expect_same(fused, ref, ce, tol, "cuda one-pass mean");
    }
  }
  unsetenv("NANOCHAT_CE_PASSES");
}

// the self-check finds its CPU kernel in both dtypes
TEST(LinearSoftcapCE, CpuKernelDtypes) { expect_cpu_kernel_in("linear_softcap_ce", {torch::kFloat, torch::kBFloat16}); }

// The training loop divides the loss by grad_accum, so the mean's bf16 dx is scaled by 1/3 at
// grad_accum 3 and by 1/6 at 6: each element must be the correctly rounded quotient of the
// unscaled dx (worked out in fp64, rounded to bf16 once). Scaling by 1/3 rounded to bf16 first
// (0.333984375) misses it on many elements: the comparison can tell the two apart.
TEST(LinearSoftcapCE, MeanGradientScaledExactlyByThreeAndSix) {
  torch::manual_seed(21);
  const int64_t N = 64, C = 32, Vp = 128, vocab = 120;
  Tensor x = torch::randn({N, C}).to(torch::kBFloat16).requires_grad_();
  Tensor w = (torch::randn({Vp, C}) * 0.3).requires_grad_();
  Tensor targets = targets_with_ignored(N, vocab);
  auto dx_at = [&](double grad_accum) {
    Tensor loss = kernels_linear_softcap_ce_mean(x, w, targets, vocab, 15.0, 0) / grad_accum;
    return torch::autograd::grad({loss}, {x})[0];
  };
  const Tensor dx1 = dx_at(1.0);
  ASSERT_EQ(dx1.scalar_type(), torch::kBFloat16);
  for (double grad_accum : {3.0, 6.0}) {
    SCOPED_TRACE("grad_accum " + std::to_string((int)grad_accum));
    const Tensor expected = (dx1.to(torch::kDouble) / grad_accum).to(torch::kBFloat16);
    const Tensor got = dx_at(grad_accum);
    EXPECT_TRUE(torch::equal(got, expected)) << "elements off: " << (got != expected).sum().item<int64_t>();
    const Tensor bf16_scale = dx1 * torch::tensor(1.0 / grad_accum).to(torch::kBFloat16);
    EXPECT_GT((bf16_scale != expected).sum().item<int64_t>(), 0) << "the bf16-rounded scale is not told apart";
  }
}
