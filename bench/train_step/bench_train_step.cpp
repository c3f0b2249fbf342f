// defines: main (bench_train_step)
// One full pretraining step on the CPU (forward, backward and the MuonAdamW update, as
// base-train runs it) for the d4 and d8 shapes, against the fp32 matmul roof measured in the
// same run: MFU = tokens/s x estimate_flops() per token / roof. Also splits the step into
// forward+backward and optimizer time, so the optimizer's share is visible.
// usage: bench_train_step [T=256] [B=8] [steps=3] [vocab=8192]
#include <cstdio>
#include <cstdlib>

#include <torch/torch.h>

#include "nanochat/common/device.h"
#include "nanochat/gpt.h"
#include "nanochat/optim.h"
#include "../bench_util.h"

using namespace nanochat;

int main(int argc, char** argv) {
  const int64_t T = argc > 1 ? std::atoll(argv[1]) : 256;
  const int64_t B = argc > 2 ? std::atoll(argv[2]) : 8;
  const int steps = argc > 3 ? std::atoi(argv[3]) : 3;
  const int64_t vocab = argc > 4 ? std::atoll(argv[4]) : 8192;
  const int threads = cpu_threads_setup(1);
  std::printf("bench_train_step: %s, %d threads, fp32, B=%lld T=%lld vocab %lld, %d timed steps\n",
              host_info().cpu_model.c_str(), threads, (long long)B, (long long)T, (long long)vocab, steps);
  const double roof = std::max(bench_matmul_roof(1024, 5), bench_matmul_roof(2048, 2));
  std::printf("matmul roof (best of 1024^3 and 2048^3 fp32 mm): %.1f GFLOP/s\n\n", roof / 1e9);
  std::printf("%-5s %6s %14s %10s %10s %10s %12s %8s\n", "model", "width", "flops/token", "step ms",
              "fwd+bwd ms", "optim ms", "tokens/s", "MFU");
  for (int64_t depth : {4, 8}) {
    GPTConfig c = gpt_config_from_depth(depth, vocab, T, "L", 64, 64);
    GPT model(c);
    gpt_init_weights(model);
    MuonAdamW opt(optim_param_groups_gpt(gpt_named_parameters(model), c.n_embd), nullptr, torch::kFloat32);
    torch::Tensor idx = torch::randint(vocab, {B, T}, torch::kLong);
    torch::Tensor tgt = torch::randint(vocab, {B, T}, torch::kLong);
    double fwd_bwd = 0, optim = 0;
    auto step = [&]() {
      auto t0 = bench_clock::now();
      gpt_loss(model, idx, tgt).backward();
      auto t1 = bench_clock::now();
      opt.step();
      opt.zero_grad();
      fwd_bwd += std::chrono::duration<double>(t1 - t0).count();
      optim += bench_seconds_since(t1);
    };
    step();  // warm-up
    fwd_bwd = optim = 0;
    for (int s = 0; s < steps; s++) step();
    const double step_s = (fwd_bwd + optim) / steps;
    const double tok_s = (double)(B * T) / step_s;
    const double mfu = (double)gpt_estimate_flops(c) * tok_s / roof;
    std::printf("d%-4lld %6lld %14lld %10.1f %10.1f %10.1f %12.1f %7.1f%%\n", (long long)depth,
                (long long)c.n_embd, (long long)gpt_estimate_flops(c), 1000 * step_s, 1000 * fwd_bwd / steps,
                1000 * optim / steps, tok_s, 100 * mfu);
  }
  return 0;
}
