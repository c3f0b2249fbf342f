// The dataset module without a network: shard names and ids, the legacy directory fallback,
// the rank-strided walk and its resume rule (against sequences computed here by hand),
// and local corpora (.jsonl, .txt by file and by paragraph, .parquet written by pyarrow).
#include <gtest/gtest.h>
#include <CLI/CLI.hpp>
#include <cstdlib>
#include <fstream>
#include <tuple>

#include "cli/commands.h"
#include "nanochat/common/files.h"
#include "nanochat/dataset.h"
#include "test_util.h"

using namespace nanochat;

static const std::string kPython = NANOCHAT_PYTHON;
static const std::string kFixtures = NANOCHAT_FIXTURES;

static void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary);
  f << bytes;
}

template <class F>
static std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(Climbmix, ShardNamesUrlsAndIds) {
  EXPECT_EQ(climbmix_shard_name(42), "shard_00042.parquet");
  EXPECT_EQ(climbmix_shard_url("http://m/x/", 6542), "http://m/x/shard_06542.parquet");
  EXPECT_EQ(climbmix_shard_url(kClimbmixBaseUrl, 0),
            "https://huggingface.co/datasets/karpathy/climbmix-400b-shuffle/resolve/main/shard_00000.parquet");
  EXPECT_EQ(climbmix_shard_ids(0), std::vector<int>({6542}));
  EXPECT_EQ(climbmix_shard_ids(3), std::vector<int>({0, 1, 2, 6542}));
  auto all = climbmix_shard_ids(-1);
  ASSERT_EQ(all.size(), 6543u);
  EXPECT_EQ(all[6541], 6541);
  EXPECT_EQ(all.back(), 6542);
  EXPECT_EQ(climbmix_shard_ids(100000).size(), 6543u);
}

TEST(Climbmix, DirectoryListingAndLegacyFallback) {
  std::string base = make_temp_dir();
  setenv("NANOCHAT_BASE_DIR", base.c_str(), 1);
  EXPECT_EQ(dataset_dir(), base + "/base_data_climbmix");  // neither exists: the new one
  make_dirs(base + "/base_data");
  EXPECT_EQ(dataset_dir(), base + "/base_data");  // only the legacy one: use it (with a warning)
  make_dirs(base + "/base_data_climbmix");
  EXPECT_EQ(dataset_dir(), base + "/base_data_climbmix");
  for (const char* n : {"shard_00002.parquet", "shard_00000.parquet", "shard_00001.parquet.tmp", "notes.txt",
                        "shard_00003.parquet.lock"})
    write_file(base + "/base_data_climbmix/" + n, "x");
  EXPECT_EQ(dataset_list_parquet_files(base + "/base_data_climbmix"),
            std::vector<std::string>(
                {base + "/base_data_climbmix/shard_00000.parquet", base + "/base_data_climbmix/shard_00002.parquet"}));
  unsetenv("NANOCHAT_BASE_DIR");
  remove_tree(base);
}

// ---- the walk, over fake sources: file f has rgs[f] row groups of 3 docs "f/rg/k" -------

class FakeSource : public DocSource {
 public:
  FakeSource(int file, int num_rgs) : file_(file), num_rgs_(num_rgs) {}
  int num_row_groups() const override { return num_rgs_; }
  std::vector<std::string> read_row_group(int rg) const override {
    std::vector<std::string> d;
    for (int k = 0; k < 3; k++) d.push_back(strprintf("%d/%d/%d", file_, rg, k));
    return d;
  }
  std::string name() const override { return "fake"; }

 private:
  int file_, num_rgs_;
};

static CorpusSplit fake_split(std::vector<int> rgs, int* opens = nullptr) {
  CorpusSplit s;
  s.num_sources = (int)rgs.size();
  s.open = [rgs, opens](int f) {
    if (opens) (*opens)++;
    return std::unique_ptr<DocSource>(new FakeSource(f, rgs.at(f)));
  };
  return s;
}

using Pos = std::tuple<int, int, int>;  // epoch, file, row group
static Pos key(const DocPosition& p) { return Pos{p.epoch, p.file, p.row_group}; }

// what rank r of w must read in `epochs` passes, written out directly from upstream's rule
static std::vector<Pos> expected_walk(const std::vector<int>& rgs, int r, int w, int epochs) {
  std::vector<Pos> out;
  for (int e = 1; e <= epochs; e++)
    for (int f = 0; f < (int)rgs.size(); f++)
      for (int g = r; g < rgs[f]; g += w) out.push_back(Pos{e, f, g});
  return out;
}

static std::vector<Pos> walk(DocIterator& it, size_t n) {
  std::vector<Pos> out;
  DocBatch b;
  while (out.size() < n && it.next(b)) {
    EXPECT_EQ(b.docs.size(), 3u);
    EXPECT_EQ(b.docs[0], strprintf("%d/%d/0", b.pos.file, b.pos.row_group)) << "docs do not match their position";
    out.push_back(key(b.pos));
  }
  return out;
}

TEST(DocIterator, RankStridedOnePassAndEpochs) {
  std::vector<int> rgs = {5, 2, 0, 4};
  for (int w = 1; w <= 4; w++)
    for (int r = 0; r < w; r++) {
      DocIterator once(fake_split(rgs), r, w, false);
      EXPECT_EQ(walk(once, 1000), expected_walk(rgs, r, w, 1)) << "rank " << r << " of " << w;
      DocIterator forever(fake_split(rgs), r, w, true);
      auto three = expected_walk(rgs, r, w, 3);
      EXPECT_EQ(walk(forever, three.size()), three) << "rank " << r << " of " << w;
    }
}

TEST(DocIterator, ResumeContinuesWithTheNextRowGroupNeverRepeatingOrSkipping) {
  std::vector<int> rgs = {5, 2, 0, 4, 1};
  for (int w = 1; w <= 3; w++)
    for (int r = 0; r < w; r++) {
      auto seq = expected_walk(rgs, r, w, 3);
      for (size_t i = 0; i + 1 < seq.size(); i++) {
        DocPosition saved{std::get<1>(seq[i]), std::get<2>(seq[i]), std::get<0>(seq[i])};
        DocIterator it(fake_split(rgs), r, w, true, &saved);
        auto rest = std::vector<Pos>(seq.begin() + i + 1, seq.end());
        EXPECT_EQ(walk(it, rest.size()), rest) << "rank " << r << " of " << w << " resumed after item " << i;
      }
      // one pass: resuming after the last row group of the pass ends it
      DocPosition last{std::get<1>(seq[seq.size() / 3 - 1]), std::get<2>(seq[seq.size() / 3 - 1]), 1};
      DocIterator once(fake_split(rgs), r, w, false, &last);
      EXPECT_TRUE(walk(once, 10).empty());
    }
  // every rank resuming from rank 0's saved position (what a checkpoint stores): rank 1 of 2
  // saved at file 0, rg 2 continues at rg (2/2+1)*2+1 = 5 -> past file 0's 5 row groups -> file 1, rg 1
  DocPosition saved{0, 2, 1};
  DocIterator it(fake_split(rgs), 1, 2, true, &saved);
  EXPECT_EQ(walk(it, 2), std::vector<Pos>({Pos{1, 1, 1}, Pos{1, 3, 1}}));
}

TEST(DocIterator, BatchesSplitRowGroupsAndKeepTheirPosition) {
  DocIterator it(fake_split({2}), 0, 1, false, nullptr, 2);
  DocBatch b;
  std::vector<std::pair<size_t, Pos>> got;
  while (it.next(b)) got.push_back({b.docs.size(), key(b.pos)});
  EXPECT_EQ(got, (std::vector<std::pair<size_t, Pos>>{
                     {2, Pos{1, 0, 0}}, {1, Pos{1, 0, 0}}, {2, Pos{1, 0, 1}}, {1, Pos{1, 0, 1}}}));
}

TEST(DocIterator, ARankWithNothingToReadIsAnErrorNotAHang) {
  DocIterator it(fake_split({2, 1}), 2, 3, true);
  DocBatch b;
  EXPECT_NE(error_of([&] { it.next(b); }).find("rank 2 of 3 gets no documents"), std::string::npos);
  EXPECT_NE(error_of([&] { DocIterator bad(fake_split({1}), 3, 3, true); }).find("not a valid rank"),
            std::string::npos);
}

TEST(DocIterator, OpensEachFileOncePerPass) {
  int opens = 0;
  DocIterator it(fake_split({3, 3, 3}, &opens), 0, 1, false);
  walk(it, 100);
  EXPECT_EQ(opens, 3);
}

// ---- corpora ----------------------------------------------------------------------------

static std::vector<std::vector<std::string>> read_all(const CorpusSplit& s) {
  std::vector<std::vector<std::string>> out;
  DocIterator it(s, 0, 1, false);
  DocBatch b;
  while (it.next(b)) out.push_back(b.docs);
  return out;
}

TEST(Corpus, JsonlRowGroupsTextColumnAndValIsTheLastFile) {
  std::string dir = make_temp_dir();
  for (int f = 0; f < 3; f++) {
    std::string s;
    for (int i = 0; i < 2500; i++) {
      s += "{\"id\": " + std::to_string(i) + ", \"body\": \"f" + std::to_string(f) + " doc " + std::to_string(i) +
           " \\u00e9\"}\n";
      if (i == 7) s += "\n   \n";  // blank lines are skipped
    }
    write_file(dir + "/part" + std::to_string(f) + ".jsonl", s);
  }
  write_file(dir + "/README.md", "not a corpus file");
  CorpusOptions o;
  o.data_dir = dir;
  o.text_column = "body";
  Corpus c = corpus_open(o);
  EXPECT_EQ(c.kind, "jsonl");
  EXPECT_EQ(corpus_split_files(c, "val"), std::vector<std::string>({dir + "/part2.jsonl"}));
  auto train = read_all(corpus_split(c, "train"));
  ASSERT_EQ(train.size(), 6u);  // 2 files x (1024, 1024, 452)
  EXPECT_EQ(train[2].size(), 452u);
  EXPECT_EQ(train[0][8], "f0 doc 8 \xc3\xa9");
  EXPECT_EQ(train[4][1023], "f1 doc 2047 \xc3\xa9");
  auto val = read_all(corpus_split(c, "val"));
  ASSERT_EQ(val.size(), 3u);
  EXPECT_EQ(val[2].back(), "f2 doc 2499 \xc3\xa9");

  // rank 1 of 2 on the train split: row group 1 of each file
  DocIterator r1(corpus_split(c, "train"), 1, 2, false);
  DocBatch b;
  ASSERT_TRUE(r1.next(b));
  EXPECT_EQ(b.docs[0], "f0 doc 1024 \xc3\xa9");
  ASSERT_TRUE(r1.next(b));
  EXPECT_EQ(b.docs[0], "f1 doc 1024 \xc3\xa9");
  EXPECT_FALSE(r1.next(b));

  o.text_column = "text";  // the default field is missing: say which fields there are
  std::string e = error_of([&] { read_all(corpus_split(corpus_open(o), "train")); });
  EXPECT_NE(e.find(dir + "/part0.jsonl:1: no string field 'text' (fields: body, id)"), std::string::npos) << e;
  EXPECT_NE(e.find("--text-column"), std::string::npos) << e;
  remove_tree(dir);
}

TEST(Corpus, JsonlErrorsNameFileAndLine) {
  std::string dir = make_temp_dir();
  write_file(dir + "/a.jsonl", "{\"text\": \"ok\"}\n{\"text\": \"ok\"\n");
  write_file(dir + "/b.jsonl", "{\"text\": \"ok\"}\n\n{\"text\": \"bad \xff byte\"}\n");
  CorpusOptions o;
  o.data_dir = dir;
  std::string e = error_of([&] { doc_source_open(dir + "/a.jsonl", o)->read_row_group(0); });
  EXPECT_NE(e.find(dir + "/a.jsonl:2: malformed JSON"), std::string::npos) << e;
  e = error_of([&] { doc_source_open(dir + "/b.jsonl", o)->read_row_group(0); });
  EXPECT_NE(e.find(dir + "/b.jsonl:3: invalid UTF-8 at byte 14"), std::string::npos) << e;
  remove_tree(dir);
}

TEST(Corpus, TxtOneDocumentPerFileStridesOverFiles) {
  std::string dir = make_temp_dir();
  for (int i = 0; i < 6; i++)
    write_file(dir + strprintf("/doc%02d.txt", i), strprintf("document %d\n\nsecond paragraph\n", i));
  write_file(dir + "/doc02.txt", " \n");  // empty files are skipped
  CorpusOptions o;
  o.data_dir = dir;
  o.docs_per_group = 2;
  Corpus c = corpus_open(o);
  EXPECT_EQ(c.kind, "txt");
  auto train = read_all(corpus_split(c, "train"));  // doc00..doc04 in groups of 2 files
  ASSERT_EQ(train.size(), 3u);
  EXPECT_EQ(train[0],
            std::vector<std::string>({"document 0\n\nsecond paragraph\n", "document 1\n\nsecond paragraph\n"}));
  EXPECT_EQ(train[1], std::vector<std::string>({"document 3\n\nsecond paragraph\n"}));
  EXPECT_EQ(train[2], std::vector<std::string>({"document 4\n\nsecond paragraph\n"}));
  auto val = read_all(corpus_split(c, "val"));
  EXPECT_EQ(val, std::vector<std::vector<std::string>>({{"document 5\n\nsecond paragraph\n"}}));
  DocIterator r1(corpus_split(c, "train"), 1, 2, false);  // rank 1 of 2 gets the 2nd group of files
  DocBatch b;
  ASSERT_TRUE(r1.next(b));
  EXPECT_EQ(b.docs, train[1]);
  EXPECT_FALSE(r1.next(b));
  write_file(dir + "/doc03.txt", "fine\nline two \xc3\x28\n");
  EXPECT_NE(error_of([&] { read_all(corpus_split(c, "train")); }).find(dir + "/doc03.txt:2: invalid UTF-8"),
            std::string::npos);
  remove_tree(dir);
}

TEST(Corpus, TxtParagraphs) {
  std::string dir = make_temp_dir();
  write_file(dir + "/a.txt", "\n\nfirst line\r\nsecond line\n\n\n   \nthird\n \t\nfourth\nfifth");
  write_file(dir + "/b.txt", "val paragraph\n");
  CorpusOptions o;
  o.data_dir = dir;
  o.txt_split = "paragraphs";
  o.docs_per_group = 2;
  Corpus c = corpus_open(o);
  auto train = read_all(corpus_split(c, "train"));
  EXPECT_EQ(train, std::vector<std::vector<std::string>>({{"first line\nsecond line", "third"}, {"fourth\nfifth"}}));
  EXPECT_EQ(read_all(corpus_split(c, "val")), std::vector<std::vector<std::string>>({{"val paragraph"}}));
  write_file(dir + "/a.txt", "ok\n\nok\nbad \xed\xa0\x80 surrogate\n");
  EXPECT_NE(error_of([&] { read_all(corpus_split(c, "train")); }).find(dir + "/a.txt:4: invalid UTF-8 at byte 4"),
            std::string::npos);
  remove_tree(dir);
}

TEST(Corpus, FolderErrors) {
  std::string dir = make_temp_dir();
  CorpusOptions o;
  o.data_dir = dir + "/missing";
  EXPECT_NE(error_of([&] { corpus_open(o); }).find("not a directory"), std::string::npos);
  o.data_dir = dir;
  EXPECT_NE(error_of([&] { corpus_open(o); }).find("no .parquet, .jsonl or .txt files"), std::string::npos);
  write_file(dir + "/only.jsonl", "{\"text\": \"x\"}\n");
  Corpus c = corpus_open(o);
  EXPECT_NE(error_of([&] { corpus_split(c, "train"); }).find("training needs at least two files"), std::string::npos);
  EXPECT_EQ(corpus_split(c, "val").num_sources, 1);
  o.txt_split = "paragraphs";
  EXPECT_NE(error_of([&] { corpus_open(o); }).find("applies to .txt corpora"), std::string::npos);
  o.txt_split = "lines";
  EXPECT_NE(error_of([&] { corpus_open(o); }).find("--txt-split 'lines'"), std::string::npos);
  o.txt_split = "file";
  write_file(dir + "/x.txt", "x");
  EXPECT_NE(error_of([&] { corpus_open(o); }).find("mixes .jsonl and .txt"), std::string::npos);
  std::string base = make_temp_dir();
  setenv("NANOCHAT_BASE_DIR", base.c_str(), 1);
  EXPECT_NE(error_of([&] { corpus_open(CorpusOptions()); }).find("nanochat download"), std::string::npos);
  unsetenv("NANOCHAT_BASE_DIR");
  remove_tree(base);
  remove_tree(dir);
}

TEST(Corpus, ParquetFilesWrittenByPyarrow) {
  std::string dir = make_temp_dir();
  for (int f = 0; f < 3; f++) {
    auto r = run_shell(kPython + " " + kFixtures + "/make_text_parquet.py " + dir +
                       strprintf("/shard_%05d.parquet", f) + " 2500 1024 f" + std::to_string(f) + " body");
    ASSERT_EQ(r.rc, 0) << r.err;
  }
  CorpusOptions o;
  o.data_dir = dir;
  EXPECT_NE(
      error_of([&] { read_all(corpus_split(corpus_open(o), "train")); }).find("has no column 'text' (columns: body)"),
      std::string::npos);
  o.text_column = "body";
  Corpus c = corpus_open(o);
  EXPECT_EQ(c.kind, "parquet");
  for (int w = 1; w <= 3; w++)
    for (int r = 0; r < w; r++) {
      DocIterator it(corpus_split(c, "train"), r, w, false);
      DocBatch b;
      std::vector<Pos> got;
      while (it.next(b)) {
        got.push_back(key(b.pos));
        size_t want = b.pos.row_group < 2 ? 1024 : 452;
        ASSERT_EQ(b.docs.size(), want);
        for (size_t k = 0; k < b.docs.size(); k += 97)  // doc i of the file is "f<file>-<i> ..."
          EXPECT_EQ(b.docs[k].rfind(strprintf("f%d-%zu ", b.pos.file, b.pos.row_group * 1024 + k), 0), 0u) << b.docs[k];
      }
      EXPECT_EQ(got, expected_walk({3, 3}, r, w, 1));
    }
  auto val = read_all(corpus_split(c, "val"));
  ASSERT_EQ(val.size(), 3u);
  EXPECT_EQ(val[2].back().rfind("f2-2499 ", 0), 0u);

  // null values are dropped, the rest keep their order
  auto r = run_shell(kPython +
                     " -c \"import pyarrow as pa, pyarrow.parquet as pq; pq.write_table(pa.table({'text': "
                     "['a', None, 'b', None, 'c']}), '" +
                     dir + "/nulls.parquet')\"");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(doc_source_open(dir + "/nulls.parquet", CorpusOptions())->read_row_group(0),
            std::vector<std::string>({"a", "b", "c"}));
  remove_tree(dir);
}

TEST(Corpus, CliFlagsFillTheOptions) {
  CLI::App app;
  CorpusOptions o;
  cli_add_data_flags(&app, o);
  app.parse(std::vector<std::string>{"paragraphs", "--txt-split", "body", "--text-column", "/tmp/d", "--data"});
  EXPECT_EQ(o.data_dir, "/tmp/d");
  EXPECT_EQ(o.text_column, "body");
  EXPECT_EQ(o.txt_split, "paragraphs");
  CLI::App app2;
  CorpusOptions o2;
  cli_add_data_flags(&app2, o2);
  EXPECT_THROW(app2.parse(std::vector<std::string>{"lines", "--txt-split"}), CLI::ValidationError);
  CLI::App app3;
  CorpusOptions o3;
  cli_add_data_flags(&app3, o3);
  app3.parse(std::vector<std::string>{});
  EXPECT_EQ(o3.text_column, "text");
  EXPECT_EQ(o3.txt_split, "file");
}
