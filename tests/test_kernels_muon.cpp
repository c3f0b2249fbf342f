// Muon's passes around Polar Express (prepare: Nesterov momentum, MuonEq, normalisation;
// finish: NorMuon's second moment, cautious weight decay, the step) fused against their
// references over three steps: fp64, fp32 and bf16 on model shapes, a property by hand, and on
// CUDA where a GPU is present.
#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "nanochat/kernels.h"
#include "test_kernels.h"

using namespace nanochat;
using namespace kernels_test;

namespace {

struct MuonState {
  std::vector<Tensor> grads, params;
  Tensor buf, second;
};

MuonState muon_state(int64_t K, int64_t rows, int64_t cols, torch::ScalarType dtype, torch::Device dev, uint64_t seed) {
  torch::manual_seed(seed);
  MuonState s;
  auto opts = torch::TensorOptions().dtype(dtype).device(dev);
  for (int64_t k = 0; k < K; k++) {
    s.params.push_back(torch::randn({rows, cols}, opts) * 0.1);
    s.grads.push_back(torch::randn({rows, cols}, opts) * torch::linspace(0.1, 2.0, cols, opts));  // unequal columns
  }
  s.buf = torch::randn({K, rows, cols}, opts) * 0.5;
  s.grads[0][1].zero_();  // a zero row of the Nesterov gradient: MuonEq's clamp
  s.buf[0][1].zero_();
  s.second = rows >= cols ? torch::rand({K, rows, 1}, opts) : torch::rand({K, 1, cols}, opts);
  return s;
}

MuonState copy_of(const MuonState& s) {
  MuonState c;
  for (const Tensor& g : s.grads) c.grads.push_back(g.clone());
  for (const Tensor& p : s.params) c.params.push_back(p.clone());
  c.buf = s.buf.clone();
  c.second = s.second.clone();
  return c;
}

void expect_close(const Tensor& got, const Tensor& want, double rtol, const std::string& what) {
  Tensor a = got.to(torch::kDouble).cpu(), b = want.to(torch::kDouble).cpu();
  const double scale = std::max(1e-300, b.abs().max().item<double>());
  EXPECT_LE((a - b).abs().max().item<double>(), rtol * scale) << what;
}

// three steps of prepare -> (a stand-in for Polar Express: X itself, plus a little of X^3 so
// that finish sees other values than prepare wrote) -> finish, fused and reference from the
// same state; every output and every piece of state compared after each step
void expect_muon_equal(int64_t K, int64_t rows, int64_t cols, torch::ScalarType dtype, torch::ScalarType x_dtype,
                       torch::Device dev, double rtol_x, double rtol) {
  MuonState f = muon_state(K, rows, cols, dtype, dev, 40 + rows), r = copy_of(f);
  const std::string shape = std::to_string(rows) + "x" + std::to_string(cols) + " " + c10::toString(x_dtype) + " ";
  for (int step = 0; step < 3; step++) {
    const std::string at = shape + "step " + std::to_string(step) + ": ";
    Tensor xf = kernels_muon_prepare(f.grads, f.buf, 0.95, x_dtype);
    Tensor xr = kernels_muon_prepare_reference(r.grads, r.buf, 0.95, x_dtype);
    ASSERT_EQ(xf.scalar_type(), x_dtype);
    expect_close(xf, xr, rtol_x, at + "X");
    expect_close(f.buf, r.buf, rtol, at + "momentum buffer");
    for (size_t k = 0; k < f.grads.size(); k++)
      EXPECT_TRUE(torch::equal(f.grads[k], r.grads[k])) << at << "grads written";
    Tensor polar = (xr + xr.to(torch::kFloat).pow(3).to(x_dtype) * 0.1).contiguous();  // one input for both
    std::vector<Tensor> before;
    for (const Tensor& p : r.params) before.push_back(p.clone());
    kernels_muon_finish(polar, f.params, f.second, 0.02, 0.2, 0.9);
    kernels_muon_finish_reference(polar, r.params, r.second, 0.02, 0.2, 0.9);
    expect_close(f.second, r.second, rtol, at + "second moment");
    // the step taken, relative to its own size (the params themselves are 5x larger)
    for (size_t k = 0; k < f.params.size(); k++) {
      expect_close(f.params[k] - before[k], r.params[k] - before[k], rtol, at + "param step");
      f.params[k].copy_(r.params[k]);  // the next step from one state again
    }
  }
}

// a d4 model's MLP matrices (tall and wide) and its attention's (square), and odd widths
// (the wide one's columns and rows ragged against CUDA's 32x8 column tiles)
const std::vector<std::pair<int64_t, int64_t>> muon_model_shapes = {
    {1024, 256}, {256, 1024}, {256, 256}, {67, 45}, {45, 1283}};

}  // namespace

TEST(MuonKernels, Fp64EqualsReference) {
  for (auto [r, c] : std::vector<std::pair<int64_t, int64_t>>{{6, 10}, {10, 6}, {8, 8}, {37, 19}})
    expect_muon_equal(3, r, c, torch::kDouble, torch::kDouble, torch::kCPU, 1e-12, 1e-12);
}

TEST(MuonKernels, Fp32AndBf16EqualReferenceOnModelShapes) {
  for (auto [r, c] : muon_model_shapes) {
    expect_muon_equal(4, r, c, torch::kFloat, torch::kFloat, torch::kCPU, 1e-5, 1e-5);
    // bf16 X: the reference rounds X twice (after MuonEq, after the division), the fused pass
    // once, so they may differ by 1.5 units in the last place (2^-8 relative)
    expect_muon_equal(4, r, c, torch::kFloat, torch::kBFloat16, torch::kCPU, 1.6e-2, 1e-5);
  }
}

TEST(MuonKernels, PrepareGivesEqualRowsOfTheNormalisedMatrix) {
  // by hand: MuonEq scales every row to the mean row norm t = ||G||_F / sqrt(rows), so the
  // scaled matrix has norm ||G||_F and the normalisation leaves every row at 1/(1.01 sqrt(rows))
  // (up to the 1e-6); the Nesterov gradient with a zero buffer and mu = 0.5 is G/2 + G/4
  const int64_t rows = 12, cols = 7;
  std::vector<Tensor> g = {torch::randn({rows, cols}, torch::kDouble) *
                           torch::arange(1, rows + 1, torch::kDouble).unsqueeze(1)};
  Tensor buf = torch::zeros({1, rows, cols}, torch::kDouble);
  Tensor X = kernels_muon_prepare(g, buf, 0.5, torch::kDouble);
  EXPECT_LT((buf[0] - g[0] * 0.5).abs().max().item<double>(), 1e-15);
  Tensor norms = X[0].norm(2, {1});
  const double fro = (g[0] * 0.75).norm().item<double>(), want = fro / (1.01 * fro + 1e-6) / std::sqrt((double)rows);
  EXPECT_LT((norms - want).abs().max().item<double>(), 1e-12);
}

TEST(MuonKernels, CudaEqualsReference) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  for (auto [r, c] : muon_model_shapes) {
    expect_muon_equal(4, r, c, torch::kFloat, torch::kFloat, torch::kCUDA, 1e-5, 1e-5);
    expect_muon_equal(4, r, c, torch::kFloat, torch::kBFloat16, torch::kCUDA, 1.6e-2, 1e-5);
  }
}

// the self-check finds its CPU kernel in both dtypes
TEST(MuonKernels, CpuKernelDtypes) { expect_cpu_kernel_in("muon", {torch::kFloat, torch::kBFloat16}); }
