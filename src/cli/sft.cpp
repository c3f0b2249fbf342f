// `nanochat sft`: supervised fine-tuning of a base checkpoint on the chat task mixture, as
// upstream's scripts/chat_sft.py: the base checkpoint and (by default) its optimizer state,
// the mixture packed by SftBatcher (sft_data), val bpb on the val mixture, ChatCORE,
// checkpoints into chatsft_checkpoints/<tag>/ (every --save-every steps, on SIGINT/SIGTERM
// and at the end) that resume exactly: model, optimizer, each rank's batcher state and the
// loss average. Flags left at -1 inherit the base run's values.
#include <CLI/CLI.hpp>
#include <cmath>
#include <deque>
#include <memory>
#include <unistd.h>

#include <torch/torch.h>

#include "cli/commands.h"
#include "cli/training_checkpoint.h"
#include "nanochat/checkpoint.h"
#include "nanochat/checkpoint/checkpoint_gpt.h"
#include "nanochat/common.h"
#include "nanochat/common/files.h"
#include "nanochat/common/stop_signal.h"
#include "nanochat/compute.h"
#include "nanochat/gpt.h"
#include "nanochat/loss_eval.h"
#include "nanochat/optim.h"
#include "nanochat/report.h"
#include "nanochat/sft_data.h"
#include "nanochat/task_eval.h"
#include "nanochat/telemetry/metrics_log.h"
#include "nanochat/telemetry/peak_flops.h"
#include "nanochat/tokenizer.h"
#include "nanochat/train_schedule.h"
#include "nanochat/train_schedule/train_step.h"

namespace nanochat {

namespace {

struct SftFlags {
  std::string run = "dummy";
  std::string device_type;
  std::string model_tag;  // the base checkpoint (and the SFT output tag); "" = largest
  int64_t model_step = -1;
  bool load_optimizer = true;   // warm-start the optimizer from the base run's state
  int64_t num_iterations = -1;  // -1: one epoch of the mixture
  int64_t max_seq_len = -1, device_batch_size = -1, total_batch_size = -1;  // -1: inherit from base
  double embedding_lr = -1, unembedding_lr = -1, matrix_lr = -1;            // -1: inherit from base
  double init_lr_frac = 0.8, warmup_ratio = 0.0, warmdown_ratio = 0.5, final_lr_frac = 0.0;
  int64_t eval_every = 200, eval_tokens = 40 * 524288;
  int64_t chatcore_every = 200, chatcore_max_cat = -1, chatcore_max_sample = 24;
  int mmlu_epochs = 3, gsm8k_epochs = 4;
  std::string identity_path;  // CustomJSON conversations added identity_epochs times
  int identity_epochs = 2;
  std::string mixture = "chat";  // sft_mixture's: chat or spelling
  // checkpoints every N steps (-1: only at the end); resume from a step of this run's tag
  // (-1: fresh) or from its last complete checkpoint
  int64_t save_every = -1, resume_from_step = -1;
  bool resume_latest = false;
  OutputFlags output;  // --force, --keep-last
};

int sft(const SftFlags& o);

// a flag, else the base run's value, else upstream's fallback
int64_t inherit(int64_t flag, const nlohmann::ordered_json& j, const char* key, int64_t fallback) {
  if (flag > 0) return flag;
  return j.contains(key) && j[key].is_number() ? j[key].get<int64_t>() : fallback;
}
double inherit(double flag, const nlohmann::ordered_json& j, const char* key, double fallback) {
  if (flag >= 0) return flag;
  return j.contains(key) && j[key].is_number() ? j[key].get<double>() : fallback;
}

// the run's shape: a flag, else the base run's value, else upstream's fallback
struct SftShape {
  int64_t T, B, total_batch;
  double embedding_lr, unembedding_lr, matrix_lr;
};
SftShape shape_of(const SftFlags& o, const LoadedGPT& base) {
  const nlohmann::ordered_json& meta = base.meta;
  const nlohmann::ordered_json user = meta.value("user_config", nlohmann::ordered_json::object());
  SftShape s;
  s.T = inherit(o.max_seq_len, meta, "max_seq_len", 2048);
  s.B = inherit(o.device_batch_size, meta, "device_batch_size", 32);
  s.total_batch = inherit(o.total_batch_size, meta, "total_batch_size", 524288);
  s.embedding_lr = inherit(o.embedding_lr, user, "embedding_lr", 0.3);
  s.unembedding_lr = inherit(o.unembedding_lr, user, "unembedding_lr", 0.004);
  s.matrix_lr = inherit(o.matrix_lr, user, "matrix_lr", 0.02);
  if (s.T > 10 * base.config.sequence_len)
    fail("--max-seq-len %lld exceeds the model's rotary cache (10 x %lld)", (long long)s.T,
         (long long)base.config.sequence_len);
  return s;
}

TaskPtr mixture_of(const SftFlags& o, const char* split) {
  SftMixtureOptions mix;
  mix.mmlu_epochs = o.mmlu_epochs;
  mix.gsm8k_epochs = o.gsm8k_epochs;
  mix.identity_path = o.identity_path;
  mix.identity_epochs = o.identity_epochs;
  return sft_mixture(o.mixture, split, mix);
}

// a checkpoint's meta: the model at this run's T, and the loop state a resume continues from
nlohmann::ordered_json meta_of(const LoadedGPT& base, const SftShape& shape, int64_t step, double val_bpb,
                               double smooth, double min_val_bpb) {
  nlohmann::ordered_json meta;
  GPTConfig cfg = base.config;
  cfg.sequence_len = shape.T;
  meta["step"] = step;
  meta["val_bpb"] = val_bpb;
  meta["model_config"] = gpt_config_to_json(cfg);
  meta["user_config"] = {{"argv", cli_argv()}, {"source_checkpoint", base.ref.dir}, {"source_step", base.ref.step}};
  meta["max_seq_len"] = shape.T;
  meta["device_batch_size"] = shape.B;
  meta["total_batch_size"] = shape.total_batch;
  meta["loop_state"] = {{"smooth_train_loss", smooth}, {"min_val_bpb", min_val_bpb}};
  return meta;
}

// the batcher's state saved with this rank's optimizer state
SftBatcherState batcher_state_of(const OptimCheckpoint& st, const std::string& dir, int64_t step, int rank,
                                 int64_t conversations) {
  const std::string where = checkpoint_optim_json_path(dir, step, rank);
  if (!st.state.contains("sft_batcher_state")) fail("%s: no sft_batcher_state", where.c_str());
  return sft_batcher_state_from_json(st.state.at("sft_batcher_state"), conversations, where);
}

void report(const SftFlags& o, const LoadedGPT& base, const SftShape& shape, int64_t final_step, int world,
            double min_val_bpb) {
  ReportItem results = {{"Number of iterations", final_step}, {"DDP world size", world}};
  if (std::isfinite(min_val_bpb)) results["Minimum validation bpb"] = min_val_bpb;
  report_log("Chat SFT", {ReportItem{{"argv", cli_argv()},
                                     {"mixture", o.mixture},
                                     {"source_checkpoint", base.ref.dir},
                                     {"source_step", base.ref.step},
                                     {"max_seq_len", shape.T},
                                     {"device_batch_size", shape.B},
                                     {"total_batch_size", shape.total_batch},
                                     {"embedding_lr", shape.embedding_lr},
                                     {"unembedding_lr", shape.unembedding_lr},
                                     {"matrix_lr", shape.matrix_lr},
                                     {"init_lr_frac", o.init_lr_frac}},
                          results});
}

// The optimizer's state from a checkpoint: this run's to resume (missing: an error), or the
// base run's to warm start (missing: a warning), keeping its moments and group fields (momentum,
// weight decay) but the fresh learning rates; then every lr times init_lr_frac is the initial
// lr. Returns the state read (its other parts: the batcher's, the grad scaler's).
std::optional<OptimCheckpoint> load_optimizer(MuonAdamW& opt, const std::string& dir, int64_t step, int rank,
                                              bool resume, bool warm_start, double init_lr_frac) {
  std::optional<OptimCheckpoint> st;
  if (resume || warm_start) st = checkpoint_load_optim(dir, step, rank);
  if (resume && !st)
    fail("%s step %lld has no optimizer state for rank %d: resume with the world size it was saved with", dir.c_str(),
         (long long)step, rank);
  if (warm_start && st) log_info("optimizer warm-started from the base run's state (rank %d)", rank);
  if (warm_start && !st)
    log_warn("the base checkpoint has no optimizer state for rank %d: starting the optimizer fresh", rank);
  if (st) {
    std::vector<double> fresh;
    for (const OptimGroup& g : opt.groups()) fresh.push_back(g.lr);
    opt.load_state(st->tensors, st->state.at("optimizer"));
    for (size_t i = 0; i < fresh.size(); i++) opt.groups()[i].lr = fresh[i];
  }
  for (OptimGroup& g : opt.groups()) {
    g.lr *= init_lr_frac;
    g.initial_lr = g.lr;
  }
  return st;
}

// ChatCORE, as upstream: categorical tasks over all problems, batched by the device batch
// size; generative ones capped (24), greedy, up to 512 new tokens
void evaluate_chatcore(GPT& model, const Tokenizer& tok, const SftFlags& o, int64_t B, int64_t step, Dist& dist,
                       MetricsLog& metrics) {
  std::vector<TaskEvalResult> results;
  for (const char* name : {"ARC-Easy", "ARC-Challenge", "MMLU", "GSM8K", "HumanEval"}) {
    TaskPtr task = task_for_eval(name);
    TaskEvalOptions eo;
    eo.batch_size = B;
    eo.max_problems = task->eval_type() == "categorical" ? o.chatcore_max_cat : o.chatcore_max_sample;
    eo.progress = false;
    model->eval();
    results.push_back(task_evaluate(model, tok, *task, eo, &dist));
  }
  model->train();
  double core = 0, core_cat = 0;
  for (size_t k = 0; k < results.size(); k++) {
    core += results[k].centered / 5.0;
    if (k < 3) core_cat += results[k].centered / 3.0;
  }
  log_info("Step %05lld | ChatCORE: %.4f | ChatCORE_cat: %.4f", (long long)step, core, core_cat);
  nlohmann::json line = {{"step", step}, {"chatcore", core}, {"chatcore_cat", core_cat}};
  for (const auto& t : results) line[t.name] = t.accuracy;
  metrics.log(line);
}

// one step's line in the log and in metrics.jsonl; flops_per_peak: FLOPs per token over the peak
void log_step(MetricsLog& metrics, int64_t step, double progress, double debiased, double loss, double lrm, double dt,
              double tokens, double flops_per_peak, const std::string& mfu_label, int epoch) {
  const double tok_per_sec = tokens / dt;
  const double mfu = 100.0 * flops_per_peak * tok_per_sec;
  log_info("step %05lld (%.2f%%) | loss: %.6f | lrm: %.2f | dt: %.2fms | tok/sec: %s | %s: %.2f | epoch: %d",
           (long long)step, 100.0 * std::min(progress, 1.0), debiased, lrm, dt * 1000,
           format_thousands((int64_t)tok_per_sec).c_str(), mfu_label.c_str(), mfu, epoch);
  metrics.log({{"step", step},
               {"loss", debiased},
               {"loss_raw", loss},
               {"lrm", lrm},
               {"dt", dt},
               {"tok_per_sec", tok_per_sec},
               {"mfu", mfu},
               {"progress", progress}});
}

}  // namespace

// data/identity_conversations.jsonl of the source tree the binary was built in (build/..)
static std::string default_identity_path() {
  char exe[4096];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) return "";
  exe[n] = 0;
  std::string path = parent_dir(parent_dir(exe)) + "/data/identity_conversations.jsonl";
  return path_exists(path) ? path : "";
}

void cli_register_sft(CLI::App& app, int& exit_code) {
  auto* sub = app.add_subcommand("sft", "Fine-tune the base model into a chat model (SFT)");
  static SftFlags o;
  auto opt = [&](const char* name, auto& var, const char* help) {
    return sub->add_option(name, var, help)->capture_default_str();
  };
  opt("--run", o.run, "run name (metrics go to <checkpoint dir>/metrics.jsonl; no wandb)");
  opt("--device-type", o.device_type, "cuda or cpu (empty: autodetect)")->check(CLI::IsMember({"", "cuda", "cpu"}));
  opt("--model-tag", o.model_tag, "base checkpoint tag, also the SFT tag (default: the largest d<N>)");
  opt("--model-step", o.model_step, "base checkpoint step (-1: the last complete one)");
  opt("--load-optimizer", o.load_optimizer, "warm-start the optimizer from the base run (1/0)");
  opt("--num-iterations", o.num_iterations, "steps (-1: one epoch of the mixture)");
  opt("--max-seq-len", o.max_seq_len, "row length (-1: the base run's)");
  opt("--device-batch-size", o.device_batch_size, "rows per rank per micro-step (-1: the base run's)");
  opt("--total-batch-size", o.total_batch_size, "tokens per step over all ranks (-1: the base run's)");
  opt("--embedding-lr", o.embedding_lr, "(-1: the base run's)");
  opt("--unembedding-lr", o.unembedding_lr, "(-1: the base run's)");
  opt("--matrix-lr", o.matrix_lr, "(-1: the base run's)");
  opt("--init-lr-frac", o.init_lr_frac, "learning rates start at this fraction of the above");
  opt("--warmup-ratio", o.warmup_ratio, "fraction of the run warming up")->check(CLI::Range(0.0, 1.0));
  opt("--warmdown-ratio", o.warmdown_ratio, "fraction of the run decaying to --final-lr-frac")
      ->check(CLI::Range(0.0, 1.0));
  opt("--final-lr-frac", o.final_lr_frac, "lr at the end as a fraction")->check(CLI::Range(0.0, 1.0));
  opt("--eval-every", o.eval_every, "val bpb every N steps, and always at the end (-1: only at the end)");
  opt("--eval-tokens", o.eval_tokens, "val tokens per evaluation")->check(CLI::PositiveNumber);
  opt("--chatcore-every", o.chatcore_every, "ChatCORE every N steps (-1: off)");
  opt("--chatcore-max-cat", o.chatcore_max_cat, "problems per categorical task (-1: all)");
  opt("--chatcore-max-sample", o.chatcore_max_sample, "problems per generative task");
  opt("--mmlu-epochs", o.mmlu_epochs, "copies of MMLU auxiliary_train in the mixture")->check(CLI::NonNegativeNumber);
  opt("--gsm8k-epochs", o.gsm8k_epochs, "copies of GSM8K train in the mixture")->check(CLI::NonNegativeNumber);
  sub->add_option("--identity", o.identity_path,
                  "CustomJSON conversations that tell the model who it is (default: the project's "
                  "data/identity_conversations.jsonl; '' for none)");
  opt("--identity-epochs", o.identity_epochs, "copies of the identity conversations")->check(CLI::NonNegativeNumber);
  opt("--mixture", o.mixture,
      "chat: SmolTalk + MMLU + GSM8K (needs `nanochat download tasks`); spelling: "
      "SimpleSpelling + SpellingBee, offline (ChatCORE then off)")
      ->check(CLI::IsMember({"chat", "spelling"}));
  cli_add_resume_flags(sub, o.save_every, o.resume_from_step, o.resume_latest, o.output);
  sub->preparse_callback([](size_t) { o.identity_path = default_identity_path(); });
  sub->callback([&exit_code] { exit_code = sft(o); });
}

namespace {

// One run of SFT: the constructor is the set-up, the methods the script's sections in
// upstream's order (data, checkpoints, evaluation, one step, the loop, the report).
class Sft {
 public:
  explicit Sft(const SftFlags& o);
  int loop();  // the training loop; the report at the end

 private:
  void next_batch();
  nlohmann::ordered_json make_meta(int64_t step) const;
  void save(int64_t step);
  void evaluate_val_bpb(int64_t step);
  void train_step(int64_t step);
  bool log_oldest();  // logs the oldest step in flight; true when some rank was signalled
  bool drain();       // every step in flight logged
  int stop_and_save(int64_t next_step);

  const SftFlags& o;
  Compute c;
  Dist& dist;
  const int world, rank;
  Tokenizer tok;
  torch::Tensor token_bytes;
  LoadedGPT base;
  GPT model{nullptr};
  SftShape shape{};
  int64_t grad_accum = 0;
  std::string out_dir;
  int64_t resume_step = -1;
  std::optional<ModelCheckpoint> resumed;
  std::unique_ptr<MuonAdamW> opt;
  std::optional<GradScaler> scaler;  // fp16: dynamic loss scaling, as upstream chat_sft's GradScaler
  TaskPtr train_data, val_data;
  std::unique_ptr<SftBatcher> train_batches;
  // the batch in hand and the batcher state that reproduces it (saved in checkpoints)
  SftBatcherState state_before_batch;
  torch::Tensor x, y;
  MetricsLog metrics;
  double smooth = 0, val_bpb = 0, min_val_bpb = INFINITY;
  // a step's loss comes back one step late (StepReadback): its log line is written then
  struct StepRecord {
    int64_t step;
    double progress, lrm;
    int epoch;
  };
  std::deque<StepRecord> in_flight;
  std::unique_ptr<StepReadback> readback;
  double flops_per_peak = 0;  // FLOPs per token over the peak FLOPS of all ranks
  std::string mfu_label;      // the dtype of that peak
};

int sft(const SftFlags& o) {
  stop_signal_install();
  Sft run(o);
  return run.loop();
}

// ---- set-up ---------------------------------------------------------------------
Sft::Sft(const SftFlags& o)
    : o(o),
      c(compute_init(o.device_type)),
      dist(*c.dist),
      world(c.env.world_size),
      rank(c.env.rank),
      tok(tokenizer_load(base_dir_path("tokenizer"))) {
  token_bytes = bpb_token_bytes(tok, c.device);
  base = checkpoint_load_gpt("base", o.model_tag, o.model_step, c.device, c.dtype, tok.vocab_size());
  model = base.model;
  model->train();
  shape = shape_of(o, base);
  grad_accum = train_grad_accum(shape.total_batch, shape.B, shape.T, world);
  log_info("SFT of %s step %lld: T %lld, %lld rows per rank, total batch %lld (grad accumulation %lld)",
           base.ref.dir.c_str(), (long long)base.ref.step, (long long)shape.T, (long long)shape.B,
           (long long)shape.total_batch, (long long)grad_accum);

  // the output tag, and the checkpoint of this run to resume from, if any
  const std::string tag = o.model_tag.empty() ? base.ref.dir.substr(base.ref.dir.rfind('/') + 1) : o.model_tag;
  out_dir = checkpoint_dir("sft", tag);
  cli_open_checkpoint_dir(out_dir, o.resume_latest || o.resume_from_step >= 0, o.output, dist);  // --force, stale files
  resume_step = o.resume_latest ? checkpoint_find_last_step(out_dir) : o.resume_from_step;
  resumed = checkpoint_resume_gpt(model, out_dir, resume_step, tok.vocab_size());

  // optimizer: no batch-lr scaling, weight decay 0; warm start keeps the base run's moments
  // and group fields (momentum, weight decay) but takes the fresh learning rates; a resumed
  // run takes this run's state the same way
  opt = std::make_unique<MuonAdamW>(
      optim_param_groups_gpt(gpt_named_parameters(model), base.config.n_embd, shape.unembedding_lr, shape.embedding_lr,
                             shape.matrix_lr, 0.0, 0.5),
      &dist, c.dtype);
  std::optional<OptimCheckpoint> st = resumed ? load_optimizer(*opt, out_dir, resume_step, rank, /*resume=*/true, false,
                                                               o.init_lr_frac)
                                              : load_optimizer(*opt, base.ref.dir, base.ref.step, rank, false,
                                                               o.load_optimizer, o.init_lr_frac);
  if (c.dtype == torch::kHalf) scaler.emplace(c.device);  // bf16 and fp32 need none
  if (scaler && resumed && st->state.contains("grad_scaler")) scaler->load_state(st->state["grad_scaler"]);

  // data: the mixtures, and the batcher where a resumed run left it
  train_data = mixture_of(o, "train");
  val_data = mixture_of(o, "val");
  log_info("train mixture: %lld conversations, val mixture: %lld", (long long)train_data->size(),
           (long long)val_data->size());
  std::optional<SftBatcherState> batcher_resume;
  if (resumed) batcher_resume = batcher_state_of(*st, out_dir, resume_step, rank, train_data->size());
  train_batches = std::make_unique<SftBatcher>(tok, train_data, shape.B, shape.T, rank, world, 100,
                                               batcher_resume ? &*batcher_resume : nullptr);
  next_batch();

  if (c.master()) metrics = MetricsLog(out_dir + "/metrics.jsonl", resumed ? resume_step : -1);
  if (resumed) {
    const nlohmann::ordered_json ls = resumed->meta.value("loop_state", nlohmann::ordered_json::object());
    val_bpb = checkpoint_meta_number(resumed->meta, "val_bpb", 0.0);
    smooth = checkpoint_meta_number(ls, "smooth_train_loss", 0.0);
    min_val_bpb = checkpoint_meta_number(ls, "min_val_bpb", INFINITY);  // JSON has no inf: null
  }
  flops_per_peak = (double)gpt_estimate_flops(base.config) /
                   (peak_flops_of_run(c.device, c.dtype, c.cpu_threads) * world);
  mfu_label = mfu_label_for(c.device, c.dtype);
  readback = std::make_unique<StepReadback>(c.device, dist);
}

// ---- data --------------------------------------------------------------------------
void Sft::next_batch() {
  state_before_batch = train_batches->state();
  SftBatch b = train_batches->next();
  x = b.inputs.to(c.device, /*non_blocking=*/true);
  y = b.targets.to(c.device, true);
}

// ---- checkpoints --------------------------------------------------------------------
nlohmann::ordered_json Sft::make_meta(int64_t step) const {
  return meta_of(base, shape, step, val_bpb, smooth, min_val_bpb);
}

void Sft::save(int64_t step) {
  nlohmann::ordered_json state = {{"optimizer", opt->state_json()},
                                  {"sft_batcher_state", sft_batcher_state_to_json(state_before_batch)}};
  if (scaler) state["grad_scaler"] = scaler->state_json();
  cli_save_training_checkpoint(out_dir, step, c.master() ? checkpoint_gpt_tensors(model) : NamedTensors{},
                               make_meta(step), opt->state_tensors(), state, o.output, dist);
}

// ---- evaluation ---------------------------------------------------------------------
void Sft::evaluate_val_bpb(int64_t step) {
  SftBatcher val_batches(tok, val_data, shape.B, shape.T, rank, world);
  const int64_t steps = std::max<int64_t>(1, o.eval_tokens / (shape.B * shape.T * world));
  model->eval();
  val_bpb = evaluate_bpb(
      [&](const torch::Tensor& vx, const torch::Tensor& vy) { return gpt_loss(model, vx, vy, LossReduction::none); },
      [&] {
        SftBatch b = val_batches.next();
        return std::make_pair(b.inputs.to(c.device, /*non_blocking=*/true), b.targets.to(c.device, true));
      },
      steps, token_bytes, &dist);
  min_val_bpb = std::min(min_val_bpb, val_bpb);
  log_info("Step %05lld | Validation bpb: %.4f", (long long)step, val_bpb);
  metrics.log({{"step", step}, {"val_bpb", val_bpb}});
  model->train();
}

// ---- one optimizer step: queued without waiting for the device ----------------------------
void Sft::train_step(int64_t step) {
  readback->begin_step();
  torch::Tensor train_loss;
  for (int64_t micro = 0; micro < grad_accum; micro++) {
    torch::Tensor loss = sft_masked_mean(gpt_loss(model, x, y, LossReduction::none), y);
    train_loss = loss.detach();
    loss = loss / (double)grad_accum;
    (scaler ? scaler->scale(loss) : loss).backward();
    next_batch();
  }
  const double progress = o.num_iterations > 0 ? (double)(step + 1) / (double)o.num_iterations
                                               : (double)train_batches->consumed() / (double)train_batches->size();
  const double lrm = sft_lr_multiplier(std::min(progress, 1.0), o.warmup_ratio, o.warmdown_ratio, o.final_lr_frac);
  train_optimizer_step(*opt, scaler ? &*scaler : nullptr, {lrm, sft_muon_momentum(step), std::nullopt}, step, dist);
  readback->push(train_loss);
  in_flight.push_back({step, progress, lrm, train_batches->epoch()});
}

bool Sft::log_oldest() {
  const StepReadback::Arrived v = readback->take();
  const StepRecord r = in_flight.front();
  in_flight.pop_front();
  smooth = 0.9 * smooth + 0.1 * v.loss;
  const double debiased = smooth / (1.0 - std::pow(0.9, (double)(r.step + 1)));
  log_step(metrics, r.step, r.progress, debiased, v.loss, r.lrm, v.dt, (double)shape.total_batch, flops_per_peak,
           mfu_label, r.epoch);
  return v.stop;
}

bool Sft::drain() {
  bool stop = false;
  while (!readback->empty()) stop = log_oldest() || stop;
  return stop;
}

// graceful stop: every rank saw the flag in the same all-reduce
int Sft::stop_and_save(int64_t next_step) {
  drain();
  return cli_stop_and_save([this](int64_t step) { save(step); }, next_step);
}

// ---- the loop ----------------------------------------------------------------
int Sft::loop() {
  for (int64_t step = std::max<int64_t>(resume_step, 0);; step++) {
    // the epoch ends when this rank's walk has placed every conversation once (or after
    // --num-iterations); ranks agree through a MAX
    const bool last = o.num_iterations > 0 ? step >= o.num_iterations
                                           : dist_any_rank(dist, train_batches->consumed() >= train_batches->size());
    // the final val bpb is always measured (upstream too), --eval-every only adds the ones before it
    const bool eval_now = last || (o.eval_every > 0 && step % o.eval_every == 0);
    const bool chatcore_now = o.mixture == "chat" && o.chatcore_every > 0 &&
                              (last || (step > 0 && step % o.chatcore_every == 0));
    const bool save_now = !last && step > 0 && step != resume_step && o.save_every > 0 && step % o.save_every == 0;
    // every rank drains at the same steps, so that a stop flag is seen by all at once
    if ((last || eval_now || chatcore_now || save_now) && drain()) return stop_and_save(step);

    // the final checkpoint comes before the final evals, which must not cost the run
    if (last) save(step);
    if (eval_now) {
      evaluate_val_bpb(step);
      if (last && c.master()) atomic_write_file(checkpoint_meta_path(out_dir, step), make_meta(step).dump(2));
    }
    if (chatcore_now) evaluate_chatcore(model, tok, o, shape.B, step, dist, metrics);
    if (last) {
      if (c.master()) report(o, base, shape, step, world, min_val_bpb);
      return 0;
    }
    if (save_now) save(step);
    train_step(step);
    if (readback->due() && log_oldest()) return stop_and_save(step + 1);
  }
}

}  // namespace

}  // namespace nanochat
