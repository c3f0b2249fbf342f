// CPython's Modules/_randommodule.c and Lib/random.py (3.10+), transcribed.
#include "nanochat/common/py_random.h"

#include <cmath>
#include <unordered_set>

#include "nanochat/common/error.h"

namespace nanochat {

PyRandom::PyRandom(int64_t s) { seed(s); }

void PyRandom::seed(int64_t s) {
  // random_seed(): the key is abs(seed) as little-endian 32-bit words, at least one word
  uint64_t n = s < 0 ? (uint64_t)0 - (uint64_t)s : (uint64_t)s;
  std::vector<uint32_t> key;
  do {
    key.push_back((uint32_t)(n & 0xffffffffu));
    n >>= 32;
  } while (n);
  // init_genrand(19650218)
  mt_[0] = 19650218u;
  for (int i = 1; i < kN; i++) mt_[i] = 1812433253u * (mt_[i - 1] ^ (mt_[i - 1] >> 30)) + (uint32_t)i;
  // init_by_array(key)
  int i = 1, j = 0, len = (int)key.size();
  for (int k = kN > len ? kN : len; k; k--) {
    mt_[i] = (mt_[i] ^ ((mt_[i - 1] ^ (mt_[i - 1] >> 30)) * 1664525u)) + key[j] + (uint32_t)j;
    i++, j++;
    if (i >= kN) mt_[0] = mt_[kN - 1], i = 1;
    if (j >= len) j = 0;
  }
  for (int k = kN - 1; k; k--) {
    mt_[i] = (mt_[i] ^ ((mt_[i - 1] ^ (mt_[i - 1] >> 30)) * 1566083941u)) - (uint32_t)i;
    i++;
    if (i >= kN) mt_[0] = mt_[kN - 1], i = 1;
  }
  mt_[0] = 0x80000000u;  // MSB is 1, assuring a non-zero initial array
  index_ = kN;
}

uint32_t PyRandom::genrand_uint32() {
  static const uint32_t mag01[2] = {0x0u, 0x9908b0dfu};
  const uint32_t upper = 0x80000000u, lower = 0x7fffffffu;
  if (index_ >= kN) {  // generate N words at one time
    int kk = 0;
    for (; kk < kN - 397; kk++) {
      uint32_t y = (mt_[kk] & upper) | (mt_[kk + 1] & lower);
      mt_[kk] = mt_[kk + 397] ^ (y >> 1) ^ mag01[y & 1u];
    }
    for (; kk < kN - 1; kk++) {
      uint32_t y = (mt_[kk] & upper) | (mt_[kk + 1] & lower);
      mt_[kk] = mt_[kk + (397 - kN)] ^ (y >> 1) ^ mag01[y & 1u];
    }
    uint32_t y = (mt_[kN - 1] & upper) | (mt_[0] & lower);
    mt_[kN - 1] = mt_[396] ^ (y >> 1) ^ mag01[y & 1u];
    index_ = 0;
  }
  uint32_t y = mt_[index_++];
  y ^= (y >> 11);
  y ^= (y << 7) & 0x9d2c5680u;
  y ^= (y << 15) & 0xefc60000u;
  y ^= (y >> 18);
  return y;
}

uint64_t PyRandom::getrandbits(int k) {
  if (k < 0 || k > 64) fail("PyRandom::getrandbits: k = %d is outside 0..64", k);
  if (k == 0) return 0;
  if (k <= 32) return genrand_uint32() >> (32 - k);
  // more words, least significant first; the last one keeps its top bits
  uint64_t lo = genrand_uint32();
  uint64_t hi = genrand_uint32() >> (64 - k);
  return lo | (hi << 32);
}

uint64_t PyRandom::randbelow(uint64_t n) {
  if (n == 0) return 0;
  int k = 0;  // n.bit_length()
  for (uint64_t v = n; v; v >>= 1) k++;
  uint64_t r = getrandbits(k);
  while (r >= n) r = getrandbits(k);
  return r;
}

double PyRandom::random() {
  uint32_t a = genrand_uint32() >> 5, b = genrand_uint32() >> 6;
  return (a * 67108864.0 + b) * (1.0 / 9007199254740992.0);
}

std::vector<int64_t> PyRandom::sample_indices(int64_t n, int64_t k) {
  if (k < 0 || k > n) fail("sample: %lld items asked from a population of %lld", (long long)k, (long long)n);
  std::vector<int64_t> result((size_t)k);
  // a list of the population is cheaper than a set of picks when n is small
  int64_t setsize = 21;
  if (k > 5) setsize += (int64_t)std::pow(4.0, std::ceil(std::log((double)(k * 3)) / std::log(4.0)));
  if (n <= setsize) {
    std::vector<int64_t> pool((size_t)n);
    for (int64_t i = 0; i < n; i++) pool[(size_t)i] = i;
    for (int64_t i = 0; i < k; i++) {
      int64_t j = (int64_t)randbelow((uint64_t)(n - i));
      result[(size_t)i] = pool[(size_t)j];
      pool[(size_t)j] = pool[(size_t)(n - i - 1)];  // move non-selected item into vacancy
    }
  } else {
    std::unordered_set<int64_t> selected;
    for (int64_t i = 0; i < k; i++) {
      int64_t j = (int64_t)randbelow((uint64_t)n);
      while (selected.count(j)) j = (int64_t)randbelow((uint64_t)n);
      selected.insert(j);
      result[(size_t)i] = j;
    }
  }
  return result;
}

int64_t py_hash_int(int64_t v) {
  const uint64_t modulus = (1ULL << 61) - 1;  // _PyHASH_MODULUS
  const uint64_t magnitude = v < 0 ? 0 - (uint64_t)v : (uint64_t)v;
  const int64_t h = (int64_t)(magnitude % modulus);
  const int64_t r = v < 0 ? -h : h;
  return r == -1 ? -2 : r;  // -1 is CPython's error value
}

int64_t py_hash_int_tuple(const std::vector<int64_t>& items) {
  const uint64_t prime1 = 11400714785074694791ULL, prime2 = 14029467366897019727ULL, prime5 = 2870177450012600261ULL;
  uint64_t acc = prime5;
  for (int64_t item : items) {
    acc += (uint64_t)py_hash_int(item) * prime2;
    acc = (acc << 31) | (acc >> 33);
    acc *= prime1;
  }
  acc += (uint64_t)items.size() ^ (prime5 ^ 3527539ULL);
  return acc == (uint64_t)-1 ? 1546275796 : (int64_t)acc;
}

}  // namespace nanochat
