// Tests of the attention module: the window mask by hand, causal and sliding-window attention
// against brute force in float64, the KV cache's prefill, chunk and decode steps against full
// attention, a batch of rows each at its own position against each row alone, a
// finite-difference gradient, on a GPU the flash kernel against a masked softmax, and the rules
// that pick the kernel for each kind of call (training, eval, prefill, decode, rows).
// (The kernels module's own CPU attention and decode kernels are tested against references in test_kernels.)
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "nanochat/attention.h"
#include "nanochat/common/error.h"
#include "nanochat/gpt.h"

using namespace nanochat;
using torch::Tensor;

namespace {

// brute-force attention in float64 with explicit loops: q (B,Tq,H,D) are the last Tq of
// Tk positions, k/v (B,Tk,Hkv,D)
Tensor naive_attention(const Tensor& q, const Tensor& k, const Tensor& v, int64_t window) {
  auto qd = q.to(torch::kFloat64), kd = k.to(torch::kFloat64), vd = v.to(torch::kFloat64);
  const int64_t B = q.size(0), Tq = q.size(1), H = q.size(2), D = q.size(3), Tk = k.size(1);
  const int64_t rep = H / k.size(2);
  Tensor out = torch::zeros({B, Tq, H, D}, torch::kFloat64);
  for (int64_t b = 0; b < B; b++)
    for (int64_t h = 0; h < H; h++)
      for (int64_t r = 0; r < Tq; r++) {
        const int64_t i = Tk - Tq + r;
        std::vector<double> s;
        std::vector<int64_t> js;
        for (int64_t j = 0; j <= i; j++) {
          if (window >= 0 && i - j > window) continue;
          s.push_back((qd[b][r][h] * kd[b][j][h / rep]).sum().item<double>() / std::sqrt((double)D));
          js.push_back(j);
        }
        double mx = *std::max_element(s.begin(), s.end()), z = 0;
        for (double& x : s) z += (x = std::exp(x - mx));
        for (size_t n = 0; n < s.size(); n++) out[b][r][h] += vd[b][js[n]][h / rep] * (s[n] / z);
      }
  return out;
}

}  // namespace

TEST(Attention, WindowMaskByHand) {
  // 3 queries = positions 2,3,4 of 5 keys, window 1: each sees itself and the key before
  Tensor m = attention_window_mask(3, 5, 1);
  std::vector<std::vector<int>> want = {{0, 1, 1, 0, 0}, {0, 0, 1, 1, 0}, {0, 0, 0, 1, 1}};
  for (int r = 0; r < 3; r++)
    for (int k = 0; k < 5; k++) EXPECT_EQ(m[r][k].item<bool>(), (bool)want[r][k]) << r << "," << k;
  Tensor full = attention_window_mask(2, 2, -1);
  EXPECT_TRUE(full[1][0].item<bool>());
  EXPECT_FALSE(full[0][1].item<bool>());
}

TEST(Attention, CausalWindowsEqualBruteForce) {
  auto gen = gpt_make_generator(torch::kCPU, 11);
  const int64_t B = 2, T = 37, H = 4, Hkv = 2, D = 8;
  Tensor q = at::randn({B, T, H, D}, gen), k = at::randn({B, T, Hkv, D}, gen), v = at::randn({B, T, Hkv, D}, gen);
  for (int64_t w : {-1, 0, 1, 5, 7, 12, 35, 36, 100}) {
    Tensor y = attention_causal(q, k, v, w);
    Tensor ref = naive_attention(q, k, v, w);
    EXPECT_LT((y.to(torch::kFloat64) - ref).abs().max().item<double>(), 1e-5) << "window " << w;
  }
}

// a differentiable masked softmax attention (GQA by repeating k and v), for the GPU check
static Tensor masked_attention(const Tensor& q, const Tensor& k, const Tensor& v, int64_t window) {
  const int64_t T = q.size(1), rep = q.size(2) / k.size(2);
  Tensor kk = k.repeat_interleave(rep, 2), vv = v.repeat_interleave(rep, 2);
  Tensor s = torch::einsum("bihd,bjhd->bhij", {q, kk}) / std::sqrt((double)q.size(3));
  s = s.masked_fill(attention_window_mask(T, T, window, q.device()).logical_not(), -INFINITY);
  return torch::einsum("bhij,bjhd->bihd", {torch::softmax(s, -1), vv});
}

// on a GPU: sliding windows through the flash kernel with a real window (bf16) against a
// masked softmax in fp64, forward and the gradients of q, k and v
TEST(AttentionCuda, FlashWindowEqualsMaskedSoftmax) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  torch::manual_seed(13);
  const int64_t B = 2, T = 512, H = 4, Hkv = 2, D = 128;
  auto opts = torch::TensorOptions().device(torch::kCUDA).dtype(torch::kBFloat16);
  Tensor q = torch::randn({B, T, H, D}, opts).requires_grad_(true),
         k = torch::randn({B, T, Hkv, D}, opts).requires_grad_(true);
  Tensor v = torch::randn({B, T, Hkv, D}, opts).requires_grad_(true);
  for (int64_t w : {0, 7, 128, 300}) {
    std::printf("window %lld: %s\n", (long long)w, attention_kernel_name(q, k, w).c_str());
    Tensor y = attention_causal(q, k, v, w);
    Tensor q64 = q.detach().to(torch::kFloat64).requires_grad_(true),
           k64 = k.detach().to(torch::kFloat64).requires_grad_(true);
    Tensor v64 = v.detach().to(torch::kFloat64).requires_grad_(true);
    Tensor ref = masked_attention(q64, k64, v64, w);
    EXPECT_LT((y.to(torch::kFloat64) - ref).abs().max().item<double>(), 2e-2) << "window " << w;
    Tensor g = torch::randn(y.sizes(), y.options());
    auto ga = torch::autograd::grad({y}, {q, k, v}, {g});
    auto gb = torch::autograd::grad({ref}, {q64, k64, v64}, {g.to(torch::kFloat64)});
    for (int i = 0; i < 3; i++)
      EXPECT_LT((ga[i].to(torch::kFloat64) - gb[i]).abs().max().item<double>(),
                5e-2 * std::max(1.0, gb[i].abs().max().item<double>()))
          << "window " << w << " gradient " << i;
  }
}

// inference on a GPU (flash called directly, never SDPA's cuDNN): a prefill, a chunk after it,
// single-token decodes, and rows at their own positions (flash's variable-length entry), each
// against the masked softmax in fp64 of the same keys
TEST(AttentionCuda, InferencePathsEqualMaskedSoftmax) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  torch::NoGradGuard no_grad;
  torch::manual_seed(14);
  const int64_t T = 300, H = 4, Hkv = 2, D = 64;
  auto opts = torch::TensorOptions().device(torch::kCUDA).dtype(torch::kBFloat16);
  Tensor q = torch::randn({1, T, H, D}, opts), k = torch::randn({1, T, Hkv, D}, opts);
  Tensor v = torch::randn({1, T, Hkv, D}, opts);
  for (int64_t w : {-1, 50}) {
    Tensor ref = masked_attention(q.to(torch::kFloat64), k.to(torch::kFloat64), v.to(torch::kFloat64), w);
    KVCache cache(1, Hkv, T, D, 1, torch::kCUDA, torch::kBFloat16);
    auto [kc, vc] = cache.get_layer_cache(0);
    std::vector<Tensor> parts;
    parts.push_back(
        attention_with_kvcache(q.narrow(1, 0, 200), kc, vc, k.narrow(1, 0, 200), v.narrow(1, 0, 200), 0, w));
    parts.push_back(
        attention_with_kvcache(q.narrow(1, 200, 37), kc, vc, k.narrow(1, 200, 37), v.narrow(1, 200, 37), 200, w));
    for (int64_t t = 237; t < T; t++)
      parts.push_back(attention_with_kvcache(q.narrow(1, t, 1), kc, vc, k.narrow(1, t, 1), v.narrow(1, t, 1), t, w));
    EXPECT_LT((torch::cat(parts, 1).to(torch::kFloat64) - ref).abs().max().item<double>(), 2e-2) << "window " << w;
    // four rows at positions 0, 60, 150, 299 - 3, three tokens each, the cache holding the keys before
    const std::vector<int64_t> pos = {0, 60, 150, 296};
    const int64_t R = 4, n = 3;
    Tensor kr = k.expand({R, T, Hkv, D}).contiguous(), vr = v.expand({R, T, Hkv, D}).contiguous();
    std::vector<Tensor> q_rows, k_rows, v_rows, want_rows;
    for (int64_t b = 0; b < R; b++) {
      q_rows.push_back(q.narrow(1, pos[b], n));
      k_rows.push_back(k.narrow(1, pos[b], n));
      v_rows.push_back(v.narrow(1, pos[b], n));
      want_rows.push_back(ref.narrow(1, pos[b], n));
    }
    Tensor y = attention_with_kvcache_rows(torch::cat(q_rows), kr, vr, torch::cat(k_rows), torch::cat(v_rows), pos, w);
    EXPECT_LT((y.to(torch::kFloat64) - torch::cat(want_rows)).abs().max().item<double>(), 2e-2) << "rows, window " << w;
  }
}

TEST(Attention, KVCachePrefillAndDecodeEqualFullAttention) {
  auto gen = gpt_make_generator(torch::kCPU, 12);
  const int64_t T = 30, H = 2, Hkv = 1, D = 8;
  Tensor q = at::randn({1, T, H, D}, gen), k = at::randn({1, T, Hkv, D}, gen), v = at::randn({1, T, Hkv, D}, gen);
  for (int64_t w : {-1, 4, 9}) {
    Tensor full = attention_causal(q, k, v, w);
    KVCache cache(1, Hkv, 40, D, 1, torch::kCPU, torch::kFloat32);
    auto [kc, vc] = cache.get_layer_cache(0);
    std::vector<Tensor> parts;
    // prefill 12, then a chunk of 6 at position 12, then single-token decodes
    parts.push_back(attention_with_kvcache(q.narrow(1, 0, 12), kc, vc, k.narrow(1, 0, 12), v.narrow(1, 0, 12), 0, w));
    cache.advance(12);
    parts.push_back(attention_with_kvcache(q.narrow(1, 12, 6), kc, vc, k.narrow(1, 12, 6), v.narrow(1, 12, 6), 12, w));
    cache.advance(6);
    for (int64_t t = 18; t < T; t++) {
      parts.push_back(attention_with_kvcache(q.narrow(1, t, 1), kc, vc, k.narrow(1, t, 1), v.narrow(1, t, 1), t, w));
      cache.advance(1);
    }
    EXPECT_EQ(cache.get_pos(), T);
    EXPECT_EQ(cache.cache_seqlens[0].item<int>(), T);
    EXPECT_LT((torch::cat(parts, 1) - full).abs().max().item<double>(), 1e-5) << "window " << w;
  }
  KVCache small(1, Hkv, 4, D, 1, torch::kCPU, torch::kFloat32);
  auto [kc, vc] = small.get_layer_cache(0);
  EXPECT_THROW(attention_with_kvcache(q.narrow(1, 0, 5), kc, vc, k.narrow(1, 0, 5), v.narrow(1, 0, 5), 0, -1), Error);
}

// the scheduler's decode: each row of the batch at its own position, as if it ran alone
TEST(Attention, RowsAtTheirOwnPositionsEqualEachRowAlone) {
  torch::manual_seed(0);
  const int64_t B = 4, H = 4, Hkv = 2, D = 16, L = 40;
  const std::vector<int64_t> pos = {0, 7, 23, 31};
  for (int64_t window : {-1, 5}) {
    for (int64_t T : {1, 3}) {
      torch::Tensor kc = torch::randn({B, L, Hkv, D}), vc = torch::randn({B, L, Hkv, D});
      torch::Tensor q = torch::randn({B, T, H, D}), k = torch::randn({B, T, Hkv, D}), v = torch::randn({B, T, Hkv, D});
      torch::Tensor kc2 = kc.clone(), vc2 = vc.clone();
      torch::Tensor y = attention_with_kvcache_rows(q, kc, vc, k, v, pos, window);
      for (int64_t b = 0; b < B; b++) {
        torch::Tensor kb = kc2.narrow(0, b, 1), vb = vc2.narrow(0, b, 1);
        torch::Tensor want = attention_with_kvcache(q.narrow(0, b, 1), kb, vb, k.narrow(0, b, 1), v.narrow(0, b, 1),
                                                    pos[b], window);
        EXPECT_TRUE(torch::allclose(y.narrow(0, b, 1), want, 1e-5, 1e-5))
            << "row " << b << " window " << window << " T " << T;
      }
      EXPECT_TRUE(torch::equal(kc, kc2)) << "each row's keys land at its own positions";
      EXPECT_TRUE(torch::equal(vc, vc2));
    }
  }
}

// decode steps of rows at their own positions (a row of one key among them), fp32 and bf16
// caches, against brute force per row: the server's batched step (on the CPU the decode kernel
// where kernels are on, else SDPA under the rows' mask)
TEST(Attention, RowsDecodeEqualsBruteForce) {
  torch::manual_seed(5);
  const int64_t H = 4, Hkv = 2, D = 16, L = 32;
  const std::vector<int64_t> pos = {0, 6, 19};
  const int64_t B = (int64_t)pos.size();
  for (auto dtype : {torch::kFloat, torch::kBFloat16})
    for (int64_t window : {-1, 3})
      for (int64_t T : {1, 2}) {
        Tensor kc = torch::randn({B, L, Hkv, D}).to(dtype), vc = torch::randn({B, L, Hkv, D}).to(dtype);
        Tensor q = torch::randn({B, T, H, D}).to(dtype), k = torch::randn({B, T, Hkv, D}).to(dtype);
        Tensor v = torch::randn({B, T, Hkv, D}).to(dtype);
        Tensor y = attention_with_kvcache_rows(q, kc, vc, k, v, pos, window);
        for (int64_t b = 0; b < B; b++) {
          const int64_t n = pos[b] + T;
          Tensor want = naive_attention(q.narrow(0, b, 1), kc.narrow(0, b, 1).narrow(1, 0, n),
                                        vc.narrow(0, b, 1).narrow(1, 0, n), window);
          // bf16: the output rounded to 8 bits (2^-8 of values below 4) after fp32 sums
          const double tol = dtype == torch::kFloat ? 1e-5 : 2e-2;
          EXPECT_LT((y.narrow(0, b, 1).to(torch::kFloat64) - want).abs().max().item<double>(), tol)
              << c10::toString(dtype) << " row " << b << " window " << window << " T " << T;
        }
      }
}

TEST(Attention, GradientOfChunkedWindowByFiniteDifferences) {
  auto gen = gpt_make_generator(torch::kCPU, 13);
  auto opts = torch::TensorOptions().dtype(torch::kFloat64);
  Tensor q = at::randn({1, 9, 2, 4}, gen, opts).requires_grad_(true);
  Tensor k = at::randn({1, 9, 2, 4}, gen, opts).requires_grad_(true);
  Tensor v = at::randn({1, 9, 2, 4}, gen, opts).requires_grad_(true);
  Tensor wsum = at::randn({1, 9, 2, 4}, gen, opts);
  auto f = [&]() { return (attention_causal(q, k, v, 3) * wsum).sum(); };
  f().backward();
  torch::NoGradGuard ng;
  for (Tensor* t : {&q, &k, &v})
    for (int64_t n : {0, 13, 40, 71}) {
      double* p = t->data_ptr<double>() + n;
      const double old = *p, eps = 1e-6;
      *p = old + eps;
      double up = f().item<double>();
      *p = old - eps;
      double down = f().item<double>();
      *p = old;
      EXPECT_NEAR(t->grad().view(-1)[n].item<double>(), (up - down) / (2 * eps), 1e-7);
    }
}

// Which kernel each kind of call takes, as rules: training's fixed shapes may use SDPA's causal
// choice (cuDNN on a recent GPU, one graph for the one shape); inference never does where flash
// runs, since eval's lengths vary and decode's key length grows every token (a cuDNN graph each).
TEST(AttentionPath, InferenceNeverTakesSdpaCausalWhereFlashRuns) {
  AttentionCall c;
  c.flash = true;
  for (bool rows : {false, true})
    for (int64_t Tk : {1, 2, 37, 100, 513, 2048})
      for (int64_t Tq : {int64_t(1), Tk / 2 + 1, Tk})
        for (int64_t window : {-1, 0, 8, 512, 4096}) {
          c.rows = rows;
          c.Tq = Tq;
          c.Tk = Tk;
          c.window = window;
          c.grad = false;
          const AttentionPath p = attention_path(c);
          EXPECT_EQ(p, rows ? AttentionPath::FlashRows : AttentionPath::Flash)
              << "Tq " << Tq << " Tk " << Tk << " window " << window << ": " << attention_path_name(p);
        }
}

// the CPU's decode kernel: a few new queries past position 0, of one position or of rows at
// their own; never with a gradient, never where flash runs, never a prefill of many queries
TEST(AttentionPath, CpuDecodeRules) {
  AttentionCall c;
  c.cpu_decode = true;
  c.Tk = 40;
  for (bool rows : {false, true}) {
    c.rows = rows;
    for (int64_t Tq : {int64_t(1), int64_t(3), kAttentionDecodeMaxQueries}) {
      c.Tq = Tq;
      for (int64_t window : {-1, 0, 8}) {
        c.window = window;
        EXPECT_EQ(attention_path(c), AttentionPath::CpuDecode) << rows << " Tq " << Tq << " window " << window;
      }
    }
    c.window = -1;
    c.Tq = kAttentionDecodeMaxQueries + 1;
    EXPECT_EQ(attention_path(c), AttentionPath::SdpaMasked) << rows;
    c.Tq = 1;
    c.grad = true;
    EXPECT_EQ(attention_path(c), rows ? AttentionPath::SdpaMasked : AttentionPath::SdpaLastKeys);
    c.grad = false;
    c.flash = true;
    EXPECT_EQ(attention_path(c), rows ? AttentionPath::FlashRows : AttentionPath::Flash);
    c.flash = false;
    c.cpu_decode = false;
    EXPECT_EQ(attention_path(c), rows ? AttentionPath::SdpaMasked : AttentionPath::SdpaLastKeys);
    c.cpu_decode = true;
  }
  // from position 0 (as many queries as keys): the causal paths
  c.rows = false;
  c.Tq = c.Tk = 5;
  EXPECT_EQ(attention_path(c), AttentionPath::SdpaCausal);
  c.cpu_kernels = true;
  EXPECT_EQ(attention_path(c), AttentionPath::CpuKernels);
  EXPECT_STREQ(attention_path_name(AttentionPath::CpuDecode), "nanochat CPU decode attention");
}

TEST(AttentionPath, RulesByHand) {
  auto path = [](bool cpu, bool flash, bool grad, bool rows, int64_t Tq, int64_t Tk, int64_t window) {
    AttentionCall c;
    c.cpu_kernels = cpu;
    c.flash = flash;
    c.grad = grad;
    c.rows = rows;
    c.Tq = Tq;
    c.Tk = Tk;
    c.window = window;
    return attention_path(c);
  };
  // training on a GPU: full causal layers keep SDPA (fixed shape), windows take the real window
  EXPECT_EQ(path(false, true, true, false, 2048, 2048, -1), AttentionPath::SdpaCausal);
  EXPECT_EQ(path(false, true, true, false, 2048, 2048, 2048), AttentionPath::SdpaCausal);  // window >= T-1: full
  EXPECT_EQ(path(false, true, true, false, 2048, 2048, 2047), AttentionPath::SdpaCausal);
  EXPECT_EQ(path(false, true, true, false, 2048, 2048, 512), AttentionPath::Flash);
  // eval or a prefill on a GPU: flash, full or windowed
  EXPECT_EQ(path(false, true, false, false, 77, 77, -1), AttentionPath::Flash);
  // no flash (fp32 on a GPU, an old GPU, a failed self-check): SDPA, chunked windows, the last keys, a mask
  EXPECT_EQ(path(false, false, false, false, 77, 77, -1), AttentionPath::SdpaCausal);
  EXPECT_EQ(path(false, false, true, false, 64, 64, 8), AttentionPath::ChunkedWindows);
  EXPECT_EQ(path(false, false, false, false, 1, 40, 8), AttentionPath::SdpaLastKeys);
  EXPECT_EQ(path(false, false, false, false, 7, 40, 8), AttentionPath::SdpaMasked);
  EXPECT_EQ(path(false, false, false, true, 1, 40, -1), AttentionPath::SdpaMasked);
  // the CPU's own kernel for causal calls from position 0, training or not
  EXPECT_EQ(path(true, false, true, false, 64, 64, 8), AttentionPath::CpuKernels);
  EXPECT_EQ(path(true, false, false, false, 64, 64, -1), AttentionPath::CpuKernels);
  EXPECT_EQ(path(true, false, false, false, 1, 64, -1), AttentionPath::SdpaLastKeys);  // a KV cache past 0
  // what this machine takes: on the CPU, never LibTorch's CUDA flash kernel with a real window
  Tensor q = torch::randn({1, 5, 2, 8}), k = torch::randn({1, 5, 2, 8});
  EXPECT_EQ(attention_kernel_name(q, k, 2).find("flash with a real"), std::string::npos)
      << attention_kernel_name(q, k, 2);
}
