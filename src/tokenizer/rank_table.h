// bytes -> rank lookups, the inner loop of encoding. Open addressing over one flat array
// (a probe touches one cache line, where std::unordered_map chases a node per lookup), with
// the full 64-bit hash stored so that most misses never compare bytes. The table keeps its
// own copy of the keys, back to back, so it never points into the caller's vectors.
#pragma once
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace nanochat {

class RankTable {
 public:
  RankTable() = default;
  // ranks[i] are the bytes of rank i; returns false on a duplicate (its rank in *dup)
  bool build(const std::vector<std::string>& ranks, int32_t* dup) {
    arena_.clear();
    offsets_.assign(1, 0);
    for (auto& r : ranks) {
      arena_ += r;
      offsets_.push_back(arena_.size());
    }
    size_t cap = 16;
    while (cap < ranks.size() * 2) cap <<= 1;
    slots_.assign(cap, Slot{0, -1});
    mask_ = cap - 1;
    for (size_t r = 0; r < ranks.size(); r++) {
      int32_t existing = find(ranks[r]);
      if (existing >= 0) return *dup = existing, false;
      uint64_t h = hash(ranks[r]);
      size_t i = h & mask_;
      while (slots_[i].rank >= 0) i = (i + 1) & mask_;
      slots_[i] = Slot{h, (int32_t)r};
    }
    return true;
  }
  int32_t find(std::string_view key) const {  // -1 when absent
    uint64_t h = hash(key);
    for (size_t i = h & mask_;; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.rank < 0) return -1;
      if (s.hash == h && key_of(s.rank) == key) return s.rank;
    }
  }

 private:
  struct Slot {
    uint64_t hash;
    int32_t rank;
  };
  static uint64_t hash(std::string_view key) {  // 8 bytes at a time, multiply-xorshift mixing
    const char* p = key.data();
    size_t n = key.size();
    uint64_t h = 0x9E3779B97F4A7C15ull ^ (n * 0xFF51AFD7ED558CCDull);
    for (; n >= 8; p += 8, n -= 8) {
      uint64_t w;
      std::memcpy(&w, p, 8);
      h = (h ^ w) * 0xBF58476D1CE4E5B9ull;
      h ^= h >> 31;
    }
    uint64_t w = 0;
    std::memcpy(&w, p, n);
    h = (h ^ w) * 0x94D049BB133111EBull;
    return h ^ (h >> 29);
  }
  std::string_view key_of(int32_t rank) const {
    return std::string_view(arena_).substr(offsets_[rank], offsets_[rank + 1] - offsets_[rank]);
  }
  std::vector<Slot> slots_;
  size_t mask_ = 0;
  std::string arena_;            // the bytes of every rank, back to back
  std::vector<size_t> offsets_;  // rank i is arena_[offsets_[i], offsets_[i + 1])
};

}  // namespace nanochat
