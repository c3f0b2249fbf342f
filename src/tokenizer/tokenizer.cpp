// Encoding and decoding with a rank table, exactly as tiktoken: split, then per piece either
// the whole piece's rank or byte-pair merging by lowest rank (leftmost on ties).
#include <algorithm>
#include <atomic>
#include <climits>
#include <memory>

#include "nanochat/common/error.h"
#include "nanochat/common/thread_pool.h"
#include "nanochat/tokenizer.h"
#include "rank_table.h"

namespace nanochat {

const std::vector<std::string> kSpecialTokens = {
    "<|bos|>",          "<|user_start|>", "<|user_end|>",     "<|assistant_start|>", "<|assistant_end|>",
    "<|python_start|>", "<|python_end|>", "<|output_start|>", "<|output_end|>"};

Tokenizer::Tokenizer(std::vector<std::string> ranks, const std::string& pattern,
                     std::vector<std::pair<std::string, int32_t>> specials, const std::string& bos_token)
    : ranks_(std::move(ranks)), specials_(std::move(specials)), splitter_(std::make_shared<Splitter>(pattern)) {
  static std::atomic<uint64_t> constructed{0};
  serial_ = ++constructed;
  auto table = std::make_shared<RankTable>();
  int32_t dup = -1;
  if (!table->build(ranks_, &dup)) fail("rank table: two ranks have the same bytes (one is rank %d)", dup);
  rank_of_ = table;
  id_bytes_ = ranks_;
  for (auto& [name, id] : specials_) {
    if (id < (int32_t)ranks_.size()) fail("special token %s has id %d inside the ranks", name.c_str(), id);
    if ((size_t)id >= id_bytes_.size()) id_bytes_.resize((size_t)id + 1);
    if (!id_bytes_[id].empty()) fail("special token %s: id %d is taken", name.c_str(), id);
    id_bytes_[id] = name;
  }
  // ids between the ranks and the specials may be unused (cl100k has such a gap), as in tiktoken
  bos_id_ = special_id(bos_token);
}

int32_t Tokenizer::special_id(const std::string& name) const {
  for (auto& [n, id] : specials_)
    if (n == name) return id;
  fail("the tokenizer has no special token %s", name.c_str());
}

const std::string& Tokenizer::decode_single_token_bytes(int32_t id) const {
  if (id < 0 || id >= vocab_size() || id_bytes_[id].empty())
    fail("token id %d is not in the vocabulary [0, %d)", id, vocab_size());
  return id_bytes_[id];
}

std::vector<int32_t> Tokenizer::token_byte_counts() const {
  std::vector<int32_t> n(id_bytes_.size(), 0);
  for (size_t i = 0; i < ranks_.size(); i++) n[i] = (int32_t)ranks_[i].size();
  return n;
}

// tiktoken's _byte_pair_merge: parts[i] = (start of part i, rank of merging parts i and i+1)
static void byte_pair_merge(std::string_view piece, const RankTable& ranks, std::vector<int32_t>& out) {
  const int32_t kNone = INT32_MAX;
  auto rank_of = [&](size_t begin, size_t end) {
    int32_t r = ranks.find(piece.substr(begin, end - begin));
    return r < 0 ? kNone : r;
  };
  thread_local std::vector<std::pair<size_t, int32_t>> parts;
  parts.clear();
  for (size_t i = 0; i + 1 < piece.size(); i++) parts.emplace_back(i, rank_of(i, i + 2));
  parts.emplace_back(piece.size() - 1, kNone);
  parts.emplace_back(piece.size(), kNone);
  // rank of merging parts i, i+1 (and so spanning to the start of part i+2)
  auto pair_rank = [&](size_t i) { return i + 3 < parts.size() ? rank_of(parts[i].first, parts[i + 3].first) : kNone; };
  for (;;) {
    int32_t min_rank = kNone;
    size_t min_i = 0;
    for (size_t i = 0; i + 1 < parts.size(); i++)
      if (parts[i].second < min_rank) min_rank = parts[i].second, min_i = i;
    if (min_rank == kNone) break;
    if (min_i > 0) parts[min_i - 1].second = pair_rank(min_i - 1);
    parts[min_i].second = pair_rank(min_i);
    parts.erase(parts.begin() + (long)min_i + 1);
  }
  for (size_t i = 0; i + 1 < parts.size(); i++) {
    int32_t r = rank_of(parts[i].first, parts[i + 1].first);
    if (r == kNone)
      fail("byte 0x%02x has no rank: the rank table lacks single bytes", (unsigned char)piece[parts[i].first]);
    out.push_back(r);
  }
}

namespace {
// Merged pieces recur (Zipf), so each thread remembers the ids of the pieces that needed
// merging. Bounded: cleared when full. Keyed by the tokenizer's serial (not its address, which a
// later tokenizer may reuse) so two tokenizers never mix.
struct PieceCache {
  uint64_t owner = 0;
  std::unordered_map<std::string_view, std::pair<uint32_t, uint32_t>> where;  // piece -> (offset, count) in ids
  std::vector<int32_t> ids;
  std::vector<std::unique_ptr<char[]>> keys;
  void reset(uint64_t tok) {
    owner = tok;
    where.clear();
    ids.clear();
    keys.clear();
  }
};
constexpr size_t kPieceCacheEntries = 1 << 16;
}  // namespace

void Tokenizer::encode_piece(std::string_view piece, std::vector<int32_t>& out) const {
  int32_t whole = rank_of_->find(piece);
  if (whole >= 0) {
    out.push_back(whole);
    return;
  }
  thread_local PieceCache cache;
  if (cache.owner != serial_ || cache.where.size() >= kPieceCacheEntries) cache.reset(serial_);
  auto hit = cache.where.find(piece);
  if (hit != cache.where.end()) {
    out.insert(out.end(), cache.ids.begin() + hit->second.first,
               cache.ids.begin() + hit->second.first + hit->second.second);
    return;
  }
  size_t before = out.size();
  byte_pair_merge(piece, *rank_of_, out);
  cache.keys.emplace_back(new char[piece.size()]);
  std::copy(piece.begin(), piece.end(), cache.keys.back().get());
  cache.where.emplace(std::string_view(cache.keys.back().get(), piece.size()),
                      std::make_pair((uint32_t)cache.ids.size(), (uint32_t)(out.size() - before)));
  cache.ids.insert(cache.ids.end(), out.begin() + (long)before, out.end());
}

void Tokenizer::encode_ordinary_into(std::string_view text, std::vector<int32_t>& out) const {
  thread_local std::vector<std::string_view> pieces;
  pieces.clear();
  splitter_->split(text, pieces);
  for (auto piece : pieces) encode_piece(piece, out);
}

static bool needs_repair(std::string_view text) { return !utf8_is_valid(text); }

std::vector<int32_t> Tokenizer::encode(std::string_view text) const {
  std::vector<int32_t> out;
  if (needs_repair(text)) {
    std::string fixed = utf8_decode_replace(text);
    encode_ordinary_into(fixed, out);
  } else {
    encode_ordinary_into(text, out);
  }
  return out;
}

std::vector<int32_t> Tokenizer::encode_with_specials(std::string_view input,
                                                     const std::vector<std::string>& allowed) const {
  std::string fixed = needs_repair(input) ? utf8_decode_replace(input) : std::string(input);
  std::string_view text = fixed;
  std::vector<int32_t> out;
  size_t pos = 0;
  for (;;) {
    // the leftmost allowed special token (longest on a tie) ends this plain segment
    size_t best = std::string_view::npos, best_len = 0;
    int32_t best_id = -1;
    for (auto& name : allowed) {
      size_t at = text.find(name, pos);
      if (at != std::string_view::npos && (at < best || (at == best && name.size() > best_len)))
        best = at, best_len = name.size(), best_id = special_id(name);
    }
    encode_ordinary_into(text.substr(pos, best == std::string_view::npos ? std::string_view::npos : best - pos), out);
    if (best == std::string_view::npos) break;
    out.push_back(best_id);
    pos = best + best_len;
  }
  return out;
}

std::vector<std::vector<int32_t>> Tokenizer::encode_batch(const std::vector<std::string>& texts,
                                                          ThreadPool& pool) const {
  std::vector<std::vector<int32_t>> out(texts.size());
  pool.parallel_for((int64_t)texts.size(), [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; i++) out[i] = encode(texts[i]);
  });
  return out;
}

std::string Tokenizer::decode_bytes(const std::vector<int32_t>& ids) const {
  std::string bytes;
  for (int32_t id : ids) bytes += decode_single_token_bytes(id);
  return bytes;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids) const { return utf8_decode_replace(decode_bytes(ids)); }

}  // namespace nanochat
