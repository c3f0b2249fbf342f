// The flags every subcommand that reads a text corpus shares, so they read the same everywhere.
#include <CLI/CLI.hpp>

#include "cli/commands.h"
#include "nanochat/dataset.h"

namespace nanochat {

void cli_add_data_flags(CLI::App* sub, CorpusOptions& opts) {
  sub->add_option("--data", opts.data_dir,
                  "corpus folder of .parquet, .jsonl or .txt files (one kind); the last file by name is "
                  "the validation split. Default: the ClimbMix shards of `nanochat download`");
  sub->add_option("--text-column", opts.text_column, "parquet column / jsonl field holding the text")
      ->default_val("text");
  sub->add_option("--txt-split", opts.txt_split,
                  "for .txt: file (one document per file) or paragraphs (blank-line-separated blocks)")
      ->default_val("file")
      ->check(CLI::IsMember({"file", "paragraphs"}));
}

}  // namespace nanochat
