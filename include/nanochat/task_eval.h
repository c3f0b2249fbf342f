// A chat model scored on one chat task, as upstream's scripts/chat_eval.py (used by
// chat-eval, by SFT's ChatCORE and, for the sampled outcomes, by RL's pass@k). Generative
// tasks (GSM8K, HumanEval, SpellingBee): sample num_samples completions per problem, a
// problem passes when any passes (pass@n).
// Categorical tasks (ARC, MMLU): one forward over a right-padded batch of prompts, the answer
// is the allowed letter with the largest logit at the <|assistant_start|> position. Problems
// are strided over ranks and the counts all-reduced. ChatCORE: the mean of the centred
// accuracies (acc - baseline) / (1 - baseline) over the five tasks (chat-eval, SFT).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "nanochat/engine.h"
#include "nanochat/gpt.h"
#include "nanochat/tasks.h"

namespace nanochat {

class Dist;
class Tokenizer;

struct TaskEvalOptions {
  int64_t num_samples = 1;
  int64_t max_new_tokens = 512;
  double temperature = 0.0;
  int64_t top_k = 50;
  int64_t batch_size = 8;     // categorical problems per forward
  int64_t max_problems = -1;  // per task; -1: all
  uint64_t seed = 42;
  bool progress = true;  // a progress line per task (rank 0)
};

struct TaskEvalResult {
  std::string name;
  int64_t passed = 0, total = 0;
  double accuracy = 0, baseline = 0, centered = 0;
};
// 0.25 for ARC-Easy, ARC-Challenge and MMLU (four letters), 0 for the generative tasks
double task_eval_baseline(const std::string& task_name);
// the task's problems strided over ranks, the counts summed over them
TaskEvalResult task_evaluate(GPT& model, const Tokenizer& tok, const Task& task, const TaskEvalOptions& opts,
                             Dist* dist);

// a categorical batch's scores: row r's logits (as forward() gives them: fp32, softcapped) of
// the tokens letter_ids[r] (B, K) at position answer_pos[r] (B) of ids (B, T). Only the B answer
// positions go through lm_head, on the model's device; what comes back to the host is the
// (B, K) fp32 tensor, not the (B, T, V) logits
torch::Tensor task_eval_letter_logits(GPT& model, const torch::Tensor& ids, const torch::Tensor& answer_pos,
                                      const torch::Tensor& letter_ids);

// one generative problem: options.num_samples completions of its prompt, each judged by the
// task (pass@n takes any of them; RL's pass@k the first k)
std::vector<bool> task_eval_sample_outcomes(const Engine& engine, const Task& task, const nlohmann::json& conversation,
                                            const GenerateOptions& options);

}  // namespace nanochat
