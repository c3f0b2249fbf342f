// bench/optim: the Muon step for nanochat d12's matrix shapes on this machine, against the time
// of its Polar Express matmuls alone (the floor: 3 batched matmuls x ns_steps per step). The
// ratio is the overhead of everything else (momentum, MuonEq, Muon+, NorMuon, cautious update,
// stacking and copy back). d12 has 48 (768,768), 12 (768,3072), 12 (3072,768) and 6 (6,12)
// matrices; --per-group N uses N of each shape (default 2, so a CPU run takes seconds;
// --per-group 0 uses the real counts). The ratio hardly depends on N.
// Usage: bench_optim [--per-group 2] [--steps 3] [--dtype float32|bfloat16] [--threads T]
#include <cstdio>
#include <string>
#include <torch/torch.h>

#include "nanochat/common/progress.h"
#include "nanochat/optim.h"

using namespace nanochat;

int main(int argc, char** argv) {
  int per_group = 2, steps = 3, threads = 0;
  std::string dtype_name = "float32";
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i];
    if (k == "--per-group") per_group = std::stoi(argv[i + 1]);
    else if (k == "--steps") steps = std::stoi(argv[i + 1]);
    else if (k == "--dtype") dtype_name = argv[i + 1];
    else if (k == "--threads") threads = std::stoi(argv[i + 1]);
  }
  if (threads > 0) torch::set_num_threads(threads);
  const bool bf16 = dtype_name == "bfloat16";
  struct Shape {
    int64_t rows, cols, count;
  };
  const Shape d12[] = {{6, 12, 6}, {768, 768, 48}, {768, 3072, 12}, {3072, 768, 12}};
  std::printf("Muon step, d12 shapes, %s Polar Express, %d threads, %d timed steps\n", dtype_name.c_str(),
              torch::get_num_threads(), steps);
  std::printf("%-12s %5s %12s %12s %8s\n", "shape", "K", "step ms", "matmuls ms", "ratio");
  double total_step = 0, total_mm = 0;
  torch::NoGradGuard no_grad;
  for (const Shape& s : d12) {
    const int64_t K = per_group > 0 ? std::min<int64_t>(per_group, s.count) : s.count;
    std::vector<torch::Tensor> params;
    for (int64_t k = 0; k < K; k++) params.push_back(torch::randn({s.rows, s.cols}) * 0.02);
    OptimGroup g;
    g.kind = OptimKind::muon;
    g.params = params;
    g.lr = 0.02;
    g.weight_decay = 0.2;
    MuonAdamW opt({g}, nullptr, bf16 ? torch::kBFloat16 : torch::kFloat);
    for (auto& p : params) p.mutable_grad() = torch::randn({s.rows, s.cols});
    opt.step();  // warm-up (allocates the state)
    Timer t;
    for (int i = 0; i < steps; i++) opt.step();
    double step_s = t.seconds() / steps;

    // the floor: Polar Express's matmuls on a stack of the same shape and dtype
    torch::Tensor X = torch::randn({K, s.rows, s.cols}).to(bf16 ? torch::kBFloat16 : torch::kFloat);
    X = X / X.norm();
    auto matmuls = [&] {
      torch::Tensor Y = X;
      for (int it = 0; it < 5; it++) {
        if (s.rows > s.cols) {
          torch::Tensor A = torch::matmul(Y.mT(), Y);
          Y = torch::matmul(Y, torch::matmul(A, A));
        } else {
          torch::Tensor A = torch::matmul(Y, Y.mT());
          Y = torch::matmul(torch::matmul(A, A), Y);
        }
        Y = Y / 2;  // keep the values finite, as the real iteration does
      }
      return Y;
    };
    matmuls();
    t.reset();
    for (int i = 0; i < steps; i++) matmuls();
    double mm_s = t.seconds() / steps;
    std::printf("%5ldx%-6ld %5ld %12.2f %12.2f %8.2f\n", (long)s.rows, (long)s.cols, (long)K, step_s * 1e3, mm_s * 1e3,
                step_s / mm_s);
    total_step += step_s;
    total_mm += mm_s;
  }
  std::printf("%-12s %5s %12.2f %12.2f %8.2f\n", "all", "", total_step * 1e3, total_mm * 1e3, total_step / total_mm);
  return 0;
}
