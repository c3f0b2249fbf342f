// FP8 linear (e4m3 forward, e5m2 gradients, tensorwise scales) against a quantise-dequantise
// emulation and LibTorch's _scaled_mm, the model's filter and eval guard, and 30 steps of a d2
// run with and without it; on CUDA where a GPU is present.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "nanochat/common/device.h"
#include "nanochat/gpt.h"
#include "nanochat/kernels.h"
#include "nanochat/optim.h"
#include "test_kernels.h"
#include "test_models.h"
#include "../src/kernels/op_dispatch.h"  // kernels_cpu_supported

using namespace nanochat;
using namespace kernels_test;

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

// The FP8 MLP, c_proj(relu(c_fc(x))^2) with both linears in FP8 and relu^2 fused, against the
// emulation written out here. The inputs sit on the fp8 grids with power-of-two scales (x: integers
// up to 7, scale 64; weights: eighths up to 0.875, scale 512; the gradient: eighths, e5m2 scale
// 65536), so h and every product are exact in fp32 on both sides and the roundings of relu(h)^2
// and of h's gradient to fp8 happen on the same values: the two agree up to fp32 summation order.
TEST(Fp8Linear, MlpEqualsTheEmulationOfItsTwoLinears) {
  torch::manual_seed(21);
  auto eighths = [](std::vector<int64_t> shape) {
    Tensor t = torch::randint(-7, 8, shape).to(torch::kFloat) / 8;
    t.view(-1)[0] = 0.875;  // the max: the scale a power of two
    return t;
  };
  Tensor x = torch::randint(-7, 8, {2, 16, 32}).to(torch::kFloat);
  x.view(-1)[0] = 7;
  Tensor w_fc = eighths({64, 32}).requires_grad_(true), w_proj = eighths({32, 64}).requires_grad_(true);
  Tensor go = eighths({2, 16, 32});
  Tensor xr = x.clone().requires_grad_(true);
  Tensor out = kernels_fp8_mlp(xr, w_fc, w_proj);
  out.backward(go);

  const Tensor x2 = x.view({-1, 32}), g2 = go.view({-1, 32}), wf = w_fc.detach(), wp = w_proj.detach();
  ASSERT_TRUE(quantize_dequantize(x2, torch::kFloat8_e4m3fn, 448).equal(x2));  // on the grid
  ASSERT_TRUE(quantize_dequantize(wf, torch::kFloat8_e4m3fn, 448).equal(wf));
  ASSERT_TRUE(quantize_dequantize(g2, torch::kFloat8_e5m2, 57344).equal(g2));
  const Tensor h = torch::mm(x2, wf.t());
  const Tensor aq = quantize_dequantize(h.relu().square(), torch::kFloat8_e4m3fn, 448);
  const Tensor dh = h.relu() * 2 * torch::mm(g2, wp);
  const Tensor dhq = quantize_dequantize(dh, torch::kFloat8_e5m2, 57344);
  auto close = [](const Tensor& a, const Tensor& b) {
    return (a - b).abs().max().item<double>() <= 1e-5 * b.abs().max().item<double>();
  };
  EXPECT_TRUE(close(out.view({-1, 32}).detach(), torch::mm(aq, wp.t())));
  EXPECT_TRUE(close(w_proj.grad(), torch::mm(g2.t(), aq)));
  EXPECT_TRUE(close(xr.grad().view({-1, 32}), torch::mm(dhq, wf)));
  EXPECT_TRUE(close(w_fc.grad(), torch::mm(dhq.t(), x2)));
  // the rounding of relu(h)^2 to e4m3 is there: without it the output differs
  EXPECT_FALSE(close(out.view({-1, 32}).detach(), torch::mm(h.relu().square(), wp.t())));
}

// the MLP's fused op and its reference (the linears' emulation with ATen's relu and square) agree
// in bf16 too, forward and the three gradients, within the rounding of bf16's h and its gradient
TEST(Fp8Linear, MlpEqualsItsReferenceInBf16) {
  torch::manual_seed(22);
  std::vector<Tensor> in = {torch::randn({2, 16, 64}).to(torch::kBFloat16), torch::randn({128, 64}) * 0.1,
                            torch::randn({64, 128}) * 0.1};
  expect_same([](const std::vector<Tensor>& t) { return kernels_fp8_mlp(t[0], t[1], t[2]); },
              [](const std::vector<Tensor>& t) { return kernels_fp8_mlp_reference(t[0], t[1], t[2]); }, in,
              kernels_check_tolerance(torch::kBFloat16), "fp8 mlp bf16");
}

// the weight's FP8 copy is made once per optimizer step: a write past the version counter (as
// the optimizer's kernels write) keeps the old copy until kernels_fp8_weights_changed(); an ATen
// in-place op (a checkpoint load) or that call makes it anew. Each output against the emulation
// of the weight it was quantized from.
TEST(Fp8Linear, TheWeightsCopyIsMadeOncePerOptimizerStep) {
  torch::manual_seed(10);
  Tensor x = torch::randn({32, 128}), w = torch::randn({64, 128}) * 0.05;
  auto emulated = [&](const Tensor& weight) {
    return torch::mm(quantize_dequantize(x, torch::kFloat8_e4m3fn, 448),
                     quantize_dequantize(weight, torch::kFloat8_e4m3fn, 448).t());
  };
  auto close = [](const Tensor& a, const Tensor& b) {
    return (a - b).abs().max().item<double>() <= 1e-5 * b.abs().max().item<double>();
  };
  const Tensor before = w.clone();
  EXPECT_TRUE(close(kernels_fp8_linear(x, w), emulated(before)));
  float* data = w.data_ptr<float>();  // as a fused optimizer kernel writes: the version stays
  for (int64_t i = 0; i < w.numel(); i++) data[i] = -2 * data[i];
  const Tensor after = w.clone();
  const bool fused = kernels_enabled() && kernels_cpu_supported();  // the emulation reads the weight each time
  EXPECT_TRUE(close(kernels_fp8_linear(x, w), emulated(fused ? before : after)));
  kernels_fp8_weights_changed();
  EXPECT_TRUE(close(kernels_fp8_linear(x, w), emulated(after)));
  w.mul_(0.5);  // an ATen in-place op moves the version
  EXPECT_TRUE(close(kernels_fp8_linear(x, w), emulated(after * 0.5)));
}

// q, k and v through one quantized input: each output has the bits of its own fp8 linear, each
// weight's gradient too, and x's gradient is their x-gradients summed in the weights' order
TEST(Fp8Linear, SharedInputGivesWhatEachLinearGivesAlone) {
  torch::manual_seed(13);
  Tensor x = torch::randn({2, 16, 128});
  std::vector<Tensor> ws, gos;
  for (int64_t out : {128, 64, 64}) {
    ws.push_back((torch::randn({out, 128}) * 0.05).requires_grad_(true));
    gos.push_back(torch::randn({2, 16, out}) * 1e-3);
  }
  Tensor xs = x.clone().requires_grad_(true);
  std::vector<Tensor> shared = kernels_fp8_linear_shared(xs, ws);
  ASSERT_EQ(shared.size(), 3u);
  torch::autograd::backward(shared, gos);
  Tensor grad_x_sum;
  for (size_t i = 0; i < ws.size(); i++) {
    Tensor xi = x.clone().requires_grad_(true), wi = ws[i].detach().clone().requires_grad_(true);
    Tensor alone = kernels_fp8_linear(xi, wi);
    alone.backward(gos[i]);
    EXPECT_TRUE(torch::equal(shared[i].detach(), alone.detach())) << "output " << i;
    EXPECT_TRUE(torch::equal(ws[i].grad(), wi.grad())) << "weight gradient " << i;
    grad_x_sum = i == 0 ? xi.grad() : grad_x_sum + xi.grad();
  }
  EXPECT_TRUE(torch::equal(xs.grad(), grad_x_sum));
  // an output left out of the loss gives its weight no gradient and x none of its term
  Tensor xo = x.clone().requires_grad_(true);
  std::vector<Tensor> ws2;
  for (const Tensor& w : ws) ws2.push_back(w.detach().clone().requires_grad_(true));
  kernels_fp8_linear_shared(xo, ws2)[1].backward(gos[1]);
  Tensor x1 = x.clone().requires_grad_(true);
  kernels_fp8_linear(x1, ws[1].detach()).backward(gos[1]);
  EXPECT_TRUE(torch::equal(xo.grad(), x1.grad()));
  EXPECT_FALSE(ws2[0].grad().defined() && ws2[0].grad().abs().sum().item<double>() > 0);
  EXPECT_TRUE(ws2[1].grad().defined());
}

// the transposed copy is the transpose of the quantized tensor, bit for bit
TEST(Fp8Linear, QuantizeTransposedIsTheTransposeOfTheQuantized) {
  torch::manual_seed(17);
  Tensor x = torch::randn({37, 29}) * 3;
  for (auto fp8 : {torch::kFloat8_e4m3fn, torch::kFloat8_e5m2}) {
    auto [q, inv] = kernels_fp8_quantize(x, fp8);
    Fp8Quantized t = kernels_fp8_quantize_transposed(x, fp8);
    EXPECT_TRUE(torch::equal(t.q.to(torch::kFloat), q.to(torch::kFloat)));
    EXPECT_TRUE(torch::equal(t.q_t.to(torch::kFloat), q.t().to(torch::kFloat)));
    EXPECT_TRUE(t.q_t.is_contiguous());
    EXPECT_TRUE(torch::equal(t.inv, inv));
  }
  EXPECT_THROW(kernels_fp8_quantize_transposed(torch::randn({2, 3, 4}), torch::kFloat8_e4m3fn), std::exception);
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
  EXPECT_LE(rel_err(xr.grad().view({-1, 128}), torch::mm(gq, wq)), 1e-2);         // bf16 output
  EXPECT_LE(rel_err(w.grad(), torch::mm(gq.t(), xq)), 1e-5);                      // fp32 output
}

// on a GPU (sm89+): the MLP's fused op (_scaled_mm, the relu^2 and quantising kernels) against its
// reference in bf16, within the FP8 self-check's tolerance (fast accumulation)
TEST(Fp8Linear, CudaMlpEqualsItsReference) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const CudaDeviceInfo gpu = cuda_device_infos(0, /*with_memory=*/false).at(0);
  if (gpu.major * 10 + gpu.minor < 89) GTEST_SKIP() << "no FP8 below sm89";
  const auto dev = torch::Device(torch::kCUDA, 0);
  torch::manual_seed(23);
  std::vector<Tensor> in = {torch::randn({4, 64, 128}).to(dev, torch::kBFloat16),
                            (torch::randn({512, 128}) * 0.1).to(dev), (torch::randn({128, 512}) * 0.05).to(dev)};
  expect_same([](const std::vector<Tensor>& t) { return kernels_fp8_mlp(t[0], t[1], t[2]); },
              [](const std::vector<Tensor>& t) { return kernels_fp8_mlp_reference(t[0], t[1], t[2]); }, in,
              kernels_check_tolerance(torch::kBFloat16), "cuda fp8 mlp");
}

TEST(Fp8Linear, CpuMatmulEqualsLibTorchScaledMm) {
  torch::manual_seed(11);
  auto [a8, a_inv] = kernels_fp8_quantize(torch::randn({32, 64}), torch::kFloat8_e5m2);
  auto [b8, b_inv] = kernels_fp8_quantize(torch::randn({48, 64}), torch::kFloat8_e4m3fn);
  for (auto out : {torch::kFloat, torch::kBFloat16}) {
    Tensor ours = kernels_fp8_mm(a8, b8.t(), a_inv, b_inv, out, false).to(torch::kFloat);
    Tensor theirs = at::_scaled_mm(a8, b8.t(), a_inv, b_inv, std::nullopt, std::nullopt, out, false).to(torch::kFloat);
    EXPECT_LE((ours - theirs).abs().max().item<double>(),
              (out == torch::kFloat ? 1e-5 : 1e-2) * theirs.abs().max().item<double>());
  }
}

TEST(Fp8Linear, ModelFilterAndTheEvalGuard) {
  EXPECT_TRUE(gpt_fp8_eligible(128, 512));
  EXPECT_FALSE(gpt_fp8_eligible(64, 512));                       // below 128
  EXPECT_FALSE(gpt_fp8_eligible(136, 520));                      // 520 % 16 != 0
  GPTConfig c = gpt_config_from_depth(2, 512, 64, "L", 64, 64);  // width 128
  GPT model = perturbed_gpt(c, 1, 0.05);                         // the init's zero projections would hide every block
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

// the self-check finds its CPU kernel in both dtypes (the emulation); its quantisation kernel is CUDA's alone
TEST(Fp8Linear, CpuKernelDtypes) {
  expect_cpu_kernel_in("fp8_linear", {torch::kFloat, torch::kBFloat16});
  expect_cpu_kernel_in("fp8_quantize", {});
}
