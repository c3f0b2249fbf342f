// Inference weights: int8 per-channel quantization and the int8 linear against an fp64 matmul of
// the original weights, within a bound built from the quantization step; bf16 storage against
// the fp32 masters cast every step; which Linears a model quantizes; widths the kernel refuses.
#include <cmath>
#include <cstdio>
#include <string>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "nanochat/common/error.h"
#include "nanochat/gpt.h"
#include "nanochat/kernels/int8_linear.h"
#include "nanochat/kernels/panel_linear.h"
#include "test_models.h"

using namespace nanochat;
using torch::Tensor;

namespace {

constexpr double kBf16Unit = 1.0 / 256;  // bf16 keeps 8 significant bits: round-to-nearest is within 2^-8 relative

// a weight with a zero row and a row with one outlier (its other weights get a coarse step)
Tensor test_weight(int64_t out, int64_t in, uint64_t seed) {
  auto gen = gpt_make_generator(torch::kCPU, seed);
  Tensor w = at::randn({out, in}, gen, torch::kFloat32) * 0.05;
  if (out > 2) {
    w[1].zero_();
    w[2][0] = 3.0;
  }
  return w;
}

std::string one_line_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST(Int8Quantize, EveryWeightWithinHalfAStep) {
  Tensor w = test_weight(37, 48, 1);
  auto [q, scale] = kernels_int8_quantize(w, torch::kBFloat16, "w");
  ASSERT_EQ(q.scalar_type(), torch::kInt8);
  ASSERT_EQ(scale.scalar_type(), torch::kBFloat16);
  Tensor s = scale.to(torch::kFloat64).unsqueeze(1);
  Tensor err = (w.to(torch::kFloat64) - q.to(torch::kFloat64) * s).abs();
  EXPECT_TRUE((err <= s / 2).all().item<bool>()) << "worst excess " << (err - s / 2).max().item<double>();
  EXPECT_LE(q.abs().max().item<int>(), 127);
  // a row's largest weight maps near 127: the scale is amax/127, not something coarser
  Tensor row_max = q.abs().amax(1).to(torch::kFloat64);
  EXPECT_EQ(row_max[1].item<double>(), 0);  // the zero row stays zero
  row_max[1] = 127;
  EXPECT_GE(row_max.min().item<double>(), 126);
}

TEST(Int8Linear, WithinTheBoundDerivedFromTheQuantizationStep) {
  // rows up to 8 run our matvec (its AVX512 and AVX2 paths; rows of 4096 and more eight weight
  // rows at a time, 21 = two such groups and a tail), up to 16 LibTorch's int8 one or on AVX-512
  // the rows kernel's tiles (to 64 bf16 rows with AVX512-BF16), more rows dequantize and run the
  // GEMM: all checked
  for (bool avx512 : {true, false})
    for (int64_t rows : {1, 3, 8, 16, 17, 40, 64, 65})
      for (auto [in, out] : {std::pair<int64_t, int64_t>{16, 1}, {128, 6}, {64, 65}, {256, 96}, {4096, 21}}) {
        Tensor w = test_weight(out, in, 10 + rows + in);
        auto [q, scale] = kernels_int8_quantize(w, torch::kBFloat16, "w");
        auto gen = gpt_make_generator(torch::kCPU, 100 + rows);
        Tensor x = at::randn({rows, in}, gen, torch::kFloat32).to(torch::kBFloat16);
        Tensor y = kernels_int8_linear(x, q, scale, avx512).to(torch::kFloat64);
        Tensor x64 = x.to(torch::kFloat64), w64 = w.to(torch::kFloat64);
        Tensor ref = at::matmul(x64, w64.t());
        // |x.(w - q s)| <= sum|x| s/2; the dequantized weight rounded to bf16 (GEMM path) and fp32
        // accumulation add at most 2^-8 + in*2^-24 of sum|x||q s|; the bf16 output rounds |y| by 2^-8
        Tensor s = scale.to(torch::kFloat64);
        Tensor deq_abs = (q.to(torch::kFloat64) * s.unsqueeze(1)).abs();
        Tensor sum_abs_x = x64.abs().sum(1, true);
        Tensor quant = sum_abs_x * (s / 2).unsqueeze(0);
        Tensor magnitude = at::matmul(x64.abs(), deq_abs.t());
        Tensor bound = quant + magnitude * (kBf16Unit + (double)in * std::ldexp(1.0, -24)) +
                       (ref.abs() + quant) * kBf16Unit;
        Tensor err = (y - ref).abs();
        EXPECT_TRUE((err <= bound).all().item<bool>())
            << (avx512 ? "avx512 " : "avx2 ") << rows << "x" << in << "->" << out << ": worst excess "
            << (err - bound).max().item<double>();
        const bool tiled = avx512 && kernels_rows_linear_supported() && rows >= 2 &&
                           rows <= (__builtin_cpu_supports("avx512bf16") ? 64 : 16);
        if (rows > 8 && !tiled) continue;
        // our matvec and tiles against the exact product with q*s: their products are exact in
        // fp32, so only the fp32 sums (in*2^-24), the scale's product (2^-24) and the bf16 output
        // (2^-8) remain
        Tensor exact = at::matmul(x64, (q.to(torch::kFloat64) * s.unsqueeze(1)).t());
        Tensor tight = magnitude * ((double)(in + 1) * std::ldexp(1.0, -24)) * (1 + kBf16Unit) +
                       exact.abs() * kBf16Unit;
        Tensor err_exact = (y - exact).abs();
        EXPECT_TRUE((err_exact <= tight).all().item<bool>())
            << (avx512 ? "avx512 " : "avx2 ") << rows << "x" << in << "->" << out << ": worst excess over q*s "
            << (err_exact - tight).max().item<double>();
      }
}

TEST(Int8Linear, KeepsLeadingDimsAndTheActivationDtype) {
  Tensor w = test_weight(32, 64, 3);
  auto [q, scale] = kernels_int8_quantize(w, torch::kBFloat16, "w");
  Tensor x = at::randn({2, 3, 64});
  Tensor y = kernels_int8_linear(x, q, scale);
  EXPECT_EQ(y.sizes(), (std::vector<int64_t>{2, 3, 32}));
  EXPECT_EQ(y.scalar_type(), torch::kFloat32);
  // fp32 activations run as bf16 (2^-8 of sum|x||w| more) against the GEMM of the dequantized weight
  Tensor ref = kernels_int8_linear_reference(x.to(torch::kFloat64), q, scale.to(torch::kFloat64));
  Tensor deq_abs = (q.to(torch::kFloat64) * scale.to(torch::kFloat64).unsqueeze(1)).abs();
  Tensor bound = at::matmul(x.to(torch::kFloat64).abs(), deq_abs.t()) * (3 * kBf16Unit);
  EXPECT_TRUE(((y.to(torch::kFloat64) - ref).abs() <= bound).all().item<bool>());
}

TEST(Bf16Linear, AFewRowsAgainstAnFp64Matmul) {
  // widths with 64-, 32-, 16-wide blocks and tails; rows up to 8 run the matvec, then the tiles
  // (to 16 rows, 32 with AVX512-BF16) or the GEMM;
  // the AVX512-BF16 path (where the CPU has it; rows of 4096 and more eight weight rows at a time,
  // 19 = two such groups and a tail) and the AVX2 one
  for (bool avx512 : {true, false})
    for (int64_t rows : {1, 2, 8, 9, 17, 32})
      for (auto [in, out] : {std::pair<int64_t, int64_t>{1, 3}, {7, 5}, {48, 17}, {100, 33}, {256, 130}, {4098, 19}}) {
        auto gen = gpt_make_generator(torch::kCPU, 7 * rows + in);
        Tensor w = at::randn({out, in}, gen, torch::kFloat32).to(torch::kBFloat16);
        Tensor x = at::randn({1, rows, in}, gen, torch::kFloat32).to(torch::kBFloat16);
        Tensor y = kernels_bf16_linear(x, w, avx512);
        ASSERT_EQ(y.sizes(), (std::vector<int64_t>{1, rows, out}));
        ASSERT_EQ(y.scalar_type(), torch::kBFloat16);
        // bf16 products are exact in fp32; fp32 sums in any order are within in*2^-24 of
        // sum|x||w|; the bf16 output rounds by 2^-8 of |y|
        Tensor x64 = x.to(torch::kFloat64), w64 = w.to(torch::kFloat64);
        Tensor ref = at::matmul(x64, w64.t());
        Tensor bound = at::matmul(x64.abs(), w64.abs().t()) * ((double)in * std::ldexp(1.0, -24)) * (1 + kBf16Unit) +
                       ref.abs() * kBf16Unit;
        Tensor err = (y.to(torch::kFloat64) - ref).abs();
        EXPECT_TRUE((err <= bound).all().item<bool>())
            << (avx512 ? "avx512 " : "avx2 ") << rows << "x" << in << "->" << out << ": worst excess "
            << (err - bound).max().item<double>();
      }
  // fp32 activations with a bf16 weight: at::linear in fp32
  Tensor w = at::randn({4, 16}).to(torch::kBFloat16);
  EXPECT_EQ(kernels_bf16_linear(at::randn({1, 16}), w).scalar_type(), torch::kFloat32);
}

TEST(RowsLinear, FewRowsAgainstAnFp64Matmul) {
  // the tiles of 4 rows by 4 outputs: row counts that fill them, leave 1 to 3 rows over, and
  // 1; output counts with a partial last block; widths with 16-wide steps and tails; fp32, bf16
  // and int8 weights. Both operands are exact in fp32 (bf16 and int8 widen exactly), so every
  // fp32 FMA rounds once: |error| <= (in+1)*2^-24 * sum|x||w| (the +1: the int8 scale's product),
  // and a bf16 output rounds |y| by 2^-8 more
  if (!kernels_rows_linear_supported()) GTEST_SKIP() << "no AVX-512 here: the rows kernel is not used";
  for (torch::ScalarType wt : {torch::kFloat32, torch::kBFloat16, torch::kInt8})
    for (int64_t rows : {1, 2, 3, 4, 5, 8, 13, 16, 32})
      for (auto [in, out] : {std::pair<int64_t, int64_t>{16, 1}, {7, 5}, {100, 33}, {256, 130}, {1040, 9}}) {
        if (wt == torch::kInt8 && !kernels_int8_linear_supported(in)) continue;
        const torch::ScalarType xt = wt == torch::kInt8 ? (rows % 2 ? torch::kFloat32 : torch::kBFloat16) : wt;
        auto gen = gpt_make_generator(torch::kCPU, 11 * rows + in);
        Tensor w = test_weight(out, in, 3 * rows + out), scale;
        if (wt == torch::kInt8) std::tie(w, scale) = kernels_int8_quantize(w, xt, "w");
        else w = w.to(wt);
        Tensor x = at::randn({rows, 1, in}, gen, torch::kFloat32).to(xt);
        Tensor y = kernels_rows_linear(x, w, scale);
        ASSERT_EQ(y.sizes(), (std::vector<int64_t>{rows, 1, out}));
        ASSERT_EQ(y.scalar_type(), xt);
        Tensor w64 = w.to(torch::kFloat64);
        if (scale.defined()) w64 = w64 * scale.to(torch::kFloat64).unsqueeze(1);
        Tensor x64 = x.to(torch::kFloat64);
        Tensor ref = at::matmul(x64, w64.t());
        const double out_unit = xt == torch::kBFloat16 ? kBf16Unit : 0.0;
        Tensor bound = at::matmul(x64.abs(), w64.abs().t()) * ((double)(in + 1) * std::ldexp(1.0, -24)) *
                           (1 + out_unit) +
                       ref.abs() * out_unit;
        Tensor err = (y.to(torch::kFloat64) - ref).abs();
        EXPECT_TRUE((err <= bound).all().item<bool>())
            << c10::toString(wt) << " weights, " << rows << "x" << in << "->" << out << ": worst excess "
            << (err - bound).max().item<double>();
      }
}

TEST(RowsLinear, TheInferenceLinearsRunItForAFewRows) {
  // fp32 weights at 2 to 16 rows go to the rows kernel (bit for bit), 1 row and 17 to ATen; a
  // weight that still trains never does
  if (!kernels_rows_linear_supported()) GTEST_SKIP() << "no AVX-512 here: the rows kernel is not used";
  Tensor w = test_weight(40, 64, 9);
  for (int64_t rows : {1, 2, 16, 17}) {
    Tensor x = at::randn({rows, 64});
    const bool tiled = at::equal(kernels_bf16_linear(x, w), kernels_rows_linear(x, w));
    const bool aten = at::equal(kernels_bf16_linear(x, w), at::linear(x, w));
    EXPECT_TRUE(rows >= 2 && rows <= 16 ? tiled : aten) << rows << " rows";
  }
  Tensor trains = w.clone().requires_grad_(true);
  Tensor x = at::randn({4, 64});
  EXPECT_TRUE(at::equal(kernels_bf16_linear(x, trains), at::linear(x, trains)));
  // what cannot run says so in one line
  std::string msg = one_line_error([&] { kernels_rows_linear(x, w.to(torch::kBFloat16)); });
  EXPECT_NE(msg.find("rows linear: a BFloat16 weight with Float activations"), std::string::npos) << msg;
}

TEST(PanelLinear, PanelsHoldEachBlocksPairsSideBySide) {
  // panels[b][k][o][j] = w[16b + o][2k + j], outputs past the last zero; unpacking gives w back
  for (auto [out, in] : {std::pair<int64_t, int64_t>{1, 2}, {17, 6}, {320, 256}}) {
    Tensor w = at::randn({out, in}).to(torch::kBFloat16);
    Tensor p = kernels_pack_pair_panels(w);
    ASSERT_EQ(p.sizes(), (std::vector<int64_t>{(out + 15) / 16, in / 2, 16, 2}));
    for (int64_t o : {int64_t{0}, out / 2, out - 1})
      for (int64_t k : {int64_t{0}, in - 1})
        EXPECT_EQ(p[o / 16][k / 2][o % 16][k % 2].item<float>(), w[o][k].item<float>()) << o << "," << k;
    if (out % 16) {
      EXPECT_EQ(p[out / 16][0][15][1].item<float>(), 0.f);
    }
    EXPECT_TRUE(at::equal(kernels_unpack_pair_panels(p, out), w));
  }
  std::string msg = one_line_error([] { kernels_pack_pair_panels(at::ones({4, 5})); });
  EXPECT_NE(msg.find("even width"), std::string::npos) << msg;
}

TEST(PanelLinear, AgainstAnFp64Matmul) {
  // tiles of 1 to 6 rows by 1 to 4 blocks of 16 outputs: row counts of one, two and three tiles
  // with uneven splits, output counts with partial blocks and groups, a weight big enough for two
  // threads; bf16 weights, and int8 ones widened in each tile (to 16 rows) or once a group (17+).
  // Every product of two bf16 (or bf16 and an int8 widened exactly) is exact in fp32, each pair
  // adds twice: |error| <= (in+1)*2^-24 * sum|x||w| (the +1: the int8 scale's product), and the
  // bf16 output rounds |y| by 2^-8 more
  // Where the CPU has AMX the rows run once on its tiles (2+ rows, widths a multiple of 32: 256 and
  // 1024 here; 17 and 33 rows leave a tile of one) and once on AVX512-BF16: the tiles add each pair
  // to the fp32 sum twice too, but flush denormal sums to zero, up to 2^-126 an add more.
  if (!kernels_panel_linear_supported()) GTEST_SKIP() << "no AVX512-BF16 here: the panels are not used";
  const bool had_amx = kernels_panel_linear_set_amx(true), amx_here = kernels_panel_linear_amx();
  std::printf("AMX here: %s\n", amx_here ? "yes, both paths tested" : "no, AVX512-BF16 only");
  for (bool amx : {false, true}) {
    if (amx && !amx_here) continue;
    kernels_panel_linear_set_amx(amx);
    for (torch::ScalarType wt : {torch::kBFloat16, torch::kInt8})
      for (int64_t rows : {1, 2, 5, 6, 7, 13, 16, 17, 33, 64})
        for (auto [in, out] :
             {std::pair<int64_t, int64_t>{2, 1}, {16, 5}, {100, 33}, {256, 130}, {1040, 9}, {1024, 1030}}) {
          auto gen = gpt_make_generator(torch::kCPU, 7 * rows + in);
          Tensor w, scale;
          if (wt == torch::kInt8) {
            w = at::randint(-127, 128, {out, in}, gen, torch::kInt8);
            scale = (at::rand({out}, gen, torch::kFloat32) * 0.01 + 0.001).to(torch::kBFloat16);
          } else {
            w = test_weight(out, in, 5 * rows + out).to(torch::kBFloat16);
          }
          Tensor x = at::randn({rows, 1, in}, gen, torch::kFloat32).to(torch::kBFloat16);
          Tensor y = kernels_panel_linear(x, kernels_pack_pair_panels(w), scale, out);
          ASSERT_EQ(y.sizes(), (std::vector<int64_t>{rows, 1, out}));
          ASSERT_EQ(y.scalar_type(), torch::kBFloat16);
          Tensor w64 = w.to(torch::kFloat64);
          if (scale.defined()) w64 = w64 * scale.to(torch::kFloat64).unsqueeze(1);
          Tensor x64 = x.to(torch::kFloat64);
          Tensor ref = at::matmul(x64, w64.t());
          const double flushed = (double)(in + 1) * std::ldexp(1.0, -126);
          Tensor bound = (at::matmul(x64.abs(), w64.abs().t()) * ((double)(in + 1) * std::ldexp(1.0, -24)) + flushed) *
                             (1 + kBf16Unit) +
                         ref.abs() * kBf16Unit;
          Tensor err = (y.to(torch::kFloat64) - ref).abs();
          EXPECT_TRUE((err <= bound).all().item<bool>())
              << c10::toString(wt) << " panels" << (amx ? " on AMX" : "") << ", " << rows << "x" << in << "->" << out
              << ": worst excess " << (err - bound).max().item<double>();
          // with relu^2 (the MLP's c_fc) on the fp32 sums: relu moves no error up, the square
          // turns a sum's error e into e (2|ref| + e), and the one bf16 rounding is of relu(ref)^2
          Tensor sq = kernels_panel_linear(x, kernels_pack_pair_panels(w), scale, out, true).to(torch::kFloat64);
          Tensor e = at::matmul(x64.abs(), w64.abs().t()) * ((double)(in + 1) * std::ldexp(1.0, -24)) + flushed;
          Tensor ref_sq = at::relu(ref).square();
          Tensor sq_bound = e * (2 * ref.abs() + e) * (1 + kBf16Unit) + ref_sq * kBf16Unit;
          EXPECT_TRUE(((sq - ref_sq).abs() <= sq_bound).all().item<bool>())
              << c10::toString(wt) << " panels with relu^2" << (amx ? " on AMX" : "") << ", " << rows << "x" << in
              << "->" << out << ": worst excess " << ((sq - ref_sq).abs() - sq_bound).max().item<double>();
        }
  }
  kernels_panel_linear_set_amx(had_amx);
}

TEST(PanelLinear, OtherRowsRunTheReference) {
  // fp32 rows, and rows that need a gradient, take the unpacked weight through at::linear
  Tensor w = at::randn({20, 32}).to(torch::kBFloat16);
  Tensor p = kernels_pack_pair_panels(w);
  Tensor x = at::randn({3, 32});
  EXPECT_TRUE(at::equal(kernels_panel_linear(x, p, {}, 20), at::linear(x, w.to(torch::kFloat32))));
  EXPECT_TRUE(
      at::equal(kernels_panel_linear(x, p, {}, 20, true), at::relu(at::linear(x, w.to(torch::kFloat32))).square()));
  std::string msg = one_line_error([&] { kernels_panel_linear(x, p, {}, 40); });
  EXPECT_NE(msg.find("panel linear: panels of 2 x 16 pairs for 40 outputs"), std::string::npos) << msg;
  msg = one_line_error([&] { kernels_panel_linear(x.to(torch::kBFloat16), p, at::ones({20}), 20); });
  EXPECT_NE(msg.find("int8 panels take one scale per output"), std::string::npos) << msg;
}

TEST(Int8Linear, AWidthTheKernelCannotTakeSaysSoInOneLine) {
  std::string msg = one_line_error([] { kernels_int8_quantize(at::ones({4, 24}), torch::kBFloat16, "gate"); });
  EXPECT_NE(msg.find("gate has 24 input features"), std::string::npos) << msg;
  EXPECT_NE(msg.find("multiples of 16"), std::string::npos) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  msg = one_line_error([] { gpt_inference_compute_dtype("int4", "cpu"); });
  EXPECT_NE(msg.find("--dtype 'int4'"), std::string::npos) << msg;
}

namespace {

GPTConfig inference_config(int64_t n_embd) {
  GPTConfig c;
  c.sequence_len = 64;
  c.vocab_size = 300;  // padded to 320
  c.n_layer = 2;
  c.n_head = 2;
  c.n_kv_head = 1;
  c.n_embd = n_embd;
  c.window_pattern = "SL";
  return c;
}

}  // namespace

TEST(GptInference, Bfloat16WeightsGiveTheLogitsOfCastingEveryStep) {
  GPT m = perturbed_gpt(inference_config(128), 5, 0.05, torch::kBFloat16);
  Tensor idx = torch::tensor({{1, 5, 9, 200, 7, 3, 3, 18}});
  torch::NoGradGuard ng;
  Tensor before = m->forward(idx);
  ASSERT_EQ(m->blocks[0]->mlp->c_fc->weight.scalar_type(), torch::kFloat32);  // the fp32 master
  gpt_prepare_for_inference(m, "bfloat16");
  for (auto& [name, p] : gpt_named_parameters(m))
    if (p.dim() >= 2) {
      EXPECT_EQ(p.scalar_type(), torch::kBFloat16) << name;
    }
  // where the CPU multiplies bf16 pairs the Linears keep pair panels, their fp32 sums in another
  // order than the GEMM's: each logit within the bf16 rounding of the last Linear's output (2^-8
  // relative, twice: both sides round) plus the same of the largest logit for what came before
  // (its inputs rounded to bf16 at every Linear, which the softcap keeps below 15)
  EXPECT_EQ(m->lm_head->panels, kernels_panel_linear_supported());
  EXPECT_EQ(m->blocks[1]->mlp->c_proj->panels, kernels_panel_linear_supported());
  Tensor after = m->forward(idx);
  if (!m->lm_head->panels) {
    EXPECT_TRUE(at::equal(after, before));
  } else {
    Tensor a = after.to(torch::kFloat64), b = before.to(torch::kFloat64);
    Tensor bound = (a.abs() + b.abs()) * kBf16Unit + b.abs().max() * 4 * kBf16Unit;
    EXPECT_TRUE(((a - b).abs() <= bound).all().item<bool>()) << ((a - b).abs() - bound).max().item<double>();
    // and the loss goes through those logits
    Tensor targets = torch::tensor({{5, 9, 200, -1, 3, 3, 18, 2}});
    Tensor ref = at::cross_entropy_loss(a.view({-1, 300}), targets.view({-1}), {}, at::Reduction::Mean, -1);
    EXPECT_NEAR(gpt_loss(m, idx, targets).item<double>(), ref.item<double>(), 1e-5);
  }
}

TEST(GptInference, Int8QuantizesTheBlocksAndLmHeadAndTheLossFollows) {
  GPT m = perturbed_gpt(inference_config(128), 5, 0.05, torch::kBFloat16);
  gpt_prepare_for_inference(m, "int8");
  for (auto& b : m->blocks) {
    for (auto* l : {&b->attn->c_q, &b->attn->c_k, &b->attn->c_v, &b->attn->c_proj, &b->mlp->c_fc, &b->mlp->c_proj})
      EXPECT_TRUE((*l)->int8() && (*l)->weight.scalar_type() == torch::kInt8);
    if (b->attn->ve_gate) {
      EXPECT_FALSE(b->attn->ve_gate->int8());  // 12 wide: stays bf16
    }
  }
  EXPECT_TRUE(m->lm_head->int8());
  EXPECT_FALSE(m->smear_gate->int8());
  EXPECT_EQ(m->smear_gate->weight.scalar_type(), torch::kBFloat16);
  // gpt_loss with an int8 lm_head goes through the logits: the cross-entropy of forward's
  Tensor idx = torch::tensor({{1, 5, 9, 200, 7, 3, 3, 18}}), targets = torch::tensor({{5, 9, 200, -1, 3, 3, 18, 2}});
  torch::NoGradGuard ng;
  Tensor logits = m->forward(idx).to(torch::kFloat64).view({-1, 300});
  Tensor ref = at::cross_entropy_loss(logits, targets.view({-1}), {}, at::Reduction::Mean, -1);
  EXPECT_NEAR(gpt_loss(m, idx, targets).item<double>(), ref.item<double>(), 1e-5);
}

TEST(GptInference, AModelTheInt8KernelCannotTakeFailsBeforeAnythingChanges) {
  GPT m = perturbed_gpt(inference_config(72), 5, 0.05, torch::kBFloat16);  // 72 wide: not a multiple of 16
  std::string msg = one_line_error([&] { gpt_prepare_for_inference(m, "int8"); });
  EXPECT_NE(msg.find("transformer.h.0.attn.c_q.weight has 72 input features"), std::string::npos) << msg;
  EXPECT_NE(msg.find("--dtype bfloat16"), std::string::npos) << msg;
  EXPECT_EQ(m->blocks[0]->attn->c_q->weight.scalar_type(), torch::kFloat32);
  EXPECT_FALSE(m->lm_head->int8());
  msg = one_line_error([&] { gpt_prepare_for_inference(m, "float32"); });  // built in bf16
  EXPECT_NE(msg.find("built in"), std::string::npos) << msg;
}
