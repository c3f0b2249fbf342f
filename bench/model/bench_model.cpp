// Forward+backward throughput of nanochat's GPT on the CPU for the d4 and d12 shapes
// (vocab 32768, short sequences), against the matmul FLOP roof measured in the same run:
// fraction = tokens/s x estimate_flops() per token / the best fp32 matmul FLOP/s.
// usage: bench_model [T=256] [B=1] [steps=3]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <torch/torch.h>

#include "nanochat/common/device.h"
#include "nanochat/gpt.h"
#include "../bench_util.h"

using namespace nanochat;
int main(int argc, char** argv) {
  const int64_t T = argc > 1 ? std::atoll(argv[1]) : 256;
  const int64_t B = argc > 2 ? std::atoll(argv[2]) : 1;
  const int steps = argc > 3 ? std::atoi(argv[3]) : 3;
  const int threads = cpu_threads_setup(1);
  const HostInfo host = host_info();
  std::printf("bench_model: %s, %d threads, fp32, B=%lld T=%lld, %d timed steps\n", host.cpu_model.c_str(), threads,
              (long long)B, (long long)T, steps);
  const double roof = std::max(bench_matmul_roof(1024, 5), bench_matmul_roof(2048, 2));
  std::printf("matmul roof (best of 1024^3 and 2048^3 fp32 mm): %.1f GFLOP/s\n\n", roof / 1e9);
  std::printf("%-5s %6s %12s %14s %12s %12s %10s\n", "model", "d", "params", "flops/token", "tokens/s", "GFLOP/s",
              "of roof");
  for (int64_t depth : {4, 12}) {
    GPTConfig c = gpt_config_from_depth(depth, 32768, T);
    GPT m(c);
    gpt_init_weights(m);
    torch::Tensor idx = torch::randint(c.vocab_size, {B, T}, torch::kLong);
    torch::Tensor tgt = torch::randint(c.vocab_size, {B, T}, torch::kLong);
    auto step = [&]() {
      for (auto& p : m->parameters()) p.mutable_grad() = torch::Tensor();
      gpt_loss(m, idx, tgt).backward();
    };
    step();  // warm-up
    auto t0 = bench_clock::now();
    for (int s = 0; s < steps; s++) step();
    const double tok_s = (double)(B * T * steps) / bench_seconds_since(t0);
    const double flops = (double)gpt_estimate_flops(c) * tok_s;
    std::printf("d%-4lld %6lld %12lld %14lld %12.1f %12.1f %9.1f%%\n", (long long)depth, (long long)c.n_embd,
                (long long)gpt_num_scaling_params(c).total, (long long)gpt_estimate_flops(c), tok_s, flops / 1e9,
                100.0 * flops / roof);
  }
  return 0;
}
