// rustbpe's BPE training (RustBPETokenizer.train_from_iterator). Unique pieces become "words" (their bytes as ids) with
// a count. Every adjacent pair's count is the sum of the counts of the words it occurs in.
// A max-heap orders pairs by (count desc, pair asc); entries are refreshed lazily, which is
// exact because after a pair's creation its count only ever goes down. Merging a pair
// rewrites only the words where it occurs, and the count deltas of the neighbouring pairs
// are applied to the global table.
#include <algorithm>
#include <optional>
#include <queue>
#include <unordered_set>

#include "nanochat/common/error.h"
#include "nanochat/common/progress.h"
#include "nanochat/common/thread_pool.h"
#include "nanochat/tokenizer.h"

namespace nanochat {

namespace {

using Pair = std::pair<int32_t, int32_t>;
struct PairHash {
  size_t operator()(const Pair& p) const {
    return std::hash<uint64_t>()(((uint64_t)(uint32_t)p.first << 32) | (uint32_t)p.second);
  }
};

struct MergeJob {
  Pair pair;
  int64_t count;
  std::vector<int32_t> words;                // indices of the words the pair occurred in when pushed
  bool operator<(const MergeJob& o) const {  // priority_queue pops the "largest"
    if (count != o.count) return count < o.count;
    return pair > o.pair;  // ties: the smaller pair first
  }
};

// left-to-right, non-overlapping replacement of (a, b) by `merged` in one word; appends the
// pair-count changes (per occurrence of the word) to `deltas`, as rustbpe's merge_pair does
void merge_word(std::vector<int32_t>& ids, Pair pair, int32_t merged, std::vector<std::pair<Pair, int>>& deltas) {
  auto [a, b] = pair;
  size_t n = ids.size(), w = 0;
  for (size_t i = 0; i < n;) {
    if (i + 1 < n && ids[i] == a && ids[i + 1] == b) {
      if (w > 0) {
        deltas.push_back({{ids[w - 1], a}, -1});
        deltas.push_back({{ids[w - 1], merged}, +1});
      }
      deltas.push_back({{a, b}, -1});
      if (i + 2 < n) {
        deltas.push_back({{b, ids[i + 2]}, -1});
        deltas.push_back({{merged, ids[i + 2]}, +1});
      }
      ids[w++] = merged;
      i += 2;
    } else {
      ids[w++] = ids[i++];
    }
  }
  ids.resize(w);
}

}  // namespace

BpeTrainer::BpeTrainer(const std::string& pattern, ThreadPool& pool) : splitter_(pattern), pool_(pool) {}

void BpeTrainer::add_texts(const std::vector<std::string>& texts) {
  // each worker counts its share of the texts, then the partial tables are merged here
  int chunks = std::max(1, std::min<int>(pool_.size(), (int)texts.size()));
  std::vector<std::unordered_map<std::string, int64_t>> partial(chunks);
  std::vector<std::future<void>> done;
  for (int c = 0; c < chunks; c++) {
    done.push_back(pool_.submit([&, c] {
      std::vector<std::string_view> pieces;
      for (size_t i = texts.size() * c / chunks; i < texts.size() * (c + 1) / chunks; i++) {
        std::string fixed;
        std::string_view text = texts[i];
        if (!utf8_is_valid(text)) text = fixed = utf8_decode_replace(text);
        pieces.clear();
        splitter_.split(text, pieces);
        for (auto p : pieces) partial[c][std::string(p)]++;
      }
    }));
  }
  for (auto& f : done) f.get();
  for (int c = 0; c < chunks; c++)
    for (auto& [piece, n] : partial[c]) piece_counts_[piece] += n;
}

std::vector<std::string> BpeTrainer::train(int32_t vocab_size_no_special, bool show_progress) {
  if (vocab_size_no_special < 256) fail("vocab size %d is below 256 byte tokens", vocab_size_no_special);
  std::vector<std::vector<int32_t>> words;
  std::vector<int64_t> counts;
  words.reserve(piece_counts_.size());
  for (auto& [piece, n] : piece_counts_) {
    words.emplace_back(piece.begin(), piece.end());
    for (auto& id : words.back()) id = (unsigned char)id;
    counts.push_back(n);
  }

  std::unordered_map<Pair, int64_t, PairHash> pair_counts;
  std::unordered_map<Pair, std::vector<int32_t>, PairHash> where;
  for (size_t w = 0; w < words.size(); w++)
    for (size_t i = 0; i + 1 < words[w].size(); i++) {
      Pair p{words[w][i], words[w][i + 1]};
      pair_counts[p] += counts[w];
      auto& list = where[p];
      if (list.empty() || list.back() != (int32_t)w) list.push_back((int32_t)w);
    }
  std::priority_queue<MergeJob> heap;
  for (auto& [p, list] : where)
    if (pair_counts[p] > 0) heap.push({p, pair_counts[p], std::move(list)});
  where.clear();

  std::vector<std::string> ranks(256);
  for (int i = 0; i < 256; i++) ranks[i] = std::string(1, (char)i);
  const int32_t num_merges = vocab_size_no_special - 256;
  std::optional<Progress> progress;
  if (show_progress) progress.emplace("bpe merges", num_merges, "merges", 10.0);
  std::vector<std::pair<Pair, int>> deltas;
  std::unordered_map<Pair, std::vector<int32_t>, PairHash> new_where;
  while ((int32_t)ranks.size() < vocab_size_no_special && !heap.empty()) {
    MergeJob top = heap.top();
    heap.pop();
    int64_t current = pair_counts[top.pair];
    if (top.count != current) {  // stale: push back with today's count
      top.count = current;
      if (current > 0) heap.push(std::move(top));
      continue;
    }
    int32_t merged = (int32_t)ranks.size();
    ranks.push_back(ranks[top.pair.first] + ranks[top.pair.second]);
    new_where.clear();
    for (int32_t w : top.words) {
      deltas.clear();
      merge_word(words[w], top.pair, merged, deltas);
      for (auto& [p, d] : deltas) {
        pair_counts[p] += d * counts[w];
        if (d > 0) {
          auto& list = new_where[p];
          if (list.empty() || list.back() != w) list.push_back(w);
        }
      }
    }
    for (auto& [p, list] : new_where) {
      int64_t c = pair_counts[p];
      if (c > 0) heap.push({p, c, std::move(list)});
    }
    if (progress) progress->update(1);
  }
  if (progress) progress->finish();
  if ((int32_t)ranks.size() < vocab_size_no_special)
    fail(
        "the text supports only %zu tokens (256 bytes + %zu merges), fewer than the %d asked for; "
        "use more text or a smaller --vocab-size",
        ranks.size(), ranks.size() - 256, vocab_size_no_special);
  return ranks;
}

}  // namespace nanochat
