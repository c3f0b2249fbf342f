// CPython's _randommodule.c (MT19937, init_by_array, random_seed for ints) and random.py
// (_randbelow_with_getrandbits, shuffle), the pieces the tasks need.
#include "tasks/task_random.h"

#include "nanochat/common/error.h"

namespace nanochat {

void TaskPyRandom::init_genrand(uint32_t s) {
  mt_[0] = s;
  for (int i = 1; i < 624; i++) mt_[i] = 1812433253u * (mt_[i - 1] ^ (mt_[i - 1] >> 30)) + (uint32_t)i;
  mti_ = 624;
}

TaskPyRandom::TaskPyRandom(uint64_t seed) {
  std::vector<uint32_t> key;  // abs(seed) as little-endian 32-bit words; 0 -> [0]
  do {
    key.push_back((uint32_t)(seed & 0xffffffffu));
    seed >>= 32;
  } while (seed > 0);
  // init_by_array
  init_genrand(19650218u);
  uint32_t i = 1, j = 0;
  const uint32_t n = 624, len = (uint32_t)key.size();
  for (uint32_t k = n > len ? n : len; k; k--) {
    mt_[i] = (mt_[i] ^ ((mt_[i - 1] ^ (mt_[i - 1] >> 30)) * 1664525u)) + key[j] + j;
    i++, j++;
    if (i >= n) mt_[0] = mt_[n - 1], i = 1;
    if (j >= len) j = 0;
  }
  for (uint32_t k = n - 1; k; k--) {
    mt_[i] = (mt_[i] ^ ((mt_[i - 1] ^ (mt_[i - 1] >> 30)) * 1566083941u)) - i;
    i++;
    if (i >= n) mt_[0] = mt_[n - 1], i = 1;
  }
  mt_[0] = 0x80000000u;
}

uint32_t TaskPyRandom::genrand_uint32() {
  static const uint32_t mag01[2] = {0x0u, 0x9908b0dfu};
  uint32_t y;
  if (mti_ >= 624) {
    int kk;
    for (kk = 0; kk < 624 - 397; kk++) {
      y = (mt_[kk] & 0x80000000u) | (mt_[kk + 1] & 0x7fffffffu);
      mt_[kk] = mt_[kk + 397] ^ (y >> 1) ^ mag01[y & 1u];
    }
    for (; kk < 623; kk++) {
      y = (mt_[kk] & 0x80000000u) | (mt_[kk + 1] & 0x7fffffffu);
      mt_[kk] = mt_[kk + (397 - 624)] ^ (y >> 1) ^ mag01[y & 1u];
    }
    y = (mt_[623] & 0x80000000u) | (mt_[0] & 0x7fffffffu);
    mt_[623] = mt_[396] ^ (y >> 1) ^ mag01[y & 1u];
    mti_ = 0;
  }
  y = mt_[mti_++];
  y ^= (y >> 11);
  y ^= (y << 7) & 0x9d2c5680u;
  y ^= (y << 15) & 0xefc60000u;
  y ^= (y >> 18);
  return y;
}

uint64_t TaskPyRandom::getrandbits(int k) {
  if (k <= 0 || k > 64) fail("getrandbits(%d): k must be in 1..64", k);
  if (k <= 32) return genrand_uint32() >> (32 - k);
  // words are filled least significant first; the last one keeps its top bits
  uint64_t lo = genrand_uint32();
  uint64_t hi = genrand_uint32() >> (64 - k);
  return lo | (hi << 32);
}

uint64_t TaskPyRandom::randbelow(uint64_t n) {
  if (n == 0) fail("randbelow(0)");
  int k = 0;  // n.bit_length()
  for (uint64_t v = n; v; v >>= 1) k++;
  uint64_t r = getrandbits(k);
  while (r >= n) r = getrandbits(k);
  return r;
}

double TaskPyRandom::random() {
  uint32_t a = genrand_uint32() >> 5, b = genrand_uint32() >> 6;
  return (a * 67108864.0 + b) * (1.0 / 9007199254740992.0);
}

}  // namespace nanochat
