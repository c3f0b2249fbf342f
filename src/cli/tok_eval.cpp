// `nanochat tok-eval`: bytes per token of the trained tokenizer on sample texts and the first
// train and val row groups, against comparison tokenizers (upstream's scripts/tok_eval.py).
#include <CLI/CLI.hpp>
#include <unistd.h>

#include "cli/commands.h"
#include "nanochat/common.h"
#include "nanochat/dataset.h"
#include "nanochat/report.h"
#include "nanochat/tokenizer.h"

namespace nanochat {

// the first row group of a split, joined by "\n" (upstream's climbmix-train / -val texts)
static void add_first_row_group(const Corpus& corpus, const std::string& split, std::vector<TokEvalText>& texts) {
  DocIterator it(corpus_split(corpus, split), 0, 1, /*infinite=*/false);
  DocBatch batch;
  if (!it.next(batch) || batch.docs.empty()) return;
  std::string joined;
  for (size_t i = 0; i < batch.docs.size(); i++) joined += (i ? "\n" : "") + batch.docs[i];
  texts.push_back({"data-" + split, joined});
}

// the table without its terminal colours (ESC [ ... m), for the report
static std::string without_colors(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); i++) {
    if (s[i] == '\033' && i + 1 < s.size() && s[i + 1] == '[') {
      i = s.find('m', i);
      if (i == std::string::npos) break;
      continue;
    }
    out += s[i];
  }
  return out;
}

static int tok_eval_run(const std::vector<std::string>& compares, const CorpusOptions& data, bool no_data) {
  Tokenizer ours = tokenizer_load(base_dir_path("tokenizer"));
  std::vector<TokEvalText> texts = tok_eval_builtin_texts();
  if (!no_data) {
    Corpus corpus = corpus_open(data);
    add_first_row_group(corpus, "train", texts);
    if (corpus.files.size() > 1) add_first_row_group(corpus, "val", texts);
  }
  std::vector<std::unique_ptr<Tokenizer>> owned;
  std::vector<std::pair<std::string, const Tokenizer*>> others;
  for (auto& c : compares) {
    size_t eq = c.find('=');
    if (eq == std::string::npos) fail("--compare '%s': expected NAME=FILE.tiktoken", c.c_str());
    std::string name = c.substr(0, eq);
    owned.push_back(std::make_unique<Tokenizer>(tokenizer_load_tiktoken(c.substr(eq + 1), name)));
    others.emplace_back(name, owned.back().get());
  }
  const std::string table = tok_eval_report(texts, ours, others, isatty(fileno(stdout)));
  std::printf("%s", table.c_str());
  report_log("Tokenizer evaluation", {ReportItem("```\n" + without_colors(table) + "```\n")});
  return 0;
}

void cli_register_tok_eval(CLI::App& app, int& exit_code) {
  auto* sub = app.add_subcommand("tok-eval",
                                 "Compress sample texts with the trained tokenizer and compare with others");
  static std::vector<std::string> compares;
  static CorpusOptions data;
  static bool no_data = false;
  sub->add_option("--compare", compares,
                  "NAME=FILE.tiktoken, NAME one of gpt2, cl100k, o200k, nanochat (its split pattern); repeatable");
  sub->add_flag("--no-data", no_data, "only the built-in sample texts, not the corpus's first row groups");
  cli_add_data_flags(sub, data);
  sub->callback([&exit_code] { exit_code = tok_eval_run(compares, data, no_data); });
}

}  // namespace nanochat
