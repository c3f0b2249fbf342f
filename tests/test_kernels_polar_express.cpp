// Polar Express's CPU kernel (fp32) against its batched ATen composition in fp64.
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "nanochat/kernels.h"
#include "nanochat/optim.h"
#include "test_kernels.h"

using namespace nanochat;
using namespace kernels_test;

// Polar Express in fp32 (one thread per matrix, the symmetric products from mirrored blocks)
// against the batched composition in fp64, for wide, tall and square batches whose sides are no
// multiple of the 128-row blocks, run on 2 threads so that the batch is split
TEST(PolarExpress, Fp32EqualsFp64Composition) {
  torch::manual_seed(23);
  struct Threads {  // 2 for this test, the previous count after it, also when an ASSERT returns early
    int before = at::get_num_threads();
    Threads() { at::set_num_threads(2); }
    ~Threads() { at::set_num_threads(before); }
  } two_threads;
  const auto& coeffs = optim_polar_express_coeffs();
  for (auto shape : std::vector<std::vector<int64_t>>{{4, 300, 700}, {2, 700, 300}, {6, 260, 260}, {2, 40, 90}}) {
    Tensor X = torch::randn(shape);
    X = X / (X.norm(2, {1, 2}, true) * 1.02);  // as Muon starts it: every singular value < 1
    Tensor X0 = X.clone();
    Tensor got = kernels_polar_express(X, coeffs, 5);
    Tensor want = kernels_polar_express_reference(X.to(torch::kDouble), coeffs, 5);
    ASSERT_EQ(got.sizes(), want.sizes());
    EXPECT_LT((got.to(torch::kDouble) - want).abs().max().item<double>(), 1e-5 * want.abs().max().item<double>())
        << c10::str(X.sizes());
    EXPECT_TRUE(X.equal(X0)) << "the input was written";
  }
}

// the self-check finds its CPU kernel in fp32 only (bf16 runs the reference)
TEST(PolarExpress, CpuKernelDtypes) { expect_cpu_kernel_in("polar_express", {torch::kFloat}); }
