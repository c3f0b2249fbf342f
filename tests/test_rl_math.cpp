// RL (upstream's chat_rl.py): rollouts into batches, the policy-gradient loss and pass@k worked out by
// hand; the rollout seeds equal CPython's hash of the tuple; and one gradient step on the
// loss makes the rewarded samples more likely under a tiny GPT (the sign and the masks).
#include <gtest/gtest.h>

#include <torch/torch.h>

#include <nlohmann/json.hpp>

#include "nanochat/common/py_random.h"
#include "nanochat/engine.h"
#include "nanochat/rl_math.h"
#include "test_models.h"
#include "test_util.h"

using namespace nanochat;

TEST(Rl, RolloutBatchPadsMasksAndCentresTheRewards) {
  // prompt [1, 2] then sampled tokens; the second sample also has a forced token (mask 0)
  RlRollout r = rl_rollout_batch({{1, 2, 3, 4}, {1, 2, 5}, {1, 2, 6, 7}}, {{0, 0, 1, 1}, {0, 0, 1}, {0, 0, 0, 1}},
                                 {1.0, 0.0, 0.5}, /*pad=*/9);
  EXPECT_TRUE(torch::equal(r.inputs, torch::tensor({1, 2, 3, 1, 2, 5, 1, 2, 6}, torch::kLong).view({3, 3})));
  EXPECT_TRUE(torch::equal(r.targets, torch::tensor({-1, 3, 4, -1, 5, -1, -1, -1, 7}, torch::kLong).view({3, 3})));
  EXPECT_TRUE(torch::allclose(r.advantages, torch::tensor({0.5f, -0.5f, 0.0f})));
  EXPECT_THROW(rl_rollout_batch({{1, 2}}, {{0}}, {1.0}, 9), std::exception);
}

TEST(Rl, PolicyGradientLossByHand) {
  torch::Tensor targets = torch::tensor({-1, 3, 4, -1, 5, -1}, torch::kLong).view({2, 3});
  torch::Tensor losses = torch::tensor({0.0, 0.5, 0.25, 0.0, 1.0, 0.0});  // flat, as gpt_loss(none) gives
  torch::Tensor adv = torch::tensor({0.5, -0.5});
  // log p = -losses; objective = 0.5 x (-0.75) + (-0.5) x (-1) = 0.125; 3 valid targets,
  // 2 passes, 3 examples per rank: loss = -0.125 / 18
  EXPECT_NEAR(rl_policy_gradient_loss(losses, targets, adv, 2, 3).item<double>(), -0.125 / 18.0, 1e-8);
  // a pass with no sampled token: 0, not NaN
  torch::Tensor none = torch::full({1, 3}, -1, torch::kLong);
  EXPECT_EQ(rl_policy_gradient_loss(torch::zeros({3}), none, torch::tensor({1.0}), 1, 1).item<double>(), 0.0);
}

TEST(Rl, PassAtKCounts) {
  // problem 0: only the 3rd sample right; problem 1: the 1st; problem 2: none
  std::vector<int64_t> c = rl_pass_at_k_counts({{false, false, true}, {true, false, false}, {false, false, false}}, 3);
  EXPECT_EQ(c, (std::vector<int64_t>{1, 1, 2}));
}

TEST(Rl, RolloutSeedsAreCPythonTupleHashes) {
  std::vector<std::vector<int64_t>> tuples = {
      {0, 0, 0}, {1, 2, 3}, {466, 7472, 1}, {59, 13, 0}, {-1, 5, 2}, {1LL << 62, -(1LL << 61), 3}, {}};
  std::string expr = "print(' '.join(str(hash(t)) for t in [";
  for (const auto& t : tuples) {
    expr += "(";
    for (int64_t v : t) expr += std::to_string(v) + ",";
    expr += "),";
  }
  expr += "]))";
  CommandResult py = run_shell(std::string(NANOCHAT_PYTHON) + " -c \"" + expr + "\"");
  ASSERT_EQ(py.rc, 0) << py.err;
  std::istringstream in(py.out);
  for (const auto& t : tuples) {
    long long expected;
    in >> expected;
    EXPECT_EQ(py_hash_int_tuple(t), expected) << nlohmann::json(t).dump();
  }
  EXPECT_EQ(rl_rollout_seed(1, 2, 3), (uint64_t)(py_hash_int_tuple({1, 2, 3}) & 0x7FFFFFFF));
}

// Rewarding samples whose first token is an even byte and taking a gradient step on the
// loss must raise p(even first token) at the prompt's last position; the opposite reward
// must lower it. The prompt is masked, so only the sampled tokens carry the signal.
TEST(Rl, GradientStepMakesRewardedSamplesMoreLikely) {
  GPTConfig c;
  c.sequence_len = 32;
  c.vocab_size = 270;
  c.n_layer = 1;
  c.n_head = 2;
  c.n_kv_head = 2;
  c.n_embd = 64;
  c.window_pattern = "L";
  Tokenizer tok = byte_tokenizer();
  const std::vector<int32_t> prompt = {256, 'h', 'i'};
  for (double sign : {1.0, -1.0}) {
    GPT model = perturbed_gpt(c, 3, 0.3);
    auto p_even = [&] {
      torch::NoGradGuard ng;
      torch::Tensor logits = model->forward(torch::tensor({256, 'h', 'i'}, torch::kLong).view({1, 3}))[0][-1];
      torch::Tensor p = torch::softmax(logits.to(torch::kDouble), -1);
      return p.slice(0, 0, 256, 2).sum().item<double>();
    };
    const double before = p_even();
    Engine engine(model, tok);
    GenerateOptions go;
    go.num_samples = 16;
    go.max_tokens = 4;
    go.temperature = 1.0;
    go.seed = 7;
    go.default_stops = false;
    go.use_calculator = false;
    GenerateResult r = engine.generate_batch(prompt, go);
    std::vector<double> rewards;
    for (const auto& row : r.tokens)
      rewards.push_back(row[prompt.size()] % 2 == 0 && row[prompt.size()] < 256 ? sign : 0.0);
    RlRollout ro = rl_rollout_batch(r.tokens, r.masks, rewards, 256);
    torch::Tensor losses = gpt_loss(model, ro.inputs, ro.targets, LossReduction::none);
    rl_policy_gradient_loss(losses, ro.targets, ro.advantages, 1, 1).backward();
    {
      torch::NoGradGuard ng;
      for (auto& p : model->parameters())
        if (p.grad().defined()) p.sub_(p.grad() * 0.5);
    }
    const double after = p_even();
    if (sign > 0) EXPECT_GT(after, before + 1e-4) << "p(even) " << before << " -> " << after;
    else EXPECT_LT(after, before - 1e-4) << "p(even) " << before << " -> " << after;
  }
}
