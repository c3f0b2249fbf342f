// `nanochat tok-train`: train the BPE tokenizer on the train split (upstream's scripts/tok_train.py).
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>

#include "cli/commands.h"
#include "nanochat/common.h"
#include "nanochat/dataset.h"
#include "nanochat/report.h"
#include "nanochat/tokenizer.h"

namespace nanochat {

static const char* kSanityText =
    "Hello world! This is a test.\nNumbers: 123, 4567, 89\nContractions: I'm, you're, it's\n"
    "Special chars: @#$%^&*()\nUnicode: 你好世界 🌍";

static int tok_train_run(const TokTrainOptions& opts, const CorpusOptions& data, int threads) {
  cpu_threads_setup(1);
  ThreadPool pool(threads > 0 ? threads : default_thread_count());
  Corpus corpus = corpus_open(data);
  DocIterator docs(corpus_split(corpus, "train"), 0, 1, /*infinite=*/false);
  log_info("training a %d-token tokenizer on up to %lld characters of %s (%d threads)", opts.vocab_size,
           (long long)opts.max_chars, corpus.dir.c_str(), pool.size());
  TokTrainStats stats;
  DocBatch batch;
  auto next_docs = [&](std::vector<std::string>& out) {
    if (!docs.next(batch)) return false;
    out = std::move(batch.docs);
    return true;
  };
  Tokenizer tok = tok_train(next_docs, opts, pool, &stats);
  log_info("counted %lld characters in %lld documents (%lld unique pieces) in %.1fs: %.1f M chars/s",
           (long long)stats.chars, (long long)stats.docs, (long long)stats.unique_pieces, stats.count_seconds,
           stats.chars / 1e6 / std::max(1e-9, stats.count_seconds));
  log_info("total training time %s", format_duration(stats.total_seconds).c_str());
  if (tok.decode(tok.encode(kSanityText)) != kSanityText)
    fail("the trained tokenizer does not round-trip the sanity text");
  std::string dir = base_dir_path("tokenizer");
  tokenizer_save(tok, dir);
  log_info("saved the tokenizer to %s (vocab %d); the sanity text round-trips", dir.c_str(), tok.vocab_size());
  // bytes per token over the non-special tokens, for the report
  std::vector<int64_t> lengths;
  for (int32_t n : tok.token_byte_counts())
    if (n > 0) lengths.push_back(n);
  double mean = 0, var = 0;  // torch's mean and (unbiased) std, as upstream logs them
  for (int64_t n : lengths) mean += (double)n / (double)lengths.size();
  for (int64_t n : lengths) var += ((double)n - mean) * ((double)n - mean) / (double)(lengths.size() - 1);
  report_log("Tokenizer training",
             {ReportItem{{"max_chars", opts.max_chars}, {"doc_cap", opts.doc_cap}, {"vocab_size", opts.vocab_size}},
              ReportItem{{"train_time", stats.total_seconds},
                         {"num_special_tokens", (int64_t)tok.specials().size()},
                         {"token_bytes_min", *std::min_element(lengths.begin(), lengths.end())},
                         {"token_bytes_max", *std::max_element(lengths.begin(), lengths.end())},
                         {"token_bytes_mean", mean},
                         {"token_bytes_std", std::sqrt(var)}}});
  return 0;
}

void cli_register_tok_train(CLI::App& app, int& exit_code) {
  auto* sub = app.add_subcommand("tok-train", "Train the BPE tokenizer on the training text");
  static TokTrainOptions opts;
  static CorpusOptions data;
  static int threads = 0;
  sub->add_option("--max-chars", opts.max_chars, "characters to train on")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  sub->add_option("--doc-cap", opts.doc_cap, "characters kept of each document")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  sub->add_option("--vocab-size", opts.vocab_size, "vocabulary size, special tokens included")
      ->capture_default_str()
      ->check(CLI::Range(265, 1 << 24));
  sub->add_option("--threads", threads, "threads for counting (default: all cores)")->check(CLI::NonNegativeNumber);
  cli_add_data_flags(sub, data);
  sub->callback([&exit_code] { exit_code = tok_train_run(opts, data, threads); });
}

}  // namespace nanochat
