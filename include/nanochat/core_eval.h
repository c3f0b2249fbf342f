// The CORE metric (upstream's core_eval.py and base_eval.py): DCLM's 22 in-context tasks scored exactly as upstream's
// nanochat/core_eval.py and scripts/base_eval.evaluate_core do it: the same shuffled
// subsets (CPython's random), the same Jinja2 prompts, the same BOS-prepended tokens and
// start/end indices, the same per-option mean losses and greedy matches, the same centring
// and mean. What differs is speed: rows of many examples go through one forward, longest
// first, right-padded with BOS (causal attention never looks right, so a row's numbers do
// not depend on its neighbours or its padding).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "nanochat/common/tensor.h"

#include "nanochat/dataset.h"
#include "nanochat/gpt.h"

namespace nanochat {

class Dist;
class Tokenizer;

constexpr const char* kEvalBundleUrl = "https://karpathy-public.s3.us-west-2.amazonaws.com/eval_bundle.zip";

// ---- the bundle (upstream's eval_bundle) ---------------------------------------------------------------
struct CoreTaskSpec {
  std::string label, type;  // type: multiple_choice, schema or language_modeling
  std::string dataset_uri;  // relative to <bundle>/eval_data/
  int64_t num_fewshot = 0;  // num_fewshot[0]
  std::string continuation_delimiter = " ";
  double random_baseline = 0;  // percent, from eval_meta_data.csv
};
// core.yaml's icl_tasks (in order) joined with eval_meta_data.csv's "Random baseline";
// Error naming the file (and task) for anything missing or unknown
std::vector<CoreTaskSpec> core_bundle_load(const std::string& bundle_dir);
// the bundle directory: `flag` when given, else $BASE/eval_bundle; Error when it has no
// core.yaml, saying to run `nanochat download eval-bundle` (or pass --eval-bundle DIR)
std::string core_eval_bundle_dir(const std::string& flag = "");
// the zip must open and hold eval_bundle/core.yaml (download_file's verify step)
void core_bundle_verify_zip(const std::string& zip_path);
// unzips into a temp directory beside `dest` and renames its eval_bundle/ to `dest`
// (atomic: `dest` is either absent or complete); no-op when `dest` exists
void core_bundle_place(const std::string& zip_path, const std::string& dest);
// download_file(url -> $BASE/eval_bundle.zip) with lock, resume, verify, then place it at
// $BASE/eval_bundle; returns that directory. Safe under several ranks at once.
std::string core_bundle_download(const std::string& url = kEvalBundleUrl,
                                 const DownloadOptions& opts = DownloadOptions());

// ---- one task's data (base_eval.evaluate_core: load, shuffle, few-shot) -----------------------------------------------------
// One JSONL record. Multiple choice: text = query, options = choices, gold. Schema:
// options = context_options, continuation, gold. Language modelling: text = context,
// continuation. Non-string values render like Jinja2 (Python's str()) for ints and bools.
struct CoreItem {
  std::string text, continuation;
  std::vector<std::string> options;
  int64_t gold = -1;
  int64_t line = 0;  // 1-based line in the JSONL file (for messages)
};
// every line one JSON record with the fields of `type`; Error "<file>:<line>: what"
std::vector<CoreItem> core_load_task_data(const std::string& path, const std::string& type);
// random.Random(1337).shuffle(data), then data[:max_per_task] when max_per_task > 0
void core_shuffle_truncate(std::vector<CoreItem>& data, int64_t max_per_task);
// random.Random(1234 + idx).sample([i for i in range(n) if i != idx], k)
std::vector<int64_t> core_fewshot_indices(int64_t idx, int64_t n, int64_t k);

// ---- prompts and tokens (core_eval.py's render_prompts_* and batch_sequences_*) --------------------------------------------------
std::string core_py_strip(const std::string& s);  // Python's str.strip() (Unicode whitespace)
// the Jinja2 templates of core_eval.py, rendered: MC one prompt per choice, schema one per
// context option, LM [without continuation (stripped), with continuation]
std::vector<std::string> core_render_prompts(const CoreTaskSpec& task, const CoreItem& item,
                                             const std::vector<const CoreItem*>& fewshot);
struct CoreSequences {
  std::vector<std::vector<int32_t>> tokens;  // BOS + encode(prompt), one per row
  std::vector<int64_t> start, end;           // scored positions [start, end) of each row
};
// renders example idx of data (few-shot drawn from data), encodes with BOS and finds the
// start/end indices; max_seq_len > 0 keeps the last max_seq_len tokens of each row and
// shifts the indices (the HF-wrapper rule; 0 = nanochat's GPT: no truncation)
CoreSequences core_prepare_example(const CoreTaskSpec& task, const std::vector<CoreItem>& data, int64_t idx,
                                   const Tokenizer& tok, int64_t max_seq_len = 0);

// ---- scoring (core_eval.py's forward_model and evaluate_example) -------------------------------------------------------------
// (B,T) int64 token ids on the CPU -> (B,T,V) logits (any float dtype, any device)
using CoreLogitsFn = std::function<torch::Tensor(const torch::Tensor& idx)>;

struct CoreOptions {
  std::string bundle_dir;               // a directory holding core.yaml (core_eval_bundle_dir())
  int64_t max_per_task = -1;            // -1: all examples (base_train uses 500)
  int64_t batch_size = 32;              // rows (prompts) per forward
  int64_t max_batch_tokens = 0;         // rows * padded length per forward; 0: no limit
  int64_t max_seq_len = 0;              // truncation rule; 0: none (nanochat's GPT)
  int threads = 0;                      // rendering and tokenizing threads; 0: all cores
  std::vector<std::string> only_tasks;  // non-empty: just these labels (debugging)
};

// the correct flags (0/1) of every example of the shuffled, truncated task that `rank`
// owns (idx = rank, rank+world, ...); other entries 0. Summing the ranks' vectors gives
// the full vector.
std::vector<float> core_evaluate_task(const CoreLogitsFn& logits_fn, const Tokenizer& tok, const CoreTaskSpec& task,
                                      const std::vector<CoreItem>& data, const CoreOptions& opts, int rank = 0,
                                      int world = 1);

struct CoreTaskResult {
  std::string label, type;
  int64_t num_fewshot = 0;
  double accuracy = 0, centered = 0;  // accuracy is the float32 mean, like torch's
  int64_t examples = 0;
  double seconds = 0;
};
struct CoreResult {
  std::vector<CoreTaskResult> tasks;
  double core = 0;  // the plain mean of the centered accuracies
};

// every task of the bundle; results summed over ranks (dist may be null: one process).
// on_task sees each task's result as it finishes (every rank).
CoreResult core_evaluate(const CoreLogitsFn& logits_fn, const Tokenizer& tok, const CoreOptions& opts, Dist* dist,
                         const std::function<void(const CoreTaskResult&)>& on_task = nullptr);
// the model under no_grad on its own device; max_batch_tokens 0 becomes
// batch_size * sequence_len, and a row longer than the rotary cache is an Error
CoreLogitsFn core_gpt_logits_fn(GPT& model);
CoreResult core_evaluate(GPT& model, const Tokenizer& tok, CoreOptions opts, Dist* dist,
                         const std::function<void(const CoreTaskResult&)>& on_task = nullptr);

// "Evaluating: hellaswag (10-shot, type: multiple_choice)... accuracy: 0.2500 | centered: 0.0000 | time: 1.23s"
std::string core_task_line(const CoreTaskResult& r);
// the CSV of upstream's base_eval.py: "{Task:<35}, {Accuracy:<10}, {Centered:<10}" rows, then CORE
std::string core_csv(const CoreResult& r);
std::string core_csv_path(int64_t step);  // $BASE/base_eval/base_model_<step:06d>.csv

}  // namespace nanochat
