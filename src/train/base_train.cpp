// Pretraining loop (spec §6.2 setup, §6.5 loop). Reads top to bottom like upstream's
// base_train.py: setup, horizon, then `for step in start..N` with eval / sample / save at
// the top of the iteration and one optimizer step at the bottom.
#include "nanochat/base_train.h"

#include <cmath>
#include <optional>

#include <torch/torch.h>

#include "nanochat/checkpoint.h"
#include "nanochat/checkpoint_gpt.h"
#include "nanochat/common.h"
#include "nanochat/common/metrics_log.h"
#include "nanochat/common/stop_signal.h"
#include "nanochat/compute.h"
#include "nanochat/core_eval.h"
#include "nanochat/dataloader.h"
#include "nanochat/gpt.h"
#include "nanochat/loss_eval.h"
#include "nanochat/optim.h"
#include "nanochat/report.h"
#include "nanochat/tokenizer.h"
#include "nanochat/train_schedule.h"
#include "train/train_common.h"

namespace nanochat {

const std::vector<std::string>& base_train_sample_prompts() {
  static const std::vector<std::string> prompts = {
      "The capital of France is",
      "The chemical symbol of gold is",
      "If yesterday was Friday, then tomorrow will be",
      "The opposite of hot is",
      "The planets of the solar system are:",
      "My favorite color is",
      "If 5*x + 3 = 13, then x is",
  };
  return prompts;
}

namespace {

// what a checkpoint restores besides weights and optimizer moments (§6.7)
struct LoopState {
  int64_t step = 0;
  double val_bpb = 0, min_val_bpb = INFINITY, smooth_train_loss = 0, total_training_time = 0;
};

nlohmann::ordered_json user_config_json(const BaseTrainOptions& o) {
  nlohmann::ordered_json j;
  j["run"] = o.run;
  j["device_type"] = o.device_type;
  j["fp8"] = o.fp8;
  j["fp8_recipe"] = o.fp8_recipe;
  j["depth"] = o.depth;
  j["aspect_ratio"] = o.aspect_ratio;
  j["head_dim"] = o.head_dim;
  j["max_seq_len"] = o.max_seq_len;
  j["window_pattern"] = o.window_pattern;
  j["num_iterations"] = o.num_iterations;
  j["target_flops"] = o.target_flops;
  j["target_param_data_ratio"] = o.target_param_data_ratio;
  j["device_batch_size"] = o.device_batch_size;
  j["total_batch_size"] = o.total_batch_size;
  j["embedding_lr"] = o.embedding_lr;
  j["unembedding_lr"] = o.unembedding_lr;
  j["weight_decay"] = o.weight_decay;
  j["matrix_lr"] = o.matrix_lr;
  j["scalar_lr"] = o.scalar_lr;
  j["warmup_steps"] = o.warmup_steps;
  j["warmdown_ratio"] = o.warmdown_ratio;
  j["final_lr_frac"] = o.final_lr_frac;
  j["resume_from_step"] = o.resume_from_step;
  j["eval_every"] = o.eval_every;
  j["eval_tokens"] = o.eval_tokens;
  j["core_metric_every"] = o.core_metric_every;
  j["core_metric_max_per_task"] = o.core_metric_max_per_task;
  j["sample_every"] = o.sample_every;
  j["save_every"] = o.save_every;
  j["model_tag"] = o.model_tag;
  j["data"] = o.data.data_dir;
  j["argv"] = o.argv;
  return j;
}


}  // namespace

int base_train_run(const BaseTrainOptions& o) {
  // ---- setup (§6.2) ---------------------------------------------------------------------
  stop_signal_install();
  // CORE needs its bundle: a missing one fails now, not at step N
  const std::string bundle = o.core_metric_every > 0 ? core_eval_bundle_dir(o.eval_bundle) : "";
  Compute c = compute_init(o.device_type);
  Dist& dist = *c.dist;
  const int world = c.env.world_size, rank = c.env.rank;
  log_info("nanochat base-train: device %s (%s), compute dtype %s, %d rank(s), %d CPU threads",
           c.device.str().c_str(), c.device_type.c_str(), dtype_name(c.dtype).c_str(), world,
           c.cpu_threads);
  double peak = train_peak_flops(c);
  if (o.fp8) log_warn("--fp8 is not implemented yet: training in %s", dtype_name(c.dtype).c_str());

  Tokenizer tok = tokenizer_load(base_dir_path("tokenizer"));
  torch::Tensor token_bytes = train_token_bytes(tok, c.device);

  GPTConfig config = gpt_config_from_depth(o.depth, tok.vocab_size(), o.max_seq_len,
                                           o.window_pattern, o.aspect_ratio, o.head_dim);
  const std::string tag = o.model_tag.empty() ? strprintf("d%lld", (long long)o.depth) : o.model_tag;
  const std::string ckpt_dir = checkpoint_dir("base", tag);
  const int64_t resume_step = o.resume_latest ? checkpoint_find_last_step(ckpt_dir) : o.resume_from_step;

  GPT model(config, c.device, c.dtype);
  gpt_init_weights(model, 42);
  std::optional<ModelCheckpoint> resumed = train_resume_model(model, ckpt_dir, resume_step, tok.vocab_size());

  ScalingParams counts = gpt_num_scaling_params(config);
  const int64_t flops_per_token = gpt_estimate_flops(config);
  log_info("model %s: d_model %lld, %lld heads, %lld layers, vocab %lld, window pattern %s",
           tag.c_str(), (long long)config.n_embd, (long long)config.n_head, (long long)config.n_layer,
           (long long)config.vocab_size, config.window_pattern.c_str());
  log_info("parameters: %s total (wte %s, value_embeds %s, lm_head %s, transformer matrices %s, scalars %lld)",
           format_count((double)counts.total).c_str(), format_count((double)counts.wte).c_str(),
           format_count((double)counts.value_embeds).c_str(), format_count((double)counts.lm_head).c_str(),
           format_count((double)counts.transformer_matrices).c_str(), (long long)counts.scalars);
  log_info("estimated FLOPs per token: %e", (double)flops_per_token);

  // ---- scaling rules (§6.3) and horizon (§6.4) ------------------------------------------
  GPTConfig ref = gpt_config_from_depth(12, tok.vocab_size(), o.max_seq_len, o.window_pattern,
                                        o.aspect_ratio, o.head_dim);
  auto scaling_of = [](const ScalingParams& s) { return s.transformer_matrices + s.lm_head; };
  TrainScaling scaling = train_scaling(scaling_of(counts), scaling_of(gpt_num_scaling_params(ref)),
                                       o.target_param_data_ratio, o.total_batch_size, o.weight_decay);
  const int64_t num_iterations = train_num_iterations(o.num_iterations, o.target_flops,
                                                      (double)flops_per_token, scaling,
                                                      o.target_param_data_ratio);
  const int64_t total_batch = scaling.total_batch_size;
  const int64_t grad_accum = train_grad_accum(total_batch, o.device_batch_size, o.max_seq_len, world);
  log_info("total batch %lld tokens (%s), grad accumulation %lld, %lld iterations, %s tokens, "
           "%.2f tokens per scaling param, %e FLOPs",
           (long long)total_batch, o.total_batch_size == -1 ? "auto" : "--total-batch-size",
           (long long)grad_accum, (long long)num_iterations,
           format_count((double)(total_batch * num_iterations)).c_str(),
           (double)(total_batch * num_iterations) / (double)scaling_of(counts),
           (double)flops_per_token * (double)(total_batch * num_iterations));
  const double bls = scaling.batch_lr_scale;
  log_info("batch lr scale %.4f, weight decay %.6f (scaled from %.4f)", bls, scaling.weight_decay, o.weight_decay);

  MuonAdamW opt(optim_param_groups_gpt(gpt_named_parameters(model), config.n_embd, o.unembedding_lr * bls,
                                       o.embedding_lr * bls, o.matrix_lr * bls, scaling.weight_decay,
                                       o.scalar_lr * bls),
                &dist, c.dtype);

  LoopState loop;
  std::optional<LoaderState> loader_resume;
  if (resumed) {
    std::optional<OptimCheckpoint> optim = checkpoint_load_optim(ckpt_dir, resume_step, rank);
    if (!optim)
      fail("%s step %lld has no optimizer state for rank %d: resume with the world size it was saved with",
           ckpt_dir.c_str(), (long long)resume_step, rank);
    opt.load_state(optim->tensors, optim->state.at("optimizer"));
    loader_resume = train_loader_state_from_checkpoint(resumed->meta, optim->state);
    const auto& ls = resumed->meta.at("loop_state");
    loop.step = resume_step;
    loop.val_bpb = train_json_number(resumed->meta, "val_bpb", 0.0);
    loop.min_val_bpb = train_json_number(ls, "min_val_bpb", INFINITY);  // JSON has no inf: null
    loop.smooth_train_loss = train_json_number(ls, "smooth_train_loss", 0.0);
    loop.total_training_time = train_json_number(ls, "total_training_time", 0.0);
  }

  // ---- data --------------------------------------------------------------------------
  Corpus corpus = corpus_open(o.data);
  LoaderOptions lo;
  lo.batch_size = o.device_batch_size;
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
    meta["user_config"] = user_config_json(o);
    meta["device_batch_size"] = o.device_batch_size;
    meta["max_seq_len"] = o.max_seq_len;
    meta["total_batch_size"] = total_batch;
    meta["dataloader_state_dict"] = train_loader_state_upstream(state_before_batch);
    meta["loop_state"] = {{"min_val_bpb", loop.min_val_bpb},
                          {"smooth_train_loss", loop.smooth_train_loss},
                          {"total_training_time", loop.total_training_time}};
    return meta;
  };
  auto save_meta = [&](int64_t step) {
    atomic_write_file(checkpoint_meta_path(ckpt_dir, step), make_meta(step).dump(2));
  };
  auto save = [&](int64_t step) {
    Timer t;
    if (c.master()) checkpoint_save_model(ckpt_dir, step, train_model_tensors(model), make_meta(step));
    nlohmann::ordered_json state;
    state["optimizer"] = opt.state_json();
    state["dataloader_state"] = state_before_batch ? loader_state_to_json(*state_before_batch) : nlohmann::json();
    checkpoint_save_optim(ckpt_dir, step, rank, opt.state_tensors(), state);
    dist.barrier();
    if (c.master()) checkpoint_mark_complete(ckpt_dir, step, world);
    dist.barrier();
    log_info("saved checkpoint %s step %06lld (%.1fs)", ckpt_dir.c_str(), (long long)step, t.seconds());
  };

  auto evaluate_val_bpb = [&]() {
    torch::NoGradGuard no_grad;
    LoaderOptions vo = lo;
    vo.rank = rank;
    vo.infinite = true;  // upstream: a fresh, endless val iterator from the start of the shard
    DataLoader val_loader(tok, corpus_split(corpus, "val"), vo);
    const int64_t eval_steps = std::max<int64_t>(1, o.eval_tokens / (o.device_batch_size * o.max_seq_len * world));
    return evaluate_bpb([&](const torch::Tensor& x, const torch::Tensor& y) {
                          return gpt_loss(model, x, y, LossReduction::none);
                        },
                        [&] {
                          LoaderBatch b = val_loader.next();
                          return std::make_pair(b.inputs, b.targets);
                        },
                        eval_steps, token_bytes, &dist);
  };

  // ---- the loop (§6.5) ----------------------------------------------------------------
  const int64_t start_step = loop.step;
  double smooth = loop.smooth_train_loss;
  double last_core = NAN, last_mfu = 0;  // for the report
  double timed_steps_seconds = 0;  // for the ETA: steps > 10 of this process
  int64_t timed_steps = 0;
  log_info("training %s from step %lld to %lld; metrics in %s", o.run.c_str(), (long long)start_step,
           (long long)num_iterations, (ckpt_dir + "/metrics.jsonl").c_str());
  for (int64_t step = start_step;; step++) {
    const bool last_step = step == num_iterations;
    const double flops_so_far = (double)flops_per_token * (double)total_batch * (double)step;

    // the final checkpoint comes before the final evals: an eval that fails (out of
    // memory, say) must not cost the run (upstream issue #446)
    if (last_step) save(step);
    if (o.eval_every > 0 && (last_step || step % o.eval_every == 0)) {
      model->eval();
      loop.val_bpb = evaluate_val_bpb();
      loop.min_val_bpb = std::min(loop.min_val_bpb, loop.val_bpb);
      log_info("Step %05lld | Validation bpb: %.6f", (long long)step, loop.val_bpb);
      metrics.log({{"step", step}, {"val_bpb", loop.val_bpb}, {"total_training_flops", flops_so_far},
                   {"total_training_time", loop.total_training_time}});
      model->train();
      if (last_step && c.master()) save_meta(step);  // the final val bpb into the saved meta
    }
    if (o.core_metric_every > 0 && (last_step || (step > 0 && step % o.core_metric_every == 0))) {
      CoreOptions co;
      co.bundle_dir = bundle;
      co.max_per_task = o.core_metric_max_per_task;
      co.batch_size = o.device_batch_size;
      CoreResult r = core_evaluate(model, tok, co, &dist);
      last_core = r.core;
      log_info("Step %05lld | CORE metric: %.4f", (long long)step, r.core);
      nlohmann::json line = {{"step", step}, {"core_metric", r.core}, {"total_training_flops", flops_so_far}};
      for (const CoreTaskResult& t : r.tasks) line["core/" + t.label] = t.centered;
      metrics.log(line);
      model->train();
    }
    if (c.master() && o.sample_every > 0 && (last_step || (step > 0 && step % o.sample_every == 0))) {
      model->eval();
      Engine engine(model, tok);
      for (const std::string& prompt : base_train_sample_prompts())
        log_info("%s", train_sample_greedy(engine, prompt, 16).c_str());
      model->train();
    }
    if (!last_step && step > 0 && step != resume_step && o.save_every > 0 && step % o.save_every == 0)
      save(step);
    if (last_step) break;

    // ---- one optimizer step ----
    device_synchronize(c.device);
    Timer step_timer;
    double data_wait = 0;
    torch::Tensor train_loss;
    for (int64_t micro = 0; micro < grad_accum; micro++) {
      torch::Tensor loss = gpt_loss(model, batch.inputs, batch.targets);
      train_loss = loss.detach();
      (loss / (double)grad_accum).backward();
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
    opt.step();
    opt.zero_grad();
    dist.all_reduce(train_loss, ReduceOp::AVG);  // the loss of all ranks, not just rank 0's
    const double loss = train_loss.item<double>();
    device_synchronize(c.device);
    const double dt = step_timer.seconds();

    // ---- logging ----
    smooth = 0.9 * smooth + 0.1 * loss;
    const double debiased = smooth / (1.0 - std::pow(0.9, (double)(step + 1)));
    loop.smooth_train_loss = smooth;
    const double tok_per_sec = (double)total_batch / dt;
    const double mfu = 100.0 * (double)flops_per_token * tok_per_sec / (peak * world);
    last_mfu = mfu;
    if (step > 10) {
      loop.total_training_time += dt;
      timed_steps_seconds += dt;
      timed_steps++;
    }
    const double eta = timed_steps ? timed_steps_seconds / timed_steps * (double)(num_iterations - step - 1) : NAN;
    const DocPosition& pos = batch.state.last;
    log_info("step %05lld/%05lld (%.2f%%) | loss: %.6f | lrm: %.2f | dt: %.2fms | tok/sec: %s | "
             "bf16_mfu: %.2f | epoch: %d pq: %d rg: %d | data-wait: %.1f%% | total time: %.2fm%s",
             (long long)step, (long long)num_iterations, 100.0 * (double)step / (double)num_iterations,
             debiased, lrm, dt * 1000, format_thousands((int64_t)tok_per_sec).c_str(), mfu, pos.epoch,
             pos.file, pos.row_group, 100.0 * data_wait / dt, loop.total_training_time / 60,
             std::isnan(eta) ? "" : strprintf(" | eta: %.1fm", eta / 60).c_str());
    metrics.log({{"step", step}, {"loss", debiased}, {"loss_raw", loss}, {"lrm", lrm}, {"dt", dt},
                 {"tok_per_sec", tok_per_sec}, {"mfu", mfu}, {"data_wait", data_wait / dt},
                 {"epoch", pos.epoch}, {"total_training_time", loop.total_training_time},
                 {"total_training_flops", flops_so_far + (double)flops_per_token * (double)total_batch}});
    loop.step = step + 1;

    // ---- graceful stop: every rank agrees, then the state after this step is saved ----
    if (train_any_rank(stop_signal_received(), dist, c.device)) {
      save(step + 1);
      log_info("stopped by signal after step %lld. Resume with:\n  %s", (long long)step,
               train_resume_command(o.argv, step + 1).c_str());
      return 0;
    }
  }

  int64_t peak_mem = device_peak_memory_bytes(c.device);
  if (peak_mem >= 0) log_info("peak memory: %.2f MiB", (double)peak_mem / (1024.0 * 1024.0));
  log_info("total training time: %.2fm", loop.total_training_time / 60);
  log_info("minimum validation bpb: %.6f", loop.min_val_bpb);
  if (c.master()) {
    const int64_t tokens = total_batch * num_iterations;
    ReportItem stats = {{"Number of parameters", counts.total},
                        {"Number of FLOPs per token", strprintf("%e", (double)flops_per_token)},
                        {"Calculated number of iterations", num_iterations},
                        {"Number of training tokens", tokens},
                        {"Tokens : Scaling params ratio", (double)tokens / (double)scaling_of(counts)},
                        {"DDP world size", world},
                        {"warmup_steps", o.warmup_steps},
                        {"warmdown_ratio", o.warmdown_ratio},
                        {"final_lr_frac", o.final_lr_frac}};
    ReportItem results = {{"Minimum validation bpb", loop.min_val_bpb},
                          {"Final validation bpb", loop.val_bpb},
                          {"CORE metric estimate", last_core},
                          {"MFU %", strprintf("%.2f%%", last_mfu)},
                          {"Total training flops", strprintf("%e", (double)flops_per_token * (double)tokens)},
                          {"Total training time", strprintf("%.2fm", loop.total_training_time / 60)},
                          {"Peak memory usage", peak_mem >= 0 ? strprintf("%.2fMiB", (double)peak_mem / 1048576.0)
                                                              : std::string("n/a (CPU)")}};
    if (std::isnan(last_core)) results.erase("CORE metric estimate");
    report_log("Base model training", {ReportItem(user_config_json(o)), stats, results});
  }
  return 0;
}

}  // namespace nanochat
