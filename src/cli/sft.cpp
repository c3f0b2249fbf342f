// `nanochat sft`: supervised fine-tuning of a base checkpoint on the chat task mixture
// (spec §9.3). Flags left at -1 inherit the base run's values.
#include <CLI/CLI.hpp>
#include <unistd.h>

#include "cli/commands.h"
#include "nanochat/common/files.h"
#include "nanochat/sft.h"

namespace nanochat {

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
  static SftOptions o;
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
  opt("--warmdown-ratio", o.warmdown_ratio, "fraction of the run decaying to --final-lr-frac")->check(CLI::Range(0.0, 1.0));
  opt("--final-lr-frac", o.final_lr_frac, "lr at the end as a fraction")->check(CLI::Range(0.0, 1.0));
  opt("--eval-every", o.eval_every, "val bpb every N steps (-1: off)");
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
  opt("--mixture", o.mixture, "chat: SmolTalk + MMLU + GSM8K (needs `nanochat download tasks`); spelling: "
                              "SimpleSpelling + SpellingBee, offline (ChatCORE then off)")
      ->check(CLI::IsMember({"chat", "spelling"}));
  cli_add_resume_flags(sub, o.save_every, o.resume_from_step, o.resume_latest);
  sub->preparse_callback([](size_t) { o.identity_path = default_identity_path(); });
  sub->callback([&exit_code] {
    o.argv = cli_argv();
    exit_code = sft_run(o);
  });
}

}  // namespace nanochat
