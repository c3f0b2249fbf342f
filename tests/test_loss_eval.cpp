// Tests of the loss_eval module: bits per byte (evaluate_bpb) on a batch whose sums are counted
// by hand, and over a loop of batches with torch's cross-entropy against -log softmax by hand.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include <torch/torch.h>

#include "nanochat/loss_eval.h"

using namespace nanochat;

TEST(Bpb, HandCountedBatch) {
  // vocab of 3: token 0 is special (0 bytes), token 1 is 3 bytes, token 2 is 1 byte
  torch::Tensor token_bytes = torch::tensor({0, 3, 1}, torch::kInt32);
  torch::Tensor targets = torch::tensor({0, 1, 2, -1}, torch::kLong).reshape({2, 2});
  torch::Tensor loss = torch::tensor({1.0f, 2.0f, 3.0f, 4.0f});
  // counted: position 1 (2 nats, 3 bytes) and 2 (3 nats, 1 byte) -> 5 nats over 4 bytes
  BpbSums sums;
  bpb_accumulate(sums, loss, targets, token_bytes);
  EXPECT_DOUBLE_EQ(sums.nats, 5.0);
  EXPECT_DOUBLE_EQ(sums.bytes, 4.0);
  EXPECT_NEAR(bpb_finish(sums, nullptr), 5.0 / (std::log(2.0) * 4.0), 1e-12);
  EXPECT_EQ(bpb_finish(BpbSums{}, nullptr), std::numeric_limits<double>::infinity());
}

TEST(Bpb, LoopOverBatchesWithRealCrossEntropy) {
  // logits fixed per batch; the per-token loss is torch's cross-entropy, the expected value
  // is -log softmax computed here term by term
  torch::Tensor token_bytes = torch::tensor({0, 2, 5}, torch::kInt32);
  torch::Tensor logits = torch::tensor({{0.0f, 1.0f, 2.0f}, {2.0f, 0.0f, -1.0f}});
  int calls = 0;
  auto next_batch = [&] {
    calls++;
    torch::Tensor x = torch::zeros({1, 2}, torch::kLong);
    torch::Tensor y = torch::tensor({{2, 1}}, torch::kLong);
    return std::make_pair(x, y);
  };
  auto loss_fn = [&](const torch::Tensor&, const torch::Tensor& y) {
    return torch::nn::functional::cross_entropy(
        logits, y.reshape({-1}), torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kNone));
  };
  double bpb = evaluate_bpb(loss_fn, next_batch, 3, token_bytes, nullptr);
  EXPECT_EQ(calls, 3);
  double lse0 = std::log(std::exp(0.0) + std::exp(1.0) + std::exp(2.0));
  double lse1 = std::log(std::exp(2.0) + std::exp(0.0) + std::exp(-1.0));
  double nats = (lse0 - 2.0) + (lse1 - 0.0);  // per batch
  EXPECT_NEAR(bpb, 3 * nats / (std::log(2.0) * 3 * (5 + 2)), 1e-6);
}
