// The CPU attention kernel (causal, sliding windows, GQA) against the reference's fp64 math and
// the SDPA path it replaced. GPUs run flash: their attention tests are in test_attention.cpp.
#include <string>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "nanochat/attention.h"
#include "nanochat/kernels.h"
#include "test_kernels.h"
#include "../src/kernels/cpu_gemm.h"  // cpu_gemm_f32_available

using namespace nanochat;
using namespace kernels_test;

namespace {

Fn attention(bool fused, int64_t window) {
  return [=](const std::vector<Tensor>& in) {
    if (fused) return kernels_attention(in[0], in[1], in[2], window);
    auto f64 = [](const Tensor& t) { return t.to(torch::kDouble); };
    return kernels_attention_reference(f64(in[0]), f64(in[1]), f64(in[2]), window).to(in[0].scalar_type());
  };
}

bool cpu_attention_kernel() { return kernels_attention_available(torch::zeros({1, 1, 1, 8})); }

}  // namespace

// the CPU attention kernel against the reference's fp64 math, forward and the gradients of
// q, k and v: windows of 1, across and at the 64-row query blocks and beyond T, a T that is no
// multiple of the block, GQA (window 0 has zero q and k gradients: the next test)
TEST(AttentionKernel, CpuKernelEqualsFp64Reference) {
  if (!cpu_attention_kernel()) GTEST_SKIP() << "no CPU attention kernel (kernels off, or LibTorch without MKL)";
  torch::manual_seed(21);
  const int64_t B = 2, T = 150, H = 4, D = 32;
  for (int64_t Hkv : {4, 2})
    for (int64_t w : {-1, 1, 63, 64, 100, 149})
      for (auto dtype : {torch::kFloat, torch::kBFloat16}) {
        std::vector<Tensor> in = {torch::randn({B, T, H, D}).to(dtype), torch::randn({B, T, Hkv, D}).to(dtype),
                                  torch::randn({B, T, Hkv, D}).to(dtype)};
        const std::string what = "window " + std::to_string(w) + ", Hkv " + std::to_string(Hkv) + ", " +
                                 c10::toString(dtype);
        expect_same(attention(true, w), attention(false, w), in, dtype == torch::kFloat ? 2e-6 : 2e-2, what.c_str());
      }
}

// window 0: every query sees only its own key, a softmax over one score. The output is the
// value row, v's gradient the sum of dO over the query heads that share it, and q's and k's
// gradients are zero (up to rounding: dS = P (dP - rowsum(dO O)) with dP equal to that sum)
TEST(AttentionKernel, CpuKernelWindowZeroReturnsTheValues) {
  if (!cpu_attention_kernel()) GTEST_SKIP() << "no CPU attention kernel";
  Tensor q = torch::randn({2, 70, 4, 16}).requires_grad_(), k = torch::randn({2, 70, 2, 16}).requires_grad_();
  Tensor v = torch::randn({2, 70, 2, 16}).requires_grad_(), dout = torch::randn({2, 70, 4, 16});
  Tensor o = kernels_attention(q, k, v, 0);
  EXPECT_TRUE(torch::allclose(o, v.repeat_interleave(2, 2), 0, 1e-6));
  auto g = torch::autograd::grad({o}, {q, k, v}, {dout});
  EXPECT_LT(g[0].abs().max().item<float>(), 1e-5);
  EXPECT_LT(g[1].abs().max().item<float>(), 1e-5);
  EXPECT_TRUE(torch::allclose(g[2], dout.view({2, 70, 2, 2, 16}).sum(3), 0, 1e-5));
}

// model shapes in bf16 against the SDPA path the kernel replaced on the CPU (flash, causal and
// chunked windows): the same outputs and gradients within bf16's rounding
TEST(AttentionKernel, CpuKernelTracksTheSdpaPathInBf16) {
  if (!cpu_attention_kernel()) GTEST_SKIP() << "no CPU attention kernel";
  torch::manual_seed(22);
  const int64_t B = 1, T = 512, H = 2, D = 64;
  for (int64_t w : {-1, 128}) {
    std::vector<Tensor> in = {torch::randn({B, T, H, D}).to(torch::kBFloat16),
                              torch::randn({B, T, H, D}).to(torch::kBFloat16),
                              torch::randn({B, T, H, D}).to(torch::kBFloat16)};
    Fn sdpa = [=](const std::vector<Tensor>& x) { return attention_causal_sdpa(x[0], x[1], x[2], w); };
    expect_same(attention(true, w), sdpa, in, 2e-2, w < 0 ? "causal" : "window 128");
  }
}

// the self-check finds its CPU kernel where MKL's fp32 GEMMs are (cpu_gemm_f32_available), and
// never the flash window's (CUDA's alone)
TEST(AttentionKernel, CpuKernelDtypes) {
  std::vector<torch::ScalarType> with;
  for (auto dtype : {torch::kFloat, torch::kBFloat16})
    if (nanochat::cpu_gemm_f32_available(dtype)) with.push_back(dtype);
  expect_cpu_kernel_in("attention", with);
}
