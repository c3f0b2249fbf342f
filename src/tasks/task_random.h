// defines: TaskPyRandom
// The part of CPython's `random.Random` the tasks use: int seeding (init_by_array over the
// absolute value's 32-bit words), MT19937, getrandbits, _randbelow, random(), choice index
// and shuffle. Internal to tasks: the project's full port (py_random.h) can replace it at
// merge; TaskMixture already takes its shuffle as a function for that reason.
#pragma once
#include <cstdint>
#include <utility>
#include <vector>

namespace nanochat {

class TaskPyRandom {
 public:
  explicit TaskPyRandom(uint64_t seed);  // random.Random(seed), seed >= 0
  uint32_t genrand_uint32();
  uint64_t getrandbits(int k);        // 0 < k <= 64
  uint64_t randbelow(uint64_t n);     // n > 0
  double random();                    // 53-bit float in [0, 1)
  template <class T>
  void shuffle(std::vector<T>& x) {  // random.shuffle: from the back, j = _randbelow(i+1)
    for (size_t i = x.size(); i-- > 1;) std::swap(x[i], x[(size_t)randbelow(i + 1)]);
  }

 private:
  void init_genrand(uint32_t s);
  uint32_t mt_[624];
  int mti_ = 625;
};

}  // namespace nanochat
