// The KV slot pool (see kv_slots.h): take, release, swap, copy, prefix match.
#include "engine/kv_slots.h"

#include <algorithm>

#include <ATen/ATen.h>

#include "nanochat/common/error.h"

namespace nanochat {

namespace {

int64_t shared_prefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  int64_t n = 0, m = (int64_t)std::min(a.size(), b.size());
  while (n < m && a[n] == b[n]) n++;
  return n;
}

}  // namespace

KvSlots::KvSlots(const EngineModel& model, int64_t rows, int64_t row_len, bool prefix_cache)
    : pool(model.make_cache(rows, row_len)), slots((size_t)rows), prefix_cache_(prefix_cache) {}

void KvSlots::swap(int64_t a, int64_t b) {
  if (a == b) return;
  const int64_t len = std::max(slots[a].pos, slots[b].pos);
  if (len > 0) {
    // each slot's (L, len, Hkv, D) as views, swapped through a copy: a row's positions are one
    // contiguous block per layer (index_select/index_copy_ over the narrowed pool took ~1 ms a swap)
    auto swap_views = [](torch::Tensor x, torch::Tensor y) {
      torch::Tensor t = x.clone();
      x.copy_(y);
      y.copy_(t);
    };
    for (torch::Tensor* c : {&pool.k_cache, &pool.v_cache})
      swap_views(c->narrow(2, 0, len).select(1, a), c->narrow(2, 0, len).select(1, b));
    if (prev.defined()) swap_views(prev.select(0, a), prev.select(0, b));
  }
  std::swap(slots[a], slots[b]);
  for (int64_t s : {a, b})
    if (slots[s].holder) slots[s].holder->slot[slots[s].row] = s;
}

void KvSlots::copy(int64_t from, int64_t to, int64_t n) {
  for (torch::Tensor* c : {&pool.k_cache, &pool.v_cache})
    c->narrow(2, 0, n).select(1, to).copy_(c->narrow(2, 0, n).select(1, from));
  if (prev.defined()) prev.select(0, to).copy_(prev.select(0, from));
  slots[to].pos = n;
}

int64_t KvSlots::free_count() const {
  int64_t n = 0;
  for (const PoolSlot& s : slots) n += s.holder == nullptr;
  return n;
}

// a free slot outside the live rows: the first empty one (next to the live rows: no copy
// when it joins), else the least recently used
int64_t KvSlots::take_free() {
  int64_t best = -1;
  for (int64_t s = live; s < (int64_t)slots.size(); s++) {
    if (slots[s].holder) continue;
    if (best < 0) best = s;
    const bool empty = slots[s].tokens.empty(), best_empty = slots[best].tokens.empty();
    if (empty != best_empty ? empty : !empty && slots[s].used < slots[best].used) best = s;  // empty: the first
  }
  slots[best].tokens.clear();
  slots[best].pos = 0;
  return best;
}

int64_t KvSlots::take(SlotHolder& h, int64_t n, const std::vector<int32_t>& prompt, bool can_recompute,
                      bool& need_prev) {
  const int64_t T = (int64_t)prompt.size();
  h.slot.assign(n, -1);
  int64_t hit = -1, reuse = 0;
  if (prefix_cache_) {
    for (int64_t s = live; s < (int64_t)slots.size(); s++) {
      if (slots[s].holder || slots[s].tokens.empty() || slots[s].scope != h.scope) continue;
      int64_t k = std::min(shared_prefix(slots[s].tokens, prompt), T - 1);  // the last prompt token gives logits
      if (k < slots[s].pos && !can_recompute) k = 0;  // a partial reuse needs the smear's input recomputed
      if (k > reuse) hit = s, reuse = k;
    }
  }
  for (int64_t i = 0; i < n; i++) {
    const int64_t s = (i == 0 && hit >= 0) ? hit : take_free();
    slots[s].holder = &h;
    slots[s].row = i;
    slots[s].used = ++tick_;
    h.slot[i] = s;
  }
  need_prev = false;
  if (hit >= 0) {
    need_prev = reuse < slots[hit].pos;
    slots[hit].tokens.clear();
    slots[hit].pos = reuse;
  }
  return reuse;
}

void KvSlots::release(int64_t s, const std::vector<int32_t>& tokens) {
  PoolSlot& sl = slots[s];
  sl.scope = sl.holder ? sl.holder->scope : std::string();
  sl.holder = nullptr;
  sl.row = -1;
  sl.used = ++tick_;
  sl.tokens.clear();
  if (prefix_cache_ && sl.pos > 0 && (int64_t)tokens.size() >= sl.pos)
    sl.tokens.assign(tokens.begin(), tokens.begin() + sl.pos);
}

void KvSlots::store_prev(int64_t first, const torch::Tensor& p) {
  if (!p.defined()) return;
  if (!prev.defined()) prev = at::zeros({(int64_t)slots.size(), 1, p.size(-1)}, p.options());
  prev.narrow(0, first, p.size(0)).copy_(p);
}

void KvSlots::clear() {
  for (PoolSlot& s : slots) s = PoolSlot();
  live = 0;
}

}  // namespace nanochat
