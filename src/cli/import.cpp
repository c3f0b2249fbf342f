// `nanochat import`: an upstream nanochat checkpoint directory (model_<step>.pt,
// meta_<step>.json, a tiktoken rank file), or a transformers `nanochat` directory (config.json,
// model.safetensors, tokenizer.json), into $NANOCHAT_BASE_DIR as our checkpoints.
#include <CLI/CLI.hpp>
#include <cstdio>

#include "cli/commands.h"
#include "nanochat/checkpoint/checkpoint_gpt.h"

namespace nanochat {

void cli_register_import(CLI::App& app, int& exit_code) {
  auto* sub = app.add_subcommand(
      "import",
      "Import upstream nanochat checkpoints (model_*.pt, meta_*.json) or a transformers nanochat directory, and the tokenizer");
  static ImportOptions opts;
  sub->add_option(
         "--from", opts.from_dir,
         "directory with model_<step>.pt and meta_<step>.json, or with config.json, model.safetensors and tokenizer.json")
      ->required();
  sub->add_option("--model-tag", opts.tag, "tag to import as (default: DIR's name if it is d<N>..., else d<n_layer>)");
  sub->add_option("--source", opts.source, "import as: base, sft or rl")->check(CLI::IsMember({"base", "sft", "rl"}));
  sub->add_option("--step", opts.step, "import only this step (default: every step; a transformers directory: 0)")
      ->check(CLI::NonNegativeNumber);
  sub->add_option("--tokenizer", opts.tokenizer_file, "tiktoken rank file (default: DIR/tokenizer.tiktoken)");
  sub->add_flag("--allow-custom-regex", opts.allow_custom_regex,
                "accept a tokenizer.json whose split regex is not GPT-2's, cl100k's, o200k's or nanochat's (it then "
                "runs under PCRE2 match limits and a time budget per text)");
  sub->add_flag("--force", opts.force, "overwrite existing steps and a different tokenizer in $NANOCHAT_BASE_DIR");
  sub->callback([&exit_code] {
    ImportResult r = checkpoint_import(opts);
    std::string steps;
    for (int64_t s : r.steps) steps += (steps.empty() ? "" : ", ") + std::to_string(s);
    std::printf("imported step(s) %s into %s%s\n", steps.c_str(), r.dir.c_str(),
                r.tokenizer_written ? " (and the tokenizer)" : "");
    exit_code = 0;
  });
}

}  // namespace nanochat
