// NumPy's default generator, bit for bit: `np.random.default_rng(seed)` is PCG64 (XSL-RR
// 128/64) seeded through SeedSequence, and `Generator.permutation(n)` is arange(n) shuffled
// by Fisher-Yates from the back with masked-rejection bounded integers (random_interval). Upstream shuffles every
// task dataset with `default_rng(42).permutation(len)` (upstream's tasks), which equals
// `datasets.Dataset.shuffle(seed=42)`; this reproduces that row order.
#pragma once
#include <cstdint>
#include <vector>

namespace nanochat {

class NpPcg64 {
 public:
  // state and increment as 128-bit (hi, lo) pairs, as pcg64_set_seed receives them
  NpPcg64(uint64_t state_hi, uint64_t state_lo, uint64_t inc_hi, uint64_t inc_lo);
  uint64_t next_uint64();
  uint32_t next_uint32();  // the low half of a 64-bit draw, then the high half (NumPy's buffer)
  // uniform in [0, max] inclusive by masked rejection (random_interval, what shuffle uses)
  uint64_t interval(uint64_t max);

 private:
  unsigned __int128 state_, inc_;
  bool has_uint32_ = false;
  uint32_t uinteger_ = 0;
};

// np.random.default_rng(seed) for a non-negative integer seed
NpPcg64 np_default_rng(uint64_t seed);
// np.random.default_rng(seed).permutation(n)
std::vector<int64_t> np_permutation(uint64_t seed, int64_t n);

}  // namespace nanochat
