// One rank of the collective tests (tests/test_dist.cpp starts 1, 2 and 3 of these as real
// processes). Every expected value is computed here with plain integer arithmetic from the
// formula each rank used to fill its input, independently of the code under test; and every
// collective refuses, with one clear line, a tensor of a device type or dtype Gloo cannot take.
#include <cstdio>
#include <functional>
#include <string>
#include <torch/torch.h>

#include "nanochat/common/error.h"
#include "nanochat/compute.h"
#include "nanochat/kernels.h"

using namespace nanochat;

static int g_failures = 0, g_checks = 0;

static void expect_equal(const char* what, const torch::Tensor& got, const std::vector<double>& want,
                         const std::vector<int64_t>& shape) {
  g_checks++;
  auto g = got.to(torch::kCPU, torch::kDouble).contiguous();
  if (g.sizes().vec() != shape) {
    std::fprintf(stderr, "FAIL %s: shape %s, want %s\n", what, c10::str(g.sizes()).c_str(),
                 c10::str(c10::IntArrayRef(shape)).c_str());
    g_failures++;
    return;
  }
  const double* p = g.data_ptr<double>();
  for (size_t i = 0; i < want.size(); i++)
    if (std::abs(p[i] - want[i]) > 1e-6 * std::max(1.0, std::abs(want[i]))) {
      std::fprintf(stderr, "FAIL %s: element %zu is %g, want %g\n", what, i, p[i], want[i]);
      g_failures++;
      return;
    }
}

// `call` must throw nanochat::Error, whose message holds `want` (written out here by hand)
static void expect_refused(const char* what, const std::function<void()>& call, const std::string& want) {
  g_checks++;
  try {
    call();
  } catch (const Error& e) {
    if (std::string(e.what()).find(want) != std::string::npos) return;
    std::fprintf(stderr, "FAIL %s: message \"%s\" lacks \"%s\"\n", what, e.what(), want.c_str());
    g_failures++;
    return;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "FAIL %s: not a nanochat error: %s\n", what, e.what());
    g_failures++;
    return;
  }
  std::fprintf(stderr, "FAIL %s: accepted\n", what);
  g_failures++;
}

// the owner of row i when n rows are sharded in chunks of ceil(n / W)
static int owner(int64_t i, int64_t n, int W) { return (int)(i / ((n + W - 1) / W)); }

// `dist_worker kernels`, run with NANOCHAT_KERNELS_FAULT=mlp_relu_square on rank 1 alone: the
// self-check's verdicts are agreed across the ranks, so both run the op's reference (its bits)
// and both report it failed; every other op passes on both
static int kernels_agreement_main() {
  Compute c = compute_init("cpu");
  const int r = c.dist->rank();
  torch::manual_seed(5);
  torch::Tensor x = torch::randn({4, 16}), w_fc = torch::randn({64, 16}) * 0.25, w_proj = torch::randn({16, 64}) * 0.1;
  g_checks++;
  if (!torch::equal(kernels_mlp_relu_square(x, w_fc, w_proj), kernels_mlp_relu_square_reference(x, w_fc, w_proj))) {
    std::fprintf(stderr, "FAIL rank %d: mlp_relu_square ran its kernel, not its reference\n", r);
    g_failures++;
  }
  for (const kernels_check_result& k : kernels_self_check(torch::kCPU, torch::kFloat)) {
    g_checks++;
    const bool want_ok = k.op != std::string("mlp_relu_square");
    if (k.ok != want_ok) {
      std::fprintf(stderr, "FAIL rank %d: %s ok=%d, want %d\n", r, k.op.c_str(), (int)k.ok, (int)want_ok);
      g_failures++;
    }
  }
  std::printf("rank %d of %d: %d checks, %d failures\n", r, c.dist->world_size(), g_checks, g_failures);
  return g_failures == 0 ? 0 : 1;
}

// `dist_worker late_dtype`, 2 ranks with unequal work (chat-eval with fewer problems than ranks):
// rank 0 alone runs a fused op in fp32, which compute_init checked at start, then in fp64, which
// it did not; rank 1 runs nothing and goes straight to the next collective, then meets fp64
// alone, after it. No check may run a collective in the ops: the sums below must come out whole
// (a check's agreement would pair with them: a gloo size mismatch, or wrong sums)
static int late_dtype_main() {
  Compute c = compute_init("cpu");
  const int r = c.dist->rank();
  torch::manual_seed(5);
  torch::Tensor x = torch::randn({4, 16}), w_fc = torch::randn({64, 16}) * 0.25, w_proj = torch::randn({16, 64}) * 0.1;
  auto run_fp64 = [&] {
    torch::Tensor xd = x.to(torch::kDouble), fd = w_fc.to(torch::kDouble), pd = w_proj.to(torch::kDouble);
    g_checks++;  // an unchecked dtype after the start: the reference, bit for bit
    if (!torch::equal(kernels_mlp_relu_square(xd, fd, pd), kernels_mlp_relu_square_reference(xd, fd, pd))) {
      std::fprintf(stderr, "FAIL rank %d: mlp_relu_square in fp64 did not run its reference\n", r);
      g_failures++;
    }
  };
  if (r == 0) {
    g_checks++;
    if (!torch::allclose(kernels_mlp_relu_square(x, w_fc, w_proj), kernels_mlp_relu_square_reference(x, w_fc, w_proj),
                         1e-4, 1e-5)) {
      std::fprintf(stderr, "FAIL rank 0: mlp_relu_square in fp32 is off its reference\n");
      g_failures++;
    }
    run_fp64();
  }
  torch::Tensor one = torch::tensor({(double)(r + 1)}, torch::kFloat);
  c.dist->all_reduce(one, ReduceOp::SUM);
  expect_equal("the sum after rank 0's fused ops", one, {3.0}, {1});
  if (r == 1) run_fp64();
  // as many values as the ops' agreement would send: a stray agreement would sum into these
  std::vector<double> want;
  for (size_t i = 0; i < 12; i++) want.push_back(3.0 * (double)(i + 1));
  torch::Tensor many = torch::arange(1, 13, torch::kLong) * (r + 1);
  c.dist->all_reduce(many, ReduceOp::SUM);
  expect_equal("the sum after rank 1's fused op", many, want, {12});
  std::printf("rank %d of %d: %d checks, %d failures\n", r, c.dist->world_size(), g_checks, g_failures);
  return g_failures == 0 ? 0 : 1;
}

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "kernels") return kernels_agreement_main();
  if (argc > 1 && std::string(argv[1]) == "late_dtype") return late_dtype_main();
  Compute c = compute_init("cpu");
  Dist& d = *c.dist;
  const int W = d.world_size(), r = d.rank();
  auto f32 = torch::TensorOptions().dtype(torch::kFloat32);

  for (int64_t n : {1, 2, 3, 7, 2 * W + 1, 10}) {
    std::string tag = " n=" + std::to_string(n);
    // all_reduce: rank r holds (r + 1) * (i + 1)
    std::vector<double> sum, avg, mx;
    for (int64_t i = 0; i < n; i++) {
      sum.push_back((i + 1) * W * (W + 1) / 2.0);
      avg.push_back((i + 1) * (W + 1) / 2.0);
      int64_t m = 0;
      for (int q = 0; q < W; q++) m = std::max<int64_t>(m, (q * 5 + i * 3) % 7);
      mx.push_back((double)m);
    }
    auto filled = [&] { return (torch::arange(1, n + 1, f32) * (r + 1)); };
    auto t = filled();
    d.all_reduce(t, ReduceOp::SUM);
    expect_equal(("all_reduce sum" + tag).c_str(), t, sum, {n});
    t = filled();
    d.all_reduce(t, ReduceOp::AVG);
    expect_equal(("all_reduce avg" + tag).c_str(), t, avg, {n});
    t = torch::remainder(torch::arange(n, f32) * 3 + r * 5, 7);
    d.all_reduce(t, ReduceOp::MAX);
    expect_equal(("all_reduce max" + tag).c_str(), t, mx, {n});
    auto tb = filled().to(torch::kBFloat16);  // small integers are exact in bf16
    d.all_reduce(tb, ReduceOp::SUM);
    expect_equal(("all_reduce bf16" + tag).c_str(), tb, sum, {n});
    auto ti = filled().to(torch::kInt64);
    d.all_reduce(ti, ReduceOp::SUM);
    expect_equal(("all_reduce int64" + tag).c_str(), ti, sum, {n});

    // reduce_scatter over (n, 3): rank r holds 100 i + 10 r + col
    auto in = torch::arange(n, f32).unsqueeze(1) * 100 + 10 * r + torch::arange(3, f32).unsqueeze(0);
    std::vector<double> rs_sum, rs_avg;
    int64_t my_rows = 0;
    for (int64_t i = 0; i < n; i++) {
      if (owner(i, n, W) != r) continue;
      my_rows++;
      for (int col = 0; col < 3; col++) {
        rs_sum.push_back(W * (100.0 * i + col) + 10.0 * W * (W - 1) / 2);
        rs_avg.push_back(100.0 * i + col + 10.0 * (W - 1) / 2);
      }
    }
    expect_equal(("reduce_scatter sum" + tag).c_str(), d.reduce_scatter(in, ReduceOp::SUM), rs_sum, {my_rows, 3});
    expect_equal(("reduce_scatter avg" + tag).c_str(), d.reduce_scatter(in, ReduceOp::AVG), rs_avg, {my_rows, 3});

    // all_gather: each rank passes its rows, row i holding 10 i + owner(i)
    std::vector<double> shard_vals, full;
    for (int64_t i = 0; i < n; i++) {
      full.push_back(10.0 * i + owner(i, n, W));
      full.push_back(-1.0 * i);
      if (owner(i, n, W) == r) {
        shard_vals.push_back(10.0 * i + r);
        shard_vals.push_back(-1.0 * i);
      }
    }
    auto shard = torch::tensor(shard_vals, torch::kDouble).to(torch::kFloat32).view({my_rows, 2});
    expect_equal(("all_gather" + tag).c_str(), d.all_gather(shard, n), full, {n, 2});

    // broadcast from the last rank
    auto b = torch::arange(n, f32) + r;
    d.broadcast(b, W - 1);
    std::vector<double> bw;
    for (int64_t i = 0; i < n; i++) bw.push_back((double)(i + W - 1));
    expect_equal(("broadcast" + tag).c_str(), b, bw, {n});
  }

  // tensors the group cannot take (wrong device type, wrong dtype): one clear line, nothing
  // sent, so every rank refuses alone and the group carries on below
  const std::string takes =
      "but the process group (Gloo) takes cpu tensors of float32, float64, float16, "
      "bfloat16, int8, uint8, int32, int64, bool";
  auto on_meta = torch::ones({4}, f32.device(torch::kMeta));
  expect_refused(
      "all_reduce of a meta tensor", [&] { d.all_reduce(on_meta, ReduceOp::SUM); },
      "dist all_reduce: its input tensor is float32 on meta, " + takes);
  expect_refused(
      "reduce_scatter of int16", [&] { d.reduce_scatter(torch::ones({4}, torch::kInt16), ReduceOp::SUM); },
      "dist reduce_scatter: its input tensor is int16 on cpu, " + takes);
  expect_refused(
      "all_gather of float8", [&] { d.all_gather(torch::ones({1}).to(c10::ScalarType::Float8_e4m3fn), W); },
      "dist all_gather: its shard tensor is Float8_e4m3fn on cpu, " + takes);
  expect_refused(
      "broadcast of a meta tensor", [&] { d.broadcast(on_meta, 0); },
      "dist broadcast: its input tensor is float32 on meta, " + takes);
  expect_refused(
      "all_reduce of nothing", [&] { d.all_reduce(torch::Tensor(), ReduceOp::SUM); },
      "dist all_reduce: its input tensor is undefined");

  // two collectives in flight at once, waited in reverse order
  auto a = torch::full({5}, (float)(r + 1)), z = torch::full({4}, (float)(2 * r));
  auto wa = d.all_reduce_async(a, ReduceOp::SUM);
  auto wz = d.all_reduce_async(z, ReduceOp::MAX);
  expect_equal("async max", wz.wait(), std::vector<double>(4, 2.0 * (W - 1)), {4});
  expect_equal("async sum", wa.wait(), std::vector<double>(5, W * (W + 1) / 2.0), {5});
  d.barrier();

  std::printf("rank %d of %d: %d checks, %d failures\n", r, W, g_checks, g_failures);
  return g_failures == 0 ? 0 : 1;
}
