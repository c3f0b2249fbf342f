// base-train's flags and its plan: everything the run derives from its flags before it
// touches a device or data (the model's shape and counts, the scaling rules, the horizon,
// the batch split, the memory estimate). The run and `base-train --dry-run` share it.
#pragma once
#include <cstdint>
#include <ostream>
#include <string>

#include "nanochat/common/tensor.h"

#include "cli/commands.h"
#include "nanochat/dataset.h"
#include "nanochat/dist.h"
#include "nanochat/gpt.h"
#include "nanochat/gpt/memory.h"
#include "nanochat/train_schedule.h"

namespace nanochat {

struct BaseTrainFlags {
  // upstream's names and defaults
  std::string run = "dummy";  // a name recorded in metrics.jsonl (no wandb)
  std::string device_type;    // "" autodetect, cuda, cpu
  bool fp8 = false;           // FP8 training on CUDA sm89+ (tensorwise); elsewhere a warning
  std::string fp8_recipe = "tensorwise";
  int64_t depth = 20, aspect_ratio = 64, head_dim = 128, max_seq_len = 2048;
  std::string window_pattern = "SSSL";
  int64_t num_iterations = -1;
  double target_flops = -1.0;
  double target_param_data_ratio = 12.0;
  int64_t device_batch_size = 32, total_batch_size = -1;
  bool device_batch_size_given = false;  // else on a GPU: the largest power of two <= 32 that fits
  double embedding_lr = 0.3, unembedding_lr = 0.008, weight_decay = 0.28, matrix_lr = 0.02, scalar_lr = 0.5;
  int64_t warmup_steps = 40;
  double warmdown_ratio = 0.65, final_lr_frac = 0.05;
  int64_t resume_from_step = -1;
  int64_t eval_every = 250, eval_tokens = 80 * 524288;
  int64_t core_metric_every = 2000, core_metric_max_per_task = 500;
  int64_t sample_every = 2000, save_every = -1;
  std::string model_tag;  // "" -> d<depth>
  // ours
  bool resume_latest = false;  // --resume latest: the last complete checkpoint of the tag
  OutputFlags output;          // --force, --keep-last
  CorpusOptions data;
  int tokenizer_threads = 0;  // 0: all but one core of this rank
  int prefetch = 2;           // batches staged ahead by the loader
  int64_t min_doc_chars = 0;
  bool skip_bad_row_groups = false;
  std::string eval_bundle;  // CORE bundle ("": $NANOCHAT_BASE_DIR/eval_bundle)
  // planning and preflight
  bool dry_run = false;         // print the plan and exit
  std::string gpu_memory;       // "80GB": plan the default device batch for a GPU of that size
  std::string gpu_name;         // the GPU whose peak FLOPS the plan's wall-clock uses
  double mfu = 0.4;             // the model FLOPS utilisation the plan's wall-clock assumes
  int world_size = 0;           // --dry-run: ranks to plan for (0: WORLD_SIZE, else 1)
  int64_t preflight_steps = 0;  // > 0: train this many steps of the real plan, save nothing, report
};

// a GPU to plan for when neither --gpu-name nor a device says which (upstream's reference)
constexpr const char* kDefaultPlanGpu = "H100";

// what one GPU can give the run: --gpu-memory, else the device's own; -1 off a GPU
struct MemoryBudget {
  int64_t bytes = -1;
  std::string source;  // "--gpu-memory 80GB", "what NVIDIA H100 can give"
};
// gpu_name empty: no GPU here (only --gpu-memory counts)
MemoryBudget base_train_memory_budget(const BaseTrainFlags& o, const std::string& device_type, torch::Device gpu,
                                      const std::string& gpu_name);

struct BaseTrainPlan {
  GPTConfig config;
  ScalingParams counts;
  int64_t scaling_params = 0;  // transformer matrices + lm_head (what the horizon scales with)
  int64_t flops_per_token = 0;
  TrainScaling scaling;        // total batch, lr and weight decay scaling
  double dmodel_lr_scale = 1;  // the AdamW lrs' 1/sqrt(d_model/768)
  int64_t num_iterations = 0, total_tokens = 0;
  int world = 1;
  torch::ScalarType dtype = torch::kFloat32;
  bool fp8 = false;  // the block matmuls in FP8 (--fp8 on a GPU)
  int64_t device_batch_size = 0, grad_accum = 0;
  std::string device_batch_source;  // why that many rows
  MemoryBudget budget;
  TrainMemory memory;  // one rank's estimate at device_batch_size
};

// The plan of a run on device_type ("cuda", "cpu"): rows per micro-step are --device-batch-size,
// or on a GPU (when the flag is not given) the largest power of two up to upstream's 32 whose
// memory estimate fits in 90% of the budget, logged; with dist, the smallest over the ranks
// (a collective: every rank calls it). Error (one line naming the flag) on flags that do not
// make a run.
BaseTrainPlan base_train_plan(const BaseTrainFlags& o, int64_t vocab_size, int world, const std::string& device_type,
                              torch::ScalarType dtype, const MemoryBudget& budget, Dist* dist);
// The step-time model of docs/gpu.md: one micro-step (forward and backward of B x T tokens) per
// op, in seconds, on a GPU of `peak` dense bf16 FLOPS and `bandwidth` nominal bytes/s. The rates
// are the H200's measured ones (docs/log.md, 2026-12-04: d20, B=16, T=2048), compute-bound ops
// scaled by peak and memory-bound ones by bandwidth. Ours: the fused kernels at their measured
// times, the norm kernels at `norm_fraction` of the bandwidth (0: their measured rates). Upstream:
// the same GEMMs and SDPA, its S layers as masked SDPA (no FA3), its CE's logits through memory,
// its compiled norms at 80% of the bandwidth. `other` (embeddings, gates, the optimizer's share,
// gaps) is upstream's measured step less its modelled ops, the same on both sides.
struct StepTimeModel {
  double matmuls = 0, attention = 0, lm_head_ce = 0, norms = 0, other = 0;
  double total() const { return matmuls + attention + lm_head_ce + norms + other; }
};
StepTimeModel base_train_step_model(const GPTConfig& config, int64_t B, int64_t T, double peak, double bandwidth,
                                    bool upstream, double norm_fraction = 0);
// the smallest of the ranks' rows (each rank fits its own free memory; the ranks must agree
// for the same micro-steps, eval steps and loader state); a collective
int64_t base_train_agree_device_batch(int64_t rows, Dist& dist);
// upstream's printout of the plan (counts, FLOPs, scaling, horizon, batch split, memory):
// base-train prints it at its start, `--dry-run` with the wall-clock and a JSON line
void base_train_plan_print(const BaseTrainPlan& p, const BaseTrainFlags& o, std::ostream& out);
bool base_train_plan_fits(const BaseTrainPlan& p);  // within 90% of the budget (or none known)

// `base-train --dry-run`: the plan on stdout, its last line one JSON object; no device, no data
int base_train_dry_run(const BaseTrainFlags& o);

class TrainProgress;
// --preflight-steps' last word: the steady rate of the steps run, MFU, peak memory against the
// estimate and the projected time of the whole plan, logged and (rank 0) printed as one JSON line;
// Error when the loss is not finite. Returns the exit code.
int base_train_preflight_report(const BaseTrainPlan& plan, const TrainProgress& progress, int64_t steps,
                                int64_t peak_memory_bytes, bool master);

// "80GB", "80 GiB", "81559MiB", "1.5TB" -> bytes (k/M/G/T: powers of 1000; Ki/Mi/Gi/Ti: of
// 1024); Error naming `flag` otherwise
int64_t base_train_parse_memory_size(const std::string& text, const char* flag);

}  // namespace nanochat
