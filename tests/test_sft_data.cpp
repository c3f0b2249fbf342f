// SFT packing (upstream's sft_data_generator_bos_bestfit) on hand-made conversations with a byte-level tokenizer (token id =
// byte value), so every row, mask and target below is worked out by hand.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <map>
#include <random>
#include <sstream>

#include <torch/torch.h>

#include "nanochat/common/files.h"
#include "nanochat/sft_data.h"
#include "nanochat/tasks.h"
#include "nanochat/tokenizer.h"
#include "test_models.h"
#include "test_util.h"

using namespace nanochat;

namespace {

// conversation i: user "u" x U, assistant "a" x A -> U + A + 5 tokens:
// <|bos|> <|user_start|> u.. <|user_end|> <|assistant_start|> a.. <|assistant_end|>
struct Conversations : Task {
  std::vector<std::pair<int, int>> sizes;
  explicit Conversations(std::vector<std::pair<int, int>> s) : sizes(std::move(s)) {}
  std::string name() const override { return "hand-made"; }
  int64_t num_examples() const override { return (int64_t)sizes.size(); }
  nlohmann::json get_example(int64_t i) const override {
    return {{"messages",
             {{{"role", "user"}, {"content", std::string(sizes[i].first, 'u')}},
              {{"role", "assistant"}, {"content", std::string(sizes[i].second, 'a')}}}}};
  }
};

std::vector<int64_t> row(const torch::Tensor& t, int64_t b) {
  torch::Tensor r = t[b].to(torch::kLong).contiguous();
  return std::vector<int64_t>(r.data_ptr<int64_t>(), r.data_ptr<int64_t>() + r.numel());
}

}  // namespace

TEST(SftBatcher, BestFitRowsWithBosPaddingAndMasks) {
  Tokenizer tok = byte_tokenizer();
  const int64_t bos = tok.special_id("<|bos|>"), us = tok.special_id("<|user_start|>"),
                ue = tok.special_id("<|user_end|>"), as = tok.special_id("<|assistant_start|>"),
                ae = tok.special_id("<|assistant_end|>"), u = 'u', a = 'a';
  // c0: 8 tokens (U1 A2), c1: 6 (U0 A1), c2: 12 (U4 A3), c3: 5 (U0 A0)
  auto data = std::make_shared<Conversations>(std::vector<std::pair<int, int>>{{1, 2}, {0, 1}, {4, 3}, {0, 0}});
  // rows of T+1 = 12 tokens, a buffer of 2 conversations, one rank
  SftBatcher batcher(tok, data, /*B=*/2, /*T=*/11, /*rank=*/0, /*world=*/1, /*buffer=*/2);

  // batch 1, row 0: buffer [c0, c1] -> c0 (largest that fits 12), 4 left; buffer [c1, c2]:
  // neither fits 4 -> BOS padding, content 8. Row 1: buffer [c1, c2] -> c2 fills it.
  SftBatch b1 = batcher.next();
  EXPECT_EQ(row(b1.inputs, 0), (std::vector<int64_t>{bos, us, u, ue, as, a, a, ae, bos, bos, bos}));
  // targets = ids[1:], -1 where mask[1:] is 0 (user part, specials but assistant_end), and
  // from content_len - 1 = 7 on (the padding)
  EXPECT_EQ(row(b1.targets, 0), (std::vector<int64_t>{-1, -1, -1, -1, a, a, ae, -1, -1, -1, -1}));
  EXPECT_EQ(row(b1.inputs, 1), (std::vector<int64_t>{bos, us, u, u, u, u, ue, as, a, a, a}));
  EXPECT_EQ(row(b1.targets, 1), (std::vector<int64_t>{-1, -1, -1, -1, -1, -1, -1, a, a, a, ae}));
  EXPECT_EQ(b1.inputs.scalar_type(), torch::kInt32);
  EXPECT_EQ(b1.targets.scalar_type(), torch::kLong);
  EXPECT_EQ(batcher.consumed(), 2);

  // batch 2, row 0: buffer [c1, c3] -> c1 (6), then [c3, c0] (the walk wrapped: epoch 2)
  // -> c3 (5), 1 left, [c0, c1]: nothing fits -> one BOS, content 11.
  // Row 1: [c0, c1] -> c0 (8), 4 left, [c1, c2]: nothing fits -> 4 BOS, content 8.
  SftBatch b2 = batcher.next();
  EXPECT_EQ(row(b2.inputs, 0), (std::vector<int64_t>{bos, us, ue, as, a, ae, bos, us, ue, as, ae}));
  EXPECT_EQ(row(b2.targets, 0), (std::vector<int64_t>{-1, -1, -1, a, ae, -1, -1, -1, -1, ae, -1}));
  EXPECT_EQ(row(b2.inputs, 1), (std::vector<int64_t>{bos, us, u, ue, as, a, a, ae, bos, bos, bos}));
  EXPECT_EQ(row(b2.targets, 1), (std::vector<int64_t>{-1, -1, -1, -1, a, a, ae, -1, -1, -1, -1}));
  EXPECT_EQ(batcher.epoch(), 2);
  EXPECT_EQ(batcher.consumed(), 5);
}

TEST(SftBatcher, RanksStrideTheConversations) {
  Tokenizer tok = byte_tokenizer();
  // all 12 tokens long (U4 A3): one conversation per row, in each rank's walk order
  auto data = std::make_shared<Conversations>(std::vector<std::pair<int, int>>(6, {4, 3}));
  SftBatcher r0(tok, data, 1, 11, 0, 2, 1), r1(tok, data, 1, 11, 1, 2, 1);
  r0.next();
  r1.next();
  // upstream counts every rank's placements in each rank's `consumed`: rank + W per conversation
  EXPECT_EQ(r0.consumed(), 2);
  EXPECT_EQ(r1.consumed(), 3);
}

TEST(SftBatcher, ConversationLongerThanARowIsCroppedNotPaddedForever) {
  Tokenizer tok = byte_tokenizer();
  // 25 tokens of which the first 12 are all prompt: the row is fully masked
  auto data = std::make_shared<Conversations>(std::vector<std::pair<int, int>>{{18, 2}});
  SftBatcher batcher(tok, data, 1, 11, 0, 1, 1);
  SftBatch b = batcher.next();
  EXPECT_EQ(row(b.targets, 0), std::vector<int64_t>(11, -1));
  // the masked mean over no target is 0, not NaN (upstream divided by zero there)
  EXPECT_EQ(sft_masked_mean(torch::ones({11}), b.targets).item<double>(), 0.0);
  torch::Tensor y = torch::tensor({{-1, 3, -1, 5}});
  EXPECT_DOUBLE_EQ(sft_masked_mean(torch::tensor({1.0, 2.0, 4.0, 8.0}), y).item<double>(), 5.0);
}

TEST(SftBatcher, StateResumesTheSameRows) {
  Tokenizer tok = byte_tokenizer();
  // the conversations of BestFitRowsWithBosPaddingAndMasks, a buffer of 2
  auto data = std::make_shared<Conversations>(std::vector<std::pair<int, int>>{{1, 2}, {0, 1}, {4, 3}, {0, 0}});
  SftBatcher batcher(tok, data, 2, 11, 0, 1, 2);
  batcher.next();
  // after batch 1 (worked out in that test): c0 and c2 placed, c1 still buffered, c3 next
  SftBatcherState s = batcher.state();
  EXPECT_EQ(s.cursor, 3);
  EXPECT_EQ(s.consumed, 2);
  EXPECT_EQ(s.epoch, 1);
  EXPECT_EQ(s.buffer, std::vector<int64_t>{1});

  // through JSON into a fresh batcher: the same batch 2 as the batcher that kept going
  SftBatcherState back = sft_batcher_state_from_json(sft_batcher_state_to_json(s), data->size(), "test");
  SftBatcher resumed(tok, data, 2, 11, 0, 1, 2, &back);
  SftBatch expected = batcher.next(), got = resumed.next();
  EXPECT_TRUE(torch::equal(expected.inputs, got.inputs));
  EXPECT_TRUE(torch::equal(expected.targets, got.targets));
  EXPECT_EQ(resumed.consumed(), 5);
  EXPECT_EQ(resumed.epoch(), 2);
  const int64_t bos = tok.special_id("<|bos|>"), us = tok.special_id("<|user_start|>"),
                ue = tok.special_id("<|user_end|>"), as = tok.special_id("<|assistant_start|>"),
                ae = tok.special_id("<|assistant_end|>"), a = 'a';
  EXPECT_EQ(row(got.inputs, 0), (std::vector<int64_t>{bos, us, ue, as, a, ae, bos, us, ue, as, ae}));

  // a state from another mixture (an index past its end) is refused with where it came from
  nlohmann::json bad = sft_batcher_state_to_json(s);
  bad["buffer"] = {7};
  try {
    sft_batcher_state_from_json(bad, data->size(), "optim_000010_rank0.json");
    FAIL() << "accepted a buffered index past the mixture";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("optim_000010_rank0.json"), std::string::npos) << e.what();
  }
  EXPECT_THROW(sft_batcher_state_from_json(nlohmann::json::object(), data->size(), "x"), std::exception);
}
