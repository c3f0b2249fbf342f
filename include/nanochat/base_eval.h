// defines: BaseEvalOptions, base_eval_run
// Evaluation of a base checkpoint (spec §8.4): bits per byte on the train and val splits,
// greedy samples of the training prompts plus unconditioned samples, and the CORE metric
// (the 22 DCLM tasks, core_eval), written to $BASE/base_eval/base_model_<step>.csv.
#pragma once
#include <cstdint>
#include <string>

#include "nanochat/dataset.h"

namespace nanochat {

struct BaseEvalOptions {
  std::string eval = "core,bpb,sample";  // comma-separated modes
  std::string source = "base";
  std::string model_tag;                 // "": the largest d<N>
  int64_t step = -1;                     // -1: the last complete step
  int64_t max_per_task = -1;             // CORE examples per task (-1: all)
  int64_t device_batch_size = 32;
  int64_t split_tokens = 40 * 524288;    // bpb tokens per split, over all ranks
  std::string device_type;
  CorpusOptions data;
  int tokenizer_threads = 0;
  std::string eval_bundle;  // "": $NANOCHAT_BASE_DIR/eval_bundle
};

int base_eval_run(const BaseEvalOptions& opts);

}  // namespace nanochat
