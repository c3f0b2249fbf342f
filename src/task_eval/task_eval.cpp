// defines: task_eval_sample_outcomes, task_eval_baseline, task_evaluate
// pass@n for generative tasks, letter logits for categorical ones (upstream chat_eval.py's
// run_generative_eval and run_categorical_eval).
#include "nanochat/task_eval.h"

#include <algorithm>
#include <cmath>

#include <torch/torch.h>

#include "nanochat/common.h"
#include "nanochat/dist.h"
#include "nanochat/engine.h"
#include "nanochat/tokenizer.h"

namespace nanochat {

std::vector<bool> task_eval_sample_outcomes(const Engine& engine, const Task& task, const nlohmann::json& conversation,
                                            const GenerateOptions& options) {
  GenerateResult r = engine.generate_batch(render_for_completion(engine.tokenizer(), conversation), options);
  std::vector<bool> outcomes;
  for (size_t row = 0; row < r.tokens.size(); row++)
    outcomes.push_back(task.evaluate(conversation, engine_completion_text(engine.tokenizer(), r, row)) != 0);
  return outcomes;
}

namespace {

int64_t problem_count(const Task& task, const TaskEvalOptions& o) {
  return o.max_problems > 0 ? std::min(task.size(), o.max_problems) : task.size();
}

// the letter's single token; Error when a letter is several tokens (the argmax needs one)
int32_t letter_token(const Tokenizer& tok, const std::string& letter) {
  std::vector<int32_t> ids = tok.encode(letter);
  if (ids.size() != 1) fail("chat-eval: the answer letter '%s' is %zu tokens, expected 1", letter.c_str(), ids.size());
  return ids[0];
}

std::pair<int64_t, int64_t> eval_generative(GPT& model, const Tokenizer& tok, const Task& task, const TaskEvalOptions& o,
                                            int rank, int world, Progress& progress) {
  Engine engine(model, tok);
  GenerateOptions go;
  go.num_samples = o.num_samples;
  go.max_tokens = o.max_new_tokens;
  go.temperature = o.temperature;
  go.top_k = o.top_k;
  go.seed = o.seed;
  int64_t passed = 0, total = 0;
  for (int64_t i = rank; i < problem_count(task, o); i += world) {
    std::vector<bool> outcomes = task_eval_sample_outcomes(engine, task, task.at(i), go);
    passed += std::find(outcomes.begin(), outcomes.end(), true) != outcomes.end();
    total++;
    progress.update(world);
  }
  return {passed, total};
}

std::pair<int64_t, int64_t> eval_categorical(GPT& model, const Tokenizer& tok, const Task& task, const TaskEvalOptions& o,
                                             int rank, int world, Progress& progress) {
  torch::NoGradGuard no_grad;
  const int64_t n = problem_count(task, o), bs = std::max<int64_t>(1, o.batch_size);
  const int64_t num_batches = (n + bs - 1) / bs;
  int64_t passed = 0, total = 0;
  for (int64_t bi = rank; bi < num_batches; bi += world) {
    const int64_t i0 = bi * bs, i1 = std::min(n, i0 + bs);
    std::vector<nlohmann::json> convs;
    std::vector<std::vector<int32_t>> prompts;
    size_t max_len = 0;
    for (int64_t i = i0; i < i1; i++) {
      convs.push_back(task.at(i));
      prompts.push_back(render_for_completion(tok, convs.back()));
      max_len = std::max(max_len, prompts.back().size());
    }
    // right-padded with BOS; each prompt's answer is read at its own last position
    torch::Tensor ids = torch::full({(int64_t)prompts.size(), (int64_t)max_len}, (int64_t)tok.bos_id(), torch::kLong);
    for (size_t r = 0; r < prompts.size(); r++)
      for (size_t t = 0; t < prompts[r].size(); t++) ids[r][t] = (int64_t)prompts[r][t];
    torch::Tensor logits = model->forward(ids.to(model->device())).to(torch::kCPU);
    for (size_t r = 0; r < prompts.size(); r++) {
      std::vector<std::string> letters = convs[r].at("letters").get<std::vector<std::string>>();
      torch::Tensor last = logits[(int64_t)r][(int64_t)prompts[r].size() - 1];
      size_t best = 0;
      double best_logit = -INFINITY;
      for (size_t k = 0; k < letters.size(); k++) {
        double v = last[letter_token(tok, letters[k])].item<double>();
        if (v > best_logit) best_logit = v, best = k;  // the first on ties, like argmax
      }
      passed += task.evaluate(convs[r], letters[best]);
      total++;
    }
    progress.update((i1 - i0) * world);
  }
  return {passed, total};
}

}  // namespace

double task_eval_baseline(const std::string& name) {
  return name == "ARC-Easy" || name == "ARC-Challenge" || name == "MMLU" ? 0.25 : 0.0;
}

TaskEvalResult task_evaluate(GPT& model, const Tokenizer& tok, const Task& task, const TaskEvalOptions& o, Dist* dist) {
  const int rank = dist ? dist->rank() : 0, world = dist ? dist->world_size() : 1;
  Progress progress(task.name(), o.progress ? problem_count(task, o) : 0, "problems");
  std::pair<int64_t, int64_t> counts;
  if (task.eval_type() == "categorical")
    counts = eval_categorical(model, tok, task, o, rank, world, progress);
  else if (task.eval_type() == "generative")
    counts = eval_generative(model, tok, task, o, rank, world, progress);
  else
    fail("chat-eval: %s is not an evaluation task", task.name().c_str());
  progress.finish();
  if (dist && world > 1) {
    torch::Tensor t = torch::tensor({counts.first, counts.second}, torch::kLong).to(dist->device());
    dist->all_reduce(t, ReduceOp::SUM);
    t = t.cpu();
    counts = {t[0].item<int64_t>(), t[1].item<int64_t>()};
  }
  TaskEvalResult r;
  r.name = task.name();
  r.passed = counts.first;
  r.total = counts.second;
  r.accuracy = r.total ? (double)r.passed / (double)r.total : 0.0;
  r.baseline = task_eval_baseline(r.name);
  r.centered = (r.accuracy - r.baseline) / (1.0 - r.baseline);
  return r;
}

}  // namespace nanochat
