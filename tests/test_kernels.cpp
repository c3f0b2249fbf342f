// Tests of the kernels module: each fused op against its plain-ATen reference (fp64 to 1e-10
// on small shapes, fp32 and bf16 to stated tolerances on real ones) and its backward against
// central finite differences in fp64. The fused path runs on this machine's CPU kernels (and
// on CUDA when a GPU is present: the *Cuda tests).
#include <cmath>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "nanochat/attention.h"
#include "nanochat/common/device.h"
#include "nanochat/gpt.h"
#include "nanochat/kernels.h"
#include "nanochat/optim.h"
#include "test_models.h"
#include "../src/kernels/cpu_gemm.h"          // MKL's fp32-output GEMMs
#include "../src/kernels/kernels_internal.h"  // kernels_cpu_supported, cast_float_bfloat16_cpu

using namespace nanochat;
using torch::Tensor;

namespace {

using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

// the op's output weighted by a fixed random tensor and summed: one scalar whose gradient
// exercises every output element with a different weight
Tensor weighted_sum(const Tensor& out, uint64_t seed) {
  torch::manual_seed(seed);
  return (out * torch::randn(out.sizes(), out.options()).detach()).sum();
}

// gradients of the first `n_diff` inputs (all floating ones by default); the rest are constants
std::vector<Tensor> grads_of(const Fn& f, const std::vector<Tensor>& inputs, size_t n_diff = 99) {
  std::vector<Tensor> leaves;
  for (size_t i = 0; i < inputs.size(); i++)
    leaves.push_back(inputs[i].detach().clone().requires_grad_(i < n_diff && inputs[i].is_floating_point()));
  weighted_sum(f(leaves), 7).backward();
  std::vector<Tensor> g;
  for (const Tensor& t : leaves) g.push_back(t.requires_grad() ? t.grad() : Tensor());
  return g;
}

// every element of every floating input: (f(x+h) - f(x-h)) / 2h against the analytic gradient
void expect_finite_differences(const Fn& f, const std::vector<Tensor>& inputs, double tol, size_t n_diff = 99) {
  std::vector<Tensor> analytic = grads_of(f, inputs, n_diff);
  torch::NoGradGuard no_grad;
  const double h = 1e-6;
  for (size_t i = 0; i < inputs.size(); i++) {
    if (!analytic[i].defined()) continue;
    Tensor x = inputs[i].detach().clone();
    std::vector<Tensor> args = inputs;
    args[i] = x;
    auto flat = x.view({-1});
    auto ga = analytic[i].reshape({-1});
    for (int64_t j = 0; j < flat.numel(); j++) {
      const double v = flat[j].item<double>();
      flat[j] = v + h;
      const double up = weighted_sum(f(args), 7).item<double>();
      flat[j] = v - h;
      const double down = weighted_sum(f(args), 7).item<double>();
      flat[j] = v;
      EXPECT_NEAR(ga[j].item<double>(), (up - down) / (2 * h), tol) << "input " << i << " element " << j;
    }
  }
}

// fused and reference: outputs and every input gradient within rtol of the reference's scale
void expect_same(const Fn& fused, const Fn& reference, const std::vector<Tensor>& inputs, double rtol,
                 const char* what, size_t n_diff = 99) {
  Tensor a, b;
  {
    torch::NoGradGuard no_grad;
    a = fused(inputs).to(torch::kDouble);
    b = reference(inputs).to(torch::kDouble);
  }
  const double scale = std::max(1.0, b.abs().max().item<double>());
  EXPECT_LE((a - b).abs().max().item<double>(), rtol * scale) << what << ": output";
  std::vector<Tensor> ga = grads_of(fused, inputs, n_diff), gb = grads_of(reference, inputs, n_diff);
  for (size_t i = 0; i < inputs.size(); i++) {
    if (!ga[i].defined()) continue;
    Tensor x = ga[i].to(torch::kDouble), y = gb[i].to(torch::kDouble);
    const double s = std::max(1e-12, y.abs().max().item<double>());
    EXPECT_LE((x - y).abs().max().item<double>(), rtol * s) << what << ": gradient of input " << i;
  }
}

Fn softcap_ce(bool fused, int64_t vocab, double cap, int64_t chunk_rows = 0) {
  return [=](const std::vector<Tensor>& in) {
    return fused ? kernels_linear_softcap_ce(in[0], in[1], in[2], vocab, cap, chunk_rows)
                 : kernels_linear_softcap_ce_reference(in[0], in[1], in[2], vocab, cap);
  };
}

Fn mlp(bool fused) {
  return [=](const std::vector<Tensor>& in) {
    return fused ? kernels_mlp_relu_square(in[0], in[1], in[2]) : kernels_mlp_relu_square_reference(in[0], in[1], in[2]);
  };
}

Fn rotary_norm(bool fused, double scale) {
  return [=](const std::vector<Tensor>& in) {
    return fused ? kernels_rotary_norm(in[0], in[1], in[2], scale) : kernels_rotary_norm_reference(in[0], in[1], in[2], scale);
  };
}

// residual_norm's two outputs as one tensor; `lambdas`: a = in[2], b = in[3] (else both 1);
// `backout`: a = 1, b = in[3] (the model's x - lambda * x_backout)
enum class Mix { plain, lambdas, backout };
Fn residual_norm(bool fused, Mix mix) {
  return [=](const std::vector<Tensor>& in) {
    const Tensor a = mix == Mix::lambdas ? in[2] : Tensor(), b = mix == Mix::plain ? Tensor() : in[3];
    auto [h, n] = fused ? kernels_residual_norm(in[0], in[1], a, b) : kernels_residual_norm_reference(in[0], in[1], a, b);
    return torch::cat({h.flatten(), n.flatten()});
  };
}

// rotary tables as the model builds them (base 100000), positions t0..t0+T-1
std::pair<Tensor, Tensor> rotary_tables(int64_t t0, int64_t T, int64_t D, torch::ScalarType dtype) {
  Tensor inv = 1.0 / torch::pow(100000.0, torch::arange(0, D, 2, torch::kDouble) / (double)D);
  Tensor f = torch::outer(torch::arange(t0, t0 + T, torch::kDouble), inv);
  return {f.cos().to(dtype).view({1, T, 1, D / 2}), f.sin().to(dtype).view({1, T, 1, D / 2})};
}

Tensor targets_with_ignored(int64_t n, int64_t vocab) {
  Tensor t = torch::randint(vocab, {n}, torch::kLong);
  t.index_put_({torch::arange(0, n, 5)}, -1);  // every fifth position ignored
  return t;
}

}  // namespace

TEST(Kernels, SwitchFollowsTheEnvironment) {
  const char* v = std::getenv("NANOCHAT_KERNELS");
  EXPECT_EQ(kernels_enabled(), !(v && std::string(v) == "0"));
}

// the self-check that picks each op's path: every op of the module is registered, and on this CPU
// each one's kernel agrees with its reference in fp32 and bf16 (where it has a kernel)
TEST(KernelsSelfCheck, EveryOpAgreesWithItsReferenceOnTheCpu) {
  if (!kernels_cpu_supported()) GTEST_SKIP() << "this CPU runs the ATen references";
  const std::set<std::string> ops = {"linear_softcap_ce", "mlp_relu_square", "rotary_norm", "residual_norm", "attention",
                                     "polar_express",     "adamw",           "muon",        "fp8_linear"};
  for (auto dtype : {torch::kFloat, torch::kBFloat16}) {
    std::set<std::string> seen, applied;
    for (const kernels_check_result& r : kernels_self_check(torch::kCPU, dtype)) {
      seen.insert(r.op);
      if (r.applies) applied.insert(r.op);
      EXPECT_TRUE(r.ok) << r.op << " in " << r.dtype << ": max error " << r.max_error << " " << r.detail;
      EXPECT_EQ(r.device, "cpu");
    }
    EXPECT_EQ(seen, ops);
    // Polar Express has a CPU kernel in fp32 only; the others in both (attention where MKL is)
    EXPECT_EQ(applied.count("polar_express"), dtype == torch::kFloat ? 1u : 0u);
    EXPECT_EQ(applied.count("attention"), cpu_gemm_f32_available(dtype) ? 1u : 0u);
    for (const char* op : {"linear_softcap_ce", "mlp_relu_square", "rotary_norm", "residual_norm", "adamw", "muon"})
      EXPECT_EQ(applied.count(op), 1u) << op;
  }
}

// NANOCHAT_KERNELS_FAULT=<op> (set for this test by ctest, tests/CMakeLists.txt): the op's kernel
// output is perturbed, its check fails with the error of the perturbation, the others pass, and
// the op itself now gives its reference's values
TEST(KernelsSelfCheck, APerturbedKernelFailsItsCheckAndTheOpRunsItsReference) {
  const char* faulty = std::getenv("NANOCHAT_KERNELS_FAULT");
  if (!faulty || std::string(faulty) != "mlp_relu_square") GTEST_SKIP() << "run by ctest as kernels_fault.*";
  if (!kernels_cpu_supported()) GTEST_SKIP() << "this CPU runs the ATen references";
  torch::manual_seed(3);
  Tensor x = torch::randn({4, 16}), w_fc = torch::randn({64, 16}) * 0.25, w_proj = torch::randn({16, 64}) * 0.1;
  // the first call checks every op on the CPU in fp32, then runs the reference
  EXPECT_TRUE(torch::equal(kernels_mlp_relu_square(x, w_fc, w_proj), kernels_mlp_relu_square_reference(x, w_fc, w_proj)));
  for (const kernels_check_result& r : kernels_self_check(torch::kCPU, torch::kFloat)) {
    if (r.op == std::string("mlp_relu_square")) {
      EXPECT_FALSE(r.ok);
      // the perturbation adds (max|y| + 1) / 2: at least half the largest output
      EXPECT_GE(r.max_error, 0.5);
    } else {
      EXPECT_TRUE(r.ok) << r.op;
    }
  }
}

// at::parallel_for is a header template: in a file built without -fopenmp its pragma is
// dropped and every CPU kernel runs on one thread, silently (it did, until the build said -fopenmp)
TEST(Kernels, CpuKernelsRunOnEveryIntraOpThread) {
  const int before = at::get_num_threads();
  at::set_num_threads(2);
  EXPECT_EQ(cpu_kernel_threads(), 2);
  at::set_num_threads(before);
}

Fn attention(bool fused, int64_t window) {
  return [=](const std::vector<Tensor>& in) {
    if (fused) return kernels_attention(in[0], in[1], in[2], window);
    auto f64 = [](const Tensor& t) { return t.to(torch::kDouble); };
    return kernels_attention_reference(f64(in[0]), f64(in[1]), f64(in[2]), window).to(in[0].scalar_type());
  };
}

bool cpu_attention_kernel() { return kernels_attention_available(torch::zeros({1, 1, 1, 8})); }

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
    std::vector<Tensor> in = {torch::randn({B, T, H, D}).to(torch::kBFloat16), torch::randn({B, T, H, D}).to(torch::kBFloat16),
                              torch::randn({B, T, H, D}).to(torch::kBFloat16)};
    Fn sdpa = [=](const std::vector<Tensor>& x) { return attention_causal_sdpa(x[0], x[1], x[2], w); };
    expect_same(attention(true, w), sdpa, in, 2e-2, w < 0 ? "causal" : "window 128");
  }
}

// Polar Express in fp32 (one thread per matrix, the symmetric products from mirrored blocks)
// against the batched composition in fp64, for wide, tall and square batches whose sides are no
// multiple of the 128-row blocks, run on 2 threads so that the batch is split
TEST(PolarExpress, Fp32EqualsFp64Composition) {
  torch::manual_seed(23);
  struct Threads {  // 2 for this test, the previous count after it, also when an ASSERT returns early
    int before = at::get_num_threads();
    Threads() { at::set_num_threads(2); }
    ~Threads() { at::set_num_threads(before); }
  } two_threads;
  const auto& coeffs = optim_polar_express_coeffs();
  for (auto shape : std::vector<std::vector<int64_t>>{{4, 300, 700}, {2, 700, 300}, {6, 260, 260}, {2, 40, 90}}) {
    Tensor X = torch::randn(shape);
    X = X / (X.norm(2, {1, 2}, true) * 1.02);  // as Muon starts it: every singular value < 1
    Tensor X0 = X.clone();
    Tensor got = kernels_polar_express(X, coeffs, 5);
    Tensor want = kernels_polar_express_reference(X.to(torch::kDouble), coeffs, 5);
    ASSERT_EQ(got.sizes(), want.sizes());
    EXPECT_LT((got.to(torch::kDouble) - want).abs().max().item<double>(), 1e-5 * want.abs().max().item<double>())
        << c10::str(X.sizes());
    EXPECT_TRUE(X.equal(X0)) << "the input was written";
  }
}

// row-major C = alpha op(A) op(B) + beta C against fp64 matmuls of the same values, for each
// pair of transposes, strided rows (ld > width) and both input dtypes
TEST(CpuGemm, EveryTransposeAgainstFp64) {
  torch::manual_seed(5);
  const int64_t M = 37, N = 29, K = 53, pad = 3;
  for (auto dtype : {torch::kFloat, torch::kBFloat16})
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        // stored (rows, cols + pad): op(A) is (M, K), op(B) is (K, N)
        Tensor As = torch::randn({ta ? K : M, (ta ? M : K) + pad}).to(dtype);
        Tensor Bs = torch::randn({tb ? N : K, (tb ? K : N) + pad}).to(dtype);
        Tensor A = As.narrow(1, 0, ta ? M : K), B = Bs.narrow(1, 0, tb ? K : N);
        Tensor opA = (ta ? A.t() : A).to(torch::kDouble), opB = (tb ? B.t() : B).to(torch::kDouble);
        Tensor C0 = torch::randn({M, N + pad});
        Tensor C = C0.clone();
        bool ran = dtype == torch::kFloat
                       ? cpu_gemm_f32(ta, tb, M, N, K, 0.5f, As.data_ptr<float>(), As.size(1), Bs.data_ptr<float>(),
                                      Bs.size(1), 2.0f, C.data_ptr<float>(), C.size(1))
                       : cpu_gemm_f32(ta, tb, M, N, K, 0.5f, As.data_ptr<at::BFloat16>(), As.size(1),
                                      Bs.data_ptr<at::BFloat16>(), Bs.size(1), 2.0f, C.data_ptr<float>(), C.size(1));
        if (!ran) GTEST_SKIP() << "this LibTorch has no MKL";
        Tensor want = 0.5 * opA.matmul(opB) + 2.0 * C0.narrow(1, 0, N).to(torch::kDouble);
        EXPECT_LT((C.narrow(1, 0, N).to(torch::kDouble) - want).abs().max().item<double>(), 1e-4)
            << "dtype " << dtype << " trans_a " << ta << " trans_b " << tb;
        EXPECT_TRUE(C.narrow(1, N, pad).equal(C0.narrow(1, N, pad)));  // the padding is not written
      }
}

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

Fn softcap_ce_mean(bool fused, int64_t vocab, double cap, int64_t chunk_rows = 0) {
  return [=](const std::vector<Tensor>& in) {
    return fused ? kernels_linear_softcap_ce_mean(in[0], in[1], in[2], vocab, cap, chunk_rows)
                 : kernels_linear_softcap_ce_mean_reference(in[0], in[1], in[2], vocab, cap);
  };
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
  std::vector<Tensor> big = {torch::randn({600, 32}), torch::randn({32768, 32}) * 0.5, targets_with_ignored(600, 32700)};
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

// the same checks on a GPU, fused CUDA kernels against the references, where one is present
TEST(KernelsCuda, AllOpsEqualReferences) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  torch::manual_seed(8);
  auto dev = torch::Device(torch::kCUDA);
  for (auto dtype : {torch::kFloat, torch::kBFloat16, torch::kHalf}) {
    const double tol = dtype == torch::kFloat ? 1e-4 : 3e-2;
    const int64_t N = 3000, C = 64, vocab = 32700;
    for (int64_t Vp : {32768, 32767}) {  // rows of whole vector packs, and rows that take the scalar loads
      std::vector<Tensor> ce = {torch::randn({N, C}, dev).to(dtype), torch::randn({Vp, C}, dev) * 0.3,
                                targets_with_ignored(N, vocab).to(dev)};
      expect_same(softcap_ce(true, vocab, 15.0), softcap_ce(false, vocab, 15.0), ce, tol, "cuda softcap_ce");
    }
    {  // a target outside the vocab other than -1 cannot raise without a sync: its loss is NaN
      Tensor loss = kernels_linear_softcap_ce(torch::randn({3, 64}, dev).to(dtype), torch::randn({128, 64}, dev),
                                              torch::tensor({1, -2, -1}).to(torch::kLong).to(dev), 100, 15.0);
      EXPECT_TRUE(std::isfinite(loss[0].item<double>()));
      EXPECT_TRUE(std::isnan(loss[1].item<double>()));
      EXPECT_EQ(loss[2].item<double>(), 0.0);
    }
    std::vector<Tensor> m = {torch::randn({8, 64, 128}, dev).to(dtype), (torch::randn({512, 128}, dev) * 0.1).to(dtype),
                             (torch::randn({128, 512}, dev) * 0.1).to(dtype)};
    expect_same(mlp(true), mlp(false), m, tol, "cuda mlp");
    auto [c, s] = rotary_tables(0, 256, 128, dtype);
    std::vector<Tensor> r = {torch::randn({2, 256, 6, 128}, dev).to(dtype), c.to(dev), s.to(dev)};
    expect_same(rotary_norm(true, 1.2), rotary_norm(false, 1.2), r, tol, "cuda rotary_norm", 1);
    auto [cw, sw] = rotary_tables(0, 16, 512, dtype);  // wider than the kernel's registers: the reference runs
    std::vector<Tensor> rw = {torch::randn({2, 16, 2, 512}, dev).to(dtype), cw.to(dev), sw.to(dev)};
    expect_same(rotary_norm(true, 1.2), rotary_norm(false, 1.2), rw, tol, "cuda rotary_norm, head dim 512", 1);
    std::vector<Tensor> rn = {torch::randn({3, 200, 1280}, dev).to(dtype), torch::randn({3, 200, 1280}, dev).to(dtype),
                              torch::tensor(0.91f, dev), torch::tensor(0.13f, dev)};
    for (Mix mix : {Mix::plain, Mix::lambdas, Mix::backout})
      expect_same(residual_norm(true, mix), residual_norm(false, mix), rn, tol, "cuda residual_norm");
  }
}

// ---- the CPU kernels' bf16 conversion ----------------------------------------------------

TEST(KernelsCpuConversion, SameBitsAsAtenBothWays) {
  // every CPU kernel rounds its fp32 results to bf16 through one row conversion (AVX512-BF16's
  // instruction where the CPU has it, which flushes denormals: such blocks take the portable
  // path). Magnitudes over fp32's whole range, denormals, signed zeros, infinities, NaNs and
  // exact ties of the rounding (low 16 bits 0x8000, both parities), in 32-value blocks and a tail
  if (!kernels_cpu_supported()) GTEST_SKIP() << "this CPU runs the ATen references";
  torch::manual_seed(11);
  const int64_t n = 100003;
  Tensor x = torch::randn({n}) * torch::pow(10.0, torch::randint(-44, 38, {n}).to(torch::kFloat));
  x.view(torch::kInt32).narrow(0, 0, 4096).bitwise_and_(~0xffff).bitwise_or_(0x8000);  // ties
  x[5000] = 0.0f, x[5001] = -0.0f, x[5002] = INFINITY, x[5003] = -INFINITY, x[5004] = NAN;
  x[5005] = 1e-40f, x[5006] = -3e-39f, x[5007] = 1.17549435e-38f;  // denormals, the smallest normal
  Tensor y = cast_float_bfloat16_cpu(x), want = x.to(torch::kBFloat16);
  ASSERT_EQ(y.scalar_type(), torch::kBFloat16);
  Tensor nan = want.isnan();
  EXPECT_TRUE(torch::equal(y.isnan(), nan));
  Tensor differ = (y.view(torch::kInt16) != want.view(torch::kInt16)) & ~nan;
  EXPECT_EQ(differ.sum().item<int64_t>(), 0)
      << "first differing element: " << (differ.any().item<bool>() ? differ.nonzero()[0][0].item<int64_t>() : -1);
  Tensor g = torch::randn({n}).to(torch::kBFloat16);
  EXPECT_TRUE(torch::equal(cast_float_bfloat16_cpu(g), g.to(torch::kFloat)));
}

// ---- Muon ----------------------------------------------------------------------------------

namespace {

struct MuonState {
  std::vector<Tensor> grads, params;
  Tensor buf, second;
};

MuonState muon_state(int64_t K, int64_t rows, int64_t cols, torch::ScalarType dtype, torch::Device dev, uint64_t seed) {
  torch::manual_seed(seed);
  MuonState s;
  auto opts = torch::TensorOptions().dtype(dtype).device(dev);
  for (int64_t k = 0; k < K; k++) {
    s.params.push_back(torch::randn({rows, cols}, opts) * 0.1);
    s.grads.push_back(torch::randn({rows, cols}, opts) * torch::linspace(0.1, 2.0, cols, opts));  // unequal columns
  }
  s.buf = torch::randn({K, rows, cols}, opts) * 0.5;
  s.grads[0][1].zero_();  // a zero row of the Nesterov gradient: MuonEq's clamp
  s.buf[0][1].zero_();
  s.second = rows >= cols ? torch::rand({K, rows, 1}, opts) : torch::rand({K, 1, cols}, opts);
  return s;
}

MuonState copy_of(const MuonState& s) {
  MuonState c;
  for (const Tensor& g : s.grads) c.grads.push_back(g.clone());
  for (const Tensor& p : s.params) c.params.push_back(p.clone());
  c.buf = s.buf.clone();
  c.second = s.second.clone();
  return c;
}

void expect_close(const Tensor& got, const Tensor& want, double rtol, const std::string& what) {
  Tensor a = got.to(torch::kDouble).cpu(), b = want.to(torch::kDouble).cpu();
  const double scale = std::max(1e-300, b.abs().max().item<double>());
  EXPECT_LE((a - b).abs().max().item<double>(), rtol * scale) << what;
}

// three steps of prepare -> (a stand-in for Polar Express: X itself, plus a little of X^3 so
// that finish sees other values than prepare wrote) -> finish, fused and reference from the
// same state; every output and every piece of state compared after each step
void expect_muon_equal(int64_t K, int64_t rows, int64_t cols, torch::ScalarType dtype, torch::ScalarType x_dtype,
                       torch::Device dev, double rtol_x, double rtol) {
  MuonState f = muon_state(K, rows, cols, dtype, dev, 40 + rows), r = copy_of(f);
  const std::string shape = std::to_string(rows) + "x" + std::to_string(cols) + " " + c10::toString(x_dtype) + " ";
  for (int step = 0; step < 3; step++) {
    const std::string at = shape + "step " + std::to_string(step) + ": ";
    Tensor xf = kernels_muon_prepare(f.grads, f.buf, 0.95, x_dtype);
    Tensor xr = kernels_muon_prepare_reference(r.grads, r.buf, 0.95, x_dtype);
    ASSERT_EQ(xf.scalar_type(), x_dtype);
    expect_close(xf, xr, rtol_x, at + "X");
    expect_close(f.buf, r.buf, rtol, at + "momentum buffer");
    for (size_t k = 0; k < f.grads.size(); k++) EXPECT_TRUE(torch::equal(f.grads[k], r.grads[k])) << at << "grads written";
    Tensor polar = (xr + xr.to(torch::kFloat).pow(3).to(x_dtype) * 0.1).contiguous();  // one input for both
    std::vector<Tensor> before;
    for (const Tensor& p : r.params) before.push_back(p.clone());
    kernels_muon_finish(polar, f.params, f.second, 0.02, 0.2, 0.9);
    kernels_muon_finish_reference(polar, r.params, r.second, 0.02, 0.2, 0.9);
    expect_close(f.second, r.second, rtol, at + "second moment");
    // the step taken, relative to its own size (the params themselves are 5x larger)
    for (size_t k = 0; k < f.params.size(); k++) {
      expect_close(f.params[k] - before[k], r.params[k] - before[k], rtol, at + "param step");
      f.params[k].copy_(r.params[k]);  // the next step from one state again
    }
  }
}

// a d4 model's MLP matrices (tall and wide) and its attention's (square), and odd widths
// (the wide one's columns and rows ragged against CUDA's 32x8 column tiles)
const std::vector<std::pair<int64_t, int64_t>> muon_model_shapes = {
    {1024, 256}, {256, 1024}, {256, 256}, {67, 45}, {45, 1283}};

}  // namespace

TEST(MuonKernels, Fp64EqualsReference) {
  for (auto [r, c] : std::vector<std::pair<int64_t, int64_t>>{{6, 10}, {10, 6}, {8, 8}, {37, 19}})
    expect_muon_equal(3, r, c, torch::kDouble, torch::kDouble, torch::kCPU, 1e-12, 1e-12);
}

TEST(MuonKernels, Fp32AndBf16EqualReferenceOnModelShapes) {
  for (auto [r, c] : muon_model_shapes) {
    expect_muon_equal(4, r, c, torch::kFloat, torch::kFloat, torch::kCPU, 1e-5, 1e-5);
    // bf16 X: the reference rounds X twice (after MuonEq, after the division), the fused pass
    // once, so they may differ by 1.5 units in the last place (2^-8 relative)
    expect_muon_equal(4, r, c, torch::kFloat, torch::kBFloat16, torch::kCPU, 1.6e-2, 1e-5);
  }
}

TEST(MuonKernels, PrepareGivesEqualRowsOfTheNormalisedMatrix) {
  // by hand: MuonEq scales every row to the mean row norm t = ||G||_F / sqrt(rows), so the
  // scaled matrix has norm ||G||_F and the normalisation leaves every row at 1/(1.01 sqrt(rows))
  // (up to the 1e-6); the Nesterov gradient with a zero buffer and mu = 0.5 is G/2 + G/4
  const int64_t rows = 12, cols = 7;
  std::vector<Tensor> g = {torch::randn({rows, cols}, torch::kDouble) * torch::arange(1, rows + 1, torch::kDouble).unsqueeze(1)};
  Tensor buf = torch::zeros({1, rows, cols}, torch::kDouble);
  Tensor X = kernels_muon_prepare(g, buf, 0.5, torch::kDouble);
  EXPECT_LT((buf[0] - g[0] * 0.5).abs().max().item<double>(), 1e-15);
  Tensor norms = X[0].norm(2, {1});
  const double fro = (g[0] * 0.75).norm().item<double>(), want = fro / (1.01 * fro + 1e-6) / std::sqrt((double)rows);
  EXPECT_LT((norms - want).abs().max().item<double>(), 1e-12);
}

TEST(MuonKernels, CudaEqualsReference) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  for (auto [r, c] : muon_model_shapes) {
    expect_muon_equal(4, r, c, torch::kFloat, torch::kFloat, torch::kCUDA, 1e-5, 1e-5);
    expect_muon_equal(4, r, c, torch::kFloat, torch::kBFloat16, torch::kCUDA, 1.6e-2, 1e-5);
  }
}

// ---- FP8 ------------------------------------------------------------------------------------

namespace {

// upstream's _to_fp8 written out: amax, scale = max/amax, clamp, cast; then back to fp32
Tensor quantize_dequantize(const Tensor& x, torch::ScalarType fp8, double fp8_max) {
  const float scale = (float)(fp8_max / std::max(x.abs().max().item<double>(), 1e-12));
  return (x.to(torch::kFloat) * scale).clamp(-fp8_max, fp8_max).to(fp8).to(torch::kFloat) / scale;
}

}  // namespace

TEST(Fp8Linear, ForwardAndGradientsEqualTheQuantizeDequantizeEmulation) {
  torch::manual_seed(9);
  Tensor x = torch::randn({2, 32, 128}), w = (torch::randn({256, 128}) * 0.05).requires_grad_(true);
  Tensor xr = x.clone().requires_grad_(true);
  Tensor out = kernels_fp8_linear(xr, w);
  Tensor go = torch::randn({2, 32, 256}) * 1e-3;
  out.backward(go);
  // the emulation: every operand rounded through its fp8 format, the products in fp32
  Tensor xq = quantize_dequantize(x.view({-1, 128}), torch::kFloat8_e4m3fn, 448);
  Tensor wq = quantize_dequantize(w.detach(), torch::kFloat8_e4m3fn, 448);
  Tensor gq = quantize_dequantize(go.view({-1, 256}), torch::kFloat8_e5m2, 57344);
  auto close = [](const Tensor& a, const Tensor& b) {
    return (a - b).abs().max().item<double>() <= 1e-5 * b.abs().max().item<double>();
  };
  EXPECT_TRUE(close(out.view({-1, 256}).detach(), torch::mm(xq, wq.t())));
  EXPECT_TRUE(close(xr.grad().view({-1, 128}), torch::mm(gq, wq)));
  EXPECT_TRUE(close(w.grad(), torch::mm(gq.t(), xq)));
  EXPECT_EQ(w.grad().scalar_type(), torch::kFloat);
  // and fp8 is not fp32: the rounding is visible against the exact product
  EXPECT_FALSE(close(out.view({-1, 256}).detach(), torch::mm(x.view({-1, 128}), w.detach().t())));
}

// on CUDA: LibTorch's _scaled_mm (cuBLASLt; fast accumulation and a bf16 output in forward)
// against the same emulation, as base-train runs it (bf16 activations, fp32 master weight);
// below compute capability 8.9 turning FP8 on is a clear error instead
TEST(Fp8Linear, CudaEqualsTheQuantizeDequantizeEmulation) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const auto dev = torch::Device(torch::kCUDA, 0);
  const CudaDeviceInfo gpu = cuda_device_infos(0, /*with_memory=*/false).at(0);
  if (gpu.major * 10 + gpu.minor < 89) {
    GPT model(gpt_config_from_depth(2, 512, 64, "L", 64, 64), dev, torch::kBFloat16);
    EXPECT_THROW(gpt_set_fp8(model, true), std::exception);
    return;
  }
  torch::manual_seed(9);
  Tensor x = torch::randn({2, 32, 128}).to(dev, torch::kBFloat16);
  Tensor w = (torch::randn({256, 128}) * 0.05).to(dev).requires_grad_(true);
  Tensor go = (torch::randn({2, 32, 256}) * 1e-3).to(dev, torch::kBFloat16);
  Tensor xr = x.clone().requires_grad_(true);
  Tensor out = kernels_fp8_linear(xr, w);
  out.backward(go);
  Tensor xq = quantize_dequantize(x.view({-1, 128}), torch::kFloat8_e4m3fn, 448);
  Tensor wq = quantize_dequantize(w.detach(), torch::kFloat8_e4m3fn, 448);
  Tensor gq = quantize_dequantize(go.view({-1, 256}), torch::kFloat8_e5m2, 57344);
  auto rel_err = [](const Tensor& a, const Tensor& b) {
    return (a.to(torch::kFloat) - b).abs().max().item<double>() / b.abs().max().item<double>();
  };
  EXPECT_EQ(out.scalar_type(), torch::kBFloat16);
  EXPECT_EQ(w.grad().scalar_type(), torch::kFloat);
  EXPECT_LE(rel_err(out.view({-1, 256}).detach(), torch::mm(xq, wq.t())), 1e-2);  // bf16 output
  EXPECT_LE(rel_err(xr.grad().view({-1, 128}), torch::mm(gq, wq)), 1e-2);        // bf16 output
  EXPECT_LE(rel_err(w.grad(), torch::mm(gq.t(), xq)), 1e-5);                     // fp32 output
}

TEST(Fp8Linear, CpuMatmulEqualsLibTorchScaledMm) {
  torch::manual_seed(11);
  auto [a8, a_inv] = kernels_fp8_quantize(torch::randn({32, 64}), torch::kFloat8_e5m2);
  auto [b8, b_inv] = kernels_fp8_quantize(torch::randn({48, 64}), torch::kFloat8_e4m3fn);
  for (auto out : {torch::kFloat, torch::kBFloat16}) {
    Tensor ours = kernels_fp8_mm(a8, b8.t(), a_inv, b_inv, out, false).to(torch::kFloat);
    Tensor theirs = at::_scaled_mm(a8, b8.t(), a_inv, b_inv, std::nullopt, std::nullopt, out, false).to(torch::kFloat);
    EXPECT_LE((ours - theirs).abs().max().item<double>(), (out == torch::kFloat ? 1e-5 : 1e-2) * theirs.abs().max().item<double>());
  }
}

TEST(Fp8Linear, ModelFilterAndTheEvalGuard) {
  EXPECT_TRUE(gpt_fp8_eligible(128, 512));
  EXPECT_FALSE(gpt_fp8_eligible(64, 512));   // below 128
  EXPECT_FALSE(gpt_fp8_eligible(136, 520));  // 520 % 16 != 0
  GPTConfig c = gpt_config_from_depth(2, 512, 64, "L", 64, 64);  // width 128
  GPT model = perturbed_gpt(c, 1, 0.05);  // the init's zero projections would hide every block
  gpt_set_fp8(model, true);
  EXPECT_TRUE(model->blocks[0]->mlp->c_fc->fp8);
  EXPECT_TRUE(model->blocks[1]->attn->c_q->fp8);
  Tensor idx = torch::randint(512, {2, 16}, torch::kLong);
  torch::NoGradGuard no_grad;
  Tensor with_fp8 = model->forward(idx);
  Tensor without;
  {
    GptFp8Off off(model);
    EXPECT_FALSE(model->blocks[0]->mlp->c_fc->fp8);
    without = model->forward(idx);
  }
  EXPECT_TRUE(model->blocks[0]->mlp->c_fc->fp8);  // restored
  gpt_set_fp8(model, false);
  EXPECT_TRUE(torch::equal(without, model->forward(idx)));
  EXPECT_FALSE(torch::equal(with_fp8, without));
}

// 30 steps of a d2 model on a fixed batch, with and without FP8: the FP8 losses stay within
// kTolerance (absolute, nats) of the fp32 ones at every step. The learning rates are a tenth
// of the defaults: at full rates a fixed batch is memorised within ten steps, chaotically
// enough that two fp32 runs differing in the last bit of one sum part ways too.
TEST(Fp8Linear, D2TrainingTracksTheRunWithoutFp8) {
  constexpr double kTolerance = 0.03;
  auto run = [](bool fp8) {
    GPTConfig c = gpt_config_from_depth(2, 512, 64, "L", 64, 64);
    GPT model(c);
    gpt_init_weights(model, 42);
    gpt_set_fp8(model, fp8);
    MuonAdamW opt(optim_param_groups_gpt(gpt_named_parameters(model), c.n_embd, 0.0004, 0.02, 0.002, 0.0, 0.05),
                  nullptr, torch::kFloat);
    torch::manual_seed(10);
    Tensor x = torch::randint(512, {8, 64}, torch::kLong), y = torch::roll(x, -1, 1);
    std::vector<double> losses;
    for (int step = 0; step < 30; step++) {
      Tensor loss = gpt_loss(model, x, y);
      losses.push_back(loss.item<double>());
      loss.backward();
      opt.step();
      opt.zero_grad();
    }
    return losses;
  };
  std::vector<double> base = run(false), fp8 = run(true);
  EXPECT_LT(base.back(), base.front() - 1.0) << "the run must learn for the comparison to mean anything";
  double worst = 0;
  for (size_t i = 0; i < base.size(); i++) {
    EXPECT_NEAR(fp8[i], base[i], kTolerance) << "step " << i;
    worst = std::max(worst, std::abs(fp8[i] - base[i]));
  }
  std::printf("d2, 30 steps: loss %.4f -> %.4f without FP8, %.4f with; largest gap %.4f\n", base.front(), base.back(),
              fp8.back(), worst);
}
