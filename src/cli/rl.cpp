// `nanochat rl`: reinforcement learning of the SFT model on GSM8K (spec §9.4)
#include <CLI/CLI.hpp>

#include "cli/commands.h"
#include "nanochat/rl.h"

namespace nanochat {

void cli_register_rl(CLI::App& app, int& exit_code) {
  auto* sub = app.add_subcommand("rl", "Reinforcement learning of the SFT model on GSM8K (simplified GRPO)");
  static RlOptions o;
  auto opt = [&](const char* name, auto& var, const char* help) {
    return sub->add_option(name, var, help)->capture_default_str();
  };
  opt("--run", o.run, "run name (metrics go to <checkpoint dir>/metrics.jsonl; no wandb)");
  opt("--device-type", o.device_type, "cuda or cpu (empty: autodetect)")->check(CLI::IsMember({"", "cuda", "cpu"}));
  opt("--model-tag", o.model_tag, "SFT checkpoint tag, also the RL tag (default: the largest d<N>)");
  opt("--model-step", o.model_step, "SFT checkpoint step (-1: the last complete one)");
  opt("--num-epochs", o.num_epochs, "passes over GSM8K train")->check(CLI::PositiveNumber);
  opt("--num-steps", o.num_steps, "stop after this many steps (-1: the epochs)");
  opt("--device-batch-size", o.device_batch_size, "samples per generation and per backward pass")->check(CLI::PositiveNumber);
  opt("--examples-per-step", o.examples_per_step, "problems per optimizer step over all ranks")->check(CLI::PositiveNumber);
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
  sub->callback([&exit_code] {
    o.argv = cli_argv();
    exit_code = rl_run(o);
  });
}

}  // namespace nanochat
