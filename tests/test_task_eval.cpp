// Tests of the task_eval module (chat-eval): the categorical path's letter logits against the
// full forward. The tasks themselves, and their evaluate() answers, are in test_tasks.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include "nanochat/task_eval.h"
#include "test_models.h"

using namespace nanochat;

// categorical chat-eval: only the (B, K) letter logits come back to the host, and they are the
// very numbers read out of the full (B, T, V) logits of forward() at each row's answer position
TEST(TaskEval, LetterLogitsAreTheFullLogitsAtTheAnswerPositions) {
  GPTConfig config = tiny_gpt_config(300);
  GPT model = perturbed_gpt(config, 7, 0.05);
  model->eval();
  torch::manual_seed(3);
  const int64_t B = 3, T = 12, K = 4;
  torch::Tensor ids = torch::randint(0, 300, {B, T}, torch::kLong);
  torch::Tensor pos = torch::tensor({11, 4, 0}, torch::kLong);  // right-padded prompts end at different places
  torch::Tensor letters = torch::randint(0, 300, {B, K}, torch::kLong);
  torch::Tensor scores = task_eval_letter_logits(model, ids, pos, letters);
  EXPECT_EQ(scores.sizes(), (std::vector<int64_t>{B, K}));  // what is copied to the host: B*K floats
  EXPECT_EQ(scores.device(), torch::Device(torch::kCPU));
  EXPECT_EQ(scores.scalar_type(), torch::kFloat32);
  torch::NoGradGuard no_grad;
  torch::Tensor full = model->forward(ids);  // (B, T, V): the straightforward way
  ASSERT_EQ(full.sizes(), (std::vector<int64_t>{B, T, 300}));
  for (int64_t r = 0; r < B; r++)
    for (int64_t k = 0; k < K; k++) {
      const float expected = full[r][pos[r].item<int64_t>()][letters[r][k].item<int64_t>()].item<float>();
      EXPECT_NEAR(scores[r][k].item<float>(), expected, 1e-5) << "row " << r << " letter " << k;
    }
  // the answer chosen (argmax over the letters) is the same either way
  for (int64_t r = 0; r < B; r++) {
    torch::Tensor row = full[r][pos[r].item<int64_t>()].index_select(0, letters[r]);
    EXPECT_EQ(scores[r].argmax().item<int64_t>(), row.argmax().item<int64_t>()) << "row " << r;
  }
  EXPECT_THROW(task_eval_letter_logits(model, ids, pos.narrow(0, 0, 2), letters), std::exception);
}
