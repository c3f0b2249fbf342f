// The arithmetic of RL, as upstream's chat_rl.py: rollouts into padded, masked batches with advantages,
// the token-normalised policy-gradient loss, pass@k counts and upstream's rollout seeds.
#include <algorithm>

#include <torch/torch.h>

#include "nanochat/common/error.h"
#include "nanochat/common/py_random.h"
#include "nanochat/rl_math.h"

namespace nanochat {

RlRollout rl_rollout_batch(const std::vector<std::vector<int32_t>>& sequences,
                           const std::vector<std::vector<uint8_t>>& masks, const std::vector<double>& rewards,
                           int32_t pad) {
  const int64_t n = (int64_t)sequences.size();
  if (n == 0 || masks.size() != sequences.size() || rewards.size() != sequences.size())
    fail("RL: %lld sequences, %zu masks and %zu rewards", (long long)n, masks.size(), rewards.size());
  size_t longest = 0;
  for (int64_t i = 0; i < n; i++) {
    if (masks[i].size() != sequences[i].size())
      fail("RL: sample %lld has %zu tokens but %zu mask entries", (long long)i, sequences[i].size(), masks[i].size());
    longest = std::max(longest, sequences[i].size());
  }
  if (longest < 2) fail("RL: every sample is shorter than 2 tokens");
  const int64_t L = (int64_t)longest;
  torch::Tensor ids = torch::full({n, L}, (int64_t)pad, torch::kLong);
  torch::Tensor mask = torch::zeros({n, L}, torch::kLong);
  auto id = ids.accessor<int64_t, 2>();
  auto m = mask.accessor<int64_t, 2>();
  for (int64_t i = 0; i < n; i++)
    for (size_t t = 0; t < sequences[i].size(); t++) {
      id[i][(int64_t)t] = sequences[i][t];
      m[i][(int64_t)t] = masks[i][t];
    }
  RlRollout r;
  r.inputs = ids.slice(1, 0, L - 1).clone();
  r.targets = ids.slice(1, 1, L).clone();
  r.targets.masked_fill_(mask.slice(1, 1, L) == 0, -1);
  r.rewards = torch::tensor(std::vector<float>(rewards.begin(), rewards.end()), torch::kFloat);
  r.advantages = r.rewards - r.rewards.mean();
  return r;
}

torch::Tensor rl_policy_gradient_loss(const torch::Tensor& token_losses, const torch::Tensor& targets,
                                      const torch::Tensor& advantages, int64_t num_passes, int64_t examples_per_rank) {
  torch::Tensor logp = -token_losses.view_as(targets);  // log p of each target, 0 where ignored
  torch::Tensor objective = (logp * advantages.to(logp.dtype()).unsqueeze(-1)).sum();
  torch::Tensor valid = (targets >= 0).sum().clamp_min(1);
  return -objective / (valid * (num_passes * examples_per_rank));
}

std::vector<int64_t> rl_pass_at_k_counts(const std::vector<std::vector<bool>>& outcomes, int64_t k_max) {
  std::vector<int64_t> counts((size_t)std::max<int64_t>(k_max, 0), 0);
  for (const std::vector<bool>& samples : outcomes)
    for (int64_t k = 1; k <= k_max; k++) {
      const auto end = samples.begin() + std::min<int64_t>(k, (int64_t)samples.size());
      counts[(size_t)k - 1] += std::find(samples.begin(), end, true) != end;
    }
  return counts;
}

uint64_t rl_rollout_seed(int64_t step, int64_t example_idx, int64_t sampling_step) {
  return (uint64_t)(py_hash_int_tuple({step, example_idx, sampling_step}) & 0x7FFFFFFF);
}

}  // namespace nanochat
