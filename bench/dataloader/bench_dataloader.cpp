// bench/dataloader: how far the loader's CPU side runs ahead of a GPU step.
//   - tokens/s produced (B*T per batch, consumer never sleeps) with 1..N tokenizer threads,
//     against the 1-thread run (scaling) and against 100K tok/s, what a d20 step on 8xH100
//     consumes per rank (headroom; goal >= 20x on one rank's share of cores)
//   - the cropped-token fraction of best-fit packing on this text (upstream: ~35% at T=2048)
//   - data-wait per step when the consumer sleeps --step-ms per batch to mimic a GPU step
// Usage: bench_dataloader [--shard PATH] [--tokenizer DIR] [--seconds 4] [--step-ms 100]
//                         [--ranks FILE] [--max-threads N] [-B 32] [-T 2048]
// The tokenizer: --tokenizer DIR (nanochat's files), --ranks FILE (a tiktoken rank file, e.g.
// the one bench_tokenizer leaves in /tmp/nanochat_bench_tokenizer, with nanochat's pattern and
// special tokens), $NANOCHAT_BASE_DIR/tokenizer when present, else a 32768-token BPE trained
// here on the first 20 MB of the shard.
#include <algorithm>
#include <thread>

#include "nanochat/common.h"
#include "nanochat/dataloader.h"
#include "nanochat/tokenizer.h"

using namespace nanochat;

static CorpusSplit one_file_split(const std::string& path) {
  CorpusSplit s;
  s.num_sources = 1;
  s.open = [path](int) { return doc_source_open(path, CorpusOptions()); };
  return s;
}

int main(int argc, char** argv) {
  std::string shard, tok_dir, ranks_file;
  double seconds = 4, step_ms = 100;
  int max_threads = std::max(1, default_thread_count() - 1);
  int64_t B = 32, T = 2048;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i], v = argv[i + 1];
    if (k == "--shard") shard = v;
    else if (k == "--tokenizer") tok_dir = v;
    else if (k == "--ranks") ranks_file = v;
    else if (k == "--seconds") seconds = std::stod(v);
    else if (k == "--step-ms") step_ms = std::stod(v);
    else if (k == "--max-threads") max_threads = std::stoi(v);
    else if (k == "-B") B = std::stoll(v);
    else if (k == "-T") T = std::stoll(v);
    else fail("unknown flag %s", k.c_str());
  }
  if (shard.empty()) {
    shard = std::string(NANOCHAT_BENCH_DATA) + "/text_shard_100mb.parquet";
    if (!path_exists(shard)) {
      make_dirs(NANOCHAT_BENCH_DATA);
      std::printf("generating %s (once)...\n", shard.c_str());
      std::fflush(stdout);
      std::string cmd = std::string(NANOCHAT_PYTHON) + " " + NANOCHAT_BENCH_SCRIPT + " " + shard;
      if (std::system(cmd.c_str()) != 0) fail("could not generate the bench shard: %s", cmd.c_str());
    }
  }
  CorpusSplit split = one_file_split(shard);

  std::unique_ptr<Tokenizer> tok;
  if (tok_dir.empty() && path_exists(base_dir_path("tokenizer") + "/tokenizer.json"))
    tok_dir = base_dir_path("tokenizer");
  auto with_specials = [](std::vector<std::string> ranks) {
    std::vector<std::pair<std::string, int32_t>> specials;
    for (size_t i = 0; i < kSpecialTokens.size(); i++)
      specials.push_back({kSpecialTokens[i], (int32_t)(ranks.size() + i)});
    return std::make_unique<Tokenizer>(ranks, kPatternNanochat, specials, "<|bos|>");
  };
  if (!ranks_file.empty()) {
    tok = with_specials(tiktoken_ranks_read(ranks_file));
    std::printf("tokenizer: %s (vocab %d)\n", ranks_file.c_str(), tok->vocab_size());
  } else if (!tok_dir.empty()) {
    tok = std::make_unique<Tokenizer>(tokenizer_load(tok_dir));
    std::printf("tokenizer: %s (vocab %d)\n", tok_dir.c_str(), tok->vocab_size());
  } else {
    ThreadPool pool(default_thread_count());
    BpeTrainer trainer(kPatternNanochat, pool);
    DocIterator it(split, 0, 1, false);
    DocBatch b;
    int64_t chars = 0;
    Timer t;
    while (chars < 20000000 && it.next(b)) {
      for (auto& d : b.docs) chars += (int64_t)d.size();
      trainer.add_texts(b.docs);
    }
    tok = with_specials(trainer.train(32768 - 9));
    std::printf("tokenizer: trained here on %.1f MB of the shard in %.1fs (vocab %d)\n", chars / 1e6, t.seconds(),
                tok->vocab_size());
  }
  std::printf("shard: %s; B=%lld T=%lld; %d hardware threads\n\n", shard.c_str(), (long long)B, (long long)T,
              default_thread_count());

  const double d20_per_rank = 100e3;  // tok/s a d20 step on 8xH100 consumes per rank
  std::vector<int> counts;
  for (int n = 1; n < max_threads; n *= 2) counts.push_back(n);
  counts.push_back(max_threads);
  std::printf("%-10s %12s %10s %10s %10s\n", "threads", "tokens/s", "vs 1", "headroom", "cropped");
  double base = 0;
  for (int n : counts) {
    LoaderOptions o;
    o.batch_size = B;
    o.seq_len = T;
    o.tokenizer_threads = n;
    DataLoader loader(*tok, split, o);
    loader.next();  // the first batch fills the buffer: not steady state
    Timer t;
    int64_t batches = 0;
    while (t.seconds() < seconds) {
      loader.next();
      batches++;
    }
    double rate = (double)(batches * B * T) / t.seconds();
    if (base == 0) base = rate;
    std::printf("%-10d %12.0f %9.2fx %9.1fx %9.1f%%\n", n, rate, rate / base, rate / d20_per_rank,
                100 * loader.metrics().cropped_fraction);
    std::fflush(stdout);
  }

  // a consumer that takes step_ms per batch, like a GPU step; the loader should keep up
  LoaderOptions o;
  o.batch_size = B;
  o.seq_len = T;
  o.tokenizer_threads = max_threads;
  DataLoader loader(*tok, split, o);
  loader.next();
  std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(step_ms));
  double wait0 = loader.metrics().wait_total_s;
  int steps = std::max(5, (int)(seconds * 1000 / step_ms));
  for (int i = 0; i < steps; i++) {
    loader.next();
    std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(step_ms));
  }
  LoaderMetrics m = loader.metrics();
  double wait = m.wait_total_s - wait0;
  std::printf(
      "\nconsumer sleeping %.0f ms per batch (%d threads): data-wait %.3f ms per step, %.2f%% of the step; "
      "%d batches ready at the end\n",
      step_ms, max_threads, 1000 * wait / steps, 100 * wait / (steps * step_ms / 1000), m.ready);
  return 0;
}
