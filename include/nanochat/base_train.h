// defines: BaseTrainOptions, base_train_run, base_train_sample_prompts
// Pretraining (spec §6): upstream's scripts/base_train.py as a module. The flags of §6.1
// with their defaults, the setup of §6.2, the scaling rules and schedules of §6.3/§6.4
// (train_schedule.h), and the loop of §6.5: val bpb, samples, checkpoints, one console
// line and one metrics.jsonl line per step. Data-parallel over the dist layer (the
// optimizer averages the gradients), resumable exactly (model, optimizer shards, loop
// state and each rank's loader state), and stoppable: SIGINT/SIGTERM finish the step,
// save, and exit 0 with the command that resumes.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "nanochat/dataset.h"

namespace nanochat {

struct BaseTrainOptions {
  // ---- spec §6.1, upstream's names and defaults ----
  std::string run = "dummy";  // a name recorded in metrics.jsonl (no wandb)
  std::string device_type;    // "" autodetect, cuda, cpu
  bool fp8 = false;           // accepted; FP8 is not implemented yet (warns, trains in bf16)
  std::string fp8_recipe = "tensorwise";
  int64_t depth = 20, aspect_ratio = 64, head_dim = 128, max_seq_len = 2048;
  std::string window_pattern = "SSSL";
  int64_t num_iterations = -1;
  double target_flops = -1.0;
  double target_param_data_ratio = 12.0;
  int64_t device_batch_size = 32, total_batch_size = -1;
  double embedding_lr = 0.3, unembedding_lr = 0.008, weight_decay = 0.28, matrix_lr = 0.02,
         scalar_lr = 0.5;
  int64_t warmup_steps = 40;
  double warmdown_ratio = 0.65, final_lr_frac = 0.05;
  int64_t resume_from_step = -1;
  int64_t eval_every = 250, eval_tokens = 80 * 524288;
  int64_t core_metric_every = 2000, core_metric_max_per_task = 500;
  int64_t sample_every = 2000, save_every = -1;
  std::string model_tag;  // "" -> d<depth>
  // ---- ours ----
  bool resume_latest = false;  // --resume latest: the last complete checkpoint of the tag
  CorpusOptions data;
  int tokenizer_threads = 0;   // 0: all but one core of this rank
  int prefetch = 2;            // batches staged ahead by the loader
  int64_t min_doc_chars = 0;
  bool skip_bad_row_groups = false;
  std::string eval_bundle;     // CORE bundle ("": $NANOCHAT_BASE_DIR/eval_bundle)
  std::vector<std::string> argv;  // the command line, recorded as user_config
};

// runs the whole job; returns the process exit code (0 also after a graceful stop)
int base_train_run(const BaseTrainOptions& opts);

// the 7 prompts sampled during training (§6.5 item 4)
const std::vector<std::string>& base_train_sample_prompts();

}  // namespace nanochat
