// Tests of fp16 loss scaling (GradScaler): unscaling against an optimizer fed the plain grads,
// a forced overflow that skips the step and halves the scale, growth after the interval, and
// an fp16 model on the CPU whose first steps overflow at an absurd initial scale and that still
// trains once the scale has backed off.
#include <cmath>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "nanochat/gpt.h"
#include "nanochat/optim.h"
#include "test_models.h"

using namespace nanochat;
using torch::Tensor;

namespace {

std::vector<OptimGroup> adamw_groups(const std::vector<Tensor>& params) {
  OptimGroup g;
  g.params = params;
  g.lr = g.initial_lr = 0.1;
  g.weight_decay = 0.01;
  return {g};
}

}  // namespace

TEST(GradScaler, UnscaledStepEqualsThePlainStep) {
  torch::manual_seed(1);
  Tensor a = torch::randn({8}), b = a.clone(), ga = torch::randn({8});
  MuonAdamW plain(adamw_groups({b})), scaled(adamw_groups({a}));
  GradScaler scaler(torch::kCPU);
  b.mutable_grad() = ga.clone();
  a.mutable_grad() = ga * 65536.0;  // what backward of scale(loss) gives: exact in fp32 (a power of 2)
  plain.step();
  EXPECT_TRUE(scaler.step(scaled, nullptr));
  EXPECT_TRUE(torch::equal(a, b));
  EXPECT_EQ(scaler.scale_value(), 65536.0);  // one clean step: no growth before 2000
  EXPECT_NEAR(scaler.scale(torch::tensor(1.5)).item<double>(), 1.5 * 65536.0, 0);
}

TEST(GradScaler, OverflowSkipsTheStepAndBacksOff) {
  Tensor p = torch::ones({4});
  MuonAdamW opt(adamw_groups({p}));
  GradScaler scaler(torch::kCPU, 1024.0);
  for (float bad : {INFINITY, NAN}) {
    p.mutable_grad() = torch::tensor({1.0f, bad, 2.0f, 3.0f});
    EXPECT_FALSE(scaler.step(opt, nullptr));
    EXPECT_TRUE(torch::equal(p, torch::ones({4}))) << "a skipped step must not move the params";
  }
  EXPECT_EQ(scaler.scale_value(), 256.0);  // halved twice
}

TEST(GradScaler, GrowsAfterTheIntervalAndStateRoundTrips) {
  Tensor p = torch::ones({4});
  MuonAdamW opt(adamw_groups({p}));
  GradScaler scaler(torch::kCPU, 8.0, 2.0, 0.5, 3);
  for (int i = 0; i < 3; i++) {
    p.mutable_grad() = torch::ones({4});
    EXPECT_TRUE(scaler.step(opt, nullptr));
  }
  EXPECT_EQ(scaler.scale_value(), 16.0);
  p.mutable_grad() = torch::ones({4});
  scaler.step(opt, nullptr);
  nlohmann::json j = scaler.state_json();
  EXPECT_EQ(j["scale"].get<double>(), 16.0);
  EXPECT_EQ(j["growth_tracker"].get<int64_t>(), 1);
  GradScaler other(torch::kCPU, 1.0, 2.0, 0.5, 3);
  other.load_state(j);
  EXPECT_EQ(other.scale_value(), 16.0);
  EXPECT_THROW(other.load_state(nlohmann::json{{"scale", "x"}}), std::exception);
}

TEST(GradScaler, Fp16ModelRecoversFromForcedOverflow) {
  GPTConfig c = tiny_gpt_config(256);
  GPT model(c, torch::kCPU, torch::kHalf);
  gpt_init_weights(model, 42);
  MuonAdamW opt(optim_param_groups_gpt(gpt_named_parameters(model), c.n_embd), nullptr, torch::kHalf);
  GradScaler scaler(torch::kCPU, std::pow(2.0, 40));  // fp16 activations' grads overflow at once
  torch::manual_seed(3);
  Tensor x = torch::randint(256, {4, 32}, torch::kLong);
  Tensor y = torch::roll(x, -1, 1);  // a learnable rule: predict the next token of a fixed batch
  std::vector<double> losses;
  int skipped = 0, first_applied = -1;
  for (int step = 0; step < 40; step++) {
    Tensor loss = gpt_loss(model, x, y);
    losses.push_back(loss.item<double>());
    scaler.scale(loss).backward();
    Tensor before = model->lm_head->weight.detach().clone();
    const bool applied = scaler.step(opt, nullptr);
    if (!applied) {
      skipped++;
      EXPECT_TRUE(torch::equal(before, model->lm_head->weight)) << "step " << step;
    } else if (first_applied < 0) {
      first_applied = step;
    }
    opt.zero_grad();
  }
  // at 2^40 the first steps overflow, each halving the scale; once it is low enough the steps
  // apply (a rare later overflow backs off once more, as GradScaler does)
  EXPECT_GE(first_applied, 10);
  EXPECT_LE(skipped - first_applied, 3);
  EXPECT_LT(scaler.scale_value(), std::pow(2.0, 40));
  for (auto& [name, p] : gpt_named_parameters(model)) EXPECT_TRUE(torch::isfinite(p).all().item<bool>()) << name;
  EXPECT_LT(losses.back(), losses[first_applied] - 0.5);
}
