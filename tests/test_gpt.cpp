// Tests for the gpt module: hand-computed pieces (rotary, softcap,
// smear, backout, init), upstream's parameter count table, KV-cache decoding against the full forward,
// a float64 finite-difference gradient check, and the forward against an independent
// PyTorch implementation written independently of this code (fixtures/gpt_reference.py).
#include <cmath>
#include <fstream>
#include <malloc.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "nanochat/attention.h"
#include "nanochat/common/error.h"
#include "nanochat/gpt.h"
#include "nanochat/gpt/memory.h"
#include "nanochat/kernels.h"
#include "test_models.h"
#include "test_util.h"

using namespace nanochat;
using torch::Tensor;

namespace {

GPTConfig tiny_config(int64_t seq_len = 512, int64_t n_layer = 3, int64_t n_kv_head = 1) {
  GPTConfig c;
  c.sequence_len = seq_len;  // short windows are 128 at 512
  c.vocab_size = 300;        // padded to 320
  c.n_layer = n_layer;
  c.n_head = 2;  // head dim 64
  c.n_kv_head = n_kv_head;
  c.n_embd = 128;
  c.window_pattern = "SSSL";
  return c;
}

GPT tiny_model(const GPTConfig& c, torch::ScalarType dtype = torch::kFloat32) {
  return perturbed_gpt(c, 42, 0.05, dtype);
}

Tensor random_tokens(int64_t B, int64_t T, int64_t vocab, uint64_t seed) {
  auto gen = gpt_make_generator(torch::kCPU, seed);
  return at::randint(vocab, {B, T}, gen, torch::kLong);
}

void write_raw(const std::string& path, const Tensor& t) {
  Tensor c = t.contiguous().cpu();
  std::ofstream f(path, std::ios::binary);
  f.write((const char*)c.data_ptr(), c.numel() * c.element_size());
}

Tensor read_f32(const std::string& path, std::vector<int64_t> shape) {
  std::string bytes = read_file(path);
  Tensor t = torch::empty(shape, torch::kFloat32);
  EXPECT_EQ((size_t)t.numel() * 4, bytes.size()) << path;
  std::memcpy(t.data_ptr(), bytes.data(), std::min(bytes.size(), (size_t)t.numel() * 4));
  return t;
}

}  // namespace

// ---- configuration and counting ----------------------------------------------------------
TEST(GptConfig, DepthTableMatchesUpstreamsParameterCounts) {
  struct Row {
    int64_t depth, d, heads, ve_layers, total, tm, scaling;
  };
  const Row rows[] = {{12, 768, 6, 6, 286261730, 84935088, 110100912},
                      {16, 1024, 8, 8, 536871738, 201327360, 234881792},
                      {20, 1280, 10, 10, 896533746, 393217200, 435160240},
                      {24, 1536, 12, 12, 1384122122, 679478976, 729810624},
                      {26, 1664, 13, 13, 1681786938, 863897580, 918423532}};
  for (const Row& r : rows) {
    GPTConfig c = gpt_config_from_depth(r.depth, 32768);
    EXPECT_EQ(c.n_embd, r.d);
    EXPECT_EQ(c.n_head, r.heads);
    EXPECT_EQ(c.n_kv_head, r.heads);
    EXPECT_EQ(c.head_dim(), 128);
    int64_t ve = 0;
    for (int64_t i = 0; i < c.n_layer; i++) ve += gpt_has_ve(i, c.n_layer);
    EXPECT_EQ(ve, r.ve_layers);
    ScalingParams p = gpt_num_scaling_params(c);
    EXPECT_EQ(p.total, r.total) << "depth " << r.depth;
    EXPECT_EQ(p.transformer_matrices, r.tm) << "depth " << r.depth;
    EXPECT_EQ(p.transformer_matrices + p.lm_head, r.scaling) << "depth " << r.depth;
    EXPECT_EQ(p.scalars, 2 * r.depth + 26);
    // the same numbers from a model built on the meta device (shapes only)
    GPT m(c, torch::Device(torch::kMeta));
    ScalingParams q = gpt_count_params(m);
    EXPECT_EQ(q.total, p.total);
    EXPECT_EQ(q.wte, p.wte);
    EXPECT_EQ(q.value_embeds, p.value_embeds);
    EXPECT_EQ(q.lm_head, p.lm_head);
    EXPECT_EQ(q.transformer_matrices, p.transformer_matrices);
    EXPECT_EQ(q.scalars, p.scalars);
  }
  EXPECT_EQ(gpt_config_from_depth(25, 32768).n_embd, 1664);  // 1600 rounds up
}

TEST(GptConfig, FlopsPerTokenOfD24ByHand) {
  GPTConfig c = gpt_config_from_depth(24, 32768);
  // matmul params: 679,478,976 + lm_head 50,331,648 + smear_gate 24
  EXPECT_EQ(gpt_num_matmul_params(c), 729810648);
  // 6 * 729,810,648 + 12*1536*(6 layers x 2048 + 18 layers x 512)
  EXPECT_EQ(gpt_estimate_flops(c), 6LL * 729810648 + 12LL * 1536 * (6 * 2048 + 18 * 512));
  EXPECT_NEAR(gpt_estimate_flops(c) / 1e9, 4.775, 0.0005);
  // S = 1024 (the LEADERBOARD Run 1 era) gives 4.945e9 per token
  c.sequence_len = 4096;  // only to get S=1024 from the window rule; attention at T=2048:
  int64_t attn = 0;
  for (int64_t w : gpt_window_sizes(c)) attn += 12 * 1536 * std::min<int64_t>(w == 4096 ? 2048 : w, 2048);
  EXPECT_NEAR((6.0 * 729810648 + attn) / 1e9, 4.945, 0.001);
  c.sequence_len = 2048;
  // decode at ctx 1000: every window >= 512 caps S layers at 512
  EXPECT_EQ(gpt_estimate_decode_flops(c, 1000), 2LL * 729810648 + 4LL * 1536 * (6 * 1000 + 18 * 512));
  // prefill of 600: S layers w=512, L layers w=600
  int64_t s_part = 512 * 513 / 2 + 88 * 512, l_part = 600 * 601 / 2;
  EXPECT_EQ(gpt_estimate_prefill_flops(c, 600), 2LL * 729810648 * 600 + 4LL * 1536 * (18 * s_part + 6 * l_part));
  EXPECT_EQ(gpt_kv_bytes_per_token(c, torch::kBFloat16), 24 * 2 * 12 * 128 * 2);
  EXPECT_EQ(gpt_kv_read_bytes(c, 1000, torch::kBFloat16), 2LL * 12 * 128 * 2 * (6 * 1000 + 18 * 512));
}

TEST(GptMemory, PartsByHandForOneSmallConfig) {
  // d2, C = 128 (2 heads of 64), vocab 512, T = 64, 4 rows (N = 256 tokens), bf16, 2 ranks;
  // layer 1 has the value embedding (i % 2 == (L-1) % 2)
  GPTConfig c = gpt_config_from_depth(2, 512, 64, "L", 64, 64);
  TrainMemory m = gpt_train_memory(c, 4, torch::kBFloat16, 2);
  // params: matrices 2 x (4 x 128^2 + 2 x 512 x 128) + ve_gate 2 x 12 = 393240, lm_head 65536,
  // scalars 2 + 2 + 24 + 1 + 1 = 30 (fp32); wte 65536 and one value embedding 65536 (bf16)
  EXPECT_EQ(m.weights, 4 * (393240 + 65536 + 30) + 2 * (65536 + 65536));
  EXPECT_EQ(m.grads, m.weights);
  // Muon, fp32, ceil(K/2) matrices per rank: 128x128 K=8 -> 4 x (16384 + 128); 512x128 and
  // 128x512 K=2 -> 1 x (65536 + 512) each; ve_gate 2x12 K=1 -> 1 x (24 + 12).
  // AdamW, two moments, rows/2 of the big ones: lm_head 2 x 32768 x 4, wte and ve 2 x 32768 x 2;
  // the small ones whole: resid and x0 2 x 2 x 4 each, smear gate 2 x 24 x 4, two lambdas 2 x 4 each
  EXPECT_EQ(m.optimizer,
            4 * (4 * 16512 + 2 * 66048 + 36) + 2 * 32768 * 4 + 2 * (2 * 32768 * 2) + (16 + 16 + 192 + 8 + 8));
  EXPECT_EQ(m.weight_copies, 393240 * 2);
  // per token: 12 bf16 vectors of 128 a layer + layer 1's block input; fp32 (2 + 2 + 2 + 2) a
  // layer; the value embedding with its sigmoid and gate (128 + 2 + 2); once 4 vectors, an
  // rstd and 3 smear numbers
  const int64_t per_token = 2 * 12 * 128 * 2 + 128 * 2 + 2 * 4 * 8 + (128 + 4) * 2 + (4 * 128 * 2 + 4 + 3 * 2);
  EXPECT_EQ(per_token, 7762);
  EXPECT_EQ(m.activations, 256 * per_token);
  EXPECT_EQ(m.loss_saved, 256 * 128 * 2 + 512 * 128 * 4);                 // d x in bf16, d lm_head in fp32
  EXPECT_EQ(m.loss_transient, 512 * 128 * 2 + 256 * 512 * 2 + 256 * 16);  // lm_head cast, all rows in one chunk
  EXPECT_EQ(m.backward, 256 * 8 * 128 * 2 + (4 * 16384 + 2 * 65536) * 6);
  EXPECT_EQ(m.optimizer_step, 2 * 4 * 393240 + 4 * 65536 + 2 * 131072);
  EXPECT_EQ(m.total, 2 * m.weights + m.optimizer + m.weight_copies + m.activations + m.loss_saved + m.backward);

  // FP8: the six block matrices as 1-byte weights (ve_gate still cast to bf16); per token and
  // layer 6 bf16 vectors (no norms, no MLP activation: backward recomputes c_fc's output) + layer
  // 1's block input, the fp8 inputs C (q, k and v share theirs) + C (attn c_proj) + 2C (c_fc's,
  // row-major and transposed) + 4C (mlp c_proj), and layer 1's norm that ve_gate reads
  TrainMemory f = gpt_train_memory(c, 4, torch::kBFloat16, 2, /*fp8=*/true);
  EXPECT_EQ(f.weight_copies, 2 * 196608 + 24 * 2);
  EXPECT_EQ(f.activations,
            256 * (2 * 6 * 128 * 2 + 128 * 2 + 2 * 4 * 8 + (128 + 4) * 2 + 1034 + 2 * 8 * 128 + 128 * 2));
  EXPECT_EQ(f.weights, m.weights);
  EXPECT_EQ(f.optimizer, m.optimizer);
}

static int64_t heap_in_use() {
  struct mallinfo2 mi = mallinfo2();  // every arena, plus mmapped chunks
  return (int64_t)(mi.uordblks + mi.hblkhd);
}

TEST(GptMemory, ActivationsAreWhatAutogradKeepsOnTheCpu) {
  // what a forward with the fused kernels leaves allocated until backward, measured by
  // glibc's heap, against the estimate's activations + the fused loss's saved gradients
  // (fp32 on the CPU: no weight copies)
  if (!kernels_enabled()) GTEST_SKIP() << "the estimate counts what the fused kernels keep (NANOCHAT_KERNELS=0)";
  GPTConfig c = gpt_config_from_depth(4, 512, 128, "SSSL", 32, 64);  // C = 128, 4 layers, ve on 1 and 3
  GPT m(c);
  gpt_init_weights(m, 1);
  const int64_t B = 4;
  Tensor x = torch::randint(0, 512, {B, c.sequence_len}, torch::kLong);
  Tensor y = torch::randint(0, 512, {B, c.sequence_len}, torch::kLong);
  gpt_loss(m, x, y).backward();  // once: lazily made tables and pools, and the grads
  const int64_t before = heap_in_use();
  Tensor loss = gpt_loss(m, x, y);
  const int64_t kept = heap_in_use() - before;
  TrainMemory est = gpt_train_memory(c, B, torch::kFloat32, 1);
  const double expected = (double)(est.activations + est.loss_saved);
  std::printf("forward kept %lld bytes, estimated %.0f (ratio %.4f)\n", (long long)kept, expected,
              (double)kept / expected);
  EXPECT_NEAR((double)kept / expected, 1.0, 0.05) << "kept " << kept << " bytes, estimated " << expected;
  loss.backward();

  // the FP8 path (which the CPU runs too): 1-byte weights and matmul inputs, no MLP activation
  gpt_set_fp8(m, true);
  gpt_loss(m, x, y).backward();
  const int64_t before8 = heap_in_use();
  Tensor loss8 = gpt_loss(m, x, y);
  const int64_t kept8 = heap_in_use() - before8;
  TrainMemory est8 = gpt_train_memory(c, B, torch::kFloat32, 1, /*fp8=*/true);
  const double expected8 = (double)(est8.activations + est8.loss_saved + est8.weight_copies);
  std::printf("fp8 forward kept %lld bytes, estimated %.0f (ratio %.4f)\n", (long long)kept8, expected8,
              (double)kept8 / expected8);
  EXPECT_NEAR((double)kept8 / expected8, 1.0, 0.05) << "kept " << kept8 << " bytes, estimated " << expected8;
  loss8.backward();
}

TEST(GptMemory, BatchFitOnAnEightyGigabyteCard) {
  // 90% of 80 GB per rank, 8 ranks, bf16: upstream's 32 for d20, 16 for d24 (the speedrun's)
  const int64_t budget = int64_t(80) * 1000 * 1000 * 1000 / 10 * 9;
  EXPECT_EQ(gpt_train_memory_fit(gpt_config_from_depth(20, 32768), torch::kBFloat16, 8, budget, 32), 32);
  EXPECT_EQ(gpt_train_memory_fit(gpt_config_from_depth(24, 32768), torch::kBFloat16, 8, budget, 32), 16);
  EXPECT_EQ(gpt_train_memory_fit(gpt_config_from_depth(20, 32768), torch::kBFloat16, 8, budget, 8), 8);  // capped
  EXPECT_EQ(gpt_train_memory_fit(gpt_config_from_depth(20, 32768), torch::kBFloat16, 8, int64_t(1) << 30, 32), 0);
}

TEST(GptConfig, RealModelCountsEqualArithmetic) {
  GPTConfig c = tiny_config();
  GPT m(c);
  ScalingParams a = gpt_num_scaling_params(c), b = gpt_count_params(m);
  EXPECT_EQ(a.total, b.total);
  EXPECT_EQ(a.value_embeds, b.value_embeds);
  EXPECT_EQ(a.transformer_matrices, b.transformer_matrices);
  int64_t sum = 0, linear = 0;
  for (auto& [name, p] : gpt_named_parameters(m)) {
    sum += p.numel();
    if (p.dim() == 2 && name.find("wte") == std::string::npos && name.find("value_embeds") == std::string::npos)
      linear += p.numel();
  }
  EXPECT_EQ(sum, a.total);
  EXPECT_EQ(linear, gpt_num_matmul_params(c));
}

TEST(GptConfig, JsonRoundTripAndErrors) {
  GPTConfig c = gpt_config_from_depth(20, 65536, 1024, "SL");
  nlohmann::json j = gpt_config_to_json(c);
  EXPECT_EQ(j["n_embd"], 1280);
  EXPECT_EQ(j["window_pattern"], "SL");
  GPTConfig d = gpt_config_from_json(j);
  EXPECT_EQ(gpt_config_to_json(d), j);
  j.erase("window_pattern");
  EXPECT_EQ(gpt_config_from_json(j).window_pattern, "L");  // old checkpoints
  j["n_head"] = 7;
  EXPECT_THROW(gpt_config_from_json(j), Error);
  nlohmann::json k = gpt_config_to_json(c);
  k.erase("n_layer");
  try {
    gpt_config_from_json(k);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("n_layer"), std::string::npos);
  }
  c.window_pattern = "SXL";
  EXPECT_THROW(gpt_config_validate(c), Error);
  EXPECT_EQ(gpt_padded_vocab(32768), 32768);
  EXPECT_EQ(gpt_padded_vocab(300), 320);
  EXPECT_EQ(gpt_padded_vocab(65), 128);
}

TEST(GptConfig, WindowSizes) {
  GPTConfig c = gpt_config_from_depth(12, 32768);
  std::vector<int64_t> w = gpt_window_sizes(c);
  std::vector<int64_t> want = {512, 512, 512, 2048, 512, 512, 512, 2048, 512, 512, 512, 2048};
  EXPECT_EQ(w, want);
  c.n_layer = 6;  // SSSLSS -> last forced long
  want = {512, 512, 512, 2048, 512, 2048};
  EXPECT_EQ(gpt_window_sizes(c), want);
  c.sequence_len = 512;  // ceil(512/4) -> 128
  c.window_pattern = "sl";
  want = {128, 512, 128, 512, 128, 512};
  EXPECT_EQ(gpt_window_sizes(c), want);
  c.sequence_len = 1000;  // ceil(250/128)*128 = 256
  c.window_pattern = "S";
  EXPECT_EQ(gpt_window_sizes(c)[0], 256);
  EXPECT_EQ(gpt_window_sizes(c).back(), 1000);
}

// ---- hand-computed pieces ------------------------------------------------------------------
TEST(GptOps, RotaryOfKnownVectors) {
  auto [cos, sin] = gpt_rotary_tables(8, 4, torch::kFloat32, torch::kCPU);
  EXPECT_EQ(cos.sizes(), (std::vector<int64_t>{1, 8, 1, 2}));
  const double f1 = 1.0 / std::sqrt(100000.0);  // inv_freq = [1, 100000^(-2/4)]
  for (int64_t t = 0; t < 8; t++) {
    EXPECT_NEAR(cos[0][t][0][0].item<double>(), std::cos((double)t), 1e-6);
    EXPECT_NEAR(sin[0][t][0][1].item<double>(), std::sin(t * f1), 1e-6);
  }
  // x = [1,0,0,0] at position t -> [cos t, 0, -sin t, 0]; x = [0,1,0,2] -> rotation of the
  // pair (x[1], x[3]) = (1,2) by -theta: [0, cos a + 2 sin a, 0, -sin a + 2 cos a]. The model
  // rotates inside kernels_rotary_norm, which then divides by the rms (0.5 and sqrt(5/4) here,
  // a rotation keeps it) and multiplies by the scale: a scale equal to the rms undoes the norm.
  Tensor x = torch::zeros({1, 8, 1, 4});
  x.select(3, 0).fill_(1.0);
  Tensor y = kernels_rotary_norm(x, cos, sin, 0.5);
  Tensor x2 = torch::tensor({0.f, 1.f, 0.f, 2.f}).view({1, 1, 1, 4}).expand({1, 8, 1, 4}).contiguous();
  Tensor y2 = kernels_rotary_norm(x2, cos, sin, std::sqrt(1.25));
  for (int64_t t = 0; t < 8; t++) {
    EXPECT_NEAR(y[0][t][0][0].item<double>(), std::cos((double)t), 1e-6);
    EXPECT_NEAR(y[0][t][0][1].item<double>(), 0.0, 1e-7);
    EXPECT_NEAR(y[0][t][0][2].item<double>(), -std::sin((double)t), 1e-6);
    const double a = t * f1;
    EXPECT_NEAR(y2[0][t][0][1].item<double>(), std::cos(a) + 2 * std::sin(a), 1e-6);
    EXPECT_NEAR(y2[0][t][0][3].item<double>(), -std::sin(a) + 2 * std::cos(a), 1e-6);
  }
  // the model's cache: 10 x sequence_len positions in the compute dtype
  GPT m(tiny_config(), torch::kCPU, torch::kBFloat16);
  EXPECT_EQ(m->cos.sizes(), (std::vector<int64_t>{1, 5120, 1, 32}));
  EXPECT_EQ(m->cos.scalar_type(), torch::kBFloat16);
}

TEST(GptOps, SoftcapAndNorm) {
  Tensor l = torch::tensor({0.0, 15.0, -30.0, 1000.0}, torch::kFloat64);
  Tensor s = gpt_softcap(l);
  EXPECT_DOUBLE_EQ(s[0].item<double>(), 0.0);
  EXPECT_NEAR(s[1].item<double>(), 15 * std::tanh(1.0), 1e-12);
  EXPECT_NEAR(s[2].item<double>(), 15 * std::tanh(-2.0), 1e-12);
  EXPECT_NEAR(s[3].item<double>(), 15.0, 1e-9);
  Tensor x = torch::tensor({3.0f, 4.0f});  // rms = sqrt(12.5)
  Tensor n = gpt_rms_norm(x);
  EXPECT_NEAR(n[0].item<double>(), 3 / std::sqrt(12.5), 1e-6);
  EXPECT_NEAR(n[1].item<double>(), 4 / std::sqrt(12.5), 1e-6);
}

TEST(GptOps, SmearOnChosenInputs) {
  // C = 24, gate weights w; x_t = (t+1) * ones. gate_t = lambda * sigmoid(w . x_t[:24])
  Tensor x = torch::stack({torch::full({24}, 1.0), torch::full({24}, 2.0), torch::full({24}, 3.0)}).unsqueeze(0);
  Tensor w = torch::full({1, 24}, 0.01);
  Tensor lam = torch::tensor({0.5});
  Tensor y = gpt_smear(x, w, lam);
  auto sig = [](double z) { return 1 / (1 + std::exp(-z)); };
  EXPECT_NEAR(y[0][0][5].item<double>(), 1.0, 1e-6);  // the first position is untouched
  EXPECT_NEAR(y[0][1][5].item<double>(), 2.0 + 0.5 * sig(0.01 * 24 * 2) * 1.0, 1e-6);
  EXPECT_NEAR(y[0][2][7].item<double>(), 3.0 + 0.5 * sig(0.01 * 24 * 3) * 2.0, 1e-6);
  // decode form: one token plus the previous embedding gives the same last position
  Tensor d = gpt_smear(x.narrow(1, 2, 1), w, lam, x.narrow(1, 1, 1));
  EXPECT_TRUE(torch::allclose(d[0][0], y[0][2]));
  EXPECT_TRUE(torch::equal(gpt_smear(x.narrow(1, 0, 1), w, lam), x.narrow(1, 0, 1)));
}

TEST(GptInit, ValuesAndOrder) {
  GPTConfig c = tiny_config();
  GPT m(c);
  gpt_init_weights(m);
  const double s = std::sqrt(3.0) / std::sqrt(128.0);
  for (auto& b : m->blocks) {
    EXPECT_EQ(b->attn->c_proj->weight.abs().max().item<float>(), 0.f);
    EXPECT_EQ(b->mlp->c_proj->weight.abs().max().item<float>(), 0.f);
    EXPECT_LE(b->attn->c_q->weight.abs().max().item<double>(), s);
    EXPECT_LE(b->mlp->c_fc->weight.abs().max().item<double>(), 0.4 * s);
    EXPECT_GT(b->mlp->c_fc->weight.abs().max().item<double>(), 0.39 * s);
    if (b->attn->ve_gate) {
      EXPECT_GE(b->attn->ve_gate->weight.min().item<double>(), 0.0);
      EXPECT_LE(b->attn->ve_gate->weight.max().item<double>(), 0.02);
    }
  }
  // L = 3: resid 1.15, 1.10, 1.05; x0 0.20, 0.125, 0.05
  EXPECT_TRUE(torch::allclose(m->resid_lambdas, torch::tensor({1.15f, 1.10f, 1.05f})));
  EXPECT_TRUE(torch::allclose(m->x0_lambdas, torch::tensor({0.20f, 0.125f, 0.05f})));
  EXPECT_EQ(m->smear_lambda.item<float>(), 0.f);
  EXPECT_FLOAT_EQ(m->backout_lambda.item<float>(), 0.2f);
  EXPECT_NEAR(m->wte->weight.std().item<double>(), 0.8, 0.01);
  EXPECT_NEAR(m->lm_head->weight.std().item<double>(), 0.001, 0.00002);
  EXPECT_NEAR(m->ve[2]->weight.std().item<double>(), s / std::sqrt(3.0), 0.002);  // U(-s,s) std
  EXPECT_FALSE(m->ve[1]);                                                         // L=3: VE on layers 0 and 2
  // the same seed gives the same weights; another seed different ones
  GPT m2(c);
  gpt_init_weights(m2);
  GPT m3(c);
  gpt_init_weights(m3, 7);
  auto p1 = gpt_named_parameters(m), p2 = gpt_named_parameters(m2), p3 = gpt_named_parameters(m3);
  for (size_t i = 0; i < p1.size(); i++) EXPECT_TRUE(torch::equal(p1[i].second, p2[i].second)) << p1[i].first;
  EXPECT_FALSE(torch::equal(m->wte->weight, m3->wte->weight));
  // embeddings stored in the compute dtype, everything else fp32
  GPT b(c, torch::kCPU, torch::kBFloat16);
  gpt_init_weights(b);
  for (auto& [name, p] : gpt_named_parameters(b)) {
    bool emb = name == "transformer.wte.weight" || name.rfind("value_embeds.", 0) == 0;
    EXPECT_EQ(p.scalar_type(), emb ? torch::kBFloat16 : torch::kFloat32) << name;
  }
  GPT f16(c, torch::kCPU, torch::kFloat16);
  gpt_init_weights(f16);
  EXPECT_EQ(f16->wte->weight.scalar_type(), torch::kFloat32);  // GradScaler needs fp32 tables
}

TEST(GptForward, IdentityBlocksGiveHandComputedLogits) {
  // right after init every c_proj is zero, so each block is the identity and the forward
  // reduces to embedding, norm, smear, the lambda mix, backout, norm, lm_head, softcap
  GPTConfig c = tiny_config(512, 4);
  GPT m(c);
  gpt_init_weights(m);
  {
    torch::NoGradGuard ng;
    m->smear_lambda.fill_(0.7);
    m->backout_lambda.fill_(0.3);
  }
  Tensor idx = random_tokens(2, 9, c.vocab_size, 3);
  Tensor logits = m->forward(idx);
  EXPECT_EQ(logits.sizes(), (std::vector<int64_t>{2, 9, 300}));
  torch::NoGradGuard ng;
  auto rms = [](const Tensor& x) { return x / (x.pow(2).mean(-1, true) + 1.1920929e-07).sqrt(); };
  Tensor e = rms(m->wte->weight.index_select(0, idx.flatten()).view({2, 9, 128}));
  Tensor g = 0.7 * torch::sigmoid(torch::matmul(e.narrow(-1, 0, 24), m->smear_gate->weight.t()));
  Tensor s = e.clone();
  s.narrow(1, 1, 8).add_(g.narrow(1, 1, 8) * e.narrow(1, 0, 8));
  Tensor x = s, xb;
  for (int64_t i = 0; i < 4; i++) {
    x = m->resid_lambdas[i].item<double>() * x + m->x0_lambdas[i].item<double>() * s;
    if (i == 2) xb = x;  // backout layer n_layer // 2
  }
  Tensor h = rms(x - 0.3 * xb);
  Tensor want = torch::matmul(h, m->lm_head->weight.t()).narrow(-1, 0, 300);
  want = 15 * torch::tanh(want / 15);
  EXPECT_LT((logits - want).abs().max().item<double>(), 1e-5);
}

TEST(GptForward, LossReductionsAndIgnoreIndex) {
  GPTConfig c = tiny_config(64, 2, 2);
  GPT m = tiny_model(c);
  Tensor idx = random_tokens(2, 16, c.vocab_size, 5);
  Tensor tgt = random_tokens(2, 16, c.vocab_size, 6);
  tgt[0][3] = -1;
  tgt[1][0] = -1;
  torch::NoGradGuard ng;
  Tensor none = gpt_loss(m, idx, tgt, LossReduction::none);
  EXPECT_EQ(none.sizes(), (std::vector<int64_t>{32}));
  Tensor logp = torch::log_softmax(m->forward(idx), -1).view({32, 300});
  double sum = 0;
  for (int64_t n = 0; n < 32; n++) {
    int64_t t = tgt.view({32})[n].item<int64_t>();
    double want = t < 0 ? 0.0 : -logp[n][t].item<double>();
    EXPECT_NEAR(none[n].item<double>(), want, 1e-5);
    sum += want;
  }
  EXPECT_NEAR(gpt_loss(m, idx, tgt).item<double>(), sum / 30, 1e-5);  // mean over 30 kept
  EXPECT_TRUE(std::isnan(gpt_loss(m, idx, torch::full({2, 16}, -1, torch::kLong)).item<double>()));
}

// ---- KV cache through the model ------------------------------------------------------------
TEST(GptKVCache, GreedyDecodeEqualsFullForward) {
  GPTConfig c = tiny_config();  // windows 128, 128, 512; the context reaches 152
  GPT m = tiny_model(c);
  m->eval();
  torch::NoGradGuard ng;
  std::vector<int64_t> prompt;
  Tensor p = random_tokens(1, 120, c.vocab_size, 21);
  for (int64_t i = 0; i < 120; i++) prompt.push_back(p[0][i].item<int64_t>());
  std::vector<int64_t> naive = gpt_generate(m, prompt, 32, 0.0);
  ASSERT_EQ(naive.size(), 32u);

  KVCache cache = m->make_kv_cache(1, 160);
  Tensor ids = torch::tensor(prompt, torch::kLong).unsqueeze(0);
  Tensor logits = m->forward(ids, &cache).select(1, 119);
  EXPECT_EQ(cache.get_pos(), 120);
  std::vector<int64_t> seq = prompt, cached;
  double max_diff = 0;
  for (int step = 0; step < 32; step++) {
    Tensor full = m->forward(torch::tensor(seq, torch::kLong).unsqueeze(0)).select(1, (int64_t)seq.size() - 1);
    max_diff = std::max(max_diff, (full - logits).abs().max().item<double>());
    int64_t next = logits.argmax(-1).item<int64_t>();
    cached.push_back(next);
    seq.push_back(next);
    logits = m->forward(torch::tensor({next}, torch::kLong).view({1, 1}), &cache).select(1, 0);
  }
  EXPECT_EQ(cached, naive);
  EXPECT_LT(max_diff, 1e-5);
  EXPECT_EQ(cache.get_pos(), 152);

  // engine-style: a batch-1 prefill cache copied into a batch of 2, both rows decode alike
  KVCache pre = m->make_kv_cache(1, 120);
  Tensor last = m->forward(ids, &pre).select(1, 119);
  KVCache dec = m->make_kv_cache(2, 140);
  dec.prefill(pre);
  EXPECT_EQ(dec.get_pos(), 120);
  EXPECT_EQ(dec.prev_embedding.size(0), 2);
  int64_t t0 = last.argmax(-1).item<int64_t>();
  Tensor two = m->forward(torch::full({2, 1}, t0, torch::kLong), &dec);
  // the two rows may take different summation orders (a GEMM splits rows across threads), so
  // they agree within the same rounding bound as the cache against the full forward, not bitwise
  EXPECT_LT((two[0] - two[1]).abs().max().item<double>(), 1e-5);
  Tensor ref = m->forward(
      torch::tensor(std::vector<int64_t>(seq.begin(), seq.begin() + 121), torch::kLong).unsqueeze(0));
  EXPECT_LT((two[0][0] - ref[0][120]).abs().max().item<double>(), 1e-5);
}

TEST(GptGenerate, SeededSamplingAndTopK) {
  GPTConfig c = tiny_config(64, 2, 2);
  GPT m = tiny_model(c);
  std::vector<int64_t> prompt = {1, 2, 3};
  auto a = gpt_generate(m, prompt, 8, 1.0, 0, 5), b = gpt_generate(m, prompt, 8, 1.0, 0, 5);
  EXPECT_EQ(a, b);
  // top_k = 1 is greedy whatever the temperature
  EXPECT_EQ(gpt_generate(m, prompt, 8, 2.0, 1, 9), gpt_generate(m, prompt, 8, 0.0));
  std::vector<int64_t> seen;
  gpt_generate(m, prompt, 4, 0.8, 5, 1, [&](int64_t t) { seen.push_back(t); });
  EXPECT_EQ(seen.size(), 4u);
  EXPECT_THROW(gpt_generate(m, {}, 4), Error);
}

// ---- loading named tensors -----------------------------------------------------------------
TEST(GptState, LoadNamedTensorsChecksEverything) {
  GPTConfig c = tiny_config(64, 2, 2);
  GPT src = tiny_model(c), dst(c);
  gpt_init_weights(dst);
  auto named = gpt_named_parameters(src);
  std::vector<std::pair<std::string, Tensor>> copy;
  for (auto& [n, t] : named) copy.emplace_back(n, t.detach().clone());
  gpt_load_named_tensors(dst, copy);
  Tensor idx = random_tokens(1, 10, c.vocab_size, 1);
  torch::NoGradGuard ng;
  EXPECT_TRUE(torch::equal(src->forward(idx), dst->forward(idx)));

  auto expect_error = [&](std::vector<std::pair<std::string, Tensor>> list, const std::string& key) {
    Tensor before = dst->lm_head->weight.clone();
    try {
      gpt_load_named_tensors(dst, list);
      ADD_FAILURE() << "no error for " << key;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(key), std::string::npos) << e.what();
    }
    EXPECT_TRUE(torch::equal(before, dst->lm_head->weight));  // nothing written
  };
  auto bad = copy;
  bad.back().second = torch::zeros({3, 3});
  expect_error(bad, bad.back().first);
  bad = copy;
  bad[0].second = bad[0].second.to(torch::kFloat64);
  expect_error(bad, bad[0].first);
  bad = copy;
  bad.erase(bad.begin() + 5);
  expect_error(bad, copy[5].first);
  bad = copy;
  bad.emplace_back("transformer.h.9.attn.c_q.weight", torch::zeros({1}));
  expect_error(bad, "transformer.h.9.attn.c_q.weight");
}

// ---- gradient check of the whole forward in float64 ---------------------------------------
TEST(GptGradient, FiniteDifferencesFloat64) {
  GPTConfig c;
  c.sequence_len = 16;
  c.vocab_size = 50;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_kv_head = 2;
  c.n_embd = 32;
  GPT m = tiny_model(c, torch::kFloat64);
  Tensor idx = random_tokens(2, 8, c.vocab_size, 31), tgt = random_tokens(2, 8, c.vocab_size, 32);
  auto params = gpt_named_parameters(m);
  for (auto& [n, p] : params) EXPECT_EQ(p.scalar_type(), torch::kFloat64) << n;
  Tensor loss = gpt_loss(m, idx, tgt);
  loss.backward();
  torch::NoGradGuard ng;
  int checked = 0;
  for (auto& [name, p] : params) {
    Tensor flat = p.view(-1);
    // an entry the batch touches: row of a used token for embeddings, else a few positions
    std::vector<int64_t> picks = {0, p.numel() / 2, p.numel() - 1};
    if (name.find("wte") != std::string::npos || name.find("value_embeds") != std::string::npos) {
      int64_t tok = idx[0][3].item<int64_t>();
      picks = {tok * p.size(1), tok * p.size(1) + p.size(1) - 1};
    }
    for (int64_t n : picks) {
      const double old = flat[n].item<double>(), eps = 1e-5;
      flat[n] = old + eps;
      double up = gpt_loss(m, idx, tgt).item<double>();
      flat[n] = old - eps;
      double down = gpt_loss(m, idx, tgt).item<double>();
      flat[n] = old;
      double fd = (up - down) / (2 * eps), g = p.grad().view(-1)[n].item<double>();
      EXPECT_NEAR(g, fd, 1e-7 + 1e-5 * std::abs(fd)) << name << "[" << n << "]";
      checked++;
    }
  }
  EXPECT_GT(checked, 40);
}

// ---- against the independent PyTorch implementation ---------------------------------------
TEST(GptReference, LogitsAndLossMatchThePythonReference) {
  const GPTConfig c = tiny_config();  // 3 layers, GQA 2:1, windows 128/128/512
  GPT m(c);
  gpt_init_weights(m);
  const std::string dir = make_temp_dir();
  nlohmann::json meta;
  meta["config"] = gpt_config_to_json(c);
  auto dump = [&](const char* list, const char* prefix) {
    int n = 0;
    for (auto& [name, p] : gpt_named_parameters(m)) {
      std::string file = std::string(prefix) + std::to_string(n++) + ".bin";
      write_raw(dir + "/" + file, p.detach().to(torch::kFloat32));
      meta[list].push_back({{"name", name}, {"shape", p.sizes().vec()}, {"file", file}});
    }
  };
  dump("init_tensors", "init");
  m = tiny_model(c);  // the same init, then perturbed
  dump("tensors", "w");
  const int64_t B = 2, T = 200;  // T > the short window
  Tensor idx = random_tokens(B, T, c.vocab_size, 41), tgt = random_tokens(B, T, c.vocab_size, 42);
  tgt[0][7] = -1;
  tgt[1][100] = -1;
  write_raw(dir + "/idx.bin", idx);
  write_raw(dir + "/targets.bin", tgt);
  meta["idx"] = {{"shape", {B, T}}, {"file", "idx.bin"}};
  meta["targets"] = {{"shape", {B, T}}, {"file", "targets.bin"}};
  std::ofstream(dir + "/meta.json") << meta.dump();

  CommandResult r = run_shell(std::string(NANOCHAT_PYTHON) + " " + NANOCHAT_SOURCE_DIR +
                              "/tests/fixtures/gpt_reference.py " + dir);
  ASSERT_EQ(r.rc, 0) << r.err;
  nlohmann::json ref = nlohmann::json::parse(read_file(dir + "/ref.json"));
  // nanochat's state_dict order (PyTorch lists own parameters before submodules')
  std::vector<std::string> names;
  for (auto& [name, p] : gpt_named_parameters(m)) names.push_back(name);
  EXPECT_EQ(names, ref["state_dict_keys"].get<std::vector<std::string>>());
  EXPECT_EQ(ref["init_max_abs_diff"].get<double>(), 0.0);  // bitwise the same init

  torch::NoGradGuard ng;
  Tensor logits = m->forward(idx);
  Tensor want = read_f32(dir + "/ref_logits.bin", {B, T, c.vocab_size});
  EXPECT_LT((logits - want).abs().max().item<double>(), 1e-4);
  EXPECT_NEAR(gpt_loss(m, idx, tgt).item<double>(), ref["loss"].get<double>(), 1e-5);
  Tensor none = read_f32(dir + "/ref_loss_none.bin", {B * T});
  EXPECT_LT((gpt_loss(m, idx, tgt, LossReduction::none) - none).abs().max().item<double>(), 1e-4);
  run_shell("rm -rf " + dir);
}
