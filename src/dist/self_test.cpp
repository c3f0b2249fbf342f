// The collective self-test behind `nanochat doctor` under more than one rank: every
// collective on values whose result is computed here by plain arithmetic, then each timed
// on a large buffer. Bus bandwidth uses NCCL-tests' factors (all_reduce 2(W-1)/W, reduce-
// scatter and all-gather (W-1)/W, broadcast 1).
#include <torch/torch.h>

#include "nanochat/common/error.h"
#include "nanochat/common/progress.h"
#include "nanochat/dist.h"

namespace nanochat {

static std::string mismatch(const torch::Tensor& got, const std::vector<float>& want) {
  auto g = got.to(torch::kCPU, torch::kFloat32).contiguous().view(-1);
  if (g.numel() != (int64_t)want.size())
    return strprintf("got %lld values, want %zu", (long long)g.numel(), want.size());
  const float* p = g.data_ptr<float>();
  for (size_t i = 0; i < want.size(); i++)
    if (std::abs(p[i] - want[i]) > 1e-4f * std::max(1.0f, std::abs(want[i])))
      return strprintf("value %zu is %g, want %g", i, p[i], want[i]);
  return "";
}

std::vector<DistSelfTestResult> dist_self_test(Dist& dist, int64_t timed_bytes) {
  const int W = dist.world_size(), r = dist.rank();
  const int64_t n = 2 * W + 1;  // rows that do not divide by the world size
  auto opts = torch::TensorOptions().dtype(torch::kFloat32).device(dist.device());
  auto iota = [&](float offset) { return torch::arange(n, opts) + offset; };
  std::vector<DistSelfTestResult> results;

  auto check = [&](const std::string& name, const std::function<std::string()>& run) {
    std::string detail;
    try {
      detail = run();
    } catch (const std::exception& e) {
      detail = c10::GetExceptionString(e).substr(0, 200);
    }
    results.push_back({name, detail.empty(), detail, 0, 0, 0});
  };

  check("all_reduce sum", [&] {
    auto t = iota((float)(r + 1));  // rank r holds i + r + 1
    dist.all_reduce(t, ReduceOp::SUM);
    std::vector<float> want;
    for (int64_t i = 0; i < n; i++) want.push_back((float)(W * i + W * (W + 1) / 2));
    return mismatch(t, want);
  });
  check("all_reduce avg", [&] {
    auto t = iota((float)(r + 1));
    dist.all_reduce(t, ReduceOp::AVG);
    std::vector<float> want;
    for (int64_t i = 0; i < n; i++) want.push_back((float)i + (W + 1) / 2.0f);
    return mismatch(t, want);
  });
  check("all_reduce max", [&] {
    auto t = torch::remainder(iota(0) * 3 + r * 7, 5);  // (3i + 7r) mod 5
    dist.all_reduce(t, ReduceOp::MAX);
    std::vector<float> want;
    for (int64_t i = 0; i < n; i++) {
      int m = 0;
      for (int q = 0; q < W; q++) m = std::max(m, (int)((3 * i + 7 * q) % 5));
      want.push_back((float)m);
    }
    return mismatch(t, want);
  });
  check("reduce_scatter sum", [&] {
    auto in = (iota(0) * 10 + r).unsqueeze(1).repeat({1, 3});  // row i on rank r: 10i + r
    auto out = dist.reduce_scatter(in, ReduceOp::SUM);
    auto [b, e] = dist_shard_range(n, W, r);
    std::vector<float> want;
    for (int64_t i = b; i < e; i++)
      for (int c = 0; c < 3; c++) want.push_back((float)(10 * i * W + W * (W - 1) / 2));
    return mismatch(out, want);
  });
  check("all_gather", [&] {
    auto [b, e] = dist_shard_range(n, W, r);
    auto shard = torch::arange(b, e, opts) * 10 + r;  // row i holds 10i + its owner
    auto out = dist.all_gather(shard, n);
    std::vector<float> want;
    for (int q = 0; q < W; q++) {
      auto [qb, qe] = dist_shard_range(n, W, q);
      for (int64_t i = qb; i < qe; i++) want.push_back((float)(10 * i + q));
    }
    return mismatch(out, want);
  });
  check("broadcast", [&] {
    auto t = iota((float)r);
    dist.broadcast(t, W - 1);
    std::vector<float> want;
    for (int64_t i = 0; i < n; i++) want.push_back((float)(i + W - 1));
    return mismatch(t, want);
  });
  check("barrier", [&] {
    dist.barrier();
    return std::string();
  });

  // bandwidth: a few timed repetitions after one warm-up
  int64_t elems = std::max<int64_t>(W, timed_bytes / 4 / W * W);
  double bytes = (double)elems * 4;
  auto big = torch::ones({elems}, opts);
  auto time_it = [&](const std::string& name, double factor, const std::function<void()>& op) {
    for (auto& res : results)
      if (res.name == name && res.ok) {
        op();
        if (dist.device().is_cuda()) torch::cuda::synchronize();
        dist.barrier();
        const int reps = 5;
        Timer timer;
        for (int k = 0; k < reps; k++) op();
        if (dist.device().is_cuda()) torch::cuda::synchronize();
        res.bytes = bytes;
        res.seconds = timer.seconds() / reps;
        res.bus_gb_per_s = bytes * factor / res.seconds / 1e9;
      }
  };
  double ring = (W - 1.0) / W;
  time_it("all_reduce sum", 2 * ring, [&] { dist.all_reduce(big, ReduceOp::SUM); });
  time_it("reduce_scatter sum", ring, [&] { dist.reduce_scatter(big, ReduceOp::SUM); });
  auto shard = big.narrow(0, 0, elems / W);
  time_it("all_gather", ring, [&] { dist.all_gather(shard, elems); });
  time_it("broadcast", 1.0, [&] { dist.broadcast(big, 0); });
  return results;
}

}  // namespace nanochat
