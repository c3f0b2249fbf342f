// NumPy's SeedSequence + PCG64 + Generator.permutation (numpy/random/bit_generator.pyx,
// _pcg64.pyx, pcg64.h, distributions.c, _generator.pyx), ported for exact row orders.
// Generator.shuffle of a 1-d array swaps a[i] with a[random_interval(i)] for i = n-1..1.
#include "tasks/np_random.h"

#include <cstddef>
#include <numeric>

namespace nanochat {

namespace {

using u128 = unsigned __int128;

// PCG_DEFAULT_MULTIPLIER_128
const u128 kPcgMult = ((u128)2549297995355413924ULL << 64) | 4865540595714422341ULL;

// SeedSequence constants (bit_generator.pyx)
constexpr uint32_t kInitA = 0x43b0d7e5, kMultA = 0x931e8875, kInitB = 0x8b51f9dd, kMultB = 0x58f38ded;
constexpr uint32_t kMixMultL = 0xca01f9dd, kMixMultR = 0x4973f715;
constexpr int kPoolSize = 4;

uint32_t hashmix(uint32_t value, uint32_t& hash_const) {
  value ^= hash_const;
  hash_const *= kMultA;
  value *= hash_const;
  value ^= value >> 16;
  return value;
}

uint32_t mix(uint32_t x, uint32_t y) {
  uint32_t r = kMixMultL * x - kMixMultR * y;
  return r ^ (r >> 16);
}

// SeedSequence(seed).generate_state(4, uint64) as 8 uint32 words
std::vector<uint32_t> seed_sequence_state(uint64_t seed, int n_words32) {
  std::vector<uint32_t> entropy;  // the integer as little-endian 32-bit words; 0 -> [0]
  do {
    entropy.push_back((uint32_t)(seed & 0xffffffffu));
    seed >>= 32;
  } while (seed > 0);
  uint32_t pool[kPoolSize];
  uint32_t hc = kInitA;
  for (int i = 0; i < kPoolSize; i++) pool[i] = hashmix(i < (int)entropy.size() ? entropy[i] : 0, hc);
  for (int s = 0; s < kPoolSize; s++)
    for (int d = 0; d < kPoolSize; d++)
      if (s != d) pool[d] = mix(pool[d], hashmix(pool[s], hc));
  for (size_t s = kPoolSize; s < entropy.size(); s++)
    for (int d = 0; d < kPoolSize; d++) pool[d] = mix(pool[d], hashmix(entropy[s], hc));
  std::vector<uint32_t> out(n_words32);
  uint32_t hb = kInitB;
  for (int i = 0; i < n_words32; i++) {
    uint32_t v = pool[i % kPoolSize];
    v ^= hb;
    hb *= kMultB;
    v *= hb;
    v ^= v >> 16;
    out[i] = v;
  }
  return out;
}

}  // namespace

NpPcg64::NpPcg64(uint64_t state_hi, uint64_t state_lo, uint64_t inc_hi, uint64_t inc_lo) {
  // pcg64_srandom_r: state 0, inc = 2*initseq+1, step, add initstate, step
  u128 initstate = ((u128)state_hi << 64) | state_lo, initseq = ((u128)inc_hi << 64) | inc_lo;
  state_ = 0;
  inc_ = (initseq << 1) | 1;
  state_ = state_ * kPcgMult + inc_;
  state_ += initstate;
  state_ = state_ * kPcgMult + inc_;
}

uint64_t NpPcg64::next_uint64() {
  state_ = state_ * kPcgMult + inc_;
  // XSL-RR output of the new state
  uint64_t x = (uint64_t)(state_ >> 64) ^ (uint64_t)state_;
  unsigned rot = (unsigned)(state_ >> 122);
  return (x >> rot) | (x << ((64 - rot) & 63));
}

uint32_t NpPcg64::next_uint32() {
  if (has_uint32_) {
    has_uint32_ = false;
    return uinteger_;
  }
  uint64_t v = next_uint64();
  has_uint32_ = true;
  uinteger_ = (uint32_t)(v >> 32);
  return (uint32_t)(v & 0xffffffffu);
}

uint64_t NpPcg64::interval(uint64_t max) {
  // random_interval (distributions.c): masked rejection sampling, 32-bit draws when they suffice
  if (max == 0) return 0;
  uint64_t mask = max;
  for (int s = 1; s <= 32; s *= 2) mask |= mask >> s;
  uint64_t value;
  if (max <= 0xffffffffULL) {
    while ((value = (next_uint32() & mask)) > max) {
    }
  } else {
    while ((value = (next_uint64() & mask)) > max) {
    }
  }
  return value;
}

NpPcg64 np_default_rng(uint64_t seed) {
  // generate_state(4, uint64): words (lo, hi) pairs; pcg64_set_seed(seed=val[0:2], inc=val[2:4])
  // with each 128-bit value = (val[k] << 64) | val[k+1]
  std::vector<uint32_t> w = seed_sequence_state(seed, 8);
  uint64_t v[4];
  for (int i = 0; i < 4; i++) v[i] = (uint64_t)w[2 * i] | ((uint64_t)w[2 * i + 1] << 32);
  return NpPcg64(v[0], v[1], v[2], v[3]);
}

std::vector<int64_t> np_permutation(uint64_t seed, int64_t n) {
  std::vector<int64_t> a(n > 0 ? n : 0);
  std::iota(a.begin(), a.end(), 0);
  NpPcg64 rng = np_default_rng(seed);
  for (int64_t i = n - 1; i >= 1; i--) std::swap(a[i], a[(size_t)rng.interval((uint64_t)i)]);
  return a;
}

}  // namespace nanochat
