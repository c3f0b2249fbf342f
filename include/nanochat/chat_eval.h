// defines: ChatEvalOptions, ChatTaskResult, ChatEvalResult, chat_eval_baseline, chat_eval_task,
//          chat_eval_run, chat_eval_json, chat_eval_sample_outcomes
// Evaluation of a chat model (spec §9.5). Generative tasks (GSM8K, HumanEval, SpellingBee):
// sample num_samples completions per problem, a problem passes when any passes (pass@n).
// Categorical tasks (ARC, MMLU): one forward over a right-padded batch of prompts, the answer
// is the allowed letter with the largest logit at the <|assistant_start|> position. Problems
// are strided over ranks and the counts all-reduced. ChatCORE: the mean of the centred
// accuracies (acc - baseline) / (1 - baseline) over the five tasks, when all five ran.
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

struct ChatEvalOptions {
  int64_t num_samples = 1;
  int64_t max_new_tokens = 512;
  double temperature = 0.0;
  int64_t top_k = 50;
  int64_t batch_size = 8;     // categorical problems per forward
  int64_t max_problems = -1;  // per task; -1: all
  uint64_t seed = 42;
  bool progress = true;       // a progress line per task (rank 0)
};

struct ChatTaskResult {
  std::string name;
  int64_t passed = 0, total = 0;
  double accuracy = 0, baseline = 0, centered = 0;
};
struct ChatEvalResult {
  std::vector<ChatTaskResult> tasks;
  double chatcore = NAN;      // all five of ARC-Easy, ARC-Challenge, MMLU, GSM8K, HumanEval
  double chatcore_cat = NAN;  // the three categorical ones
};

// 0.25 for ARC-Easy, ARC-Challenge and MMLU (four letters), 0 for the generative tasks
double chat_eval_baseline(const std::string& task_name);
ChatTaskResult chat_eval_task(GPT& model, const Tokenizer& tok, const Task& task, const ChatEvalOptions& opts,
                              Dist* dist);
// task_names empty: all five
ChatEvalResult chat_eval_run(GPT& model, const Tokenizer& tok, std::vector<std::string> task_names,
                             const ChatEvalOptions& opts, Dist* dist);
nlohmann::ordered_json chat_eval_json(const ChatEvalResult& r);

// one generative problem: options.num_samples completions of its prompt, each judged by the
// task (pass@n takes any of them; RL's pass@k the first k)
std::vector<bool> chat_eval_sample_outcomes(const Engine& engine, const Task& task, const nlohmann::json& conversation,
                                            const GenerateOptions& options);

}  // namespace nanochat
