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

std::pair<int64_t, int64_t> eval_generative(GPT& model, const Tokenizer& tok, const Task& task,
                                            const TaskEvalOptions& o, int rank, int world, Progress& progress) {
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

std::pair<int64_t, int64_t> eval_categorical(GPT& model, const Tokenizer& tok, const Task& task,
                                             const TaskEvalOptions& o, int rank, int world, Progress& progress) {
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
    // right-padded with BOS; each prompt's answer is read at its own last position. Letter
    // lists differ in length (ARC has 3 to 5): short rows repeat their first letter, unread
    const int64_t B = (int64_t)prompts.size();
    size_t max_letters = 1;
    std::vector<std::vector<std::string>> letters;
    for (const nlohmann::json& conv : convs) {
      letters.push_back(conv.at("letters").get<std::vector<std::string>>());
      if (letters.back().empty()) fail("chat-eval: a %s problem has no answer letters", task.name().c_str());
      max_letters = std::max(max_letters, letters.back().size());
    }
    torch::Tensor ids = torch::full({B, (int64_t)max_len}, (int64_t)tok.bos_id(), torch::kLong);
    torch::Tensor pos = torch::empty({B}, torch::kLong);
    torch::Tensor letter_ids = torch::empty({B, (int64_t)max_letters}, torch::kLong);
    auto id = ids.accessor<int64_t, 2>();
    auto at = pos.accessor<int64_t, 1>();
    auto letter = letter_ids.accessor<int64_t, 2>();
    for (int64_t r = 0; r < B; r++) {
      for (size_t t = 0; t < prompts[r].size(); t++) id[r][(int64_t)t] = (int64_t)prompts[r][t];
      at[r] = (int64_t)prompts[r].size() - 1;
      for (size_t k = 0; k < max_letters; k++)
        letter[r][(int64_t)k] = (int64_t)letter_token(tok, letters[r][k < letters[r].size() ? k : 0]);
    }
    torch::Tensor scores = task_eval_letter_logits(model, ids, pos, letter_ids);  // (B, K) on the CPU
    auto s = scores.accessor<float, 2>();
    for (int64_t r = 0; r < B; r++) {
      size_t best = 0;
      for (size_t k = 1; k < letters[r].size(); k++)
        if (s[r][(int64_t)k] > s[r][(int64_t)best]) best = k;  // the first on ties, like argmax
      passed += task.evaluate(convs[r], letters[r][best]);
      total++;
    }
    progress.update((i1 - i0) * world);
  }
  return {passed, total};
}

}  // namespace

torch::Tensor task_eval_letter_logits(GPT& model, const torch::Tensor& ids, const torch::Tensor& answer_pos,
                                      const torch::Tensor& letter_ids) {
  torch::NoGradGuard no_grad;
  const torch::Device device = model->device();
  const int64_t B = ids.size(0);
  if (answer_pos.dim() != 1 || answer_pos.size(0) != B || letter_ids.dim() != 2 || letter_ids.size(0) != B)
    fail("task_eval_letter_logits: ids (B, T), answer_pos (B) and letter_ids (B, K) disagree on B");
  torch::Tensor h = model->hidden(ids.to(device));  // (B, T, C)
  torch::Tensor rows = torch::arange(B, torch::TensorOptions().dtype(torch::kLong).device(device));
  torch::Tensor at_answer = h.index({rows, answer_pos.to(device)});  // (B, C)
  // what forward() does to every position, done to these B only
  torch::Tensor logits = model->lm_head(at_answer).narrow(-1, 0, model->config.vocab_size);
  logits = gpt_softcap(logits.to(torch::kFloat32));
  return logits.gather(1, letter_ids.to(device)).to(torch::kCPU);  // (B, K): the one copy to the host
}

double task_eval_baseline(const std::string& name) {
  return name == "ARC-Easy" || name == "ARC-Challenge" || name == "MMLU" ? 0.25 : 0.0;
}

TaskEvalResult task_evaluate(GPT& model, const Tokenizer& tok, const Task& task, const TaskEvalOptions& o, Dist* dist) {
  const int rank = dist ? dist->rank() : 0, world = dist ? dist->world_size() : 1;
  Progress progress(task.name(), o.progress ? problem_count(task, o) : 0, "problems");
  std::pair<int64_t, int64_t> counts;
  if (task.eval_type() == "categorical") counts = eval_categorical(model, tok, task, o, rank, world, progress);
  else if (task.eval_type() == "generative") counts = eval_generative(model, tok, task, o, rank, world, progress);
  else fail("chat-eval: %s is not an evaluation task", task.name().c_str());
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
