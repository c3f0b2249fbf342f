// tokenizer: hand-worked merges and encodings, then equality with upstream's own tools on a
// multilingual corpus: rustbpe's merges, Python regex's pieces, tiktoken's ids and decodes
#include <gtest/gtest.h>
#include <fstream>
#include <optional>

#include "nanochat/common.h"
#include "nanochat/tokenizer.h"
#include "test_util.h"

using namespace nanochat;

static std::vector<std::string> byte_ranks() {
  std::vector<std::string> r;
  for (int i = 0; i < 256; i++) r.push_back(std::string(1, (char)i));
  return r;
}

static std::vector<std::pair<std::string, int32_t>> nanochat_specials(int32_t first) {
  std::vector<std::pair<std::string, int32_t>> s;
  for (size_t i = 0; i < kSpecialTokens.size(); i++) s.emplace_back(kSpecialTokens[i], first + (int32_t)i);
  return s;
}

static std::vector<std::string> train(const std::vector<std::string>& texts, int32_t vocab) {
  ThreadPool pool(2);
  BpeTrainer trainer(kPatternNanochat, pool);
  trainer.add_texts(texts);
  return trainer.train(vocab);
}

TEST(BpeTrain, OverlappingPairsMergeLeftToRight) {
  // "aaa": (a,a) occurs twice -> "aa"; the word becomes [aa, a] -> "aaa"
  auto ranks = train({"aaa"}, 258);
  EXPECT_EQ(ranks[256], "aa");
  EXPECT_EQ(ranks[257], "aaa");
}

TEST(BpeTrain, HighestCountFirstThenSmallestPair) {
  // pieces "cd", " cd", "ab": (c,d)=2 wins; then (' ',cd) and (a,b) tie at 1 and the smaller
  // pair (32, 256) < (97, 98) goes first
  auto ranks = train({"cd cd", "ab"}, 259);
  EXPECT_EQ(ranks[256], "cd");
  EXPECT_EQ(ranks[257], " cd");
  EXPECT_EQ(ranks[258], "ab");
}

TEST(BpeTrain, TooLargeVocabIsAClearError) {
  EXPECT_THROW(train({"ab"}, 300), Error);
  EXPECT_THROW(train({"ab"}, 100), Error);
}

TEST(Encode, LowestRankMergesFirst) {
  auto ranks = byte_ranks();
  ranks.push_back("bc");  // 256
  ranks.push_back("ab");  // 257
  Tokenizer tok(ranks, kPatternNanochat, nanochat_specials(258), "<|bos|>");
  // "abc": bc (256) beats ab (257)
  EXPECT_EQ(tok.encode("abc"), (std::vector<int32_t>{'a', 256}));
  ranks.push_back("abc");  // a whole piece with a rank is one token
  Tokenizer tok2(ranks, kPatternNanochat, nanochat_specials(259), "<|bos|>");
  EXPECT_EQ(tok2.encode("abc"), (std::vector<int32_t>{258}));
  // " abc" is one piece: bc (256) first, then a+bc = abc (258); nothing joins the space
  EXPECT_EQ(tok2.encode("abc abc"), (std::vector<int32_t>{258, ' ', 258}));
}

TEST(Encode, CopiesAndMovesKeepWorking) {
  auto make = [] {
    auto ranks = byte_ranks();
    ranks.push_back("ab");
    return Tokenizer(ranks, kPatternNanochat, nanochat_specials(257), "<|bos|>");
  };
  Tokenizer moved = make();
  Tokenizer copy = moved;
  auto heap = std::make_unique<Tokenizer>(std::move(moved));
  EXPECT_EQ(heap->encode("ab"), (std::vector<int32_t>{256}));
  EXPECT_EQ(copy.encode("abab"), (std::vector<int32_t>{256, 256}));
}

// the per-thread cache of merged pieces belongs to one tokenizer: a tokenizer built where an
// earlier one was (the same address) does not get the earlier one's merges of a piece
TEST(Encode, ATokenizerAtAFreedOnesAddressMergesByItsOwnRanks) {
  auto with = [](const char* merge) {
    auto ranks = byte_ranks();
    ranks.push_back(merge);  // 256
    return ranks;
  };
  std::optional<Tokenizer> slot;
  slot.emplace(with("ab"), kPatternNanochat, nanochat_specials(257), "<|bos|>");
  const Tokenizer* first = &*slot;
  EXPECT_EQ(slot->encode("aba"), (std::vector<int32_t>{256, 'a'}));  // "aba" is one piece: cached
  slot.reset();
  slot.emplace(with("ba"), kPatternNanochat, nanochat_specials(257), "<|bos|>");
  ASSERT_EQ(&*slot, first);
  EXPECT_EQ(slot->encode("aba"), (std::vector<int32_t>{'a', 256}));
}

TEST(Encode, SpecialTokensArePlainTextUnlessAllowed) {
  Tokenizer tok(byte_ranks(), kPatternNanochat, nanochat_specials(256), "<|bos|>");
  EXPECT_EQ(tok.bos_id(), 256);
  EXPECT_EQ(tok.vocab_size(), 265);
  auto plain = tok.encode("<|bos|>");
  EXPECT_EQ(plain.size(), 7u);  // '<', '|', 'bos' as bytes, '|', '>' ... all plain bytes
  EXPECT_EQ(tok.decode(plain), "<|bos|>");
  auto special = tok.encode_with_specials("a<|bos|>b<|user_end|>", {"<|bos|>"});
  EXPECT_EQ(special[0], 'a');
  EXPECT_EQ(special[1], 256);
  EXPECT_EQ(special[2], 'b');
  EXPECT_EQ(special.size(), 3u + 12u);  // <|user_end|> stays text: 12 bytes
  EXPECT_EQ(tok.decode({256}), "<|bos|>");
  EXPECT_EQ(tok.token_byte_counts()[256], 0);
  EXPECT_EQ(tok.token_byte_counts()['a'], 1);
  EXPECT_THROW(tok.decode({9999}), Error);
}

// ---- equality with rustbpe, regex and tiktoken ---------------------------------------------

struct Reference {
  nlohmann::json j;
  std::vector<std::string> texts;
};

static const Reference& reference() {
  static Reference ref = [] {
    std::string dir = make_temp_dir();
    std::string cmd = std::string(NANOCHAT_PYTHON) + " " + NANOCHAT_SOURCE_DIR +
                      "/tests/fixtures/tokenizer_reference.py " + dir + "/ref.json 600";
    auto r = run_shell(cmd);
    EXPECT_EQ(r.rc, 0) << r.err;
    Reference out;
    out.j = nlohmann::json::parse(read_file(dir + "/ref.json"));
    out.texts = out.j["texts"].get<std::vector<std::string>>();
    remove_tree(dir);
    return out;
  }();
  return ref;
}

static std::vector<std::string> reference_ranks() {
  std::vector<std::string> ranks;
  for (auto& b64 : reference().j["ranks"]) ranks.push_back(base64_decode(b64.get<std::string>()));
  return ranks;
}

TEST(Reference, TrainingGivesRustbpesMerges) {
  auto ours = train(reference().texts, reference().j["vocab_size"].get<int32_t>());
  auto theirs = reference_ranks();
  ASSERT_EQ(ours.size(), theirs.size());
  for (size_t i = 0; i < ours.size(); i++) ASSERT_EQ(ours[i], theirs[i]) << "rank " << i;
}

TEST(Reference, SplitterGivesPythonRegexPieces) {
  for (auto& [name, per_text] : reference().j["pieces"].items()) {
    Splitter splitter(pattern_by_name(name));
    for (size_t t = 0; t < reference().texts.size(); t++) {
      std::vector<std::string_view> pieces;
      splitter.split(reference().texts[t], pieces);
      auto want = per_text[t].get<std::vector<std::string>>();
      ASSERT_EQ(std::vector<std::string>(pieces.begin(), pieces.end()), want) << name << " text " << t;
    }
  }
}

TEST(Reference, EncodeGivesTiktokensIdsWithEveryPattern) {
  ThreadPool pool(2);
  for (auto& [name, ids] : reference().j["ids"].items()) {
    Tokenizer tok(reference_ranks(), pattern_by_name(name), {{"<|bos|>", 600}}, "<|bos|>");
    auto batch = tok.encode_batch(reference().texts, pool);
    for (size_t t = 0; t < reference().texts.size(); t++) {
      auto want = ids[t].get<std::vector<int32_t>>();
      ASSERT_EQ(tok.encode(reference().texts[t]), want) << name << " text " << t;
      ASSERT_EQ(batch[t], want) << name << " text " << t;
      ASSERT_EQ(tok.decode(want), reference().texts[t]) << name << " text " << t;
    }
  }
}

TEST(Reference, LettersNewerThanPcre2sUnicodeSplitLikeTiktoken) {
  auto texts = reference().j["new_unicode_texts"].get<std::vector<std::string>>();
  for (auto& [name, ids] : reference().j["new_unicode_ids"].items()) {
    if (name == "o200k") continue;  // its \p{Lu}, \p{Ll}, ... still come from PCRE2 (docs/tokenizer.md)
    for (size_t t = 0; t < texts.size(); t++) {
      auto ranks = byte_ranks();
      ranks.push_back(texts[t]);  // token 256: the whole text
      Tokenizer tok(ranks, pattern_by_name(name), {{"<|bos|>", 257}}, "<|bos|>");
      EXPECT_EQ(tok.encode(texts[t]), ids[t].get<std::vector<int32_t>>()) << name << " " << texts[t];
    }
  }
}

TEST(Reference, DecodeReplacesLikeTiktoken) {
  for (auto& [name, chunks] : reference().j["decoded"].items()) {
    Tokenizer tok(reference_ranks(), pattern_by_name(name), {{"<|bos|>", 600}}, "<|bos|>");
    std::vector<int32_t> flat;
    for (auto& row : reference().j["ids"][name])
      for (auto& id : row) flat.push_back(id.get<int32_t>());
    flat.resize(std::min<size_t>(flat.size(), 3000));
    for (size_t k = 0, c = 0; k < flat.size(); k += 7, c++) {
      std::vector<int32_t> part(flat.begin() + k, flat.begin() + std::min(flat.size(), k + 7));
      ASSERT_EQ(tok.decode(part), chunks[c].get<std::string>()) << name << " chunk " << c;
    }
  }
}

TEST(Reference, Utf8ReplacementMatchesPython) {
  for (auto& c : reference().j["utf8_cases"])
    ASSERT_EQ(utf8_decode_replace(base64_decode(c[0].get<std::string>())), c[1].get<std::string>()) << c[0];
}

// ---- files -----------------------------------------------------------------------------

TEST(Files, SaveLoadRoundTripAndTiktokenFormat) {
  std::string dir = make_temp_dir();
  auto ranks = reference_ranks();
  Tokenizer tok(ranks, kPatternNanochat, nanochat_specials((int32_t)ranks.size()), "<|bos|>");
  tokenizer_save(tok, dir);
  Tokenizer back = tokenizer_load(dir);
  EXPECT_EQ(back.vocab_size(), tok.vocab_size());
  EXPECT_EQ(back.bos_id(), 600);
  EXPECT_EQ(back.pattern(), std::string(kPatternNanochat));
  for (auto& t : reference().texts) ASSERT_EQ(back.encode(t), tok.encode(t));
  // the rank file is tiktoken's format: line i is "base64(bytes) i"
  std::ifstream in(dir + "/tokenizer.tiktoken");
  std::string line;
  std::getline(in, line);
  EXPECT_EQ(line, "AA== 0");
  std::string tb = read_file(dir + "/token_bytes.bin");
  ASSERT_EQ(tb.size(), 4u * 609);
  int32_t n600, n97;
  memcpy(&n600, tb.data() + 4 * 600, 4);
  memcpy(&n97, tb.data() + 4 * 97, 4);
  EXPECT_EQ(n600, 0);
  EXPECT_EQ(n97, 1);
  remove_tree(dir);
}

TEST(Files, BadRankFilesNameFileAndLine) {
  std::string dir = make_temp_dir();
  struct Case {
    const char* text;
    const char* needle;
  };
  for (Case c : {Case{"AA== 0\nAQ== 0\n", "f.tiktoken:2: duplicate rank 0"},
                 Case{"AA== 0\nAQ== 2\n", "f.tiktoken:2: rank 2 where rank 1 belongs"},
                 Case{"AA== 0\nA!== 1\n", "f.tiktoken:2: bad base64"},
                 Case{"AA== 0\nAQ==\n", "f.tiktoken:2: expected 'base64 rank'"},
                 Case{"AA== x\n", "f.tiktoken:1: rank='x' is not an integer"},
                 Case{"AA== 5\n", "f.tiktoken:1: rank 5 where rank 0 belongs"}}) {
    atomic_write_file(dir + "/f.tiktoken", c.text);
    try {
      tiktoken_ranks_read(dir + "/f.tiktoken");
      ADD_FAILURE() << "accepted " << c.text;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(c.needle), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(tokenizer_load(dir + "/missing"), Error);
  remove_tree(dir);
}

// tokenizer.json's special ids are bounded by the vocabulary before the Tokenizer makes room
// for them: the fuzz corpus's regression (an id of 2^31-1 once asked for 64 GB) and its kin
TEST(Files, SpecialIdsOutsideTheVocabularyAreCleanErrors) {
  std::string dir = make_temp_dir();
  std::string ranks;
  for (int b = 0; b < 256; b++) ranks += base64_encode(std::string(1, (char)b)) + " " + std::to_string(b) + "\n";
  auto load_with = [&](const std::string& special_tokens, const std::string& extra) {
    atomic_write_file(dir + "/tokenizer.tiktoken", ranks);
    atomic_write_file(dir + "/tokenizer.json", "{\"pattern\": \"\\\\s+|\\\\S+\", \"bos_token\": \"<|bos|>\", " + extra +
                                                   "\"special_tokens\": " + special_tokens + "}");
    return tokenizer_load(dir);
  };
  EXPECT_EQ(load_with("{\"<|bos|>\": 256, \"<|end|>\": 300}", "").vocab_size(), 301);  // a gap is fine
  struct Case {
    std::string specials, extra, needle;
  };
  for (const Case& c :
       {Case{"{\"<|bos|>\": 2147483647}", "", "<|bos|> has id 2147483647, outside the special ids [256, 4352)"},
        Case{"{\"<|bos|>\": 256, \"<|x|>\": 4352}", "", "<|x|> has id 4352"},
        Case{"{\"<|bos|>\": 256, \"<|x|>\": 258}", "\"vocab_size\": 258, ",
             "<|x|> has id 258, outside the special ids [256, 258)"},
        Case{"{\"<|bos|>\": 256}", "\"vocab_size\": 99999999, ", "vocab_size 99999999 is not between"},
        Case{"{\"<|bos|>\": 12}", "", "<|bos|> has id 12"}, Case{"{\"<|bos|>\": -1}", "", "<|bos|> has id -1"},
        Case{"{\"<|bos|>\": 1e300}", "", "<|bos|> has id 1e+300"},
        Case{"{\"<|bos|>\": \"256\"}", "", "<|bos|> has id \"256\""},
        Case{"[256]", "", "special_tokens is not an object"}}) {
    try {
      load_with(c.specials, c.extra);
      ADD_FAILURE() << "accepted " << c.specials;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(c.needle), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("tokenizer.json"), std::string::npos) << e.what();
    }
  }
  remove_tree(dir);
}

// ---- chat rendering (render_conversation) ------------------------------------------------------------

class Chat : public ::testing::Test {
 protected:
  Tokenizer tok{byte_ranks(), kPatternNanochat, nanochat_specials(256), "<|bos|>"};
  int32_t id(const char* name) { return tok.special_id(name); }
  std::vector<int32_t> enc(const std::string& s) { return tok.encode(s); }
  static std::vector<int32_t> cat(std::initializer_list<std::vector<int32_t>> parts) {
    std::vector<int32_t> out;
    for (auto& p : parts) out.insert(out.end(), p.begin(), p.end());
    return out;
  }
};

TEST_F(Chat, SupervisedTokensAndMask) {
  auto conv = nlohmann::json::parse(
      R"({"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"hello!"},
    {"role":"user","content":"bye"},{"role":"assistant","content":"later"}]})");
  auto r = render_conversation(tok, conv);
  auto want = cat({{id("<|bos|>"), id("<|user_start|>")},
                   enc("hi"),
                   {id("<|user_end|>"), id("<|assistant_start|>")},
                   enc("hello!"),
                   {id("<|assistant_end|>"), id("<|user_start|>")},
                   enc("bye"),
                   {id("<|user_end|>"), id("<|assistant_start|>")},
                   enc("later"),
                   {id("<|assistant_end|>")}});
  EXPECT_EQ(r.ids, want);
  std::vector<int32_t> supervised;
  for (size_t i = 0; i < r.ids.size(); i++)
    if (r.mask[i]) supervised.push_back(r.ids[i]);
  EXPECT_EQ(supervised, cat({enc("hello!"), {id("<|assistant_end|>")}, enc("later"), {id("<|assistant_end|>")}}));
}

TEST_F(Chat, SystemMessageMergesIntoTheFirstUserMessage) {
  auto with_system = nlohmann::json::parse(R"({"messages":[{"role":"system","content":"be nice"},
    {"role":"user","content":"hi"},{"role":"assistant","content":"ok"}]})");
  auto merged = nlohmann::json::parse(R"({"messages":[{"role":"user","content":"be nice\n\nhi"},
    {"role":"assistant","content":"ok"}]})");
  EXPECT_EQ(render_conversation(tok, with_system).ids, render_conversation(tok, merged).ids);
}

TEST_F(Chat, ToolPartsAndTheirMasks) {
  auto conv = nlohmann::json::parse(R"({"messages":[{"role":"user","content":"q"},{"role":"assistant","content":[
    {"type":"text","text":"a"},{"type":"python","text":"1+1"},{"type":"python_output","text":"2"},{"type":"text","text":"b"}]}]})");
  auto r = render_conversation(tok, conv);
  auto want_ids = cat({{id("<|bos|>"), id("<|user_start|>")},
                       enc("q"),
                       {id("<|user_end|>"), id("<|assistant_start|>")},
                       enc("a"),
                       {id("<|python_start|>")},
                       enc("1+1"),
                       {id("<|python_end|>"), id("<|output_start|>")},
                       enc("2"),
                       {id("<|output_end|>")},
                       enc("b"),
                       {id("<|assistant_end|>")}});
  EXPECT_EQ(r.ids, want_ids);
  std::vector<uint8_t> want_mask = {0, 0, 0, 0, 0, /*a*/ 1, /*python*/ 1, 1, 1, 1, 1, /*output*/ 0, 0, 0, /*b*/ 1, 1};
  EXPECT_EQ(r.mask, want_mask);
}

TEST_F(Chat, TruncationAndErrors) {
  auto conv = nlohmann::json::parse(
      R"({"messages":[{"role":"user","content":"hello there"},{"role":"assistant","content":"hi"}]})");
  auto r = render_conversation(tok, conv, 5);
  EXPECT_EQ(r.ids.size(), 5u);
  EXPECT_EQ(r.mask.size(), 5u);
  EXPECT_THROW(render_conversation(tok, nlohmann::json::parse(R"({"messages":[]})")), Error);
  EXPECT_THROW(render_conversation(tok, nlohmann::json::parse(R"({"messages":[{"role":"assistant","content":"x"}]})")),
               Error);
  EXPECT_THROW(
      render_conversation(
          tok, nlohmann::json::parse(R"({"messages":[{"role":"user","content":"x"},{"role":"user","content":"y"}]})")),
      Error);
  EXPECT_THROW(
      render_conversation(
          tok,
          nlohmann::json::parse(
              R"({"messages":[{"role":"user","content":"x"},{"role":"assistant","content":[{"type":"image","text":"y"}]}]})")),
      Error);
}

TEST_F(Chat, RenderForCompletion) {
  auto conv = nlohmann::json::parse(
      R"({"messages":[{"role":"user","content":"2+2?"},{"role":"assistant","content":"4"}]})");
  auto ids = render_for_completion(tok, conv);
  auto want = cat(
      {{id("<|bos|>"), id("<|user_start|>")}, enc("2+2?"), {id("<|user_end|>"), id("<|assistant_start|>")}});
  EXPECT_EQ(ids, want);
  EXPECT_THROW(render_for_completion(tok, nlohmann::json::parse(R"({"messages":[{"role":"user","content":"x"}]})")),
               Error);
}

// ---- tok-eval (scripts/tok_eval.py) ------------------------------------------------------------------

TEST(TokEval, TableAgainstAByteLevelTokenizer) {
  auto ranks = reference_ranks();
  Tokenizer ours(ranks, kPatternNanochat, nanochat_specials((int32_t)ranks.size()), "<|bos|>");
  Tokenizer bytes(byte_ranks(), kPatternNanochat, nanochat_specials(256), "<|bos|>");
  std::vector<TokEvalText> texts = {{"tiny", "hello hello"}};
  std::string table = tok_eval_report(texts, ours, {{"bytes", &bytes}}, false);
  // a byte-level tokenizer needs one token per byte: 11 tokens, ratio 1.00
  size_t mine = ours.encode("hello hello").size();
  double diff = 100.0 * (11.0 - (double)mine) / 11.0;
  std::string row = strprintf("%-16s %9d %9d %7.2f %9zu %7.2f %+8.1f%%  ours", "tiny", 11, 11, 1.0, mine, 11.0 / mine,
                              diff);
  EXPECT_NE(table.find(row), std::string::npos) << table << "\nwant: " << row;
  EXPECT_EQ(tok_eval_builtin_texts().size(), 5u);
  for (auto& t : tok_eval_builtin_texts()) EXPECT_EQ(ours.decode(ours.encode(t.text)), t.text) << t.name;
}

// ---- nanochat tokenize ---------------------------------------------------------------------

TEST(TokenizeCli, EncodeLinesAndDecodeWithATiktokenFile) {
  std::string dir = make_temp_dir();
  std::string ranks_file = dir + "/ranks.tiktoken";
  {
    AtomicFile f(ranks_file);
    auto ranks = reference_ranks();
    for (size_t i = 0; i < ranks.size(); i++) f.write(base64_encode(ranks[i]) + " " + std::to_string(i) + "\n");
    f.commit();
  }
  // texts without newlines, one per line; expected ids from tiktoken with the gpt2 pattern
  std::string input;
  std::vector<std::string> want;
  for (size_t t = 0; t < reference().texts.size() && want.size() < 20; t++) {
    const std::string& text = reference().texts[t];
    if (text.empty() || text.find_first_of("\r\n") != std::string::npos) continue;
    // \u2028, \u0085, \x0b, \x0c are not line breaks for std::getline; keep them
    input += text + "\n";
    want.push_back(reference().j["ids"]["gpt2"][t].dump());
  }
  atomic_write_file(dir + "/in.txt", input);
  auto r = run_shell(std::string(NANOCHAT_BIN) + " tokenize --tiktoken " + ranks_file + " --pattern gpt2 --lines < " +
                     dir + "/in.txt");
  ASSERT_EQ(r.rc, 0) << r.err;
  std::string expected;
  for (auto& w : want) expected += w + "\n";
  EXPECT_EQ(r.out, expected);
  // decode: ids back to the exact text
  atomic_write_file(dir + "/ids.json", want[0]);
  r = run_shell(std::string(NANOCHAT_BIN) + " tokenize --tiktoken " + ranks_file + " --pattern gpt2 --decode < " + dir +
                "/ids.json");
  EXPECT_EQ(r.out, input.substr(0, input.find('\n')));
  // bad input: one error line, exit 1
  atomic_write_file(dir + "/bad.json", "[1, 2,");
  r = run_shell(std::string(NANOCHAT_BIN) + " tokenize --tiktoken " + ranks_file + " --decode < " + dir + "/bad.json");
  EXPECT_EQ(r.rc, 1);
  EXPECT_EQ(r.err, "error: stdin line 1: expected a JSON array of token ids like [1,2,3]\n");
  r = run_shell(std::string(NANOCHAT_BIN) + " tokenize --tiktoken " + dir + "/missing.tiktoken < /dev/null");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("missing.tiktoken"), std::string::npos);
  remove_tree(dir);
}

// ---- nanochat tok-train / tok-eval -------------------------------------------------------

static void write_jsonl(const std::string& path, const std::vector<std::string>& texts) {
  std::string out;
  for (auto& t : texts) out += nlohmann::json{{"text", t}}.dump() + "\n";
  atomic_write_file(path, out);
}

TEST(TokTrainCli, CropsDocumentsAndStopsAfterMaxChars) {
  // --doc-cap 4 --max-chars 6: "cdcdcdcd" -> "cdcd" (4 chars), "xyx" (7 > 6: the last one used),
  // "zzzzzzz" never read. Merges: cd (count 2), then xy (tie with yx and cd+cd at 1, smallest
  // pair). Without the crop, cd+cd (count 3) would be second; without the stop, zz (3) first.
  std::string dir = make_temp_dir();
  write_jsonl(dir + "/data/a.jsonl", {"cdcdcdcd", "xyx", "zzzzzzz"});
  write_jsonl(dir + "/data/b.jsonl", {"validation text"});
  auto r = run_shell("NANOCHAT_BASE_DIR=" + dir + "/base " + NANOCHAT_BIN + " tok-train --data " + dir +
                     "/data --vocab-size 267 --doc-cap 4 --max-chars 6");
  ASSERT_EQ(r.rc, 0) << r.err;
  auto ranks = tiktoken_ranks_read(dir + "/base/tokenizer/tokenizer.tiktoken");
  ASSERT_EQ(ranks.size(), 258u);
  EXPECT_EQ(ranks[256], "cd");
  EXPECT_EQ(ranks[257], "xy");
  Tokenizer tok = tokenizer_load(dir + "/base/tokenizer");
  EXPECT_EQ(tok.vocab_size(), 267);
  EXPECT_EQ(tok.bos_id(), 258);
  EXPECT_EQ(tok.special_id("<|output_end|>"), 266);
  // tok-eval prints the table for the built-in texts and the corpus's first row groups
  r = run_shell("NANOCHAT_BASE_DIR=" + dir + "/base " + NANOCHAT_BIN + " tok-eval --data " + dir + "/data");
  EXPECT_EQ(r.rc, 0) << r.err;
  for (const char* name : {"news", "korean", "code", "math", "science", "data-train", "data-val"})
    EXPECT_NE(r.out.find(name), std::string::npos) << name << " in\n" << r.out;
  // too small a vocabulary is refused before any work
  r = run_shell("NANOCHAT_BASE_DIR=" + dir + "/base " + NANOCHAT_BIN + " tok-train --data " + dir +
                "/data --vocab-size 200");
  EXPECT_EQ(r.rc, 2);
  remove_tree(dir);
}

TEST(TokTrainCli, GivesRustbpesMergesOnTheReferenceCorpus) {
  std::string dir = make_temp_dir();
  write_jsonl(dir + "/data/a.jsonl", reference().texts);
  write_jsonl(dir + "/data/b.jsonl", {"val"});
  int32_t vocab = reference().j["vocab_size"].get<int32_t>() + (int32_t)kSpecialTokens.size();
  auto r = run_shell("NANOCHAT_BASE_DIR=" + dir + "/base " + NANOCHAT_BIN + " tok-train --data " + dir +
                     "/data --vocab-size " + std::to_string(vocab));
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(tiktoken_ranks_read(dir + "/base/tokenizer/tokenizer.tiktoken"), reference_ranks());
  remove_tree(dir);
}
