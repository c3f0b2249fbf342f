// CPython's random.Random, bit for bit, for the parts nanochat's evaluations use: seeding
// from an int (init_by_array over the 32-bit words of |seed|), getrandbits, _randbelow (the
// getrandbits rejection loop), shuffle and sample (CPython 3.10+ algorithms, including
// sample's list-vs-set switch). Datasets are shuffled and few-shot examples drawn with it,
// so the C++ evaluation sees exactly the examples upstream's Python sees.
#pragma once
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace nanochat {

class PyRandom {
 public:
  explicit PyRandom(int64_t seed);  // random.Random(seed)
  void seed(int64_t seed);          // random_seed() for an int: key = words of abs(seed)
  uint32_t genrand_uint32();        // one MT19937 output
  uint64_t getrandbits(int k);      // 0 <= k <= 64
  uint64_t randbelow(uint64_t n);   // uniform in [0, n); n == 0 gives 0 like CPython
  double random();                  // random.random(): 53 bits

  // random.shuffle(x): i from len-1 down to 1 swaps x[i] with x[randbelow(i+1)]
  template <class T>
  void shuffle(std::vector<T>& x) {
    for (size_t i = x.size(); i-- > 1;) std::swap(x[i], x[(size_t)randbelow(i + 1)]);
  }
  // random.sample(population, k); Error when k < 0 or k > len(population)
  template <class T>
  std::vector<T> sample(const std::vector<T>& population, int64_t k) {
    std::vector<int64_t> idx = sample_indices((int64_t)population.size(), k);
    std::vector<T> out;
    out.reserve(idx.size());
    for (int64_t i : idx) out.push_back(population[(size_t)i]);
    return out;
  }
  // the positions sample() picks from a population of n, in order
  std::vector<int64_t> sample_indices(int64_t n, int64_t k);

 private:
  static constexpr int kN = 624;
  uint32_t mt_[kN];
  int index_ = kN + 1;
};

// CPython's hash() of an int (its value mod 2^61 - 1, sign kept, -1 -> -2) and of a tuple of
// ints (the xxHash-style tuplehash of CPython 3.8+): upstream's RL seeds its rollouts with
// hash((step, example_idx, sampling_step)) & 0x7FFFFFFF
int64_t py_hash_int(int64_t v);
int64_t py_hash_int_tuple(const std::vector<int64_t>& items);

}  // namespace nanochat
