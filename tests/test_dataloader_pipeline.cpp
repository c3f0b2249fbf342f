// dataloader pipeline: against a synchronous reference built from DocIterator + Tokenizer +
// BestFitPacker on the test's thread; exact resume; rank striding; bad input; shutdown.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <future>
#include <random>
#include <set>
#include <torch/cuda.h>

#include "nanochat/common.h"
#include "nanochat/dataloader.h"
#include "nanochat/tokenizer.h"
#include "test_util.h"
#include "test_models.h"

using namespace nanochat;
using Batch = std::vector<int64_t>;  // inputs then targets, flattened

// runs fn on another thread; a hang aborts the test binary instead of blocking CI
template <class F>
static void within(double seconds, F fn) {
  auto fut = std::async(std::launch::async, fn);
  if (fut.wait_for(std::chrono::duration<double>(seconds)) == std::future_status::timeout) {
    std::fprintf(stderr, "timed out after %.0f s (a hang)\n", seconds);
    std::abort();
  }
  fut.get();
}

static void write_text(const std::string& path, const std::string& text) {
  FILE* f = std::fopen(path.c_str(), "wb");
  ASSERT_TRUE(f) << path;
  std::fwrite(text.data(), 1, text.size(), f);
  std::fclose(f);
}

// a jsonl corpus: files with the given numbers of documents of 1..200 pseudo-words
static std::vector<std::vector<std::string>> make_jsonl_corpus(const std::string& dir, std::vector<int> counts,
                                                               uint32_t seed = 7) {
  std::mt19937 rng(seed);
  const char* words[] = {"the", "cat", "sat", "on", "a", "mat", "naïve", "日本", "42", "x", "loader", "best-fit"};
  std::vector<std::vector<std::string>> files;
  for (size_t f = 0; f < counts.size(); f++) {
    std::string text;
    files.emplace_back();
    for (int d = 0; d < counts[f]; d++) {
      std::string doc = strprintf("f%zu-d%d", f, d);
      int n = 1 + (int)(rng() % 60);
      if (rng() % 4 == 0) n = 1 + (int)(rng() % 8);  // many short documents too
      for (int w = 0; w < n; w++) doc += std::string(" ") + words[rng() % 12];
      files.back().push_back(doc);
      text += nlohmann::json({{"text", doc}}).dump() + "\n";
    }
    write_text(strprintf("%s/part_%02zu.jsonl", dir.c_str(), f), text);
  }
  return files;
}

// a small BPE trained on the corpus, so tokens are not just bytes
static Tokenizer small_tokenizer(const std::vector<std::vector<std::string>>& files) {
  ThreadPool pool(1);
  BpeTrainer trainer(kPatternNanochat, pool);
  for (auto& f : files) trainer.add_texts(f);
  auto ranks = trainer.train(300);
  return Tokenizer(ranks, kPatternNanochat, {{"<|bos|>", (int32_t)ranks.size()}}, "<|bos|>");
}

static Batch to_vec(const LoaderBatch& b) {
  torch::Tensor t = torch::cat({b.inputs.flatten(), b.targets.flatten()}).to(torch::kCPU).contiguous();
  return Batch(t.data_ptr<int64_t>(), t.data_ptr<int64_t>() + t.numel());
}

// the synchronous reference: upstream's loop on this thread
static std::vector<Batch> reference(const CorpusSplit& split, const Tokenizer& tok, const LoaderOptions& o, int n,
                                    const DocPosition* resume = nullptr) {
  DocIterator it(split, o.rank, o.world, o.infinite, resume, o.tokenizer_batch_size);
  BestFitPacker packer(o.batch_size, o.seq_len, o.buffer_size);
  auto refill = [&](BestFitPacker& p) {
    DocBatch b;
    if (!it.next(b)) return false;
    for (auto& d : b.docs) {
      if (o.min_doc_chars > 0 && (int64_t)d.size() < o.min_doc_chars) continue;  // ASCII-only docs there
      if (o.drop_invalid_utf8 && !utf8_is_valid(d)) continue;
      std::vector<int32_t> ids = {tok.bos_id()};
      for (int32_t id : tok.encode(d)) ids.push_back(id);
      p.push(ids);
    }
    return true;
  };
  std::vector<Batch> out;
  std::vector<int32_t> rows;
  int64_t B = o.batch_size, T = o.seq_len;
  while ((int)out.size() < n && packer.next_batch(refill, rows)) {
    Batch b((size_t)(2 * B * T));
    for (int64_t r = 0; r < B; r++)
      for (int64_t t = 0; t < T; t++) {
        b[(size_t)(r * T + t)] = rows[(size_t)(r * (T + 1) + t)];
        b[(size_t)(B * T + r * T + t)] = rows[(size_t)(r * (T + 1) + t + 1)];
      }
    out.push_back(b);
  }
  return out;
}

struct LoaderCorpus : ::testing::Test {
  std::string dir;
  std::vector<std::vector<std::string>> files;
  std::unique_ptr<Tokenizer> tok;
  Corpus corpus;
  void SetUp() override {
    dir = make_temp_dir();
    files = make_jsonl_corpus(dir, {61, 23, 75, 30});  // 3 train files + val
    tok = std::make_unique<Tokenizer>(small_tokenizer(files));
    CorpusOptions co;
    co.data_dir = dir;
    co.docs_per_group = 10;
    corpus = corpus_open(co);
  }
  void TearDown() override { remove_tree(dir); }
  LoaderOptions options(int rank = 0, int world = 1) {
    LoaderOptions o;
    o.batch_size = 2;
    o.seq_len = 48;
    o.buffer_size = 12;
    o.tokenizer_batch_size = 4;
    o.rank = rank;
    o.world = world;
    return o;
  }
};

TEST_F(LoaderCorpus, MatchesSynchronousReferenceForSeveralThreadCounts) {
  within(60, [&] {
    for (int world : {1, 2})
      for (int rank = 0; rank < world; rank++)
        for (int threads : {1, 2, 5}) {
          LoaderOptions o = options(rank, world);
          o.tokenizer_threads = threads;
          o.prefetch = threads == 2 ? 1 : 3;
          auto split = corpus_split(corpus, "train");
          int n = 40;  // more than one epoch
          auto want = reference(split, *tok, o, n);
          DataLoader loader(*tok, split, o);
          for (int i = 0; i < n; i++) {
            LoaderBatch b = loader.next();
            ASSERT_EQ(b.inputs.size(0), 2);
            ASSERT_EQ(b.inputs.size(1), 48);
            ASSERT_EQ(b.inputs.dtype(), torch::kLong);
            ASSERT_EQ(to_vec(b), want[(size_t)i])
                << "batch " << i << " rank " << rank << "/" << world << " threads " << threads;
            for (auto& r : b.state.buffered) ASSERT_EQ(r.row_group % world, rank);
          }
          auto m = loader.metrics();
          EXPECT_EQ(m.batches, n);
          EXPECT_GT(m.cropped_fraction, 0.0);
          EXPECT_LT(m.cropped_fraction, 1.0);
          EXPECT_GE(m.wait_total_s, m.wait_last_s);
          EXPECT_GT(m.tokens_per_s, 0.0);
        }
  });
}

TEST_F(LoaderCorpus, FinitePassEndsAndValSplitWorks) {
  within(30, [&] {
    LoaderOptions o = options();
    o.infinite = false;
    auto split = corpus_split(corpus, "val");
    auto want = reference(split, *tok, o, 1000);
    ASSERT_GT(want.size(), 3u);
    DataLoader loader(*tok, split, o);
    LoaderBatch b;
    size_t i = 0;
    while (loader.next(b)) ASSERT_EQ(to_vec(b), want[i++]);
    EXPECT_EQ(i, want.size());
    EXPECT_FALSE(loader.next(b));  // stays ended
    EXPECT_THROW(loader.next(), Error);
  });
}

TEST_F(LoaderCorpus, ResumeReproducesTheNextBatchesBitForBit) {
  within(60, [&] {
    for (int world : {1, 2})
      for (int rank = 0; rank < world; rank++) {
        LoaderOptions o = options(rank, world);
        o.tokenizer_threads = 3;
        auto split = corpus_split(corpus, "train");
        const int total = 60;
        std::vector<Batch> all;
        std::vector<std::string> states;
        {
          DataLoader loader(*tok, split, o);
          for (int i = 0; i < total; i++) {
            LoaderBatch b = loader.next();
            all.push_back(to_vec(b));
            states.push_back(loader_state_to_json(b.state).dump());
          }
        }
        int second_epoch = 0;  // the first batch whose state is in epoch 2
        while (loader_state_from_json(nlohmann::json::parse(states[(size_t)second_epoch])).next.epoch < 2)
          ASSERT_LT(++second_epoch, total - 2) << "the test should cross an epoch";
        for (int n : {1, 5, 17, second_epoch + 1}) {
          LoaderState s = loader_state_from_json(nlohmann::json::parse(states[(size_t)n - 1]));
          ASSERT_TRUE(s.exact);
          DataLoader resumed(*tok, split, o, &s);
          for (int k = n; k < total; k++)
            ASSERT_EQ(to_vec(resumed.next()), all[(size_t)k])
                << "resumed after " << n << ", batch " << k << ", rank " << rank << "/" << world;
        }
      }
  });
}

TEST_F(LoaderCorpus, UpstreamStateResumesAtTheNextRowGroup) {
  within(30, [&] {
    LoaderOptions o = options(1, 2);
    auto split = corpus_split(corpus, "train");
    // upstream's fields only: rank 1 of 2 continues at row group (3 / 2 + 1) * 2 + 1 = 5 of file
    // 1, which has 3, so at file 2
    LoaderState s = loader_state_from_json(nlohmann::json::parse(R"({"pq_idx": 1, "rg_idx": 3, "epoch": 2})"));
    EXPECT_FALSE(s.exact);
    DocPosition at{1, 3, 2};
    auto want = reference(split, *tok, o, 5, &at);
    DataLoader loader(*tok, split, o, &s);
    for (int i = 0; i < 5; i++) ASSERT_EQ(to_vec(loader.next()), want[(size_t)i]);
  });
}

TEST(LoaderState, JsonCompactsTheBufferIntoRuns) {
  LoaderState s;
  s.next = DocRef{2, 1, 4, 8};
  s.last = DocPosition{1, 4, 2};
  s.rank = 0;
  s.world = 2;
  s.buffered = {{1, 0, 0, 3}, {1, 0, 0, 4}, {1, 0, 0, 5}, {1, 0, 0, 9}, {1, 1, 2, 0}, {2, 0, 0, 3}};
  auto j = loader_state_to_json(s);
  EXPECT_EQ(j["pq_idx"], 1);
  EXPECT_EQ(j["rg_idx"], 4);
  EXPECT_EQ(j["epoch"], 2);
  EXPECT_EQ(j["buffer"].dump(), "[[1,0,0,[[3,6],[9,10]]],[1,1,2,[[0,1]]],[2,0,0,[[3,4]]]]");
  LoaderState back = loader_state_from_json(j);
  EXPECT_TRUE(back.buffered == s.buffered);
  EXPECT_TRUE(back.next == s.next);
  EXPECT_EQ(back.world, 2);
  EXPECT_THROW(loader_state_from_json(nlohmann::json::parse(R"({"pq_idx": -1, "rg_idx": 0, "epoch": 1})")), Error);
  EXPECT_THROW(loader_state_from_json(nlohmann::json::parse(
                   R"({"pq_idx": 0, "rg_idx": 0, "epoch": 1, "next": {"epoch": 1, "file": 0, "row_group": 0,
                       "doc": 0}, "buffer": [[1, 0, 0, [[5, 5]]]]})")),
               Error);
}

TEST_F(LoaderCorpus, TwoRanksReadDisjointRowGroupsCoveringOneRank) {
  auto split = corpus_split(corpus, "train");
  auto row_groups = [&](int rank, int world) {
    std::vector<std::pair<int, int>> seen;
    DocIterator r(split, rank, world, false, nullptr, 4);  // the walk the loader reads through
    DocBatch c;
    while (r.next(c))
      if (c.first_doc == 0) seen.push_back({c.pos.file, c.pos.row_group});
    return seen;
  };
  auto one = row_groups(0, 1), r0 = row_groups(0, 2), r1 = row_groups(1, 2);
  EXPECT_EQ(one.size(), 7u + 3u + 8u);  // 61, 23, 75 documents in groups of 10
  std::set<std::pair<int, int>> u(r0.begin(), r0.end());
  for (auto& g : r1) EXPECT_TRUE(u.insert(g).second) << "row group read by both ranks";
  std::set<std::pair<int, int>> single(one.begin(), one.end());
  EXPECT_EQ(u, single);
}

TEST_F(LoaderCorpus, DestroyingMidEpochStopsPromptly) {
  within(30, [&] {
    for (int taken : {0, 1, 3}) {
      LoaderOptions o = options();
      o.tokenizer_threads = 3;
      auto t0 = std::chrono::steady_clock::now();
      {
        DataLoader loader(*tok, corpus_split(corpus, "train"), o);
        for (int i = 0; i < taken; i++) loader.next();
        std::this_thread::sleep_for(std::chrono::milliseconds(50));  // workers blocked on full queues
      }
      double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      EXPECT_LT(s, 5.0);
    }
  });
}

// ---- bad input: parquet files written by pyarrow ----------------------------------------
static void write_parquet(const std::string& path, const std::vector<std::string>& docs, int rg_size,
                          const std::string& extra = "") {
  nlohmann::json j = nlohmann::json::array();
  for (auto& d : docs) j.push_back(std::vector<int>(d.begin(), d.end()));
  for (auto& v : j)
    for (auto& b : v) b = b.get<int>() & 0xFF;
  write_text(path + ".json", j.dump());
  auto r = run_shell(strprintf("%s %s/tests/fixtures/make_loader_parquet.py %s %s.json %d %s", NANOCHAT_PYTHON,
                               NANOCHAT_SOURCE_DIR, path.c_str(), path.c_str(), rg_size, extra.c_str()));
  ASSERT_EQ(r.rc, 0) << r.err;
  std::remove((path + ".json").c_str());
}

static std::vector<std::string> numbered_docs(const std::string& prefix, int n) {
  std::vector<std::string> d;
  for (int i = 0; i < n; i++) d.push_back(strprintf("%s %d lorem ipsum dolor sit amet %d", prefix.c_str(), i, i * i));
  return d;
}

static std::string error_of(DataLoader& loader, int max_batches = 1000) {
  try {
    for (int i = 0; i < max_batches; i++) loader.next();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(LoaderBadInput, UndecodableRowGroupNamesFileAndRowGroupOrIsSkipped) {
  std::string dir = make_temp_dir();
  write_parquet(dir + "/a.parquet", numbered_docs("a", 40), 10, "--corrupt-row-group 2");
  write_parquet(dir + "/b.parquet", numbered_docs("val", 10), 10);
  Tokenizer tok = byte_tokenizer(false);
  CorpusOptions co;
  co.data_dir = dir;
  Corpus c = corpus_open(co);
  LoaderOptions o;
  o.batch_size = 1;
  o.seq_len = 16;
  o.buffer_size = 4;
  o.tokenizer_batch_size = 4;
  within(30, [&] {
    DataLoader loader(tok, corpus_split(c, "train"), o);
    std::string err = error_of(loader);
    EXPECT_NE(err.find(dir + "/a.parquet: row group 2"), std::string::npos) << err;
    EXPECT_THROW(loader.next(), Error);  // and stays failed
  });
  within(30, [&] {  // skipped: a finite pass reads row groups 0, 1 and 3, with a count
    o.skip_bad_row_groups = true;
    o.infinite = false;
    o.buffer_size = 1;
    o.seq_len = 5000;  // one row would take every document of the pass
    LoaderOptions big = o;
    DataLoader loader(tok, corpus_split(c, "train"), big);
    LoaderBatch b;
    EXPECT_FALSE(loader.next(b));  // about 1100 tokens in the pass: no full batch
    EXPECT_EQ(loader.metrics().bad_row_groups, 1);
    EXPECT_EQ(loader.metrics().docs_tokenized, 30);
  });
  remove_tree(dir);
}

TEST(LoaderBadInput, MissingTextColumnAndEmptySplitAreErrorsNotHangs) {
  std::string dir = make_temp_dir();
  auto r = run_shell(
      strprintf("%s %s/tests/fixtures/make_text_parquet.py %s/a.parquet 20 10 a content && "
                "%s %s/tests/fixtures/make_text_parquet.py %s/b.parquet 20 10 b content",
                NANOCHAT_PYTHON, NANOCHAT_SOURCE_DIR, dir.c_str(), NANOCHAT_PYTHON, NANOCHAT_SOURCE_DIR, dir.c_str()));
  ASSERT_EQ(r.rc, 0) << r.err;
  Tokenizer tok = byte_tokenizer(false);
  CorpusOptions co;
  co.data_dir = dir;
  Corpus c = corpus_open(co);
  LoaderOptions o;
  o.batch_size = 1;
  o.seq_len = 16;
  within(30, [&] {
    DataLoader loader(tok, corpus_split(c, "train"), o);
    std::string err = error_of(loader);
    EXPECT_NE(err.find(dir + "/a.parquet has no column 'text'"), std::string::npos) << err;
  });
  // a split whose files hold no documents: an error from next(), infinite or not
  std::string empty = make_temp_dir();
  write_text(empty + "/a.jsonl", "");
  write_text(empty + "/b.jsonl", "\n\n");
  co.data_dir = empty;
  Corpus e = corpus_open(co);
  within(30, [&] {
    DataLoader loader(tok, corpus_split(e, "train"), o);
    std::string err = error_of(loader);
    EXPECT_NE(err.find("gets no documents"), std::string::npos) << err;
    o.infinite = false;
    DataLoader finite(tok, corpus_split(e, "train"), o);
    LoaderBatch b;
    EXPECT_FALSE(finite.next(b));
  });
  remove_tree(dir);
  remove_tree(empty);
}

TEST(LoaderCleaning, DropsShortAndInvalidUtf8DocumentsWithCounts) {
  std::string dir = make_temp_dir();
  std::vector<std::string> docs = numbered_docs("doc", 30);
  docs[3] = "tiny";
  docs[11] = "bad \xff\xfe utf-8 here, long enough to pass the length rule";
  docs[20] = "ab";
  docs[27] = "also bad \xc3\x28 in the middle of a long enough document";
  write_parquet(dir + "/a.parquet", docs, 8, "--binary");
  write_parquet(dir + "/b.parquet", numbered_docs("val", 8), 8, "--binary");
  Tokenizer tok = byte_tokenizer(false);
  CorpusOptions co;
  co.data_dir = dir;
  Corpus c = corpus_open(co);
  LoaderOptions o;
  o.batch_size = 2;
  o.seq_len = 40;
  o.buffer_size = 3;
  o.tokenizer_batch_size = 3;
  o.min_doc_chars = 10;
  o.infinite = false;
  within(30, [&] {
    auto split = corpus_split(c, "train");
    auto want = reference(split, tok, o, 1000);
    ASSERT_GT(want.size(), 2u);
    DataLoader loader(tok, split, o);
    LoaderBatch b;
    size_t i = 0;
    while (loader.next(b)) ASSERT_EQ(to_vec(b), want[i++]);
    EXPECT_EQ(i, want.size());
    auto m = loader.metrics();
    EXPECT_EQ(m.docs_short, 2);
    EXPECT_EQ(m.docs_bad_utf8, 2);
    EXPECT_EQ(m.docs_tokenized, 26);
  });
  remove_tree(dir);
}

TEST_F(LoaderCorpus, CudaStagingMatchesTheReference) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no GPU";
  within(60, [&] {
    LoaderOptions o = options();
    o.device = torch::Device(torch::kCUDA, 0);
    auto split = corpus_split(corpus, "train");
    auto want = reference(split, *tok, o, 20);
    DataLoader loader(*tok, split, o);
    for (int i = 0; i < 20; i++) {
      LoaderBatch b = loader.next();
      ASSERT_TRUE(b.inputs.is_cuda());
      ASSERT_EQ(to_vec(b), want[(size_t)i]) << "batch " << i;
    }
  });
}
