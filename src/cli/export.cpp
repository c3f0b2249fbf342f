// `nanochat export`: a checkpoint as one safetensors file (nanochat's tensor names) with
// config.json and the tokenizer files beside it, for other tools; or (--format hf) as a
// directory that transformers loads as its `nanochat` model type.
#include <CLI/CLI.hpp>
#include <cstdio>

#include "cli/commands.h"
#include "nanochat/checkpoint/checkpoint_gpt.h"

namespace nanochat {

void cli_register_export(CLI::App& app, int& exit_code) {
  auto* sub = app.add_subcommand("export", "Write a checkpoint as model.safetensors + config.json + tokenizer files");
  static std::string source = "base", tag, out, format = "nanochat";
  static int64_t step = -1;
  cli_add_checkpoint_flags(sub, source, tag, step);
  sub->add_option("--out", out,
                  "the safetensors file to write, config.json and the tokenizer beside it (--format hf: the directory)")
      ->required();
  sub->add_option("--format", format, "nanochat (our tensor names) or hf (transformers' nanochat model type)")
      ->check(CLI::IsMember({"nanochat", "hf"}));
  sub->callback([&exit_code] {
    ExportResult r = format == "hf" ? checkpoint_export_hf(source, tag, step, out)
                                    : checkpoint_export(source, tag, step, out);
    std::printf("exported %s step %lld: %lld tensors (%.1f MB) to %s, with %s and the tokenizer in %s\n",
                r.ref.dir.c_str(), (long long)r.ref.step, (long long)r.num_tensors, r.num_bytes / 1e6,
                r.model_path.c_str(), r.config_path.c_str(), r.tokenizer_dir.c_str());
    exit_code = 0;
  });
}

}  // namespace nanochat
