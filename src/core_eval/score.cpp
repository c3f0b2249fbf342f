// Scoring (upstream core_eval.py's evaluate_example and base_eval.py's CSV). Upstream forwards one example at a time (its options as
// one batch). Here every row (prompt) of this rank's examples is prepared on a thread pool,
// the rows are sorted longest first and cut into forwards of at most batch_size rows (and
// max_batch_tokens padded tokens), right-padded with BOS. Causal attention keeps a row's
// logits independent of the padding after it, and every number per row (the losses over
// [start-1, end-1), the greedy predictions) is the one upstream computes.
#include <algorithm>
#include <chrono>
#include <numeric>

#include <torch/torch.h>

#include "nanochat/common.h"
#include "nanochat/core_eval.h"
#include "nanochat/dist.h"
#include "nanochat/tokenizer.h"

namespace nanochat {

namespace {
struct Row {
  size_t original;  // position before sorting: examples in order, options in order
  int64_t start, end;
  const std::vector<int32_t>* tokens;
};
}  // namespace

std::vector<float> core_evaluate_task(const CoreLogitsFn& logits_fn, const Tokenizer& tok, const CoreTaskSpec& task,
                                      const std::vector<CoreItem>& data, const CoreOptions& opts, int rank, int world) {
  std::vector<float> correct(data.size(), 0.0f);
  std::vector<int64_t> mine;  // examples are strided over ranks
  for (int64_t idx = rank; idx < (int64_t)data.size(); idx += world) mine.push_back(idx);
  if (mine.empty()) return correct;

  // render and tokenize on the pool (the first error is rethrown by parallel_for)
  std::vector<CoreSequences> seqs(mine.size());
  {
    ThreadPool pool(opts.threads > 0 ? opts.threads : default_thread_count());
    pool.parallel_for((int64_t)mine.size(), [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; i++) seqs[i] = core_prepare_example(task, data, mine[i], tok, opts.max_seq_len);
    });
  }
  std::vector<Row> rows;
  for (size_t i = 0; i < seqs.size(); i++)
    for (size_t r = 0; r < seqs[i].tokens.size(); r++)
      rows.push_back({rows.size(), seqs[i].start[r], seqs[i].end[r], &seqs[i].tokens[r]});
  std::stable_sort(rows.begin(), rows.end(),
                   [](const Row& a, const Row& b) { return a.tokens->size() > b.tokens->size(); });

  // per row: mean loss (MC, schema) or 1/0 exact greedy match (LM)
  std::vector<float> score(rows.size());
  const int64_t max_rows = std::max<int64_t>(1, opts.batch_size);
  for (size_t begin = 0; begin < rows.size();) {
    const int64_t T = (int64_t)rows[begin].tokens->size();  // longest of this batch
    size_t end = begin + 1;
    while (end < rows.size() && (int64_t)(end - begin) < max_rows &&
           (opts.max_batch_tokens <= 0 || (int64_t)(end - begin + 1) * T <= opts.max_batch_tokens))
      end++;
    const int64_t B = (int64_t)(end - begin);
    // stack_sequences: right-pad with BOS
    torch::Tensor input = torch::full({B, T}, (int64_t)tok.bos_id(), torch::kLong);
    auto acc = input.accessor<int64_t, 2>();
    for (int64_t b = 0; b < B; b++) {
      const auto& t = *rows[begin + b].tokens;
      for (size_t j = 0; j < t.size(); j++) acc[b][(int64_t)j] = t[j];
    }
    torch::Tensor losses, preds;
    {
      torch::NoGradGuard no_grad;
      torch::Tensor logits = logits_fn(input);
      const int64_t V = logits.size(-1);
      // forward_model: cross entropy against the inputs rolled left by one, argmax
      torch::Tensor targets = torch::roll(input, -1, 1).to(logits.device());
      losses = torch::nn::functional::cross_entropy(
                   logits.reshape({B * T, V}), targets.reshape({B * T}),
                   torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kNone))
                   .view({B, T})
                   .to(torch::kCPU, torch::kFloat);
      preds = logits.argmax(-1).to(torch::kCPU);
    }
    auto pacc = preds.accessor<int64_t, 2>();
    for (int64_t b = 0; b < B; b++) {
      const Row& row = rows[begin + b];
      if (task.type == "language_modeling") {
        // predictions[s-1:e-1] == input_ids[s:e]
        bool ok = true;
        for (int64_t p = row.start; p < row.end; p++) ok = ok && pacc[b][p - 1] == acc[b][p];
        score[begin + b] = ok ? 1.0f : 0.0f;
      } else if (row.start >= 1 && row.start < row.end) {
        score[begin + b] = losses[b].slice(0, row.start - 1, row.end - 1).mean().item<float>();
      } else {
        score[begin + b] = std::numeric_limits<float>::quiet_NaN();  // an empty span: mean of nothing
      }
    }
    begin = end;
  }

  // back to examples, options in their order
  std::vector<float> by_original(rows.size());
  for (size_t i = 0; i < rows.size(); i++) by_original[rows[i].original] = score[i];
  size_t at = 0;
  for (size_t i = 0; i < mine.size(); i++) {
    const CoreItem& item = data[(size_t)mine[i]];
    size_t n = seqs[i].tokens.size();
    if (task.type == "language_modeling") {
      correct[(size_t)mine[i]] = by_original[at];
    } else {
      // mean_losses.index(min(mean_losses)): the first strictly smaller wins (NaN never does)
      size_t best = 0;
      for (size_t k = 1; k < n; k++)
        if (by_original[at + k] < by_original[at + best]) best = k;
      correct[(size_t)mine[i]] = (int64_t)best == item.gold ? 1.0f : 0.0f;
    }
    at += n;
  }
  return correct;
}

CoreResult core_evaluate(const CoreLogitsFn& logits_fn, const Tokenizer& tok, const CoreOptions& opts, Dist* dist,
                         const std::function<void(const CoreTaskResult&)>& on_task) {
  std::string dir = core_eval_bundle_dir(opts.bundle_dir);
  std::vector<CoreTaskSpec> tasks = core_bundle_load(dir);
  int rank = dist ? dist->rank() : 0, world = dist ? dist->world_size() : 1;
  CoreResult out;
  double centered_sum = 0;
  for (const auto& task : tasks) {
    if (!opts.only_tasks.empty() &&
        std::find(opts.only_tasks.begin(), opts.only_tasks.end(), task.label) == opts.only_tasks.end())
      continue;
    auto t0 = std::chrono::steady_clock::now();
    std::vector<CoreItem> data = core_load_task_data(dir + "/eval_data/" + task.dataset_uri, task.type);
    core_shuffle_truncate(data, opts.max_per_task);
    std::vector<float> correct = core_evaluate_task(logits_fn, tok, task, data, opts, rank, world);
    torch::Tensor c = torch::from_blob(correct.data(), {(int64_t)correct.size()}, torch::kFloat).clone();
    if (dist && world > 1) {
      torch::Tensor d = c.to(dist->device());
      dist->all_reduce(d, ReduceOp::SUM);
      c = d.to(torch::kCPU);
    }
    CoreTaskResult r;
    r.label = task.label, r.type = task.type, r.num_fewshot = task.num_fewshot;
    r.examples = (int64_t)data.size();
    r.accuracy = c.mean().item<float>();  // a float32 mean, like correct.mean().item()
    double rb = 0.01 * task.random_baseline;
    r.centered = (r.accuracy - rb) / (1.0 - rb);
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    centered_sum += r.centered;
    out.tasks.push_back(r);
    if (on_task) on_task(r);
  }
  if (out.tasks.empty()) fail("no CORE task to evaluate in %s (check --only-tasks)", dir.c_str());
  out.core = centered_sum / (double)out.tasks.size();
  return out;
}

CoreLogitsFn core_gpt_logits_fn(GPT& model) {
  return [model](const torch::Tensor& idx) mutable {
    int64_t rotary = model->cos.size(1);
    if (idx.size(1) > rotary)
      fail("a CORE prompt of %lld tokens is longer than the model's rotary cache (%lld = 10 x sequence_len)",
           (long long)idx.size(1), (long long)rotary);
    torch::NoGradGuard no_grad;
    return model->forward(idx.to(model->device()));
  };
}

CoreResult core_evaluate(GPT& model, const Tokenizer& tok, CoreOptions opts, Dist* dist,
                         const std::function<void(const CoreTaskResult&)>& on_task) {
  if (opts.max_batch_tokens <= 0) opts.max_batch_tokens = opts.batch_size * model->config.sequence_len;
  bool was_training = model->is_training();
  model->eval();
  CoreResult r;
  try {
    r = core_evaluate(core_gpt_logits_fn(model), tok, opts, dist, on_task);
  } catch (...) {
    model->train(was_training);
    throw;
  }
  model->train(was_training);
  return r;
}

std::string core_task_line(const CoreTaskResult& r) {
  return strprintf("Evaluating: %s (%lld-shot, type: %s)... accuracy: %.4f | centered: %.4f | time: %.2fs",
                   r.label.c_str(), (long long)r.num_fewshot, r.type.c_str(), r.accuracy, r.centered, r.seconds);
}

std::string core_csv(const CoreResult& r) {
  // f"{label:<35}, {acc:<10.6f}, {centered:<10.6f}"; the last row f"{'CORE':<35}, {'':<10}, {core:<10.6f}"
  std::string s = strprintf("%-35s, %-10s, %-10s\n", "Task", "Accuracy", "Centered");
  for (const auto& t : r.tasks) {
    s += strprintf("%-35s, %-10s, %-10s\n", t.label.c_str(), strprintf("%.6f", t.accuracy).c_str(),
                   strprintf("%.6f", t.centered).c_str());
  }
  s += strprintf("%-35s, %-10s, %-10s\n", "CORE", "", strprintf("%.6f", r.core).c_str());
  return s;
}

std::string core_csv_path(int64_t step) {
  return base_dir_path("base_eval") + strprintf("/base_model_%06lld.csv", (long long)step);
}

}  // namespace nanochat
