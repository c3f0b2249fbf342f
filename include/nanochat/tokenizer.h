// Byte-level BPE exactly as nanochat uses it (upstream's nanochat/tokenizer.py): pieces from a GPT-4 style split
// regex (PCRE2 with JIT), tiktoken's merge rule for encoding (lowest rank first, leftmost on
// ties) and rustbpe's rule for training (highest pair count first, smallest pair on ties).
// Token ids 0-255 are the raw bytes (no GPT-2 byte shuffling); special tokens come last.
#pragma once
#include <cstdint>
#include <memory>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "nanochat/common/utf8.h"

namespace nanochat {

class ThreadPool;
class RankTable;

extern const char* const kPatternNanochat;  // upstream's SPLIT_PATTERN: cl100k with \p{N}{1,2}
extern const char* const kPatternGpt2;
extern const char* const kPatternCl100k;
extern const char* const kPatternO200k;
extern const char* const kPatternGpt2ByteLevel;  // GPT-2's as the tokenizers library's ByteLevel spells it
// one of the five above: a pattern we know splits in linear time. Any other runs under a PCRE2
// match limit and a per-text time budget (Splitter::split; ServerError 400 when spent).
bool pattern_is_known(const std::string& pattern);
// "nanochat", "gpt2", "cl100k", "o200k" -> the pattern; Error for anything else
std::string pattern_by_name(const std::string& name);

// nanochat's 9 special tokens, in id order (upstream's SPECIAL_TOKENS); <|bos|> first
extern const std::vector<std::string> kSpecialTokens;

// Splits text into the pieces the pattern matches, left to right (like regex.findall).
// Thread-safe: each calling thread gets its own match data and JIT stack.
class Splitter {
 public:
  explicit Splitter(const std::string& pattern);  // Error if PCRE2 rejects it
  ~Splitter();
  Splitter(const Splitter&) = delete;
  Splitter& operator=(const Splitter&) = delete;
  // text must be valid UTF-8 (see utf8_decode_replace); pieces point into text
  void split(std::string_view text, std::vector<std::string_view>& pieces) const;
  const std::string& pattern() const { return pattern_; }

 private:
  std::string pattern_;
  void* code_;        // pcre2_code* with PCRE2's own Unicode tables
  void* exact_code_;  // the same with tiktoken's \p{L} and \p{N} spelled out
  bool limited_;      // not a known pattern: match limit and time budget
};

class Tokenizer {
 public:
  // ranks[i] = the bytes of token i for i < ranks.size(); specials get ids after them
  // unless given explicitly. Error on duplicate bytes.
  Tokenizer(std::vector<std::string> ranks, const std::string& pattern,
            std::vector<std::pair<std::string, int32_t>> specials, const std::string& bos_token);

  // ordinary: special-token text is plain text. Invalid UTF-8 is first replaced by U+FFFD.
  std::vector<int32_t> encode(std::string_view text) const;
  // the listed special tokens (names) are recognised as single ids; others are plain text
  std::vector<int32_t> encode_with_specials(std::string_view text, const std::vector<std::string>& allowed) const;
  std::vector<std::vector<int32_t>> encode_batch(const std::vector<std::string>& texts, ThreadPool& pool) const;
  // bytes of the ids (specials as their literal text) decoded with errors='replace'
  std::string decode(const std::vector<int32_t>& ids) const;
  std::string decode_bytes(const std::vector<int32_t>& ids) const;  // raw bytes, no replacement
  const std::string& decode_single_token_bytes(int32_t id) const;   // Error for a bad id
  int32_t special_id(const std::string& name) const;                // Error if unknown
  // number of raw bytes of each token, 0 for specials (nanochat's token_bytes for bpb)
  std::vector<int32_t> token_byte_counts() const;

  int32_t vocab_size() const { return (int32_t)id_bytes_.size(); }
  int32_t bos_id() const { return bos_id_; }
  const std::vector<std::string>& ranks() const { return ranks_; }
  const std::vector<std::pair<std::string, int32_t>>& specials() const { return specials_; }
  const std::string& pattern() const { return splitter_->pattern(); }
  // the same tokens, ids, specials and split pattern: one encodes as the other does
  bool same_as(const Tokenizer& o) const {
    return ranks() == o.ranks() && specials() == o.specials() && pattern() == o.pattern();
  }

  // the pieces of one split, BPE-merged (exposed for tests and benches)
  void encode_piece(std::string_view piece, std::vector<int32_t>& out) const;

 private:
  void encode_ordinary_into(std::string_view valid_utf8, std::vector<int32_t>& out) const;

  std::vector<std::string> ranks_;            // rank -> bytes
  std::shared_ptr<const RankTable> rank_of_;  // bytes -> rank
  std::vector<std::pair<std::string, int32_t>> specials_;
  std::vector<std::string> id_bytes_;  // id -> bytes (specials: literal text)
  std::shared_ptr<Splitter> splitter_;
  int32_t bos_id_ = -1;
  uint64_t serial_ = 0;  // unique per constructed tokenizer (copies share it): the piece cache's key
};

// rustbpe's training (RustBPETokenizer.train_from_iterator). add_texts() splits each text with the pattern and counts
// the pieces on the pool's threads, so memory grows with the unique pieces, not the text.
// train() then merges the most frequent adjacent pair (smallest pair on ties) until
// 256 + merges == vocab_size_no_special and returns the ranks (bytes of each token).
class BpeTrainer {
 public:
  BpeTrainer(const std::string& pattern, ThreadPool& pool);
  void add_texts(const std::vector<std::string>& texts);
  std::vector<std::string> train(int32_t vocab_size_no_special, bool show_progress = false);
  int64_t unique_pieces() const { return (int64_t)piece_counts_.size(); }

 private:
  Splitter splitter_;
  ThreadPool& pool_;
  std::unordered_map<std::string, int64_t> piece_counts_;
};

}  // namespace nanochat

namespace nanochat {

// ---- files (src/tokenizer/tokenizer_files.cpp) ----------------------------------------
// A tokenizer directory ($BASE/tokenizer) holds:
//   tokenizer.tiktoken  the ranks in tiktoken's format: "base64(bytes) rank" per line
//   tokenizer.json      {"pattern", "special_tokens": {name: id}, "bos_token", "vocab_size"}
//   token_bytes.bin     int32 little-endian, raw bytes per token id, 0 for special tokens
// each written atomically.
void tokenizer_save(const Tokenizer& tok, const std::string& dir);
Tokenizer tokenizer_load(const std::string& dir);  // Error naming the file (and line) on bad input
// any tiktoken rank file with a pattern by name (nanochat, gpt2, cl100k, o200k); the specials
// of that encoding are added (gpt2: <|endoftext|> 50256; cl100k: <|endoftext|> 100257, ...)
Tokenizer tokenizer_load_tiktoken(const std::string& file, const std::string& pattern_name);
std::vector<std::string> tiktoken_ranks_read(const std::string& file);  // rank -> bytes
std::string base64_encode(std::string_view bytes);
std::string base64_decode(std::string_view text);  // Error on a bad character or length

// ---- chat rendering (src/tokenizer/chat_render.cpp, upstream's render_conversation) -----------------------------
// conversation: {"messages": [{"role": "system"|"user"|"assistant", "content": str or parts}]}
// mask 1 marks the tokens the model is trained on (the assistant's own text, python calls
// and <|assistant_end|>); Error with the message index on a malformed conversation.
struct RenderedConversation {
  std::vector<int32_t> ids;
  std::vector<uint8_t> mask;
};
RenderedConversation render_conversation(const Tokenizer& tok, const nlohmann::json& conversation,
                                         size_t max_tokens = 2048);
// drops the final assistant message and ends with <|assistant_start|> (for RL and evaluation)
std::vector<int32_t> render_for_completion(const Tokenizer& tok, const nlohmann::json& conversation);

// ---- evaluation (src/tokenizer/tok_eval.cpp, upstream's scripts/tok_eval.py) -----------------------------------
struct TokEvalText {
  std::string name, text;
};
std::vector<TokEvalText> tok_eval_builtin_texts();  // news, korean, code, math, science
// the table of bytes per token for ours and each comparison tokenizer; Error if ours does
// not round-trip a text
std::string tok_eval_report(const std::vector<TokEvalText>& texts, const Tokenizer& ours,
                            const std::vector<std::pair<std::string, const Tokenizer*>>& others, bool color);

// ---- tok-train (src/tokenizer/tok_train.cpp, upstream's scripts/tok_train.py) ---------------------------------
// the documents to train on, a batch at a time (tok-train reads the dataset's train split):
// fills `docs` and returns true, or returns false at the end
using DocBatchSource = std::function<bool(std::vector<std::string>& docs)>;
struct TokTrainOptions {
  int64_t max_chars = 2000000000;  // stop after the document that crosses this many characters
  int64_t doc_cap = 10000;         // characters kept of each document
  int32_t vocab_size = 32768;      // including the 9 special tokens
};
struct TokTrainStats {
  int64_t chars = 0, docs = 0, unique_pieces = 0;
  double count_seconds = 0, total_seconds = 0;
};
// trains nanochat's tokenizer (its pattern and special tokens) on the documents
Tokenizer tok_train(const DocBatchSource& next_docs, const TokTrainOptions& opts, ThreadPool& pool,
                    TokTrainStats* stats = nullptr);

}  // namespace nanochat
