// What the kernels' tests share (test_kernels.cpp and one test_kernels_<op>.cpp per op): an op
// seen as a function of its inputs, its gradients, finite differences, and fused against
// reference within a tolerance.
#pragma once
#include <algorithm>
#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "nanochat/kernels.h"
#include "../src/kernels/op_dispatch.h"  // kernels_cpu_supported

namespace kernels_test {

using torch::Tensor;

using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

// the op's output weighted by a fixed random tensor and summed: one scalar whose gradient
// exercises every output element with a different weight
inline Tensor weighted_sum(const Tensor& out, uint64_t seed) {
  torch::manual_seed(seed);
  return (out * torch::randn(out.sizes(), out.options()).detach()).sum();
}

// gradients of the first `n_diff` inputs (all floating ones by default); the rest are constants
inline std::vector<Tensor> grads_of(const Fn& f, const std::vector<Tensor>& inputs, size_t n_diff = 99) {
  std::vector<Tensor> leaves;
  for (size_t i = 0; i < inputs.size(); i++)
    leaves.push_back(inputs[i].detach().clone().requires_grad_(i < n_diff && inputs[i].is_floating_point()));
  weighted_sum(f(leaves), 7).backward();
  std::vector<Tensor> g;
  for (const Tensor& t : leaves) g.push_back(t.requires_grad() ? t.grad() : Tensor());
  return g;
}

// every element of every floating input: (f(x+h) - f(x-h)) / 2h against the analytic gradient
inline void expect_finite_differences(const Fn& f, const std::vector<Tensor>& inputs, double tol, size_t n_diff = 99) {
  std::vector<Tensor> analytic = grads_of(f, inputs, n_diff);
  torch::NoGradGuard no_grad;
  const double h = 1e-6;
  for (size_t i = 0; i < inputs.size(); i++) {
    if (!analytic[i].defined()) continue;
    Tensor x = inputs[i].detach().clone();
    std::vector<Tensor> args = inputs;
    args[i] = x;
    auto flat = x.view({-1});
    auto ga = analytic[i].reshape({-1});
    for (int64_t j = 0; j < flat.numel(); j++) {
      const double v = flat[j].item<double>();
      flat[j] = v + h;
      const double up = weighted_sum(f(args), 7).item<double>();
      flat[j] = v - h;
      const double down = weighted_sum(f(args), 7).item<double>();
      flat[j] = v;
      EXPECT_NEAR(ga[j].item<double>(), (up - down) / (2 * h), tol) << "input " << i << " element " << j;
    }
  }
}

// fused and reference: outputs and every input gradient within rtol of the reference's scale
inline void expect_same(const Fn& fused, const Fn& reference, const std::vector<Tensor>& inputs, double rtol,
                        const char* what, size_t n_diff = 99) {
  Tensor a, b;
  {
    torch::NoGradGuard no_grad;
    a = fused(inputs).to(torch::kDouble);
    b = reference(inputs).to(torch::kDouble);
  }
  const double scale = std::max(1.0, b.abs().max().item<double>());
  EXPECT_LE((a - b).abs().max().item<double>(), rtol * scale) << what << ": output";
  std::vector<Tensor> ga = grads_of(fused, inputs, n_diff), gb = grads_of(reference, inputs, n_diff);
  for (size_t i = 0; i < inputs.size(); i++) {
    if (!ga[i].defined()) continue;
    Tensor x = ga[i].to(torch::kDouble), y = gb[i].to(torch::kDouble);
    const double s = std::max(1e-12, y.abs().max().item<double>());
    EXPECT_LE((x - y).abs().max().item<double>(), rtol * s) << what << ": gradient of input " << i;
  }
}

// rotary tables as the model builds them (base 100000), positions t0..t0+T-1
inline std::pair<Tensor, Tensor> rotary_tables(int64_t t0, int64_t T, int64_t D, torch::ScalarType dtype) {
  Tensor inv = 1.0 / torch::pow(100000.0, torch::arange(0, D, 2, torch::kDouble) / (double)D);
  Tensor f = torch::outer(torch::arange(t0, t0 + T, torch::kDouble), inv);
  return {f.cos().to(dtype).view({1, T, 1, D / 2}), f.sin().to(dtype).view({1, T, 1, D / 2})};
}

inline Tensor targets_with_ignored(int64_t n, int64_t vocab) {
  Tensor t = torch::randint(vocab, {n}, torch::kLong);
  t.index_put_({torch::arange(0, n, 5)}, -1);  // every fifth position ignored
  return t;
}

// the dtypes the CUDA kernels run in, each with the self-check's tolerance (the one table of
// them: kernels_check_tolerance)
struct CudaDtype {
  torch::ScalarType dtype;
  double tol;
};
inline const std::vector<CudaDtype> kCudaDtypes = {
    {torch::kFloat, nanochat::kernels_check_tolerance(torch::kFloat)},
    {torch::kBFloat16, nanochat::kernels_check_tolerance(torch::kBFloat16)},
    {torch::kHalf, nanochat::kernels_check_tolerance(torch::kHalf)}};

// the self-check (the registry) finds a CPU kernel of `check` in exactly the dtypes of `with`
// among fp32 and bf16: each op's test says where its kernel is
inline void expect_cpu_kernel_in(const std::string& check, const std::vector<torch::ScalarType>& with) {
  if (!nanochat::kernels_cpu_supported()) GTEST_SKIP() << "this CPU runs the ATen references";
  for (auto dtype : {torch::kFloat, torch::kBFloat16}) {
    bool found = false, applies = false;
    for (const nanochat::kernels_check_result& r : nanochat::kernels_self_check(torch::kCPU, dtype))
      if (r.op == check) found = true, applies = r.applies;
    EXPECT_TRUE(found) << check << " is not registered";
    EXPECT_EQ(applies, std::find(with.begin(), with.end(), dtype) != with.end()) << check << " in " << dtype;
  }
}

}  // namespace kernels_test
