// The SFT loop (spec §9.3): the base checkpoint and (by default) its optimizer state, the
// task mixture packed by SftBatcher, val bpb on the val mixture, checkpoints into
// chatsft_checkpoints/<tag>/ (every --save-every steps, on SIGINT/SIGTERM and at the end)
// that resume exactly: model, optimizer, each rank's batcher state and the loss average.
#include "nanochat/sft.h"

#include <cmath>

#include <torch/torch.h>

#include "nanochat/chat_eval.h"
#include "nanochat/checkpoint.h"
#include "nanochat/checkpoint_gpt.h"
#include "nanochat/common.h"
#include "nanochat/common/metrics_log.h"
#include "nanochat/common/stop_signal.h"
#include "nanochat/compute.h"
#include "nanochat/gpt.h"
#include "nanochat/loss_eval.h"
#include "nanochat/optim.h"
#include "nanochat/report.h"
#include "nanochat/tokenizer.h"
#include "nanochat/train_schedule.h"
#include "train/train_common.h"

namespace nanochat {

namespace {

// a flag, else the base run's value, else upstream's fallback
int64_t inherit(int64_t flag, const nlohmann::ordered_json& j, const char* key, int64_t fallback) {
  if (flag > 0) return flag;
  return j.contains(key) && j[key].is_number() ? j[key].get<int64_t>() : fallback;
}
double inherit(double flag, const nlohmann::ordered_json& j, const char* key, double fallback) {
  if (flag >= 0) return flag;
  return j.contains(key) && j[key].is_number() ? j[key].get<double>() : fallback;
}

torch::Tensor masked_mean_loss(GPT& model, const torch::Tensor& x, const torch::Tensor& y) {
  return sft_masked_mean(gpt_loss(model, x, y, LossReduction::none), y);
}

}  // namespace

TaskPtr sft_mixture(const SftOptions& o, const std::string& split) {
  if (o.mixture == "chat") {
    SftMixtureOptions mix;
    mix.mmlu_epochs = o.mmlu_epochs;
    mix.gsm8k_epochs = o.gsm8k_epochs;
    mix.identity_path = o.identity_path;
    mix.identity_epochs = o.identity_epochs;
    return tasks_sft_mixture(split, mix);
  }
  if (o.mixture != "spelling") fail("--mixture must be chat or spelling, got '%s'", o.mixture.c_str());
  std::vector<TaskPtr> tasks;
  if (split == "train") {
    tasks.push_back(std::make_shared<SimpleSpellingTask>(20000, "train"));
    tasks.push_back(std::make_shared<SpellingBeeTask>(8000, "train"));
    if (!o.identity_path.empty()) {
      auto identity = std::make_shared<CustomJsonTask>(o.identity_path);
      for (int i = 0; i < o.identity_epochs; i++) tasks.push_back(identity);
    }
  } else {
    tasks.push_back(std::make_shared<SpellingBeeTask>(500, "test"));
  }
  return std::make_shared<TaskMixture>(std::move(tasks));
}

int sft_run(const SftOptions& o) {
  stop_signal_install();
  Compute c = compute_init(o.device_type);
  Dist& dist = *c.dist;
  const int world = c.env.world_size, rank = c.env.rank;
  const double peak = train_peak_flops(c);
  Tokenizer tok = tokenizer_load(base_dir_path("tokenizer"));
  torch::Tensor token_bytes = train_token_bytes(tok, c.device);

  LoadedGPT base = checkpoint_load_gpt("base", o.model_tag, o.model_step, c.device, c.dtype, tok.vocab_size());
  GPT model = base.model;
  model->train();
  const nlohmann::ordered_json& meta = base.meta;
  const nlohmann::ordered_json user = meta.value("user_config", nlohmann::ordered_json::object());
  const int64_t T = inherit(o.max_seq_len, meta, "max_seq_len", 2048);
  const int64_t B = inherit(o.device_batch_size, meta, "device_batch_size", 32);
  const int64_t total_batch = inherit(o.total_batch_size, meta, "total_batch_size", 524288);
  const double embedding_lr = inherit(o.embedding_lr, user, "embedding_lr", 0.3);
  const double unembedding_lr = inherit(o.unembedding_lr, user, "unembedding_lr", 0.004);
  const double matrix_lr = inherit(o.matrix_lr, user, "matrix_lr", 0.02);
  if (T > 10 * base.config.sequence_len)
    fail("--max-seq-len %lld exceeds the model's rotary cache (10 x %lld)", (long long)T,
         (long long)base.config.sequence_len);
  const int64_t grad_accum = train_grad_accum(total_batch, B, T, world);
  log_info("SFT of %s step %lld: T %lld, %lld rows per rank, total batch %lld (grad accumulation %lld)",
           base.ref.dir.c_str(), (long long)base.ref.step, (long long)T, (long long)B, (long long)total_batch,
           (long long)grad_accum);

  // the output tag, and the checkpoint of this run to resume from, if any
  const std::string tag = o.model_tag.empty() ? base.ref.dir.substr(base.ref.dir.rfind('/') + 1) : o.model_tag;
  const std::string out_dir = checkpoint_dir("sft", tag);
  const int64_t resume_step = o.resume_latest ? checkpoint_find_last_step(out_dir) : o.resume_from_step;
  std::optional<ModelCheckpoint> resumed = train_resume_model(model, out_dir, resume_step, tok.vocab_size());

  // optimizer: no batch-lr scaling, weight decay 0; warm start keeps the base run's moments
  // and group fields (momentum, weight decay) but takes the fresh learning rates; a resumed
  // run takes this run's state the same way
  MuonAdamW opt(optim_param_groups_gpt(gpt_named_parameters(model), base.config.n_embd, unembedding_lr,
                                       embedding_lr, matrix_lr, 0.0, 0.5),
                &dist, c.dtype);
  std::optional<OptimCheckpoint> st;
  if (resumed) {
    st = checkpoint_load_optim(out_dir, resume_step, rank);
    if (!st)
      fail("%s step %lld has no optimizer state for rank %d: resume with the world size it was saved with",
           out_dir.c_str(), (long long)resume_step, rank);
  } else if (o.load_optimizer) {
    st = checkpoint_load_optim(base.ref.dir, base.ref.step, rank);
    if (st) log_info("optimizer warm-started from the base run's state (rank %d)", rank);
    else log_warn("the base checkpoint has no optimizer state for rank %d: starting the optimizer fresh", rank);
  }
  if (st) {
    std::vector<double> fresh;
    for (const OptimGroup& g : opt.groups()) fresh.push_back(g.lr);
    opt.load_state(st->tensors, st->state.at("optimizer"));
    for (size_t i = 0; i < fresh.size(); i++) opt.groups()[i].lr = fresh[i];
  }
  for (OptimGroup& g : opt.groups()) {
    g.lr *= o.init_lr_frac;
    g.initial_lr = g.lr;
  }

  TaskPtr train_data = sft_mixture(o, "train");
  TaskPtr val_data = sft_mixture(o, "val");
  log_info("train mixture: %lld conversations, val mixture: %lld", (long long)train_data->size(),
           (long long)val_data->size());
  std::optional<SftBatcherState> batcher_resume;
  if (resumed) {
    const std::string where = checkpoint_optim_json_path(out_dir, resume_step, rank);
    if (!st->state.contains("sft_batcher_state")) fail("%s: no sft_batcher_state", where.c_str());
    batcher_resume = sft_batcher_state_from_json(st->state["sft_batcher_state"], train_data->size(), where);
  }
  SftBatcher train_batches(tok, train_data, B, T, rank, world, 100, batcher_resume ? &*batcher_resume : nullptr);
  auto to_device = [&](SftBatch b) {
    return std::make_pair(b.inputs.to(c.device, /*non_blocking=*/true), b.targets.to(c.device, true));
  };

  MetricsLog metrics;
  if (c.master()) metrics = MetricsLog(out_dir + "/metrics.jsonl", resumed ? resume_step : -1);
  const int64_t flops_per_token = gpt_estimate_flops(base.config);

  // the batch in hand comes with the batcher state that reproduces it (saved in checkpoints)
  SftBatcherState state_before_batch = train_batches.state();
  torch::Tensor x, y;
  std::tie(x, y) = to_device(train_batches.next());
  double smooth = 0, val_bpb = 0, min_val_bpb = INFINITY, progress = 0;
  int64_t final_step = 0;
  if (resumed) {
    const nlohmann::ordered_json ls = resumed->meta.value("loop_state", nlohmann::ordered_json::object());
    val_bpb = train_json_number(resumed->meta, "val_bpb", 0.0);
    smooth = train_json_number(ls, "smooth_train_loss", 0.0);
    min_val_bpb = train_json_number(ls, "min_val_bpb", INFINITY);  // JSON has no inf: null
  }
  auto make_meta = [&](int64_t step) {
    nlohmann::ordered_json out_meta;
    GPTConfig cfg = base.config;
    cfg.sequence_len = T;
    out_meta["step"] = step;
    out_meta["val_bpb"] = val_bpb;
    out_meta["model_config"] = gpt_config_to_json(cfg);
    out_meta["user_config"] = {{"argv", o.argv}, {"source_checkpoint", base.ref.dir}, {"source_step", base.ref.step}};
    out_meta["max_seq_len"] = T;
    out_meta["device_batch_size"] = B;
    out_meta["total_batch_size"] = total_batch;
    out_meta["loop_state"] = {{"smooth_train_loss", smooth}, {"min_val_bpb", min_val_bpb}};
    return out_meta;
  };
  auto save = [&](int64_t step) {
    if (c.master()) checkpoint_save_model(out_dir, step, train_model_tensors(model), make_meta(step));
    checkpoint_save_optim(out_dir, step, rank, opt.state_tensors(),
                          {{"optimizer", opt.state_json()},
                           {"sft_batcher_state", sft_batcher_state_to_json(state_before_batch)}});
    dist.barrier();
    if (c.master()) checkpoint_mark_complete(out_dir, step, world);
    dist.barrier();
    log_info("saved %s step %06lld", out_dir.c_str(), (long long)step);
  };

  for (int64_t step = std::max<int64_t>(resume_step, 0);; step++) {
    // the epoch ends when this rank's walk has placed every conversation once (or after
    // --num-iterations); ranks agree through a MAX
    const bool last = train_any_rank(
        o.num_iterations > 0 ? step >= o.num_iterations : train_batches.consumed() >= train_batches.size(), dist,
        c.device);

    // the final checkpoint comes before the final evals, which must not cost the run
    if (last) save(step);
    if (o.eval_every > 0 && (last || step % o.eval_every == 0)) {
      model->eval();
      SftBatcher val_batches(tok, val_data, B, T, rank, world);
      const int64_t steps = std::max<int64_t>(1, o.eval_tokens / (B * T * world));
      val_bpb = evaluate_bpb([&](const torch::Tensor& vx, const torch::Tensor& vy) {
                               return gpt_loss(model, vx, vy, LossReduction::none);
                             },
                             [&] { return to_device(val_batches.next()); }, steps, token_bytes, &dist);
      min_val_bpb = std::min(min_val_bpb, val_bpb);
      log_info("Step %05lld | Validation bpb: %.4f", (long long)step, val_bpb);
      metrics.log({{"step", step}, {"val_bpb", val_bpb}});
      model->train();
      if (last && c.master()) atomic_write_file(checkpoint_meta_path(out_dir, step), make_meta(step).dump(2));
    }
    if (o.mixture == "chat" && o.chatcore_every > 0 && (last || (step > 0 && step % o.chatcore_every == 0))) {
      // upstream: categorical tasks over all problems, batched by the device batch size;
      // generative ones capped (24), greedy, up to 512 new tokens
      ChatEvalResult r;
      for (const char* name : {"ARC-Easy", "ARC-Challenge", "MMLU", "GSM8K", "HumanEval"}) {
        TaskPtr task = task_for_eval(name);
        ChatEvalOptions eo;
        eo.batch_size = B;
        eo.max_problems = task->eval_type() == "categorical" ? o.chatcore_max_cat : o.chatcore_max_sample;
        eo.progress = false;
        model->eval();
        r.tasks.push_back(chat_eval_task(model, tok, *task, eo, &dist));
      }
      model->train();
      double core = 0, core_cat = 0;
      for (size_t k = 0; k < r.tasks.size(); k++) {
        core += r.tasks[k].centered / 5.0;
        if (k < 3) core_cat += r.tasks[k].centered / 3.0;
      }
      log_info("Step %05lld | ChatCORE: %.4f | ChatCORE_cat: %.4f", (long long)step, core, core_cat);
      nlohmann::json line = {{"step", step}, {"chatcore", core}, {"chatcore_cat", core_cat}};
      for (const auto& t : r.tasks) line[t.name] = t.accuracy;
      metrics.log(line);
    }
    if (last) {
      final_step = step;
      break;
    }
    if (step > 0 && step != resume_step && o.save_every > 0 && step % o.save_every == 0) save(step);

    device_synchronize(c.device);
    Timer timer;
    torch::Tensor train_loss;
    for (int64_t micro = 0; micro < grad_accum; micro++) {
      torch::Tensor loss = masked_mean_loss(model, x, y);
      train_loss = loss.detach();
      (loss / (double)grad_accum).backward();
      state_before_batch = train_batches.state();
      std::tie(x, y) = to_device(train_batches.next());
    }
    progress = o.num_iterations > 0 ? (double)(step + 1) / (double)o.num_iterations
                                    : (double)train_batches.consumed() / (double)train_batches.size();
    const double lrm = sft_lr_multiplier(std::min(progress, 1.0), o.warmup_ratio, o.warmdown_ratio, o.final_lr_frac);
    for (OptimGroup& g : opt.groups()) {
      g.lr = g.initial_lr * lrm;
      if (g.kind == OptimKind::muon) g.momentum = sft_muon_momentum(step);
    }
    opt.step();
    opt.zero_grad();
    dist.all_reduce(train_loss, ReduceOp::AVG);
    const double loss = train_loss.item<double>();
    device_synchronize(c.device);
    const double dt = timer.seconds();
    smooth = 0.9 * smooth + 0.1 * loss;
    const double debiased = smooth / (1.0 - std::pow(0.9, (double)(step + 1)));
    const double tok_per_sec = (double)total_batch / dt;
    const double mfu = 100.0 * (double)flops_per_token * tok_per_sec / (peak * world);
    log_info("step %05lld (%.2f%%) | loss: %.6f | lrm: %.2f | dt: %.2fms | tok/sec: %s | mfu: %.2f | epoch: %d",
             (long long)step, 100.0 * std::min(progress, 1.0), debiased, lrm, dt * 1000,
             format_thousands((int64_t)tok_per_sec).c_str(), mfu, train_batches.epoch());
    metrics.log({{"step", step}, {"loss", debiased}, {"loss_raw", loss}, {"lrm", lrm}, {"dt", dt},
                 {"tok_per_sec", tok_per_sec}, {"mfu", mfu}, {"progress", progress}});

    // graceful stop: every rank agrees, then the state after this step is saved
    if (train_any_rank(stop_signal_received(), dist, c.device)) {
      save(step + 1);
      log_info("stopped by signal after step %lld. Resume with:\n  %s", (long long)step,
               train_resume_command(o.argv, step + 1).c_str());
      return 0;
    }
  }
  if (c.master()) {
    ReportItem results = {{"Number of iterations", final_step}, {"DDP world size", world}};
    if (std::isfinite(min_val_bpb)) results["Minimum validation bpb"] = min_val_bpb;
    report_log("Chat SFT", {ReportItem{{"argv", o.argv}, {"mixture", o.mixture}, {"source_checkpoint", base.ref.dir},
                                       {"source_step", base.ref.step}, {"max_seq_len", T}, {"device_batch_size", B},
                                       {"total_batch_size", total_batch}, {"embedding_lr", embedding_lr},
                                       {"unembedding_lr", unembedding_lr}, {"matrix_lr", matrix_lr},
                                       {"init_lr_frac", o.init_lr_frac}},
                            results});
  }
  return 0;
}

}  // namespace nanochat
