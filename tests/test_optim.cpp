// optim: AdamW against a plain loop implementation and LibTorch's AdamW, Muon against an
// independent float64 implementation of upstream's muon_step_fused and against properties checkable by hand
// (orthogonality, NorMuon's equal row norms, the cautious mask), state save/load, the setup_optimizer
// groups from names, and world 1 vs 2 vs 3 real Gloo processes (tests/optim_worker.cpp).
#include <gtest/gtest.h>
#include <spawn.h>

#include <cmath>
#include <cstring>
#include <torch/torch.h>

#include "adamw_rounding_bound.h"
#include "nanochat/common/error.h"
#include "nanochat/optim.h"
#include "test_util.h"

extern char** environ;
using namespace nanochat;

static torch::Tensor randn(std::vector<int64_t> shape, uint64_t seed, torch::ScalarType dtype = torch::kFloat) {
  auto gen = at::detail::createCPUGenerator(seed);
  return torch::randn(shape, gen, torch::TensorOptions().dtype(torch::kFloat)).to(dtype);
}

static float fp32(double x) { return (float)x; }

// ---- AdamW ------------------------------------------------------------------------------

// upstream's adamw_step_fused written out element by element: fp32 scalars, moments rounded to the param's dtype
// after every step; lerp as torch's vectorised CPU kernel computes it: fma(w, b - a, a) for
// w < 0.5, else fma(w - 1, b - a, b).
template <typename T>
static void plain_adamw(std::vector<T>& p, std::vector<T>& m, std::vector<T>& v, const std::vector<float>& g, int step,
                        double lr, double b1, double b2, double eps, double wd) {
  auto lerp = [](float a, float b, float w) { return w < 0.5f ? std::fma(w, b - a, a) : std::fma(w - 1.0f, b - a, b); };
  const float lr_f = fp32(lr), b1f = fp32(b1), b2f = fp32(b2), eps_f = fp32(eps), wd_f = fp32(wd);
  const float bias1 = 1.0f - std::pow(b1f, (float)step), bias2 = 1.0f - std::pow(b2f, (float)step);
  for (size_t i = 0; i < p.size(); i++) {
    float pi = (float)p[i], mi = (float)m[i], vi = (float)v[i];
    pi = pi * (1.0f - lr_f * wd_f);
    mi = lerp(mi, g[i], 1.0f - b1f);
    vi = lerp(vi, g[i] * g[i], 1.0f - b2f);
    float denom = std::sqrt(vi / bias2) + eps_f;
    pi = std::fma(-(lr_f / bias1), mi / denom, pi);  // torch's add(alpha) is an fma when vectorised
    p[i] = (T)pi;
    m[i] = (T)mi;
    v[i] = (T)vi;
  }
}

template <typename T>
static std::vector<T> to_vec(const torch::Tensor& t) {
  auto c = t.contiguous();
  return std::vector<T>(c.data_ptr<T>(), c.data_ptr<T>() + c.numel());
}

template <typename T>
static torch::Tensor to_tensor(const std::vector<T>& x, torch::ScalarType dtype) {
  return torch::tensor(std::vector<float>(x.begin(), x.end()), torch::kFloat).to(dtype);
}

// the optimizer's AdamW against the plain loop: apart only by rounding (the plain loop's fma/sqrt
// against ATen's or the fused kernel's at whatever CPU capability runs), within the bound of
// adamw_rounding_bound.h for p and both moments after every step
template <typename T>
static void run_adamw_vs_plain(torch::ScalarType dtype, std::vector<int64_t> shape = {7, 13}) {
  const double lr = 0.05, b1 = 0.8, b2 = 0.95, eps = 1e-10, wd = 0.1;
  torch::Tensor p = randn(shape, 1, dtype);
  std::vector<T> rp = to_vec<T>(p), rm(p.numel(), T(0)), rv(p.numel(), T(0));
  OptimGroup grp;
  grp.name = "test";
  grp.params = {p};
  grp.lr = lr;
  grp.betas = {b1, b2};
  grp.eps = eps;
  grp.weight_decay = wd;
  MuonAdamW opt({grp});
  AdamWRoundingBound bound(p.numel(), dtype);
  for (int step = 1; step <= 6; step++) {
    torch::Tensor g = randn(shape, 100 + step, dtype);
    p.mutable_grad() = g;
    opt.step();
    const torch::Tensor p0 = to_tensor(rp, dtype), m0 = to_tensor(rm, dtype), v0 = to_tensor(rv, dtype);
    plain_adamw<T>(rp, rm, rv, to_vec<float>(g.to(torch::kFloat)), step, lr, b1, b2, eps, wd);
    adamw_bound_step(bound, p0, m0, v0, g, to_tensor(rp, dtype), to_tensor(rm, dtype), to_tensor(rv, dtype), step, lr,
                     b1, b2, eps, wd);
    // moments kept in the param's dtype (zeros_like)
    NamedTensors st = opt.state_tensors();
    ASSERT_EQ(st.size(), 2u);
    EXPECT_EQ(st[0].first, "state.0.exp_avg");
    EXPECT_EQ(st[1].first, "state.0.exp_avg_sq");
    EXPECT_EQ(st[0].second.scalar_type(), dtype);
    EXPECT_EQ(beyond_bound(p, to_tensor(rp, dtype), bound.p), "") << "p at step " << step;
    EXPECT_EQ(beyond_bound(st[0].second, to_tensor(rm, dtype), bound.m), "") << "exp_avg at step " << step;
    EXPECT_EQ(beyond_bound(st[1].second, to_tensor(rv, dtype), bound.v), "") << "exp_avg_sq at step " << step;
  }
}

TEST(AdamW, MatchesPlainLoopFp32) { run_adamw_vs_plain<float>(torch::kFloat); }
TEST(AdamW, MatchesPlainLoopBf16) { run_adamw_vs_plain<c10::BFloat16>(torch::kBFloat16); }
// the fused kernel's blocks of 4096 and its vector tail (12297 = 3 blocks + 9 elements)
TEST(AdamW, MatchesPlainLoopAcrossKernelBlocks) {
  run_adamw_vs_plain<float>(torch::kFloat, {3, 4099});
  run_adamw_vs_plain<c10::BFloat16>(torch::kBFloat16, {3, 4099});
}

TEST(AdamW, MatchesLibTorchAdamW) {
  // torch's AdamW has the same math (decoupled decay first, bias-corrected denominator);
  // upstream's test compares with rtol 1e-5
  torch::Tensor a = randn({16, 9}, 7), b = a.clone();
  b.set_requires_grad(true);
  OptimGroup grp;
  grp.params = {a};
  grp.lr = 0.01;
  grp.betas = {0.9, 0.99};
  grp.eps = 1e-10;
  grp.weight_decay = 0.05;
  MuonAdamW opt({grp});
  torch::optim::AdamW ref({b}, torch::optim::AdamWOptions(0.01).betas({0.9, 0.99}).eps(1e-10).weight_decay(0.05));
  for (int s = 0; s < 5; s++) {
    torch::Tensor g = randn({16, 9}, 200 + s);
    a.mutable_grad() = g;
    b.mutable_grad() = g.clone();
    opt.step();
    ref.step();
  }
  EXPECT_TRUE(torch::allclose(a, b.detach(), 1e-5, 1e-8)) << (a - b).abs().max().item<double>();
}

TEST(AdamW, ParamsWithoutGradAreSkippedOnOneRank) {
  torch::Tensor p = randn({3}, 3), before = p.clone();
  OptimGroup grp;
  grp.params = {p};
  grp.lr = 0.1;
  MuonAdamW opt({grp});
  opt.step();
  EXPECT_TRUE(torch::equal(p, before));
  EXPECT_TRUE(opt.state_tensors().empty());
}

// ---- Muon -------------------------------------------------------------------------------

// upstream's muon_step_fused in float64, one matrix at a time, with plain formulas
struct RefMuon {
  double mu, lr, wd, beta2;
  std::vector<torch::Tensor> buf, second;  // per matrix

  void step(std::vector<torch::Tensor>& P, const std::vector<torch::Tensor>& grads) {
    static const double coeffs[5][3] = {{8.156554524902461, -22.48329292557795, 15.878769915207462},
                                        {4.042929935166739, -2.808917465908714, 0.5000178451051316},
                                        {3.8916678022926607, -2.772484153217685, 0.5060648178503393},
                                        {3.285753657755655, -2.3681294933425376, 0.46449024233003106},
                                        {2.3465413258596377, -1.7097828382687081, 0.42323551169305323}};
    for (size_t k = 0; k < P.size(); k++) {
      torch::Tensor G = grads[k].to(torch::kDouble);
      const int64_t rows = G.size(0), cols = G.size(1);
      const bool tall = rows > cols, row_wise = rows >= cols;
      if (buf.size() <= k) {
        buf.push_back(torch::zeros_like(G));
        second.push_back(row_wise ? torch::zeros({rows, 1}, torch::kDouble) : torch::zeros({1, cols}, torch::kDouble));
      }
      buf[k] = mu * buf[k] + (1 - mu) * G;
      G = (1 - mu) * G + mu * buf[k];
      // MuonEq
      double target = G.norm().item<double>() / std::sqrt((double)rows);
      torch::Tensor X = G.clone();
      for (int64_t i = 0; i < rows; i++) {
        double rn = std::max(G[i].norm().item<double>(), 1e-6);
        X[i] = G[i] * (target / rn);
      }
      X = X / (X.norm().item<double>() * 1.01 + 1e-6);
      for (auto& c : coeffs) {
        if (tall) {
          torch::Tensor A = X.t().mm(X);
          X = c[0] * X + X.mm(c[1] * A + c[2] * A.mm(A));
        } else {
          torch::Tensor A = X.mm(X.t());
          X = c[0] * X + (c[1] * A + c[2] * A.mm(A)).mm(X);
        }
      }
      X = X * (std::sqrt((double)std::min(rows, cols)) / std::max(X.norm().item<double>(), 1e-6));
      // NorMuon
      torch::Tensor v = row_wise ? (X * X).mean(1, true) : (X * X).mean(0, true);
      const double n = row_wise ? (double)cols : (double)rows;
      double v_norm = std::sqrt(v.sum().item<double>() * n);
      second[k] = second[k] + (1 - beta2) * (v - second[k]);
      torch::Tensor s = 1.0 / second[k].clamp_min(1e-10).sqrt();
      double v_norm_new = std::sqrt((v * n * s * s).sum().item<double>());
      X = X * s * (v_norm / std::max(v_norm_new, 1e-10));
      // cautious weight decay
      torch::Tensor mask = ((X * P[k]) >= 0).to(torch::kDouble);
      P[k] = P[k] - lr * X - lr * wd * P[k] * mask;
    }
  }
};

static OptimGroup muon_group(std::vector<torch::Tensor> params, double lr, double mu, double wd, double beta2) {
  OptimGroup g;
  g.kind = OptimKind::muon;
  g.name = "muon";
  g.params = std::move(params);
  g.lr = lr;
  g.momentum = mu;
  g.weight_decay = wd;
  g.beta2 = beta2;
  return g;
}

// K matrices of one shape, 3 steps, against the float64 reference. Hyperparameters reach the
// kernel as fp32 (upstream's 0-D fp32 tensors), so the reference gets the same rounded values.
static void check_muon_vs_reference(int64_t rows, int64_t cols, torch::ScalarType dtype, double rtol) {
  const int K = 3;
  const double lr = 0.02, mu = 0.95, wd = 0.2, beta2 = 0.9;
  std::vector<torch::Tensor> params, ref_params;
  for (int k = 0; k < K; k++) {
    params.push_back(randn({rows, cols}, 10 + k).to(dtype));
    ref_params.push_back(params.back().to(torch::kDouble).clone());  // never the same tensor
  }
  MuonAdamW opt({muon_group(params, lr, mu, wd, beta2)});
  const double eff_lr = fp32(lr * std::sqrt(std::max(1.0, (double)rows / cols)));
  RefMuon ref{fp32(mu), eff_lr, fp32(wd), fp32(beta2), {}, {}};
  for (int s = 0; s < 3; s++) {
    std::vector<torch::Tensor> grads;
    for (int k = 0; k < K; k++) {
      grads.push_back(randn({rows, cols}, 1000 * s + k).to(dtype));
      params[k].mutable_grad() = grads.back();
    }
    std::vector<torch::Tensor> before;
    for (auto& p : ref_params) before.push_back(p.clone());
    opt.step();
    ref.step(ref_params, grads);
    for (int k = 0; k < K; k++) {
      // compare the step taken, relative to its size
      torch::Tensor want = ref_params[k] - before[k], got = params[k].to(torch::kDouble) - before[k];
      double err = (got - want).abs().max().item<double>(), scale = want.abs().max().item<double>();
      EXPECT_LT(err, rtol * scale) << rows << "x" << cols << " step " << s << " matrix " << k;
      if (dtype == torch::kDouble) ref_params[k] = params[k].clone();  // same start for the next step
      else ref_params[k] = params[k].to(torch::kDouble);
    }
  }
}

TEST(Muon, Float64MatchesReferenceWideTallSquare) {
  for (auto [r, c] : std::vector<std::pair<int64_t, int64_t>>{{6, 10}, {10, 6}, {8, 8}})
    check_muon_vs_reference(r, c, torch::kDouble, 1e-9);
}

TEST(Muon, Fp32MatchesReferenceWideTallSquare) {
  for (auto [r, c] : std::vector<std::pair<int64_t, int64_t>>{{12, 20}, {20, 12}, {16, 16}})
    check_muon_vs_reference(r, c, torch::kFloat, 1e-4);
}

// upstream's test: first step with mu=0, beta2=1, lr=1 from zero params is -(Polar Express
// output), whose singular values are close to one: max/min < 4
static void check_singular_values(int64_t rows, int64_t cols, bool bf16) {
  torch::Tensor p = torch::zeros({rows, cols});
  p.mutable_grad() = randn({rows, cols}, 5);
  MuonAdamW opt({muon_group({p}, 1.0, 0.0, 0.0, 1.0)}, nullptr, bf16 ? torch::kBFloat16 : torch::kFloat);
  opt.step();
  torch::Tensor sv = torch::linalg_svdvals(-p);
  double ratio = (sv.max() / sv.min()).item<double>();
  EXPECT_LT(ratio, 4.0) << rows << "x" << cols << (bf16 ? " bf16" : " fp32");
  EXPECT_GT(sv.min().item<double>(), 0.1);
  // Muon+ (and NorMuon, the identity here) leave ||U||_F = sqrt(min(rows, cols))
  const double want = std::sqrt((double)std::min(rows, cols)) * std::sqrt(std::max(1.0, (double)rows / cols));
  EXPECT_NEAR(p.norm().item<double>(), want, 1e-3 * want);
}

TEST(Muon, PolarExpressSingularValues) {
  for (bool bf16 : {false, true})
    for (auto [r, c] : std::vector<std::pair<int64_t, int64_t>>{{32, 64}, {64, 32}, {48, 48}})
      check_singular_values(r, c, bf16);
}

TEST(Muon, NorMuonEqualisesRowsOrColumns) {
  // beta2 = 0: the second moment is this step's mean square, so every row (rows >= cols) or
  // column (rows < cols) of the update gets the same norm, and the Frobenius norm is kept
  for (auto [rows, cols] : std::vector<std::pair<int64_t, int64_t>>{{40, 24}, {24, 40}, {32, 32}}) {
    torch::Tensor p = torch::zeros({rows, cols});
    p.mutable_grad() = randn({rows, cols}, 9) * torch::linspace(0.1, 3.0, cols);  // unequal columns
    MuonAdamW opt({muon_group({p}, 1.0, 0.0, 0.0, 0.0)});
    opt.step();
    const bool row_wise = rows >= cols;
    torch::Tensor norms = torch::linalg_vector_norm(p, 2, std::vector<int64_t>{row_wise ? 1 : 0}, false, c10::nullopt);
    double n_lines = row_wise ? rows : cols, expect = std::sqrt(std::min(rows, cols) / n_lines);
    expect *= std::sqrt(std::max(1.0, (double)rows / cols));  // Muon's lr factor for tall matrices
    EXPECT_LT((norms - expect).abs().max().item<double>(), 1e-4) << rows << "x" << cols;
  }
}

TEST(Muon, CautiousWeightDecayOnlyWhereSignsAgree) {
  // the same update U with and without decay: P' = P - lr U - lr wd P [U P >= 0]
  const double lr = 0.125, wd = 0.5;
  torch::Tensor P0 = randn({16, 24}, 21), G = randn({16, 24}, 22);
  torch::Tensor a = P0.clone(), b = P0.clone();
  a.mutable_grad() = G.clone();
  b.mutable_grad() = G.clone();
  MuonAdamW plain({muon_group({a}, lr, 0.0, 0.0, 1.0)}), decayed({muon_group({b}, lr, 0.0, wd, 1.0)});
  plain.step();
  decayed.step();
  torch::Tensor U = (P0 - a) / lr;
  torch::Tensor mask = (U * P0 >= 0).to(torch::kFloat);
  double frac = mask.mean().item<double>();
  EXPECT_GT(frac, 0.2);
  EXPECT_LT(frac, 0.8);
  torch::Tensor want = P0 - lr * U - lr * wd * P0 * mask;
  EXPECT_LT((b - want).abs().max().item<double>(), 1e-6);
}

TEST(Muon, EffectiveLrScalesTallMatrices) {
  // a (4d x d) matrix moves sqrt(4) = 2x as far as lr alone would (Muon+ fixes ||U||_F)
  torch::Tensor p = torch::zeros({64, 16});
  p.mutable_grad() = randn({64, 16}, 31);
  MuonAdamW opt({muon_group({p}, 0.5, 0.0, 0.0, 1.0)});
  opt.step();
  EXPECT_NEAR(p.norm().item<double>(), 0.5 * 2.0 * 4.0, 1e-3);
}

TEST(Muon, MixedShapesAreAnError) {
  EXPECT_THROW(MuonAdamW({muon_group({torch::zeros({4, 4}), torch::zeros({4, 5})}, 0.1, 0.9, 0, 0.9)}), Error);
}

// ---- state ------------------------------------------------------------------------------

struct OptSetup {
  std::vector<torch::Tensor> params;
  std::vector<OptimGroup> groups;
};

static OptSetup make_setup(const std::vector<torch::Tensor>* from = nullptr) {
  OptSetup s;
  std::vector<std::vector<int64_t>> shapes = {{40, 30}, {5}, {6, 10}, {6, 10}, {10, 6}};
  for (size_t i = 0; i < shapes.size(); i++) s.params.push_back(from ? (*from)[i].clone() : randn(shapes[i], 50 + i));
  OptimGroup a;
  a.name = "adamw";
  a.params = {s.params[0], s.params[1]};
  a.lr = a.initial_lr = 0.01;
  a.betas = {0.8, 0.95};
  a.weight_decay = 0.01;
  s.groups = {a, muon_group({s.params[2], s.params[3]}, 0.02, 0.95, 0.1, 0.9),
              muon_group({s.params[4]}, 0.02, 0.95, 0.1, 0.9)};
  return s;
}

static void step_with_grads(MuonAdamW& opt, OptSetup& s, int step) {
  for (size_t i = 0; i < s.params.size(); i++)
    s.params[i].mutable_grad() = randn(s.params[i].sizes().vec(), 7000 + 10 * step + i);
  for (auto& g : opt.groups()) g.lr = g.initial_lr * (1.0 - 0.1 * step);  // a schedule
  opt.step();
}

TEST(State, SaveLoadContinuesBitwise) {
  OptSetup a = make_setup();
  MuonAdamW opt_a(a.groups);
  for (int s = 0; s < 5; s++) step_with_grads(opt_a, a, s);

  OptSetup b = make_setup();
  MuonAdamW opt_b(b.groups);
  for (int s = 0; s < 3; s++) step_with_grads(opt_b, b, s);
  NamedTensors saved;
  for (auto& [name, t] : opt_b.state_tensors()) saved.emplace_back(name, t.clone());
  std::string json_text = opt_b.state_json().dump();
  // the names and the JSON the checkpoint module stores
  ASSERT_EQ(saved.size(), 8u);
  EXPECT_EQ(saved[0].first, "state.0.exp_avg");
  EXPECT_EQ(saved[2].first, "state.1.exp_avg");
  // Muon state sits on the first param of each group: (6, 10) x2 is wide -> per column
  EXPECT_EQ(saved[4].first, "state.2.momentum_buffer");
  EXPECT_EQ(saved[4].second.sizes().vec(), (std::vector<int64_t>{2, 6, 10}));
  EXPECT_EQ(saved[5].second.sizes().vec(), (std::vector<int64_t>{2, 1, 10}));
  // (10, 6) x1 is tall -> per row
  EXPECT_EQ(saved[6].first, "state.4.momentum_buffer");
  EXPECT_EQ(saved[7].second.sizes().vec(), (std::vector<int64_t>{1, 10, 1}));
  nlohmann::json j = nlohmann::json::parse(json_text);
  EXPECT_EQ(j["world_size"], 1);
  EXPECT_EQ(j["state"]["0"]["step"], 3);
  EXPECT_EQ(j["param_groups"][1]["kind"], "muon");
  EXPECT_EQ(j["param_groups"][1]["params"], nlohmann::json({2, 3}));

  OptSetup c = make_setup(&b.params);  // a fresh process: same params, fresh optimizer
  MuonAdamW opt_c(c.groups);
  opt_c.load_state(saved, j);
  EXPECT_DOUBLE_EQ(opt_c.groups()[0].lr, opt_b.groups()[0].lr);
  for (int s = 3; s < 5; s++) step_with_grads(opt_c, c, s);
  for (size_t i = 0; i < a.params.size(); i++) EXPECT_TRUE(torch::equal(a.params[i], c.params[i])) << "param " << i;
}

TEST(State, OtherWorldSizeIsAClearError) {
  OptSetup a = make_setup();
  MuonAdamW opt(a.groups);
  step_with_grads(opt, a, 0);
  nlohmann::json j = opt.state_json();
  j["world_size"] = 2;
  try {
    opt.load_state(opt.state_tensors(), j);
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("same number of ranks"), std::string::npos) << e.what();
  }
  NamedTensors t = opt.state_tensors();
  t[0].second = torch::zeros({3, 3});
  EXPECT_THROW(opt.load_state(t, opt.state_json()), Error);
}

// ---- groups from names (setup_optimizer) ----------------------------------------------------------

TEST(Groups, FromNanochatNamesD4) {
  const int64_t L = 4, d = 256, V = 512, H = 2, hd = 128;
  NamedTensors named;
  auto add = [&](const std::string& name, std::vector<int64_t> shape) {
    named.emplace_back(name, torch::zeros(shape));
  };
  add("transformer.wte.weight", {V, d});
  for (int64_t i = 0; i < L; i++) {
    std::string b = "transformer.h." + std::to_string(i) + ".";
    add(b + "attn.c_q.weight", {H * hd, d});
    add(b + "attn.c_k.weight", {H * hd, d});
    add(b + "attn.c_v.weight", {H * hd, d});
    add(b + "attn.c_proj.weight", {d, d});
    if (i % 2 == (L - 1) % 2) add(b + "attn.ve_gate.weight", {H, 12});
    add(b + "mlp.c_fc.weight", {4 * d, d});
    add(b + "mlp.c_proj.weight", {d, 4 * d});
  }
  add("lm_head.weight", {V, d});
  add("resid_lambdas", {L});
  add("x0_lambdas", {L});
  add("smear_gate.weight", {1, 24});
  add("smear_lambda", {1});
  add("backout_lambda", {1});
  add("value_embeds.1.weight", {V, H * hd});
  add("value_embeds.3.weight", {V, H * hd});
  auto param = [&](const std::string& name) {
    for (auto& [n, t] : named)
      if (n == name) return t;
    return torch::Tensor();
  };

  std::vector<OptimGroup> g = optim_param_groups_gpt(named, d);
  ASSERT_EQ(g.size(), 10u);
  const double dls = 1.0 / std::sqrt(256.0 / 768.0);  // sqrt(3)
  struct Want {
    const char* name;
    double lr, b1, b2, wd;
    size_t n;
  };
  Want want[6] = {{"lm_head", 0.004 * dls, 0.8, 0.96, 0.01, 1},     {"wte", 0.2 * dls, 0.8, 0.995, 0.001, 1},
                  {"value_embeds", 0.1 * dls, 0.8, 0.995, 0.01, 2}, {"resid_lambdas", 0.005, 0.8, 0.95, 0.05, 1},
                  {"x0_lambdas", 0.5, 0.96, 0.95, 0.0, 1},          {"smear", 0.2, 0.8, 0.95, 0.0, 3}};
  for (int i = 0; i < 6; i++) {
    SCOPED_TRACE(want[i].name);
    EXPECT_EQ(g[i].kind, OptimKind::adamw);
    EXPECT_NEAR(g[i].lr, want[i].lr, 1e-12);
    EXPECT_EQ(g[i].initial_lr, g[i].lr);
    EXPECT_EQ(g[i].betas[0], want[i].b1);
    EXPECT_EQ(g[i].betas[1], want[i].b2);
    EXPECT_EQ(g[i].weight_decay, want[i].wd);
    EXPECT_EQ(g[i].eps, 1e-10);
    EXPECT_EQ(g[i].params.size(), want[i].n);
  }
  EXPECT_TRUE(g[0].params[0].is_same(param("lm_head.weight")));
  EXPECT_TRUE(g[2].params[1].is_same(param("value_embeds.3.weight")));
  EXPECT_TRUE(g[5].params[0].is_same(param("smear_gate.weight")));
  EXPECT_TRUE(g[5].params[2].is_same(param("backout_lambda")));
  // Muon: shapes sorted (2,12) < (256,256) < (256,1024) < (1024,256); module order inside
  struct MuonWant {
    int64_t r, c;
    size_t n;
    const char* first;
  };
  MuonWant mw[4] = {{2, 12, 2, "transformer.h.1.attn.ve_gate.weight"},
                    {256, 256, 16, "transformer.h.0.attn.c_q.weight"},
                    {256, 1024, 4, "transformer.h.0.mlp.c_proj.weight"},
                    {1024, 256, 4, "transformer.h.0.mlp.c_fc.weight"}};
  for (int i = 0; i < 4; i++) {
    const OptimGroup& m = g[6 + i];
    EXPECT_EQ(m.kind, OptimKind::muon);
    EXPECT_EQ(m.params.size(), mw[i].n);
    EXPECT_EQ(m.params[0].size(0), mw[i].r);
    EXPECT_EQ(m.params[0].size(1), mw[i].c);
    EXPECT_TRUE(m.params[0].is_same(param(mw[i].first))) << i;
    EXPECT_EQ(m.lr, 0.02);
    EXPECT_EQ(m.momentum, 0.95);
    EXPECT_EQ(m.beta2, 0.9);
    EXPECT_EQ(m.ns_steps, 5);
    EXPECT_EQ(m.weight_decay, 0.0);
  }
  EXPECT_TRUE(g[7].params[3].is_same(param("transformer.h.0.attn.c_proj.weight")));
  EXPECT_TRUE(g[7].params[4].is_same(param("transformer.h.1.attn.c_q.weight")));
  // weight_decay goes to Muon only
  std::vector<OptimGroup> g2 = optim_param_groups_gpt(named, d, 0.004, 0.2, 0.02, 0.28);
  EXPECT_EQ(g2[6].weight_decay, 0.28);
  EXPECT_EQ(g2[0].weight_decay, 0.01);

  named.emplace_back("mystery.weight", torch::zeros({2}));
  EXPECT_THROW(optim_param_groups_gpt(named, d), Error);
}

// ---- world 1 vs 2 vs 3 -----------------------------------------------------------------------

static int run_workers(int world, int port, const std::string& out) {
  std::vector<pid_t> pids;
  for (int rank = 0; rank < world; rank++) {
    std::vector<std::string> env_strings;
    for (char** e = environ; *e; e++) env_strings.push_back(*e);
    if (world > 1) {
      for (std::string kv :
           {"RANK=" + std::to_string(rank), "WORLD_SIZE=" + std::to_string(world), "LOCAL_RANK=" + std::to_string(rank),
            "LOCAL_WORLD_SIZE=" + std::to_string(world), std::string("MASTER_ADDR=127.0.0.1"),
            "MASTER_PORT=" + std::to_string(port), std::string("NANOCHAT_DIST_TIMEOUT=60")})
        env_strings.push_back(kv);
    }
    std::vector<char*> envp;
    for (auto& s : env_strings) envp.push_back(s.data());
    envp.push_back(nullptr);
    std::string path = out;
    char* argv[] = {const_cast<char*>(NANOCHAT_OPTIM_WORKER), path.data(), nullptr};
    pid_t pid;
    if (posix_spawn(&pid, NANOCHAT_OPTIM_WORKER, nullptr, nullptr, argv, envp.data()) != 0) return -1;
    pids.push_back(pid);
  }
  int failures = 0;
  for (pid_t pid : pids) {
    int status = 0;
    waitpid(pid, &status, 0);
    failures += !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  return failures;
}

static std::vector<double> read_doubles(const std::string& path) {
  std::string bytes = read_file(path);
  std::vector<double> v(bytes.size() / sizeof(double));
  std::memcpy(v.data(), bytes.data(), v.size() * sizeof(double));
  return v;
}

TEST(Distributed, WorldsTwoAndThreeMatchOneRank) {
  std::string dir = make_temp_dir();
  ASSERT_EQ(run_workers(1, 0, dir + "/w1"), 0);
  std::vector<double> want = read_doubles(dir + "/w1.rank0");
  ASSERT_GT(want.size(), 1000u);
  for (int world : {2, 3}) {
    int port = 20000 + (getpid() * 7 + world * 131) % 20000;
    std::string out = dir + "/w" + std::to_string(world);
    ASSERT_EQ(run_workers(world, port, out), 0) << "world " << world;
    for (int r = 0; r < world; r++) {
      std::vector<double> got = read_doubles(out + ".rank" + std::to_string(r));
      ASSERT_EQ(got.size(), want.size());
      size_t bad = 0, first_bad = 0;
      for (size_t i = 0; i < got.size(); i++)
        if (std::abs(got[i] - want[i]) > 1e-6 * std::max(std::abs(want[i]), 1e-3) && !bad++) first_bad = i;
      EXPECT_EQ(bad, 0u) << "world " << world << " rank " << r << ": first at " << first_bad << " got "
                         << got[first_bad] << " want " << want[first_bad];
    }
  }
  (void)std::system(("rm -rf " + dir).c_str());
}
