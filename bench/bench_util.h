// What several benches share: a wall clock and the CPU's fp32 matmul FLOP/s measured in the
// same run (the roof that model throughput is reported against).
#pragma once
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include <torch/torch.h>

namespace nanochat {

using bench_clock = std::chrono::steady_clock;

inline double bench_seconds_since(bench_clock::time_point t0) {
  return std::chrono::duration<double>(bench_clock::now() - t0).count();
}

// the best of several n x n x n fp32 matmuls, in FLOP/s
inline double bench_matmul_roof(int64_t n, int reps) {
  torch::Tensor a = torch::randn({n, n}), b = torch::randn({n, n});
  torch::Tensor c = torch::mm(a, b);  // warm-up
  double best = 0;
  for (int r = 0; r < reps; r++) {
    auto t0 = bench_clock::now();
    c = torch::mm(a, b);
    best = std::max(best, 2.0 * (double)n * (double)n * (double)n / bench_seconds_since(t0));
  }
  return best;
}

// "1,8,32" -> {1, 8, 32}: the sweep flags of the benches
inline std::vector<int64_t> bench_parse_list(const std::string& s) {
  std::vector<int64_t> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) out.push_back(std::stoll(item));
  return out;
}

}  // namespace nanochat
