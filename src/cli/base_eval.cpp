// `nanochat base-eval`: bits per byte, samples and (later) CORE of a base checkpoint (spec §8.4).
#include <CLI/CLI.hpp>

#include "cli/commands.h"
#include "nanochat/base_eval.h"

namespace nanochat {

void cli_register_base_eval(CLI::App& app, int& exit_code) {
  auto* sub = app.add_subcommand("base-eval", "Evaluate a base checkpoint: bits per byte, samples, CORE");
  static BaseEvalOptions o;
  sub->add_option("--eval", o.eval, "comma-separated: core, bpb, sample")->capture_default_str();
  cli_add_checkpoint_flags(sub, o.source, o.model_tag, o.step);
  sub->add_option("--max-per-task", o.max_per_task, "CORE examples per task (-1: all)")->capture_default_str();
  sub->add_option("--device-batch-size", o.device_batch_size, "rows per forward")->capture_default_str()
      ->check(CLI::PositiveNumber);
  sub->add_option("--split-tokens", o.split_tokens, "tokens per split for bpb (over all ranks)")->capture_default_str()
      ->check(CLI::PositiveNumber);
  sub->add_option("--device-type", o.device_type, "cuda or cpu (empty: autodetect)")
      ->check(CLI::IsMember({"", "cuda", "cpu"}));
  sub->add_option("--tokenizer-threads", o.tokenizer_threads, "loader threads (0: all but one core)")
      ->check(CLI::NonNegativeNumber);
  sub->add_option("--eval-bundle", o.eval_bundle, "CORE bundle folder (default: $NANOCHAT_BASE_DIR/eval_bundle, "
                                                  "from `nanochat download eval-bundle`)");
  cli_add_data_flags(sub, o.data);
  sub->callback([&exit_code] { exit_code = base_eval_run(o); });
}

}  // namespace nanochat
