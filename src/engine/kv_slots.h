// The scheduler's KV slot pool (internal to the engine module): one KVCache of `rows` slots x
// row_len positions, allocated once. The slots that decode are kept packed at the front
// (0..live-1), each at its own position, so a step reads only live rows and no cache is
// copied per step; a row that finishes swaps places with the last live one. A free slot keeps
// the tokens its KV holds and the scope of the request that left them (the prefix cache):
// a request of the same scope whose prompt begins with them takes that slot and prefills
// only the rest. Free slots are handed out empty ones first, then least recently used.
// Not thread-safe: the scheduler's decode thread owns it.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "nanochat/engine.h"

namespace nanochat {

// what the pool knows of a request holding slots
struct SlotHolder {
  std::vector<int64_t> slot;  // the pool slot of each of its rows, -1 once it left
  std::string scope;          // the prefix cache it may read and leaves its KV to
  virtual ~SlotHolder() = default;
};

struct PoolSlot {
  SlotHolder* holder = nullptr;  // the owner, or null (free)
  int64_t row = -1;              // the owner's row in it
  int64_t pos = 0;               // positions whose KV the slot holds
  std::vector<int32_t> tokens;   // a free slot: the tokens of those positions (prefix cache)
  std::string scope;             // ... and the scope of the request that left them
  uint64_t used = 0;             // when it was last freed or hit (LRU)
};

class KvSlots {
 public:
  KvSlots(const EngineModel& model, int64_t rows, int64_t row_len, bool prefix_cache);
  KVCache pool;
  torch::Tensor prev;  // (rows,1,C) the smear's input per slot, allocated at the first store
  std::vector<PoolSlot> slots;
  int64_t live = 0;  // slots 0..live-1 decode

  // exchanges two slots' KV (the used positions), smear inputs and owners
  void swap(int64_t a, int64_t b);
  // copies slot `from`'s first n positions (and its smear input) into slot `to`
  void copy(int64_t from, int64_t to, int64_t n);
  int64_t free_count() const;
  // takes n free slots for h's rows; row 0 gets the free slot of h's scope whose tokens share
  // the longest prefix with `prompt` (but its last token, which must give logits). Returns how
  // many positions it reuses; need_prev: the reuse is partial and the smear's input must be
  // recomputed (only when `can_recompute` — else no reuse).
  int64_t take(SlotHolder& h, int64_t n, const std::vector<int32_t>& prompt, bool can_recompute, bool& need_prev);
  // the slot goes back to the pool; with the prefix cache it remembers the tokens of its
  // positions (when given) and its owner's scope
  void release(int64_t s, const std::vector<int32_t>& tokens);
  // the smear inputs of slots first.. (p: (n,1,C))
  void store_prev(int64_t first, const torch::Tensor& p);
  void clear();  // every slot free and empty (the decode thread failed)

 private:
  int64_t take_free();
  bool prefix_cache_;
  uint64_t tick_ = 0;
};

}  // namespace nanochat
