// `nanochat base-train`: pretrain the base model, as upstream's scripts/base_train.py: the
// flags (upstream's names and defaults, plus the loader's and resume's), the set-up (model,
// the scaling rules of train_schedule, optimizer, loader, resume), then `for step in
// start..N` with val bpb / CORE / samples / checkpoints at the top of an iteration and one
// optimizer step at the bottom, and the report section. Data-parallel (the optimizer
// averages the gradients), resumable exactly (model, optimizer shards, loop state and each
// rank's loader state), and stoppable: SIGINT/SIGTERM finish the step, save, and exit 0
// with the command that resumes. Every step and eval is one line of metrics.jsonl.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <deque>
#include <memory>
#include <optional>
#include <sstream>

#include <torch/torch.h>

#include "cli/base_train.h"
#include "cli/commands.h"
#include "cli/training_checkpoint.h"
#include "nanochat/checkpoint.h"
#include "nanochat/checkpoint/checkpoint_gpt.h"
#include "nanochat/common.h"
#include "nanochat/common/stop_signal.h"
#include "nanochat/core_eval.h"
#include "nanochat/core_eval/leaderboard.h"
#include "nanochat/dataloader.h"
#include "nanochat/dataset.h"
#include "nanochat/compute.h"
#include "nanochat/engine.h"
#include "nanochat/gpt.h"
#include "nanochat/loss_eval.h"
#include "nanochat/optim.h"
#include "nanochat/report.h"
#include "nanochat/telemetry/metrics_log.h"
#include "nanochat/telemetry/peak_flops.h"
#include "nanochat/telemetry/train_progress.h"
#include "nanochat/tokenizer.h"
#include "nanochat/train_schedule.h"
#include "nanochat/train_schedule/train_step.h"

namespace nanochat {

namespace {

// what a checkpoint restores besides weights and optimizer moments
struct LoopState {
  int64_t step = 0;
  double val_bpb = 0, min_val_bpb = INFINITY, smooth_train_loss = 0, total_training_time = 0;
};

// the job; returns the process exit code (0 also after a graceful stop)
int base_train(const BaseTrainFlags& o, const nlohmann::ordered_json& user_config);

}  // namespace

void cli_register_base_train(CLI::App& app, int& exit_code) {
  auto* sub = app.add_subcommand("base-train", "Pretrain the base model (data-parallel under `nanochat launch`)");
  static BaseTrainFlags o;
  auto opt = [&](const char* name, auto& var, const char* help) {
    return sub->add_option(name, var, help)->capture_default_str();
  };
  opt("--run", o.run,
      "run name, recorded in <checkpoint dir>/metrics.jsonl (there is no wandb: "
      "every step and eval is logged to that local file instead)");
  opt("--device-type", o.device_type, "cuda or cpu (empty: autodetect)")->check(CLI::IsMember({"", "cuda", "cpu"}));
  sub->add_flag("--fp8", o.fp8,
                "FP8 training of the blocks' matmuls (CUDA, compute capability 8.9+; "
                "evaluation and sampling stay in the compute dtype)");
  opt("--fp8-recipe", o.fp8_recipe, "tensorwise or rowwise")->check(CLI::IsMember({"tensorwise", "rowwise"}));
  opt("--depth", o.depth, "number of layers; width, heads, batch and learning rates derive from it")
      ->check(CLI::Range(1, 1024));
  opt("--aspect-ratio", o.aspect_ratio, "model width = depth x aspect ratio (rounded up to the head dim)")
      ->check(CLI::PositiveNumber);
  opt("--head-dim", o.head_dim, "attention head dimension")->check(CLI::Range(2, 1024));
  opt("--max-seq-len", o.max_seq_len, "context length T")->check(CLI::Range(2, 1 << 20));
  opt("--window-pattern", o.window_pattern, "S (quarter context) / L (full) per layer, tiled; the last layer is L");
  opt("--num-iterations", o.num_iterations, "optimizer steps (-1: from --target-flops or the data ratio)");
  opt("--target-flops", o.target_flops, "training FLOPs to spend (-1: off)");
  opt("--target-param-data-ratio", o.target_param_data_ratio, "tokens per scaling parameter (-1: off)");
  opt("--device-batch-size", o.device_batch_size,
      "rows per rank per micro-step (on a GPU, by default the "
      "largest power of two up to 32 that fits its memory)")
      ->check(CLI::PositiveNumber);
  opt("--total-batch-size", o.total_batch_size, "tokens per optimizer step over all ranks (-1: auto from depth)");
  opt("--embedding-lr", o.embedding_lr, "AdamW lr of wte (value embeddings: half)");
  opt("--unembedding-lr", o.unembedding_lr, "AdamW lr of lm_head");
  opt("--weight-decay", o.weight_decay, "Muon cautious weight decay at the d12 reference (scaled by depth)");
  opt("--matrix-lr", o.matrix_lr, "Muon lr of the transformer matrices");
  opt("--scalar-lr", o.scalar_lr, "AdamW lr of the per-layer scalars");
  opt("--warmup-steps", o.warmup_steps, "linear lr warmup steps")->check(CLI::NonNegativeNumber);
  opt("--warmdown-ratio", o.warmdown_ratio, "fraction of steps of the final linear lr decay")
      ->check(CLI::Range(0.0, 1.0));
  opt("--final-lr-frac", o.final_lr_frac, "lr at the end as a fraction of the peak")->check(CLI::Range(0.0, 1.0));
  cli_add_resume_flags(sub, o.save_every, o.resume_from_step, o.resume_latest, o.output);
  opt("--eval-every", o.eval_every, "val bpb every N steps (-1: off)");
  opt("--eval-tokens", o.eval_tokens, "val tokens per bpb evaluation")->check(CLI::PositiveNumber);
  opt("--core-metric-every", o.core_metric_every, "CORE metric every N steps (-1: off)");
  opt("--core-metric-max-per-task", o.core_metric_max_per_task, "examples per CORE task (-1: all)");
  opt("--sample-every", o.sample_every, "greedy samples every N steps (-1: off)");
  opt("--model-tag", o.model_tag, "checkpoint folder name (default d<depth>)");
  opt("--eval-bundle", o.eval_bundle,
      "CORE bundle folder (default: $NANOCHAT_BASE_DIR/eval_bundle, from "
      "`nanochat download eval-bundle`)");
  cli_add_data_flags(sub, o.data);
  opt("--tokenizer-threads", o.tokenizer_threads, "loader threads per rank (0: all but one core of the rank)")
      ->check(CLI::NonNegativeNumber);
  opt("--prefetch", o.prefetch, "batches the loader stages ahead")->check(CLI::Range(1, 64));
  opt("--min-doc-chars", o.min_doc_chars, "drop documents shorter than this many bytes")->check(CLI::NonNegativeNumber);
  sub->add_flag("--skip-bad-row-groups", o.skip_bad_row_groups,
                "warn about and skip a row group that fails to decode (default: stop with an error)");
  sub->add_flag("--dry-run", o.dry_run,
                "print the plan (counts, FLOPs, batch, horizon, scaling, memory per rank, "
                "wall-clock) and exit: no weights, no data, no GPU needed; last line JSON");
  opt("--gpu-memory", o.gpu_memory,
      "plan the default --device-batch-size for a GPU of this much memory (e.g. 80GB, "
      "80GiB) instead of asking the device");
  opt("--gpu-name", o.gpu_name,
      "--dry-run: the GPU whose peak FLOPS the wall-clock uses (default: this machine's, "
      "else H100)");
  opt("--mfu", o.mfu, "--dry-run: the model FLOPS utilisation the wall-clock assumes")->check(CLI::Range(1e-6, 1.0));
  opt("--world-size", o.world_size, "--dry-run: ranks to plan for (0: WORLD_SIZE, else 1)")
      ->check(CLI::Range(0, 1 << 20));
  opt("--preflight-steps", o.preflight_steps,
      "train this many steps of the real plan (model, batch, schedule) into "
      "the scratch tag <tag>-preflight, with no evals and no checkpoint, "
      "then report tok/s, MFU, peak memory vs the estimate and the "
      "projected time of the whole run (0: off)")
      ->check(CLI::NonNegativeNumber);
  sub->callback([sub, &exit_code] {
    nlohmann::ordered_json user_config = cli_flags_json(sub);
    user_config["argv"] = cli_argv();
    o.device_batch_size_given = sub->get_option("--device-batch-size")->count() > 0;
    exit_code = o.dry_run ? base_train_dry_run(o) : base_train(o, user_config);
  });
}

namespace {

// One run of base-train: the constructor is the set-up, the methods the script's sections in
// upstream's order (data, evaluation, checkpoints, the loop, the report).
class BaseTrain {
 public:
  BaseTrain(const BaseTrainFlags& o, const nlohmann::ordered_json& user_config);
  int loop();  // the training loop; the report at the end

 private:
  void open_data();
  nlohmann::ordered_json make_meta(int64_t step) const;
  void save(int64_t step);
  double evaluate_val_bpb();
  void evaluate_core(int64_t step, double flops_so_far);
  void sample();
  void train_step(int64_t step);
  bool log_oldest();  // logs the oldest step in flight; true when some rank was signalled
  bool drain();       // every step in flight logged
  int stop_and_save();
  void report(const TrainProgress& progress, int64_t peak_mem);

  const BaseTrainFlags& o;
  const nlohmann::ordered_json& user_config;
  const bool preflight, evals;  // --preflight-steps: the first steps of the plan, nothing saved
  const std::string bundle;     // CORE's, checked now rather than at step N
  Compute c;
  Dist& dist;
  const int world, rank;
  Tokenizer tok;
  torch::Tensor token_bytes;
  std::string tag, ckpt_dir;
  int64_t resume_step = -1;
  GPT model{nullptr};
  std::optional<ModelCheckpoint> resumed;
  BaseTrainPlan plan;
  std::unique_ptr<MuonAdamW> opt;
  std::optional<GradScaler> scaler;  // fp16: dynamic loss scaling, as upstream's GradScaler
  LoopState state;
  std::optional<LoaderState> loader_resume;
  Corpus corpus;
  LoaderOptions lo;
  std::unique_ptr<DataLoader> train_loader;
  LoaderBatch batch;
  // the state that reproduces `batch` (the one in hand, not trained on yet): saved with a
  // checkpoint so the resumed run trains on exactly the batches this one would have
  std::optional<LoaderState> state_before_batch;
  MetricsLog metrics;
  double last_core = NAN;  // for the report

  // a step's loss comes back one step late (StepReadback): its log line is written then
  struct StepRecord {
    int64_t step;
    double lrm, data_wait;
    DocPosition pos;
  };
  std::deque<StepRecord> in_flight;
  std::unique_ptr<StepReadback> readback;
  std::unique_ptr<TrainProgress> progress;
  int64_t start_step = 0;
};

int base_train(const BaseTrainFlags& o, const nlohmann::ordered_json& user_config) {
  stop_signal_install();
  BaseTrain run(o, user_config);
  return run.loop();
}

// ---- set-up ---------------------------------------------------------------------
BaseTrain::BaseTrain(const BaseTrainFlags& o, const nlohmann::ordered_json& user_config)
    : o(o),
      user_config(user_config),
      preflight(o.preflight_steps > 0),
      evals(!preflight),
      bundle(evals && o.core_metric_every > 0 ? core_eval_bundle_dir(o.eval_bundle) : ""),
      c(compute_init(o.device_type)),
      dist(*c.dist),
      world(c.env.world_size),
      rank(c.env.rank),
      tok(tokenizer_load(base_dir_path("tokenizer"))) {
  if (preflight && (o.resume_latest || o.resume_from_step >= 0))
    fail("--preflight-steps starts a scratch run: drop --resume / --resume-from-step");
  if (o.world_size > 0 && o.world_size != world)
    fail("--world-size %d plans a --dry-run; this run has %d rank(s) (use `nanochat launch --nproc-per-node N`)",
         o.world_size, world);
  log_info("nanochat base-train: device %s (%s), compute dtype %s, %d rank(s), %d CPU threads", c.device.str().c_str(),
           c.device_type.c_str(), dtype_name(c.dtype).c_str(), world, c.cpu_threads);
  if (o.fp8 && o.fp8_recipe != "tensorwise")
    fail("--fp8-recipe %s is not implemented (neither is it upstream): use --fp8-recipe tensorwise",
         o.fp8_recipe.c_str());
  if (o.fp8 && !c.device.is_cuda())
    log_warn("--fp8 is for CUDA (as upstream): training in %s", dtype_name(c.dtype).c_str());
  token_bytes = bpb_token_bytes(tok, c.device);

  // the plan (the device batch agreed over the ranks), printed as --dry-run prints it
  const MemoryBudget budget = base_train_memory_budget(o, c.device_type, c.device,
                                                       c.device.is_cuda() ? c.device.str() : "");
  plan = base_train_plan(o, tok.vocab_size(), world, c.device_type, c.dtype, budget, &dist);
  if (c.master()) {
    std::ostringstream text;
    base_train_plan_print(plan, o, text);
    std::printf("%s", text.str().c_str());
    std::fflush(stdout);
  }
  const GPTConfig& config = plan.config;

  tag = (o.model_tag.empty() ? strprintf("d%lld", (long long)o.depth) : o.model_tag) + (preflight ? "-preflight" : "");
  ckpt_dir = checkpoint_dir("base", tag);
  cli_open_checkpoint_dir(ckpt_dir, o.resume_latest || o.resume_from_step >= 0, o.output,
                          dist);  // --force, stale files
  resume_step = o.resume_latest ? checkpoint_find_last_step(ckpt_dir) : o.resume_from_step;
  model = GPT(config, c.device, c.dtype);
  gpt_init_weights(model, 42);
  resumed = checkpoint_resume_gpt(model, ckpt_dir, resume_step, tok.vocab_size());
  if (plan.fp8) gpt_set_fp8(model, true);  // Error below compute capability 8.9
  {                                        // which attention kernel each kind of layer runs, once
    auto probe = torch::TensorOptions().dtype(c.dtype).device(c.device);
    torch::Tensor q = torch::empty({1, config.sequence_len, config.n_head, config.head_dim()}, probe);
    torch::Tensor k = torch::empty({1, config.sequence_len, config.n_kv_head, config.head_dim()}, probe);
    std::vector<int64_t> kinds = gpt_window_sizes(config);
    std::sort(kinds.begin(), kinds.end());
    kinds.erase(std::unique(kinds.begin(), kinds.end()), kinds.end());
    for (int64_t w : kinds)
      log_info("attention, window %lld: %s", (long long)w, attention_kernel_name(q, k, w).c_str());
  }
  log_info("model %s: total batch %lld tokens (%s), grad accumulation %lld, %lld iterations, device batch %lld",
           tag.c_str(), (long long)plan.scaling.total_batch_size,
           o.total_batch_size == -1 ? "auto" : "--total-batch-size", (long long)plan.grad_accum,
           (long long)plan.num_iterations, (long long)plan.device_batch_size);
  if (preflight)
    log_info("preflight: %lld steps of this plan into %s, no evals, nothing saved", (long long)o.preflight_steps,
             tag.c_str());

  const double bls = plan.scaling.batch_lr_scale;
  opt = std::make_unique<MuonAdamW>(
      optim_param_groups_gpt(gpt_named_parameters(model), config.n_embd, o.unembedding_lr * bls, o.embedding_lr * bls,
                             o.matrix_lr * bls, plan.scaling.weight_decay, o.scalar_lr * bls),
      &dist, c.dtype);
  if (c.dtype == torch::kHalf) scaler.emplace(c.device);  // bf16 and fp32 need none

  if (resumed) {
    std::optional<OptimCheckpoint> optim = checkpoint_load_optim(ckpt_dir, resume_step, rank);
    if (!optim)
      fail("%s step %lld has no optimizer state for rank %d: resume with the world size it was saved with",
           ckpt_dir.c_str(), (long long)resume_step, rank);
    opt->load_state(optim->tensors, optim->state.at("optimizer"));
    if (scaler && optim->state.contains("grad_scaler")) scaler->load_state(optim->state["grad_scaler"]);
    loader_resume = loader_state_from_checkpoint(resumed->meta, optim->state);
    const auto& ls = resumed->meta.at("loop_state");
    state.step = resume_step;
    state.val_bpb = checkpoint_meta_number(resumed->meta, "val_bpb", 0.0);
    state.min_val_bpb = checkpoint_meta_number(ls, "min_val_bpb", INFINITY);  // JSON has no inf: null
    state.smooth_train_loss = checkpoint_meta_number(ls, "smooth_train_loss", 0.0);
    state.total_training_time = checkpoint_meta_number(ls, "total_training_time", 0.0);
  }
  open_data();
  if (c.master()) metrics = MetricsLog(ckpt_dir + "/metrics.jsonl", resumed ? resume_step : -1);
}

// ---- data --------------------------------------------------------------------------
void BaseTrain::open_data() {
  corpus = corpus_open(o.data);
  lo.batch_size = plan.device_batch_size;
  lo.seq_len = o.max_seq_len;
  lo.device = c.device;
  lo.rank = rank;
  lo.world = world;
  lo.local_world = c.env.local_world_size;
  lo.tokenizer_threads = o.tokenizer_threads;
  lo.prefetch = o.prefetch;
  lo.min_doc_chars = o.min_doc_chars;
  lo.skip_bad_row_groups = o.skip_bad_row_groups;
  train_loader = std::make_unique<DataLoader>(tok, corpus_split(corpus, "train"), lo,
                                              loader_resume ? &*loader_resume : nullptr);
  batch = train_loader->next();
  state_before_batch = loader_resume;
}

// ---- checkpoints --------------------------------------------------------------------
nlohmann::ordered_json BaseTrain::make_meta(int64_t step) const {
  nlohmann::ordered_json meta;
  meta["step"] = step;
  meta["val_bpb"] = state.val_bpb;
  meta["model_config"] = gpt_config_to_json(plan.config);
  meta["user_config"] = user_config;
  meta["device_batch_size"] = plan.device_batch_size;
  meta["max_seq_len"] = o.max_seq_len;
  meta["total_batch_size"] = plan.scaling.total_batch_size;
  meta["dataloader_state_dict"] = loader_state_upstream_json(state_before_batch);
  meta["loop_state"] = {{"min_val_bpb", state.min_val_bpb},
                        {"smooth_train_loss", state.smooth_train_loss},
                        {"total_training_time", state.total_training_time}};
  return meta;
}

void BaseTrain::save(int64_t step) {
  nlohmann::ordered_json s;
  s["optimizer"] = opt->state_json();
  if (scaler) s["grad_scaler"] = scaler->state_json();
  s["dataloader_state"] = state_before_batch ? loader_state_to_json(*state_before_batch) : nlohmann::json();
  cli_save_training_checkpoint(ckpt_dir, step, c.master() ? checkpoint_gpt_tensors(model) : NamedTensors{},
                               make_meta(step), opt->state_tensors(), s, o.output, dist);
}

// ---- evaluation ---------------------------------------------------------------------
double BaseTrain::evaluate_val_bpb() {
  torch::NoGradGuard no_grad;
  GptFp8Off fp8_off(model);  // evaluation and sampling in the compute dtype, as upstream
  LoaderOptions vo = lo;
  vo.infinite = true;  // upstream: a fresh, endless val iterator from the start of the shard
  DataLoader val_loader(tok, corpus_split(corpus, "val"), vo);
  const int64_t eval_steps = std::max<int64_t>(1, o.eval_tokens / (plan.device_batch_size * o.max_seq_len * world));
  return evaluate_bpb(
      [&](const torch::Tensor& x, const torch::Tensor& y) { return gpt_loss(model, x, y, LossReduction::none); },
      [&] {
        LoaderBatch b = val_loader.next();
        return std::make_pair(b.inputs, b.targets);
      },
      eval_steps, token_bytes, &dist);
}

void BaseTrain::evaluate_core(int64_t step, double flops_so_far) {
  CoreOptions co;
  co.bundle_dir = bundle;
  co.max_per_task = o.core_metric_max_per_task;
  co.batch_size = plan.device_batch_size;
  GptFp8Off fp8_off(model);
  CoreResult r = core_evaluate(model, tok, co, &dist);
  last_core = r.core;
  log_info("Step %05lld | CORE metric: %.4f", (long long)step, r.core);
  nlohmann::json line = {{"step", step},
                         {"core_metric", r.core},
                         {"total_training_flops", flops_so_far},
                         {"total_training_time", state.total_training_time}};  // for time to GPT-2
  for (const CoreTaskResult& t : r.tasks) line["core/" + t.label] = t.centered;
  metrics.log(line);
  model->train();
}

void BaseTrain::sample() {
  model->eval();
  GptFp8Off fp8_off(model);
  Engine engine(model, tok);
  for (const std::string& prompt : engine_sample_prompts())
    log_info("%s", engine_sample_greedy(engine, prompt, 16).c_str());
  model->train();
}

// ---- one optimizer step: queued without waiting for the device ----------------------------
void BaseTrain::train_step(int64_t step) {
  readback->begin_step();
  double data_wait = 0;
  torch::Tensor train_loss;
  for (int64_t micro = 0; micro < plan.grad_accum; micro++) {
    torch::Tensor loss = gpt_loss(model, batch.inputs, batch.targets);
    train_loss = loss.detach();
    loss = loss / (double)plan.grad_accum;
    (scaler ? scaler->scale(loss) : loss).backward();
    state_before_batch = batch.state;
    batch = train_loader->next();  // prefetch: the loader's workers already packed it
    data_wait += train_loader->metrics().wait_last_s;
  }
  const int64_t n = plan.num_iterations;
  const double lrm = lr_multiplier(step, n, o.warmup_steps, o.warmdown_ratio, o.final_lr_frac);
  train_optimizer_step(
      *opt, scaler ? &*scaler : nullptr,
      {lrm, muon_momentum(step, n, o.warmdown_ratio), muon_weight_decay(step, n, plan.scaling.weight_decay)}, step,
      dist);
  readback->push(train_loss);
  in_flight.push_back({step, lrm, data_wait, batch.state.last});
  state.step = step + 1;
}

bool BaseTrain::log_oldest() {
  const StepReadback::Arrived v = readback->take();
  const StepRecord r = in_flight.front();
  in_flight.pop_front();
  progress->record({r.step, v.loss, v.dt, r.lrm, r.data_wait, r.pos.epoch, r.pos.file, r.pos.row_group}, metrics);
  state.smooth_train_loss = progress->smooth_loss();
  state.total_training_time = progress->total_training_time();
  if (r.step == start_step + 1) {  // the estimate beside the allocator's peak, once the state exists
    const int64_t peak_now = device_peak_memory_bytes(c.device);
    if (peak_now >= 0)
      log_info("memory after step %lld: peak %.2f GiB allocated (CUDA caching allocator), estimate %.2f GiB",
               (long long)r.step, (double)peak_now / (1 << 30), (double)plan.memory.total / (1 << 30));
  }
  return v.stop;
}

bool BaseTrain::drain() {
  bool stop = false;
  while (!readback->empty()) stop = log_oldest() || stop;
  return stop;
}

// graceful stop: every rank saw the flag in the same all-reduce
int BaseTrain::stop_and_save() {
  drain();
  return cli_stop_and_save([this](int64_t step) { save(step); }, state.step);
}

// ---- the loop ----------------------------------------------------------------
int BaseTrain::loop() {
  const int64_t num_iterations = plan.num_iterations, total_batch = plan.scaling.total_batch_size;
  start_step = state.step;
  progress = std::make_unique<TrainProgress>(
      num_iterations, total_batch, plan.flops_per_token, peak_flops_of_run(c.device, c.dtype, c.cpu_threads) * world,
      mfu_label_for(c.device, c.dtype), state.smooth_train_loss, state.total_training_time);
  readback = std::make_unique<StepReadback>(c.device, dist);
  // the step that ends this process's loop: the plan's last, or the preflight's
  const int64_t end_step = preflight ? std::min(num_iterations, start_step + o.preflight_steps) : num_iterations;
  log_info("training %s from step %lld to %lld; metrics in %s", o.run.c_str(), (long long)start_step,
           (long long)num_iterations, (ckpt_dir + "/metrics.jsonl").c_str());
  for (int64_t step = start_step;; step++) {
    const bool last_step = step == end_step;
    const double flops_so_far = (double)plan.flops_per_token * (double)total_batch * (double)step;
    const bool eval_now = evals && o.eval_every > 0 && (last_step || step % o.eval_every == 0);
    const bool core_now = evals && o.core_metric_every > 0 &&
                          (last_step || (step > 0 && step % o.core_metric_every == 0));
    const bool sample_due = evals && o.sample_every > 0 && (last_step || (step > 0 && step % o.sample_every == 0));
    const bool save_now = !preflight && !last_step && step > 0 && step != resume_step && o.save_every > 0 &&
                          step % o.save_every == 0;
    // every rank drains at the same steps, so that a stop flag is seen by all at once
    if ((last_step || eval_now || core_now || sample_due || save_now) && drain()) return stop_and_save();

    // the final checkpoint comes before the final evals: an eval that fails (out of
    // memory, say) must not cost the run (upstream nanochat learned this from a lost run)
    if (last_step && !preflight) save(step);
    if (eval_now) {
      model->eval();
      state.val_bpb = evaluate_val_bpb();
      state.min_val_bpb = std::min(state.min_val_bpb, state.val_bpb);
      log_info("Step %05lld | Validation bpb: %.6f", (long long)step, state.val_bpb);
      metrics.log({{"step", step},
                   {"val_bpb", state.val_bpb},
                   {"total_training_flops", flops_so_far},
                   {"total_training_time", state.total_training_time}});
      model->train();
      if (last_step && c.master())  // the final val bpb into the saved meta
        atomic_write_file(checkpoint_meta_path(ckpt_dir, step), make_meta(step).dump(2));
    }
    if (core_now) evaluate_core(step, flops_so_far);
    if (sample_due && c.master()) sample();
    if (save_now) save(step);
    if (last_step) break;
    train_step(step);
    if (readback->due() && log_oldest()) return stop_and_save();
  }

  int64_t peak_mem = device_peak_memory_bytes(c.device);
  if (peak_mem >= 0) log_info("peak memory: %.2f MiB", (double)peak_mem / (1024.0 * 1024.0));
  if (preflight) return base_train_preflight_report(plan, *progress, end_step - start_step, peak_mem, c.master());
  log_info("total training time: %.2fm", state.total_training_time / 60);
  log_info("minimum validation bpb: %.6f", state.min_val_bpb);
  if (c.master()) report(*progress, peak_mem);
  return 0;
}

// ---- the report ----------------------------------------------------------------
void BaseTrain::report(const TrainProgress& progress, int64_t peak_mem) {
  const int64_t num_iterations = plan.num_iterations, tokens = plan.scaling.total_batch_size * num_iterations;
  ReportItem stats = {{"Number of parameters", plan.counts.total},
                      {"Number of FLOPs per token", strprintf("%e", (double)plan.flops_per_token)},
                      {"Calculated number of iterations", num_iterations},
                      {"Number of training tokens", tokens},
                      {"Tokens : Scaling params ratio", (double)tokens / (double)plan.scaling_params},
                      {"DDP world size", world},
                      {"warmup_steps", o.warmup_steps},
                      {"warmdown_ratio", o.warmdown_ratio},
                      {"final_lr_frac", o.final_lr_frac}};
  ReportItem results = {{"Minimum validation bpb", state.min_val_bpb},
                        {"Final validation bpb", state.val_bpb},
                        {"CORE metric estimate", last_core},
                        {"MFU %", strprintf("%.2f%%", progress.last_mfu())},
                        {"Total training flops", strprintf("%e", (double)plan.flops_per_token * (double)tokens)},
                        {"Total training time", strprintf("%.2fm", state.total_training_time / 60)},
                        {"Peak memory usage", peak_mem >= 0 ? strprintf("%.2fMiB", (double)peak_mem / 1048576.0)
                                                            : std::string("n/a (CPU)")}};
  if (std::isnan(last_core)) results.erase("CORE metric estimate");
  if (o.core_metric_every > 0) {  // the leaderboard's number, over every CORE line of the run (resumes too)
    const TimeToGpt2 t = leaderboard_time_to_gpt2(leaderboard_core_points(metrics.path()));
    log_info("time to GPT-2: %s", leaderboard_line(t).c_str());
    metrics.log(leaderboard_metrics_record(t, num_iterations));
    results["Time to GPT-2"] = leaderboard_line(t);
  }
  report_log("Base model training", {ReportItem(user_config), stats, results});
}

}  // namespace

}  // namespace nanochat
