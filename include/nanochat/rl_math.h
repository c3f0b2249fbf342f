// The arithmetic of RL on GSM8K (the rl subcommand), as upstream's scripts/chat_rl.py: a
// simplified GRPO, in effect REINFORCE with a mean
// baseline. For each training problem the current model samples num_samples completions;
// each is scored by the task's reward, advantage = reward - mean reward (no division by σ),
// and the loss is minus the sum of log p(sampled token) x advantage over the sampled tokens,
// divided by the pass's sampled tokens (DAPO-style token normalisation), the passes and the
// examples of the step. No KL term, no reference model, no ratio clipping: it is on-policy.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "nanochat/common/tensor.h"

namespace nanochat {

struct RlRollout {
  torch::Tensor inputs;      // (N, L-1) int64: ids[:, :-1]
  torch::Tensor targets;     // (N, L-1) int64: ids[:, 1:], -1 where mask[1:] is 0
  torch::Tensor rewards;     // (N,) float32
  torch::Tensor advantages;  // (N,) float32: rewards - mean(rewards)
};
// the samples of one problem (prompt + generated tokens, the stop token excluded) and their
// masks (1 sampled; 0 prompt and forced tool output), right-padded with `pad`
// (<|assistant_end|>) under mask 0, so only sampled tokens are trained on
RlRollout rl_rollout_batch(const std::vector<std::vector<int32_t>>& sequences,
                           const std::vector<std::vector<uint8_t>>& masks, const std::vector<double>& rewards,
                           int32_t pad);

// token_losses: the per-token cross-entropy (B*T or B x T, 0 where the target is -1) of one
// pass of B rows; returns -sum(log p x advantage) / (valid targets (min 1) x num_passes x
// examples_per_rank), whose gradient summed over the step's passes is upstream's
torch::Tensor rl_policy_gradient_loss(const torch::Tensor& token_losses, const torch::Tensor& targets,
                                      const torch::Tensor& advantages, int64_t num_passes, int64_t examples_per_rank);

// outcomes: per problem, whether each of its samples was correct; entry k-1 counts the
// problems where one of the first k samples was (k = 1..k_max)
std::vector<int64_t> rl_pass_at_k_counts(const std::vector<std::vector<bool>>& outcomes, int64_t k_max);

// upstream's rollout seed: hash((step, example_idx, sampling_step)) & 0x7FFFFFFF (CPython)
uint64_t rl_rollout_seed(int64_t step, int64_t example_idx, int64_t sampling_step);

}  // namespace nanochat
