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
#include <optional>

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
#include "nanochat/dist/compute.h"
#include "nanochat/engine.h"
#include "nanochat/gpt.h"
#include "nanochat/loss_eval.h"
#include "nanochat/optim.h"
#include "nanochat/report.h"
#include "nanochat/telemetry/deferred_readback.h"
#include "nanochat/telemetry/metrics_log.h"
#include "nanochat/telemetry/peak_flops.h"
#include "nanochat/telemetry/train_progress.h"
#include "nanochat/tokenizer.h"
#include "nanochat/train_schedule.h"

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
  opt("--run", o.run, "run name, recorded in <checkpoint dir>/metrics.jsonl (there is no wandb: "
                      "every step and eval is logged to that local file instead)");
  opt("--device-type", o.device_type, "cuda or cpu (empty: autodetect)")->check(CLI::IsMember({"", "cuda", "cpu"}));
  sub->add_flag("--fp8", o.fp8, "FP8 training of the blocks' matmuls (CUDA, compute capability 8.9+; "
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
  opt("--device-batch-size", o.device_batch_size, "rows per rank per micro-step (on a GPU, by default the "
                                                   "largest power of two up to 32 that fits its memory)")
      ->check(CLI::PositiveNumber);
  opt("--total-batch-size", o.total_batch_size, "tokens per optimizer step over all ranks (-1: auto from depth)");
  opt("--embedding-lr", o.embedding_lr, "AdamW lr of wte (value embeddings: half)");
  opt("--unembedding-lr", o.unembedding_lr, "AdamW lr of lm_head");
  opt("--weight-decay", o.weight_decay, "Muon cautious weight decay at the d12 reference (scaled by depth)");
  opt("--matrix-lr", o.matrix_lr, "Muon lr of the transformer matrices");
  opt("--scalar-lr", o.scalar_lr, "AdamW lr of the per-layer scalars");
  opt("--warmup-steps", o.warmup_steps, "linear lr warmup steps")->check(CLI::NonNegativeNumber);
  opt("--warmdown-ratio", o.warmdown_ratio, "fraction of steps of the final linear lr decay")->check(CLI::Range(0.0, 1.0));
  opt("--final-lr-frac", o.final_lr_frac, "lr at the end as a fraction of the peak")->check(CLI::Range(0.0, 1.0));
  cli_add_resume_flags(sub, o.save_every, o.resume_from_step, o.resume_latest, o.output);
  opt("--eval-every", o.eval_every, "val bpb every N steps (-1: off)");
  opt("--eval-tokens", o.eval_tokens, "val tokens per bpb evaluation")->check(CLI::PositiveNumber);
  opt("--core-metric-every", o.core_metric_every, "CORE metric every N steps (-1: off)");
  opt("--core-metric-max-per-task", o.core_metric_max_per_task, "examples per CORE task (-1: all)");
  opt("--sample-every", o.sample_every, "greedy samples every N steps (-1: off)");
  opt("--model-tag", o.model_tag, "checkpoint folder name (default d<depth>)");
  opt("--eval-bundle", o.eval_bundle, "CORE bundle folder (default: $NANOCHAT_BASE_DIR/eval_bundle, from "
                                      "`nanochat download eval-bundle`)");
  cli_add_data_flags(sub, o.data);
  opt("--tokenizer-threads", o.tokenizer_threads, "loader threads per rank (0: all but one core of the rank)")
      ->check(CLI::NonNegativeNumber);
  opt("--prefetch", o.prefetch, "batches the loader stages ahead")->check(CLI::Range(1, 64));
  opt("--min-doc-chars", o.min_doc_chars, "drop documents shorter than this many bytes")->check(CLI::NonNegativeNumber);
  sub->add_flag("--skip-bad-row-groups", o.skip_bad_row_groups,
                "warn about and skip a row group that fails to decode (default: stop with an error)");
  sub->add_flag("--dry-run", o.dry_run, "print the plan (counts, FLOPs, batch, horizon, scaling, memory per rank, "
                                        "wall-clock) and exit: no weights, no data, no GPU needed; last line JSON");
  opt("--gpu-memory", o.gpu_memory, "plan the default --device-batch-size for a GPU of this much memory (e.g. 80GB, "
                                    "80GiB) instead of asking the device");
  opt("--gpu-name", o.gpu_name, "--dry-run: the GPU whose peak FLOPS the wall-clock uses (default: this machine's, "
                                "else H100)");
  opt("--mfu", o.mfu, "--dry-run: the model FLOPS utilisation the wall-clock assumes")->check(CLI::Range(1e-6, 1.0));
  opt("--world-size", o.world_size, "--dry-run: ranks to plan for (0: WORLD_SIZE, else 1)")->check(CLI::Range(0, 1 << 20));
  opt("--preflight-steps", o.preflight_steps, "train this many steps of the real plan (model, batch, schedule) into "
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

int base_train(const BaseTrainFlags& o, const nlohmann::ordered_json& user_config) {
  // ---- set-up ---------------------------------------------------------------------
  stop_signal_install();
  // --preflight-steps: the first steps of the real plan, into a scratch tag, nothing saved
  const bool preflight = o.preflight_steps > 0;
  if (preflight && (o.resume_latest || o.resume_from_step >= 0))
    fail("--preflight-steps starts a scratch run: drop --resume / --resume-from-step");
  const bool evals = !preflight;  // val bpb, CORE, samples
  // CORE needs its bundle: a missing one fails now, not at step N
  const std::string bundle = evals && o.core_metric_every > 0 ? core_eval_bundle_dir(o.eval_bundle) : "";
  Compute c = compute_init(o.device_type);
  Dist& dist = *c.dist;
  const int world = c.env.world_size, rank = c.env.rank;
  if (o.world_size > 0 && o.world_size != world)
    fail("--world-size %d plans a --dry-run; this run has %d rank(s) (use `nanochat launch --nproc-per-node N`)",
         o.world_size, world);
  log_info("nanochat base-train: device %s (%s), compute dtype %s, %d rank(s), %d CPU threads",
           c.device.str().c_str(), c.device_type.c_str(), dtype_name(c.dtype).c_str(), world,
           c.cpu_threads);
  double peak = peak_flops_of_run(c.device, c.dtype, c.cpu_threads);
  const std::string mfu_label = mfu_label_for(c.device, c.dtype);  // the dtype of that peak
  if (o.fp8 && o.fp8_recipe != "tensorwise")
    fail("--fp8-recipe %s is not implemented (neither is it upstream): use --fp8-recipe tensorwise", o.fp8_recipe.c_str());
  if (o.fp8 && !c.device.is_cuda()) log_warn("--fp8 is for CUDA (as upstream): training in %s", dtype_name(c.dtype).c_str());

  Tokenizer tok = tokenizer_load(base_dir_path("tokenizer"));
  torch::Tensor token_bytes = bpb_token_bytes(tok, c.device);

  GPTConfig config = gpt_config_from_depth(o.depth, tok.vocab_size(), o.max_seq_len,
                                           o.window_pattern, o.aspect_ratio, o.head_dim);
  const std::string tag = (o.model_tag.empty() ? strprintf("d%lld", (long long)o.depth) : o.model_tag) +
                          (preflight ? "-preflight" : "");
  const std::string ckpt_dir = checkpoint_dir("base", tag);
  cli_open_checkpoint_dir(ckpt_dir, o.resume_latest || o.resume_from_step >= 0, o.output, dist);  // --force, stale files
  const int64_t resume_step = o.resume_latest ? checkpoint_find_last_step(ckpt_dir) : o.resume_from_step;

  GPT model(config, c.device, c.dtype);
  gpt_init_weights(model, 42);
  std::optional<ModelCheckpoint> resumed = checkpoint_resume_gpt(model, ckpt_dir, resume_step, tok.vocab_size());
  if (o.fp8 && c.device.is_cuda()) gpt_set_fp8(model, true);  // Error below compute capability 8.9

  const int64_t device_batch_size = base_train_device_batch_size(o, config, c.device, c.dtype, world);
  if (o.fp8 && c.device.is_cuda() && device_batch_size * config.sequence_len % 16 != 0)
    fail("--fp8: a micro-batch's %lld x %lld tokens must be a multiple of 16 (the inner dimension of the weight "
         "gradient's FP8 matmul): change --device-batch-size or --max-seq-len",
         (long long)device_batch_size, (long long)config.sequence_len);
  {  // which attention kernel each kind of layer runs, once
    auto probe = torch::TensorOptions().dtype(c.dtype).device(c.device);
    torch::Tensor q = torch::empty({1, config.sequence_len, config.n_head, config.head_dim()}, probe);
    torch::Tensor k = torch::empty({1, config.sequence_len, config.n_kv_head, config.head_dim()}, probe);
    std::vector<int64_t> kinds = gpt_window_sizes(config);
    std::sort(kinds.begin(), kinds.end());
    kinds.erase(std::unique(kinds.begin(), kinds.end()), kinds.end());
    for (int64_t w : kinds)
      log_info("attention, window %lld: %s", (long long)w, attention_kernel_name(q, k, w).c_str());
  }

  const BaseTrainPlan plan = base_train_plan(o, tok.vocab_size(), world, device_batch_size, c.dtype,
                                             o.fp8 && c.device.is_cuda());
  const ScalingParams& counts = plan.counts;
  const int64_t flops_per_token = plan.flops_per_token;
  log_info("model %s: d_model %lld, %lld heads, %lld layers, vocab %lld, window pattern %s",
           tag.c_str(), (long long)config.n_embd, (long long)config.n_head, (long long)config.n_layer,
           (long long)config.vocab_size, config.window_pattern.c_str());
  log_info("parameters: %s total (wte %s, value_embeds %s, lm_head %s, transformer matrices %s, scalars %lld)",
           format_count((double)counts.total).c_str(), format_count((double)counts.wte).c_str(),
           format_count((double)counts.value_embeds).c_str(), format_count((double)counts.lm_head).c_str(),
           format_count((double)counts.transformer_matrices).c_str(), (long long)counts.scalars);
  log_info("estimated FLOPs per token: %e", (double)flops_per_token);

  // ---- scaling rules and horizon (the plan: train_schedule) ------------------------------
  const TrainScaling& scaling = plan.scaling;
  const int64_t num_iterations = plan.num_iterations;
  const int64_t total_batch = scaling.total_batch_size;
  const int64_t grad_accum = plan.grad_accum;
  log_info("total batch %lld tokens (%s), grad accumulation %lld, %lld iterations, %s tokens, "
           "%.2f tokens per scaling param, %e FLOPs",
           (long long)total_batch, o.total_batch_size == -1 ? "auto" : "--total-batch-size",
           (long long)grad_accum, (long long)num_iterations, format_count((double)plan.total_tokens).c_str(),
           (double)plan.total_tokens / (double)plan.scaling_params,
           (double)flops_per_token * (double)plan.total_tokens);
  const double bls = scaling.batch_lr_scale;
  log_info("batch lr scale %.4f, weight decay %.6f (scaled from %.4f)", bls, scaling.weight_decay, o.weight_decay);
  log_info("memory estimate per rank at %lld rows: %.2f GiB (weights %.2f, grads %.2f, optimizer %.2f, "
           "activations %.2f GiB)", (long long)device_batch_size, (double)plan.memory.total / (1 << 30),
           (double)plan.memory.weights / (1 << 30), (double)plan.memory.grads / (1 << 30),
           (double)plan.memory.optimizer / (1 << 30), (double)plan.memory.activations / (1 << 30));
  if (preflight)
    log_info("preflight: %lld steps of this plan into %s, no evals, nothing saved", (long long)o.preflight_steps,
             tag.c_str());

  MuonAdamW opt(optim_param_groups_gpt(gpt_named_parameters(model), config.n_embd, o.unembedding_lr * bls,
                                       o.embedding_lr * bls, o.matrix_lr * bls, scaling.weight_decay,
                                       o.scalar_lr * bls),
                &dist, c.dtype);

  // fp16: dynamic loss scaling, as upstream's GradScaler (bf16 and fp32 need none)
  std::optional<GradScaler> scaler;
  if (c.dtype == torch::kHalf) scaler.emplace(c.device);

  LoopState loop;
  std::optional<LoaderState> loader_resume;
  if (resumed) {
    std::optional<OptimCheckpoint> optim = checkpoint_load_optim(ckpt_dir, resume_step, rank);
    if (!optim)
      fail("%s step %lld has no optimizer state for rank %d: resume with the world size it was saved with",
           ckpt_dir.c_str(), (long long)resume_step, rank);
    opt.load_state(optim->tensors, optim->state.at("optimizer"));
    if (scaler && optim->state.contains("grad_scaler")) scaler->load_state(optim->state["grad_scaler"]);
    loader_resume = loader_state_from_checkpoint(resumed->meta, optim->state);
    const auto& ls = resumed->meta.at("loop_state");
    loop.step = resume_step;
    loop.val_bpb = checkpoint_meta_number(resumed->meta, "val_bpb", 0.0);
    loop.min_val_bpb = checkpoint_meta_number(ls, "min_val_bpb", INFINITY);  // JSON has no inf: null
    loop.smooth_train_loss = checkpoint_meta_number(ls, "smooth_train_loss", 0.0);
    loop.total_training_time = checkpoint_meta_number(ls, "total_training_time", 0.0);
  }

  // ---- data --------------------------------------------------------------------------
  Corpus corpus = corpus_open(o.data);
  LoaderOptions lo;
  lo.batch_size = device_batch_size;
  lo.seq_len = o.max_seq_len;
  lo.device = c.device;
  lo.rank = rank;
  lo.world = world;
  lo.local_world = c.env.local_world_size;
  lo.tokenizer_threads = o.tokenizer_threads;
  lo.prefetch = o.prefetch;
  lo.min_doc_chars = o.min_doc_chars;
  lo.skip_bad_row_groups = o.skip_bad_row_groups;
  DataLoader train_loader(tok, corpus_split(corpus, "train"), lo, loader_resume ? &*loader_resume : nullptr);
  LoaderBatch batch = train_loader.next();
  // the state that reproduces `batch` (the one in hand, not trained on yet): saved with a
  // checkpoint so the resumed run trains on exactly the batches this one would have
  std::optional<LoaderState> state_before_batch = loader_resume;

  MetricsLog metrics;
  if (c.master()) metrics = MetricsLog(ckpt_dir + "/metrics.jsonl", resumed ? resume_step : -1);

  auto make_meta = [&](int64_t step) {
    nlohmann::ordered_json meta;
    meta["step"] = step;
    meta["val_bpb"] = loop.val_bpb;
    meta["model_config"] = gpt_config_to_json(config);
    meta["user_config"] = user_config;
    meta["device_batch_size"] = device_batch_size;
    meta["max_seq_len"] = o.max_seq_len;
    meta["total_batch_size"] = total_batch;
    meta["dataloader_state_dict"] = loader_state_upstream_json(state_before_batch);
    meta["loop_state"] = {{"min_val_bpb", loop.min_val_bpb},
                          {"smooth_train_loss", loop.smooth_train_loss},
                          {"total_training_time", loop.total_training_time}};
    return meta;
  };
  auto save_meta = [&](int64_t step) {
    atomic_write_file(checkpoint_meta_path(ckpt_dir, step), make_meta(step).dump(2));
  };
  auto save = [&](int64_t step) {
    nlohmann::ordered_json state;
    state["optimizer"] = opt.state_json();
    if (scaler) state["grad_scaler"] = scaler->state_json();
    state["dataloader_state"] = state_before_batch ? loader_state_to_json(*state_before_batch) : nlohmann::json();
    cli_save_training_checkpoint(ckpt_dir, step, c.master() ? checkpoint_gpt_tensors(model) : NamedTensors{},
                                 make_meta(step), opt.state_tensors(), state, o.output, dist);
  };

  auto evaluate_val_bpb = [&]() {
    torch::NoGradGuard no_grad;
    GptFp8Off fp8_off(model);  // evaluation and sampling in the compute dtype, as upstream
    LoaderOptions vo = lo;
    vo.rank = rank;
    vo.infinite = true;  // upstream: a fresh, endless val iterator from the start of the shard
    DataLoader val_loader(tok, corpus_split(corpus, "val"), vo);
    const int64_t eval_steps = std::max<int64_t>(1, o.eval_tokens / (device_batch_size * o.max_seq_len * world));
    return evaluate_bpb([&](const torch::Tensor& x, const torch::Tensor& y) {
                          return gpt_loss(model, x, y, LossReduction::none);
                        },
                        [&] {
                          LoaderBatch b = val_loader.next();
                          return std::make_pair(b.inputs, b.targets);
                        },
                        eval_steps, token_bytes, &dist);
  };

  // ---- the loop ----------------------------------------------------------------
  const int64_t start_step = loop.step;
  TrainProgress progress(num_iterations, total_batch, flops_per_token, peak * world, mfu_label,
                         loop.smooth_train_loss, loop.total_training_time);
  double last_core = NAN;  // for the report
  // the step that ends this process's loop: the plan's last, or the preflight's
  const int64_t end_step = preflight ? std::min(num_iterations, start_step + o.preflight_steps) : num_iterations;

  // A step's loss (and whether any rank was signalled) comes back one step late on a GPU:
  // the host queues step s+1 before it waits for step s, once (DeferredReadback). The log
  // line of a step is written when its values arrive; dt is then the time between two
  // arrivals, which is the device's step time once the queue is steady.
  struct StepRecord {
    int64_t step;
    double lrm, data_wait;
    DocPosition pos;
  };
  std::deque<StepRecord> in_flight;
  DeferredReadback readback(c.device);
  Timer since_last_log;
  // logs the oldest step in flight; true when some rank was signalled to stop
  auto log_oldest = [&]() {
    const std::vector<double> v = readback.take();
    const StepRecord r = in_flight.front();
    in_flight.pop_front();
    const double dt = since_last_log.seconds();
    since_last_log.reset();
    progress.record({r.step, v[0] / world, dt, r.lrm, r.data_wait, r.pos.epoch, r.pos.file, r.pos.row_group}, metrics);
    loop.smooth_train_loss = progress.smooth_loss();
    loop.total_training_time = progress.total_training_time();
    if (r.step == start_step + 1) {  // the estimate beside the allocator's peak, once the state exists
      const int64_t peak_now = device_peak_memory_bytes(c.device);
      if (peak_now >= 0)
        log_info("memory after step %lld: peak %.2f GiB allocated (CUDA caching allocator), estimate %.2f GiB",
                 (long long)r.step, (double)peak_now / (1 << 30), (double)plan.memory.total / (1 << 30));
    }
    return v[1] > 0;
  };
  // every step in flight logged (before evals and saves, which want the loop state whole)
  auto drain = [&]() {
    bool stop = false;
    while (!readback.empty()) stop = log_oldest() || stop;
    return stop;
  };
  // graceful stop: every rank saw the flag in the same all-reduce; save the state after the
  // last step that ran, and say how to resume
  auto stop_and_save = [&]() {
    drain();
    save(loop.step);
    log_info("stopped by signal after step %lld. Resume with:\n  %s", (long long)(loop.step - 1),
             cli_resume_command(cli_argv(), loop.step).c_str());
    return 0;
  };

  log_info("training %s from step %lld to %lld; metrics in %s", o.run.c_str(), (long long)start_step,
           (long long)num_iterations, (ckpt_dir + "/metrics.jsonl").c_str());
  for (int64_t step = start_step;; step++) {
    const bool last_step = step == end_step;
    const double flops_so_far = (double)flops_per_token * (double)total_batch * (double)step;
    const bool eval_now = evals && o.eval_every > 0 && (last_step || step % o.eval_every == 0);
    const bool core_now = evals && o.core_metric_every > 0 && (last_step || (step > 0 && step % o.core_metric_every == 0));
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
      loop.val_bpb = evaluate_val_bpb();
      loop.min_val_bpb = std::min(loop.min_val_bpb, loop.val_bpb);
      log_info("Step %05lld | Validation bpb: %.6f", (long long)step, loop.val_bpb);
      metrics.log({{"step", step}, {"val_bpb", loop.val_bpb}, {"total_training_flops", flops_so_far},
                   {"total_training_time", loop.total_training_time}});
      model->train();
      if (last_step && c.master()) save_meta(step);  // the final val bpb into the saved meta
    }
    if (core_now) {
      CoreOptions co;
      co.bundle_dir = bundle;
      co.max_per_task = o.core_metric_max_per_task;
      co.batch_size = device_batch_size;
      GptFp8Off fp8_off(model);
      CoreResult r = core_evaluate(model, tok, co, &dist);
      last_core = r.core;
      log_info("Step %05lld | CORE metric: %.4f", (long long)step, r.core);
      nlohmann::json line = {{"step", step}, {"core_metric", r.core}, {"total_training_flops", flops_so_far},
                             {"total_training_time", loop.total_training_time}};  // for time to GPT-2
      for (const CoreTaskResult& t : r.tasks) line["core/" + t.label] = t.centered;
      metrics.log(line);
      model->train();
    }
    if (sample_due && c.master()) {
      model->eval();
      GptFp8Off fp8_off(model);
      Engine engine(model, tok);
      for (const std::string& prompt : engine_sample_prompts())
        log_info("%s", engine_sample_greedy(engine, prompt, 16).c_str());
      model->train();
    }
    if (save_now) save(step);
    if (last_step) break;

    // ---- one optimizer step: queued without waiting for the device ----
    if (in_flight.empty()) since_last_log.reset();  // nothing queued: this step's time starts now
    double data_wait = 0;
    torch::Tensor train_loss;
    for (int64_t micro = 0; micro < grad_accum; micro++) {
      torch::Tensor loss = gpt_loss(model, batch.inputs, batch.targets);
      train_loss = loss.detach();
      loss = loss / (double)grad_accum;
      (scaler ? scaler->scale(loss) : loss).backward();
      state_before_batch = batch.state;
      batch = train_loader.next();  // prefetch: the loader's workers already packed it
      data_wait += train_loader.metrics().wait_last_s;
    }
    const double lrm = lr_multiplier(step, num_iterations, o.warmup_steps, o.warmdown_ratio, o.final_lr_frac);
    for (OptimGroup& g : opt.groups()) {
      g.lr = g.initial_lr * lrm;
      if (g.kind == OptimKind::muon) {
        g.momentum = muon_momentum(step, num_iterations, o.warmdown_ratio);
        g.weight_decay = muon_weight_decay(step, num_iterations, scaling.weight_decay);
      }
    }
    if (!scaler) opt.step();
    else if (!scaler->step(opt, &dist))
      log_warn("step %lld: fp16 gradients overflowed; step skipped, loss scale now %g", (long long)step,
               scaler->scale_value());
    opt.zero_grad();
    // the loss summed over ranks and the stop flag (any rank), in one collective
    torch::Tensor stats = at::stack({train_loss.to(torch::kFloat32).reshape({}),
                                     torch::full({}, stop_signal_received() ? 1.0f : 0.0f, train_loss.options().dtype(torch::kFloat32))});
    dist.all_reduce(stats, ReduceOp::SUM);
    readback.push(stats);
    in_flight.push_back({step, lrm, data_wait, batch.state.last});
    loop.step = step + 1;
    if (readback.due() && log_oldest()) return stop_and_save();
  }

  int64_t peak_mem = device_peak_memory_bytes(c.device);
  if (peak_mem >= 0) log_info("peak memory: %.2f MiB", (double)peak_mem / (1024.0 * 1024.0));
  if (preflight) return base_train_preflight_report(plan, progress, end_step - start_step, peak_mem, c.master());
  log_info("total training time: %.2fm", loop.total_training_time / 60);
  log_info("minimum validation bpb: %.6f", loop.min_val_bpb);
  if (c.master()) {
    const int64_t tokens = total_batch * num_iterations;
    ReportItem stats = {{"Number of parameters", counts.total},
                        {"Number of FLOPs per token", strprintf("%e", (double)flops_per_token)},
                        {"Calculated number of iterations", num_iterations},
                        {"Number of training tokens", tokens},
                        {"Tokens : Scaling params ratio", (double)tokens / (double)plan.scaling_params},
                        {"DDP world size", world},
                        {"warmup_steps", o.warmup_steps},
                        {"warmdown_ratio", o.warmdown_ratio},
                        {"final_lr_frac", o.final_lr_frac}};
    ReportItem results = {{"Minimum validation bpb", loop.min_val_bpb},
                          {"Final validation bpb", loop.val_bpb},
                          {"CORE metric estimate", last_core},
                          {"MFU %", strprintf("%.2f%%", progress.last_mfu())},
                          {"Total training flops", strprintf("%e", (double)flops_per_token * (double)tokens)},
                          {"Total training time", strprintf("%.2fm", loop.total_training_time / 60)},
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
  return 0;
}

}  // namespace

}  // namespace nanochat
