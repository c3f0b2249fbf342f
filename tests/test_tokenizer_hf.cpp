// Tests for tokenizer.json (the tokenizers library's format) in and out: the ids equal the
// library's own on about 3 MB of mixed text (English, code, digits, whitespace runs, 20 scripts,
// emoji, combining marks), for both byte-level kinds; what cannot be represented exactly is
// one Error naming the file and the field. The library's ids come from tests/fixtures/hf_fixtures.py.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "hf_fixtures.h"
#include "nanochat/common/error.h"
#include "nanochat/tokenizer/hf_json.h"

using namespace nanochat;
using json = nlohmann::json;

namespace {

std::vector<int32_t> read_ids(const std::string& path) {
  std::string bytes = read_file(path);
  std::vector<int32_t> ids(bytes.size() / 4);
  std::memcpy(ids.data(), bytes.data(), ids.size() * 4);
  return ids;
}

void expect_library_ids(const std::string& kind) {
  const std::string dir = hf_fixtures().dir;
  Tokenizer tok = tokenizer_load_hf_json(dir + "/tok_" + kind + "/tokenizer.json");
  EXPECT_EQ(tok.vocab_size(), 1009);
  EXPECT_EQ(tok.special_id("<|assistant_end|>"), 1004);  // mapped by name
  std::string text = read_file(dir + "/tok_text.txt");
  ASSERT_GT(text.size(), 3000000u);
  std::vector<int32_t> ours = tok.encode(text), theirs = read_ids(dir + "/tok_" + kind + "_ids.bin");
  size_t i = 0;
  while (i < ours.size() && i < theirs.size() && ours[i] == theirs[i]) i++;
  EXPECT_EQ(i, theirs.size()) << kind << ": first difference at id " << i << " of " << theirs.size();
  EXPECT_EQ(ours.size(), theirs.size());
}

std::string write_json(const json& j) {
  std::string path = temp_dir() + "/tokenizer.json";
  std::ofstream(path) << j.dump();
  return path;
}

}  // namespace

TEST(TokenizerHf, SplitRegexThenByteLevelGivesTheLibrarysIds) {
  NEEDS_TRANSFORMERS();
  expect_library_ids("split");
}

TEST(TokenizerHf, ByteLevelWithItsRegexGivesTheLibrarysIds) {
  NEEDS_TRANSFORMERS();
  expect_library_ids("bytelevel");
}

// written from ours and read back: the same ranks, specials and pattern (what transformers
// makes of the written file is checked by HfExport in test_checkpoint_hf.cpp)
TEST(TokenizerHf, WrittenJsonReadsBackAsTheSameTokenizer) {
  NEEDS_TRANSFORMERS();
  Tokenizer tok = tokenizer_load_hf_json(hf_fixtures().dir + "/tok_split/tokenizer.json");
  std::string path = write_json(json::parse(tokenizer_hf_json(tok)));
  Tokenizer back = tokenizer_load_hf_json(path);
  EXPECT_EQ(back.ranks(), tok.ranks());
  EXPECT_EQ(back.specials(), tok.specials());
  EXPECT_EQ(back.pattern(), tok.pattern());
}

// each kind we cannot represent exactly: one Error naming the file and what it is
TEST(TokenizerHf, UnrepresentableKindsAreRefusedByName) {
  NEEDS_TRANSFORMERS();
  const json good = json::parse(read_file(hf_fixtures().dir + "/tok_split/tokenizer.json"));
  auto expect_refused = [&](const std::function<void(json&)>& edit, const std::string& needle) {
    json j = good;
    edit(j);
    std::string path = write_json(j);
    try {
      tokenizer_load_hf_json(path);
      ADD_FAILURE() << "accepted, expected an error naming " << needle;
    } catch (const Error& e) {
      std::string msg = e.what();
      EXPECT_NE(msg.find(path), std::string::npos) << msg;
      EXPECT_NE(msg.find(needle), std::string::npos) << msg;
      EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    }
  };
  expect_refused([](json& j) { j["normalizer"] = {{"type", "NFC"}}; }, "normalizer");
  expect_refused([](json& j) { j["model"]["type"] = "WordPiece"; }, "WordPiece");
  expect_refused([](json& j) { j["model"]["byte_fallback"] = true; }, "byte_fallback");
  expect_refused([](json& j) { j["pre_tokenizer"] = {{"type", "Whitespace"}}; }, "pre_tokenizer");
  expect_refused([](json& j) { j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Removed"; }, "Removed");
  expect_refused([](json& j) { j["pre_tokenizer"]["pretokenizers"][1]["add_prefix_space"] = true; }, "add_prefix_space");
  expect_refused([](json& j) { std::swap(j["model"]["merges"][3], j["model"]["merges"][4]); }, "merge 4");
  expect_refused([](json& j) { j["added_tokens"][0]["special"] = false; }, "not special");
  expect_refused([](json& j) { j["added_tokens"][2]["id"] = 5; }, "<|user_end|>");
  expect_refused([](json& j) { j["model"]["vocab"].erase("\xc4\x80"); }, "id");  // U+0100 stands for byte 0x00
  expect_refused(
      [](json& j) {
        for (auto& a : j["added_tokens"]) a["content"] = "<|x" + a["id"].dump() + "|>";
      },
      "<|bos|>");
}
