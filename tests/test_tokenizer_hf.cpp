// Tests for tokenizer.json (the tokenizers library's format) in and out: the ids equal the
// library's own on about 3 MB of mixed text (English, code, digits, whitespace runs, 20 scripts,
// emoji, combining marks), for both byte-level kinds; what cannot be represented exactly is
// one Error naming the file and the field. The library's ids come from tests/fixtures/hf_fixtures.py.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
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

// ours through the file's ids (HfTokenizer::file_ids) against the library's own ids; the
// file's id of <|assistant_end|> is what the library says it is
void expect_library_ids(const std::string& kind, int32_t assistant_end_id) {
  const std::string dir = hf_fixtures().dir;
  HfTokenizer hf = tokenizer_read_hf_json(dir + "/tok_" + kind + "/tokenizer.json");
  const Tokenizer& tok = hf.tok;
  EXPECT_EQ(tok.vocab_size(), 1009);
  ASSERT_EQ(hf.file_ids.size(), 1009u);
  EXPECT_EQ(hf.file_ids[tok.special_id("<|assistant_end|>")], assistant_end_id);  // mapped by name
  std::string text = read_file(dir + "/tok_text.txt");
  ASSERT_GT(text.size(), 3000000u);
  std::vector<int32_t> ours = tok.encode(text), theirs = read_ids(dir + "/tok_" + kind + "_ids.bin");
  for (int32_t& id : ours) id = hf.file_ids.at(id);
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
  expect_library_ids("split", 1004);
  EXPECT_TRUE(tokenizer_read_hf_json(hf_fixtures().dir + "/tok_split/tokenizer.json").identity());
}

TEST(TokenizerHf, ByteLevelWithItsRegexGivesTheLibrarysIds) {
  NEEDS_TRANSFORMERS();
  expect_library_ids("bytelevel", 1004);
}

// BpeTrainer given the special tokens puts them at ids 0..8 (the bytes and merges after)
TEST(TokenizerHf, SpecialsFirstLayoutGivesTheLibrarysIds) {
  NEEDS_TRANSFORMERS();
  expect_library_ids("specials_first", 4);
  EXPECT_FALSE(tokenizer_read_hf_json(hf_fixtures().dir + "/tok_specials_first/tokenizer.json").identity());
}

// any layout: the vocab ids of the split tokenizer permuted at random, merges as they were
TEST(TokenizerHf, ShuffledIdsGiveTheLibrarysIds) {
  NEEDS_TRANSFORMERS();
  json j = json::parse(read_file(hf_fixtures().dir + "/tok_shuffled/tokenizer.json"));
  int32_t assistant_end = -1;
  for (auto& a : j["added_tokens"])
    if (a["content"] == "<|assistant_end|>") assistant_end = a["id"];
  expect_library_ids("shuffled", assistant_end);
}

// a split regex that is not one of the known ones needs the explicit flag, and then runs
// under a match limit and a time budget: a catastrophic pattern is a 400 in well under a second
TEST(TokenizerHf, UnknownRegexNeedsTheFlagAndRunsBounded) {
  NEEDS_TRANSFORMERS();
  json j = json::parse(read_file(hf_fixtures().dir + "/tok_split/tokenizer.json"));
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(?:a?){18}a{18}b|[\\s\\S]";
  std::string path = write_json(j);
  try {
    tokenizer_read_hf_json(path);
    ADD_FAILURE() << "an unknown regex was accepted without the flag";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--allow-custom-regex"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
  Tokenizer tok = tokenizer_read_hf_json(path, true).tok;
  EXPECT_EQ(tok.encode("xyz").size(), 3u);  // [\s\S]: one piece a character
  const std::string hostile(8000, 'a');
  auto start = std::chrono::steady_clock::now();
  try {
    tok.encode(hostile);
    ADD_FAILURE() << "the catastrophic pattern finished its 8,000 characters";
  } catch (const Error& e) {  // chat-web answers 400 for an Error while tokenizing (routes.cpp)
    EXPECT_NE(std::string(e.what()).find("custom split pattern"), std::string::npos) << e.what();
  }
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 1.0);
  // the known patterns are not held to it: nanochat's own splits the 3 MB text
  Tokenizer known = tokenizer_load_hf_json(hf_fixtures().dir + "/tok_split/tokenizer.json");
  EXPECT_GT(known.encode(read_file(hf_fixtures().dir + "/tok_text.txt")).size(), 100000u);
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
  expect_refused([](json& j) { j["pre_tokenizer"]["pretokenizers"][1]["add_prefix_space"] = true; },
                 "add_prefix_space");
  expect_refused([](json& j) { j["model"]["merges"][4] = "\xc4\xa0 q\xc3\xa9"; }, "merge 4");
  expect_refused([](json& j) { j["added_tokens"][0]["special"] = false; }, "not special");
  expect_refused([](json& j) { j["added_tokens"][2]["id"] = 5; }, "<|user_end|>");
  expect_refused([](json& j) { j["model"]["vocab"].erase("\xc4\x80"); }, "id");  // U+0100 stands for byte 0x00
  // a 40 KB token no merge makes (its split into merges at export was quadratic in it)
  expect_refused(
      [](json& j) {
        size_t next = 0;
        for (auto& [tok, id] : j["model"]["vocab"].items()) next = std::max(next, id.get<size_t>() + 1);
        for (auto& a : j["added_tokens"]) next = std::max(next, a["id"].get<size_t>() + 1);
        j["model"]["vocab"][std::string(40000, 'a')] = next;
      },
      "made by no merge");
  expect_refused(
      [](json& j) {
        for (auto& a : j["added_tokens"]) a["content"] = "<|x" + a["id"].dump() + "|>";
      },
      "<|bos|>");
}

// the kept table of an import's ids: written only when it is not the identity, read back as it
// was, and anything but a permutation of the vocabulary is one error naming the file
TEST(TokenizerHf, KeptFileIdsAreAPermutationOrRefused) {
  const std::string dir = temp_dir();
  EXPECT_EQ(tokenizer_load_hf_ids(dir, 3), (std::vector<int32_t>{0, 1, 2}));  // none kept
  tokenizer_save_hf_ids(dir, {2, 0, 1});
  EXPECT_EQ(tokenizer_load_hf_ids(dir, 3), (std::vector<int32_t>{2, 0, 1}));
  tokenizer_save_hf_ids(dir, {0, 1, 2});  // the identity removes it
  EXPECT_FALSE(std::ifstream(dir + "/hf_token_ids.json").good());
  for (const char* bad : {"{\"file_ids\": [2, 2, 1]}", "{\"file_ids\": [0, 1]}", "{\"file_ids\": [0, 1, 3]}",
                          "{\"file_ids\": [0, 1, -1]}", "[0, 1, 2]", "{\"file_ids\": [0, 1,"}) {
    std::ofstream(dir + "/hf_token_ids.json") << bad;
    try {
      tokenizer_load_hf_ids(dir, 3);
      ADD_FAILURE() << "accepted " << bad;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("hf_token_ids.json"), std::string::npos) << e.what();
    }
  }
}
