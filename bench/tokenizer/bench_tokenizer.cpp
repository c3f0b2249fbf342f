// bench/tokenizer: our tokenizer against upstream's tools on the same text in the same run.
//   - BPE training (vocab 32768 by default) against rustbpe; the merges must be identical
//   - single-thread encode MB/s against tiktoken (native), the ids must be identical
//   - encode_batch scaling over threads
// Usage: bench_tokenizer [--mb 100] [--vocab 32768] [--encode-mb 10]
#include <fstream>
#include <iostream>

#include "nanochat/common.h"
#include "nanochat/tokenizer.h"

using namespace nanochat;

int main(int argc, char** argv) {
  double mb = 100, encode_mb = 10;
  int vocab = 32768;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i];
    if (k == "--mb") mb = std::stod(argv[i + 1]);
    else if (k == "--vocab") vocab = std::stoi(argv[i + 1]);
    else if (k == "--encode-mb") encode_mb = std::stod(argv[i + 1]);
  }
  std::string dir = "/tmp/nanochat_bench_tokenizer";
  make_dirs(dir);
  std::string cmd = strprintf("%s %s/bench/tokenizer/baseline.py %s %g %d %g", NANOCHAT_PYTHON, NANOCHAT_SOURCE_DIR,
                              dir.c_str(), mb, vocab, encode_mb);
  std::printf("running the baselines (rustbpe training, tiktoken encode) ...\n");
  if (std::system(cmd.c_str()) != 0) fail("baseline script failed: %s", cmd.c_str());
  std::ifstream bf(dir + "/baseline.json");
  auto base = nlohmann::json::parse(bf);

  std::vector<std::string> docs;
  std::ifstream cf(dir + "/corpus.jsonl");
  for (std::string line; std::getline(cf, line);) docs.push_back(nlohmann::json::parse(line).get<std::string>());
  double corpus_mb = base["corpus_bytes"].get<double>() / 1e6;

  ThreadPool pool(default_thread_count());
  Timer t;
  BpeTrainer trainer(kPatternNanochat, pool);
  trainer.add_texts(docs);
  auto ranks = trainer.train(vocab);
  double train_s = t.seconds();
  auto theirs = tiktoken_ranks_read(dir + "/ranks.tiktoken");
  bool same_merges = ranks == theirs;

  Tokenizer tok(ranks, kPatternNanochat, {{"<|bos|>", vocab}}, "<|bos|>");
  size_t n = base["encode_docs"].get<size_t>();
  std::vector<std::string> sample(docs.begin(), docs.begin() + (long)n);
  double encode_bytes = base["encode_bytes"].get<double>();
  t.reset();
  int64_t tokens = 0;
  for (auto& d : sample) tokens += (int64_t)tok.encode(d).size();
  double encode_s = t.seconds();

  // the floor: splitting alone
  Splitter splitter(kPatternNanochat);
  std::vector<std::string_view> pieces;
  t.reset();
  for (auto& d : sample) {
    pieces.clear();
    splitter.split(d, pieces);
  }
  double split_s = t.seconds();

  std::printf("\n%-36s %12s %12s %10s\n", "benchmark", "nanochat", "baseline", "ratio");
  std::printf("%-36s %11.1fs %11.1fs %9.2fx   (rustbpe; merges identical: %s)\n",
              strprintf("BPE training %.0f MB, vocab %d", corpus_mb, vocab).c_str(), train_s,
              base["train_seconds"].get<double>(), base["train_seconds"].get<double>() / train_s,
              same_merges ? "yes" : "NO");
  double ours_mbs = encode_bytes / 1e6 / encode_s,
         theirs_mbs = encode_bytes / 1e6 / base["encode_seconds"].get<double>();
  std::printf("%-36s %9.2fMB/s %9.2fMB/s %9.2fx   (tiktoken; tokens %lld vs %lld)\n", "encode, 1 thread", ours_mbs,
              theirs_mbs, ours_mbs / theirs_mbs, (long long)tokens, base["encode_tokens"].get<long long>());
  std::printf("%-36s %9.2fMB/s   (the floor of encode: PCRE2 JIT split only)\n", "split only, 1 thread",
              encode_bytes / 1e6 / split_s);
  for (int threads : {1, 2, 4}) {
    ThreadPool p(threads);
    t.reset();
    tok.encode_batch(sample, p);
    double s = t.seconds();
    double theirs_s = base["batch_seconds"][std::to_string(threads)].get<double>();
    std::printf("%-36s %9.2fMB/s %9.2fMB/s %9.2fx   (tiktoken encode_ordinary_batch)\n",
                strprintf("encode_batch, %d threads", threads).c_str(), encode_bytes / 1e6 / s,
                encode_bytes / 1e6 / theirs_s, theirs_s / s);
  }
  return same_merges && tokens == base["encode_tokens"].get<long long>() ? 0 : 1;
}
