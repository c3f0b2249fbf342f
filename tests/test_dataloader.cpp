// dataloader: best-fit packing against hand-worked rows and an independent Python
// implementation written from upstream's dataloader.py (tests/fixtures/bestfit_reference.py)
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "nanochat/common.h"
#include "nanochat/dataloader.h"
#include "test_util.h"

using namespace nanochat;
using Docs = std::vector<std::vector<int32_t>>;

static BestFitPacker::Refill from(Docs docs, size_t per_refill) {
  auto next = std::make_shared<size_t>(0);
  return [docs = std::move(docs), per_refill, next](BestFitPacker& packer) {
    if (*next >= docs.size()) return false;
    for (size_t k = 0; k < per_refill && *next < docs.size(); k++) packer.push(docs[(*next)++]);
    return true;
  };
}

TEST(BestFit, HandWorkedRows) {
  // T = 5: rows of 6. Buffer of 3 documents (B = BOS = 9).
  // row 0: space 6: largest fitting of {[9,1,1,1], [9,2], [9,3,3,3,3,3,3,3]} is [9,1,1,1] (4);
  //        space 2: buffer {[9,2], [9,3..], [9,4,4]}: [9,2] and [9,4,4]? only [9,2] fits (2)
  // row 1: buffer {[9,3,3,3,3,3,3,3], [9,4,4], [9,5]}: space 6: [9,4,4] (3); space 3: buffer
  //        {[9,3..], [9,5], (end)}: [9,5] (2); space 1: nothing fits, the shortest [9,3..] is
  //        cropped to [9]
  Docs docs = {{9, 1, 1, 1}, {9, 2}, {9, 3, 3, 3, 3, 3, 3, 3}, {9, 4, 4}, {9, 5}};
  BestFitPacker packer(2, 5, 3);
  std::vector<int32_t> rows;
  ASSERT_TRUE(packer.next_batch(from(docs, 1), rows));
  EXPECT_EQ(rows, (std::vector<int32_t>{9, 1, 1, 1, 9, 2, /**/ 9, 4, 4, 9, 5, 9}));
  EXPECT_EQ(packer.tokens_used(), 12);
  EXPECT_EQ(packer.tokens_cropped(), 7);  // [9,3,...] lost 7 of its 8 tokens
}

TEST(BestFit, TiesGoToTheFirstInBufferOrder) {
  // two documents of length 3 fit exactly: the first one wins, then the other
  Docs docs = {{9, 7, 7}, {9, 8, 8}, {9, 6, 6, 6}};
  BestFitPacker packer(1, 2, 3);  // rows of 3
  std::vector<int32_t> rows;
  auto refill = from(docs, 3);
  ASSERT_TRUE(packer.next_batch(refill, rows));
  EXPECT_EQ(rows, (std::vector<int32_t>{9, 7, 7}));
  ASSERT_TRUE(packer.next_batch(refill, rows));
  EXPECT_EQ(rows, (std::vector<int32_t>{9, 8, 8}));
}

TEST(BestFit, EndOfDataAndBadSizes) {
  BestFitPacker packer(1, 10, 4);
  std::vector<int32_t> rows;
  EXPECT_FALSE(packer.next_batch(from({{9, 1}}, 1), rows));  // 2 tokens cannot fill 11
  EXPECT_THROW(BestFitPacker(0, 10), Error);
}

TEST(BestFit, MatchesAnIndependentImplementation) {
  std::string dir = make_temp_dir();
  auto r = run_shell(std::string(NANOCHAT_PYTHON) + " " + NANOCHAT_SOURCE_DIR +
                     "/tests/fixtures/bestfit_reference.py " + dir + "/ref.json");
  ASSERT_EQ(r.rc, 0) << r.err;
  auto ref = nlohmann::json::parse(read_file(dir + "/ref.json"));
  auto docs = ref["docs"].get<Docs>();
  for (auto& c : ref["cases"]) {
    int64_t B = c["B"], T = c["T"];
    BestFitPacker packer(B, T, c["buffer_size"].get<size_t>());
    auto refill = from(docs, c["refill_size"].get<size_t>());
    std::vector<int32_t> rows;
    for (auto& batch : c["batches"]) {
      ASSERT_TRUE(packer.next_batch(refill, rows));
      std::vector<int32_t> want;
      for (auto& row : batch)
        for (auto& t : row) want.push_back(t.get<int32_t>());
      ASSERT_EQ(rows, want) << "B=" << B << " T=" << T;
    }
  }
  remove_tree(dir);
}
