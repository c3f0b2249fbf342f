// `nanochat rl`: reinforcement learning of the SFT model on GSM8K, as upstream's
// scripts/chat_rl.py (a simplified GRPO; the arithmetic is in rl_math): the SFT checkpoint,
// rollouts on GSM8K train with the engine (each rank walks its strided share of the
// problems, cycling), one optimizer step per examples_per_step problems, the learning rate
// decaying linearly to 0, pass@k on GSM8K test every eval_every steps, and the model saved
// into chatrl_checkpoints/<tag>/ every save_every steps and at the end (model only, as
// upstream: RL does not resume).
#include <CLI/CLI.hpp>
#include <cmath>
#include <memory>
#include <optional>

#include <torch/torch.h>

#include "cli/commands.h"
#include "nanochat/checkpoint.h"
#include "nanochat/checkpoint/checkpoint_gpt.h"
#include "nanochat/common.h"
#include "nanochat/compute.h"
#include "nanochat/engine.h"
#include "nanochat/gpt.h"
#include "nanochat/optim.h"
#include "nanochat/report.h"
#include "nanochat/rl_math.h"
#include "nanochat/task_eval.h"
#include "nanochat/tasks.h"
#include "nanochat/telemetry/metrics_log.h"
#include "nanochat/tokenizer.h"
#include "nanochat/train_schedule/train_step.h"

namespace nanochat {

namespace {

struct RlFlags {
  std::string run = "dummy";
  std::string device_type;
  std::string model_tag;                   // the SFT checkpoint (and the RL output tag); "" = largest
  int64_t model_step = -1;                 // -1: the last complete one
  int64_t num_epochs = 1, num_steps = -1;  // num_steps -1: num_epochs x (GSM8K train problems / examples_per_step)
  int64_t device_batch_size = 8, examples_per_step = 16, num_samples = 16, max_new_tokens = 256;
  double temperature = 1.0;
  int64_t top_k = 50;
  double embedding_lr = 0.2, unembedding_lr = 0.004, matrix_lr = 0.02, weight_decay = 0.0;
  double init_lr_frac = 0.05;
  int64_t eval_every = 60, eval_examples = 400, save_every = 60;
  OutputFlags output;  // --force, --keep-last
};

int rl(const RlFlags& o);

// the mean over ranks of a per-rank value
double mean_over_ranks(double v, Dist& dist, torch::Device device) {
  torch::Tensor t = torch::tensor({v}, torch::kDouble).to(device);
  dist.all_reduce(t, ReduceOp::AVG);
  return t.item<double>();
}

// pass@1..K on the first `max_examples` test problems: K = device_batch_size samples each at
// temperature 1 (upstream's run_gsm8k_eval), the counts summed over ranks
std::vector<double> evaluate_pass_at_k(const Engine& engine, const Task& task, const RlFlags& o, int rank, int world,
                                       Dist& dist, torch::Device device) {
  const int64_t n = std::min<int64_t>(o.eval_examples, task.size());
  GenerateOptions go;
  go.num_samples = o.device_batch_size;
  go.max_tokens = o.max_new_tokens;
  go.temperature = 1.0;
  go.top_k = o.top_k;
  std::vector<std::vector<bool>> outcomes;
  for (int64_t i = rank; i < n; i += world) outcomes.push_back(task_eval_sample_outcomes(engine, task, task.at(i), go));
  std::vector<int64_t> counts = rl_pass_at_k_counts(outcomes, o.device_batch_size);
  torch::Tensor t = torch::tensor(counts, torch::kLong);
  t = torch::cat({t, torch::tensor({(int64_t)outcomes.size()}, torch::kLong)}).to(device);
  dist.all_reduce(t, ReduceOp::SUM);
  t = t.cpu();
  const double total = (double)std::max<int64_t>(t[-1].item<int64_t>(), 1);
  std::vector<double> pass;
  for (int64_t k = 0; k < o.device_batch_size; k++) pass.push_back((double)t[k].item<int64_t>() / total);
  return pass;
}

}  // namespace

void cli_register_rl(CLI::App& app, int& exit_code) {
  auto* sub = app.add_subcommand("rl", "Reinforcement learning of the SFT model on GSM8K (simplified GRPO)");
  static RlFlags o;
  auto opt = [&](const char* name, auto& var, const char* help) {
    return sub->add_option(name, var, help)->capture_default_str();
  };
  opt("--run", o.run, "run name (metrics go to <checkpoint dir>/metrics.jsonl; no wandb)");
  opt("--device-type", o.device_type, "cuda or cpu (empty: autodetect)")->check(CLI::IsMember({"", "cuda", "cpu"}));
  opt("--model-tag", o.model_tag, "SFT checkpoint tag, also the RL tag (default: the largest d<N>)");
  opt("--model-step", o.model_step, "SFT checkpoint step (-1: the last complete one)");
  opt("--num-epochs", o.num_epochs, "passes over GSM8K train")->check(CLI::PositiveNumber);
  opt("--num-steps", o.num_steps, "stop after this many steps (-1: the epochs)");
  opt("--device-batch-size", o.device_batch_size, "samples per generation and per backward pass")
      ->check(CLI::PositiveNumber);
  opt("--examples-per-step", o.examples_per_step, "problems per optimizer step over all ranks")
      ->check(CLI::PositiveNumber);
  opt("--num-samples", o.num_samples, "completions sampled per problem")->check(CLI::PositiveNumber);
  opt("--max-new-tokens", o.max_new_tokens, "tokens per completion")->check(CLI::PositiveNumber);
  opt("--temperature", o.temperature, "sampling temperature of the rollouts")->check(CLI::Range(0.0, 2.0));
  opt("--top-k", o.top_k, "top-k of the rollouts (0: all tokens)")->check(CLI::NonNegativeNumber);
  opt("--embedding-lr", o.embedding_lr, "AdamW lr of the embeddings");
  opt("--unembedding-lr", o.unembedding_lr, "AdamW lr of lm_head");
  opt("--matrix-lr", o.matrix_lr, "Muon lr of the transformer matrices");
  opt("--weight-decay", o.weight_decay, "Muon weight decay");
  opt("--init-lr-frac", o.init_lr_frac, "the learning rates start at this fraction of the above");
  opt("--eval-every", o.eval_every, "pass@k on GSM8K test every N steps (-1: off)");
  opt("--eval-examples", o.eval_examples, "test problems per evaluation")->check(CLI::PositiveNumber);
  opt("--save-every", o.save_every, "checkpoint every N steps (and at the end; -1: only at the end)");
  cli_add_output_flags(sub, o.output);
  sub->callback([&exit_code] { exit_code = rl(o); });
}

namespace {

// One run of RL: the constructor is the set-up, the methods the script's sections in upstream's
// order (evaluation, rollouts, one step, checkpoints, the loop, the report).
class Rl {
 public:
  explicit Rl(const RlFlags& o);
  int loop();  // the training loop; the report at the end

 private:
  void evaluate(int64_t step);
  // one problem's rollouts, their rewards and the policy-gradient backward; adds to the sums
  void rollouts_and_backward(int64_t step, double& reward_sum, double& length_sum, int64_t& length_count);
  void train_step(int64_t step);
  void save(int64_t step);
  void report();

  const RlFlags& o;
  Compute c;
  Dist& dist;
  const int world, rank;
  int64_t examples_per_rank = 0, num_passes = 0;
  Tokenizer tok;
  LoadedGPT sft;
  GPT model{nullptr};
  std::unique_ptr<Engine> engine;  // shares the model's parameters: rollouts see every update
  int32_t assistant_end = 0;
  std::optional<Gsm8kTask> train_task, val_task;
  int64_t num_steps = 0;
  std::unique_ptr<MuonAdamW> opt;
  std::string out_dir;
  MetricsLog metrics;
  int64_t walk = 0;           // this rank's position in its cycle over range(rank, len, world)
  int64_t rank_problems = 0;  // the length of that cycle
};

int rl(const RlFlags& o) {
  Rl run(o);
  return run.loop();
}

// ---- set-up ---------------------------------------------------------------------
Rl::Rl(const RlFlags& o)
    : o(o),
      c(compute_init(o.device_type)),
      dist(*c.dist),
      world(c.env.world_size),
      rank(c.env.rank),
      tok(tokenizer_load(base_dir_path("tokenizer"))) {
  if (o.examples_per_step % world != 0)
    fail("--examples-per-step %lld must be divisible by the %d ranks", (long long)o.examples_per_step, world);
  if (o.num_samples % o.device_batch_size != 0)
    fail("--num-samples %lld must be a multiple of --device-batch-size %lld", (long long)o.num_samples,
         (long long)o.device_batch_size);
  examples_per_rank = o.examples_per_step / world;
  num_passes = o.num_samples / o.device_batch_size;

  sft = checkpoint_load_gpt("sft", o.model_tag, o.model_step, c.device, c.dtype, tok.vocab_size());
  model = sft.model;
  engine = std::make_unique<Engine>(model, tok);
  assistant_end = tok.special_id("<|assistant_end|>");

  train_task.emplace("main", "train");
  val_task.emplace("main", "test");
  num_steps = (train_task->size() / o.examples_per_step) * o.num_epochs;
  if (o.num_steps > 0) num_steps = std::min(num_steps, o.num_steps);
  if (num_steps <= 0)
    fail("RL: GSM8K train has %lld problems, fewer than --examples-per-step %lld x --num-epochs %lld",
         (long long)train_task->size(), (long long)o.examples_per_step, (long long)o.num_epochs);
  log_info("RL of %s step %lld on GSM8K: %lld steps of %lld problems x %lld samples (%d ranks)", sft.ref.dir.c_str(),
           (long long)sft.ref.step, (long long)num_steps, (long long)o.examples_per_step, (long long)o.num_samples,
           world);
  rank_problems = (train_task->size() - rank + world - 1) / world;

  // the standard groups at init_lr_frac of the given rates; Muon's momentum stays 0.95
  opt = std::make_unique<MuonAdamW>(
      optim_param_groups_gpt(gpt_named_parameters(model), sft.config.n_embd, o.unembedding_lr, o.embedding_lr,
                             o.matrix_lr, o.weight_decay),
      &dist, c.dtype);
  for (OptimGroup& g : opt->groups()) {
    g.lr *= o.init_lr_frac;
    g.initial_lr = g.lr;
  }

  const std::string tag = o.model_tag.empty() ? sft.ref.dir.substr(sft.ref.dir.rfind('/') + 1) : o.model_tag;
  out_dir = checkpoint_dir("rl", tag);
  cli_open_checkpoint_dir(out_dir, false, o.output, dist);  // RL starts fresh: --force, stale files
  if (c.master()) metrics = MetricsLog(out_dir + "/metrics.jsonl", -1);
}

// ---- evaluation ---------------------------------------------------------------------
void Rl::evaluate(int64_t step) {
  model->eval();
  std::vector<double> pass = evaluate_pass_at_k(*engine, *val_task, o, rank, world, dist, c.device);
  std::string line;
  nlohmann::json record = {{"step", step}};
  for (size_t k = 0; k < pass.size(); k++) {
    line += strprintf("%sPass@%zu: %.4f", k ? ", " : "", k + 1, pass[k]);
    record[strprintf("pass@%zu", k + 1)] = pass[k];
  }
  log_info("Step %lld | %s", (long long)step, line.c_str());
  metrics.log(record);
}

// ---- rollouts ---------------------------------------------------------------------
void Rl::rollouts_and_backward(int64_t step, double& reward_sum, double& length_sum, int64_t& length_count) {
  const int64_t example_idx = rank + (walk++ % rank_problems) * world;
  nlohmann::json conv = train_task->at(example_idx);
  std::vector<int32_t> prompt = render_for_completion(tok, conv);
  model->eval();
  std::vector<std::vector<int32_t>> sequences;
  std::vector<std::vector<uint8_t>> masks;
  std::vector<double> rewards;
  for (int64_t s = 0; s < num_passes; s++) {
    GenerateOptions go;
    go.num_samples = o.device_batch_size;
    go.max_tokens = o.max_new_tokens;
    go.temperature = o.temperature;
    go.top_k = o.top_k;
    go.seed = rl_rollout_seed(step, example_idx, s);
    GenerateResult r = engine->generate_batch(prompt, go);
    for (size_t row = 0; row < r.tokens.size(); row++)
      rewards.push_back(train_task->reward(conv, engine_completion_text(tok, r, row)));
    sequences.insert(sequences.end(), r.tokens.begin(), r.tokens.end());
    masks.insert(masks.end(), r.masks.begin(), r.masks.end());
  }
  for (const auto& seq : sequences) length_sum += (double)seq.size();
  length_count += (int64_t)sequences.size();
  RlRollout ro = rl_rollout_batch(sequences, masks, rewards, assistant_end);
  model->train();
  for (int64_t p = 0; p < num_passes; p++) {
    const int64_t b0 = p * o.device_batch_size, b1 = b0 + o.device_batch_size;
    torch::Tensor x = ro.inputs.slice(0, b0, b1).to(c.device), y = ro.targets.slice(0, b0, b1).to(c.device);
    torch::Tensor losses = gpt_loss(model, x, y, LossReduction::none);
    rl_policy_gradient_loss(losses, y, ro.advantages.slice(0, b0, b1).to(c.device), num_passes, examples_per_rank)
        .backward();
  }
  reward_sum += ro.rewards.mean().item<double>();
}

// ---- one optimizer step ------------------------------------------------------------
void Rl::train_step(int64_t step) {
  Timer timer;
  double reward_sum = 0, length_sum = 0;
  int64_t length_count = 0;
  for (int64_t e = 0; e < examples_per_rank; e++) rollouts_and_backward(step, reward_sum, length_sum, length_count);
  const double mean_reward = mean_over_ranks(reward_sum / (double)examples_per_rank, dist, c.device);
  const double mean_length = mean_over_ranks(length_sum / (double)std::max<int64_t>(length_count, 1), dist, c.device);
  const double lrm = 1.0 - (double)step / (double)num_steps;
  train_optimizer_step(*opt, /*scaler=*/nullptr, {lrm, std::nullopt, std::nullopt}, step, dist);  // no fp16 RL upstream
  const double dt = timer.seconds();
  log_info("Step %lld/%lld | Average reward: %.4f | Average sequence length: %.2f | lrm: %.4f | dt: %.2fs",
           (long long)step, (long long)num_steps, mean_reward, mean_length, lrm, dt);
  metrics.log({{"step", step}, {"reward", mean_reward}, {"sequence_length", mean_length}, {"lrm", lrm}, {"dt", dt}});
}

// ---- checkpoints --------------------------------------------------------------------
// the model only, as upstream (RL does not resume)
void Rl::save(int64_t step) {
  if (c.master()) {
    nlohmann::ordered_json meta;
    meta["step"] = step;
    meta["model_config"] = gpt_config_to_json(sft.config);
    meta["user_config"] = {{"argv", cli_argv()}, {"source_checkpoint", sft.ref.dir}, {"source_step", sft.ref.step}};
    checkpoint_save_model(out_dir, step, checkpoint_gpt_tensors(model), meta);
    checkpoint_mark_complete(out_dir, step, 0);
    cli_prune_checkpoints(out_dir, step, o.output);  // --keep-last
    log_info("saved %s step %06lld", out_dir.c_str(), (long long)step);
  }
  dist.barrier();
}

// ---- the loop ----------------------------------------------------------------
int Rl::loop() {
  for (int64_t step = 0; step < num_steps; step++) {
    if (o.eval_every > 0 && step % o.eval_every == 0) evaluate(step);
    train_step(step);
    if ((step > 0 && o.save_every > 0 && step % o.save_every == 0) || step == num_steps - 1) save(step);
  }
  if (c.master()) report();
  return 0;
}

// ---- the report ----------------------------------------------------------------
void Rl::report() {
  report_log("Chat RL", {ReportItem{{"argv", cli_argv()},
                                    {"source_checkpoint", sft.ref.dir},
                                    {"source_step", sft.ref.step},
                                    {"num_steps", num_steps},
                                    {"examples_per_step", o.examples_per_step},
                                    {"num_samples", o.num_samples},
                                    {"max_new_tokens", o.max_new_tokens},
                                    {"temperature", o.temperature},
                                    {"top_k", o.top_k},
                                    {"init_lr_frac", o.init_lr_frac},
                                    {"DDP world size", world}}});
}

}  // namespace

}  // namespace nanochat
