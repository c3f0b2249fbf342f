// The CPU decode attention kernel (a few new queries over a KV cache) against a masked softmax
// worked out here in fp64 with loops, within a bound derived from the kernel's fp32 arithmetic;
// which inner loops it runs at each ATen CPU capability; its bad calls; and the engine's greedy
// decode with it against the same decode with every kernel off (NANOCHAT_KERNELS=0, a process
// of its own).
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "nanochat/common/error.h"
#include "nanochat/engine.h"
#include "nanochat/engine/scheduler.h"
#include "nanochat/kernels.h"
#include "test_kernels.h"
#include "test_models.h"
#include "test_util.h"

using namespace nanochat;
using torch::Tensor;

namespace {

// where kernels run (on, and a CPU with AVX2), the decode kernel must: it passed its self-check
bool decode_kernel_runs(torch::ScalarType dtype) {
  if (!kernels_enabled() || !kernels_cpu_supported()) return false;
  Tensor q = torch::zeros({1, 1, 1, 8}, dtype), c = torch::zeros({1, 2, 1, 8}, dtype);
  EXPECT_TRUE(kernels_decode_attention_available(q, c, c)) << "the decode kernel failed its self-check";
  return true;
}

struct Expected {
  Tensor out;    // (B,Tq,H,D) fp64
  Tensor bound;  // (B,Tq,H,D): what the kernel's fp32 arithmetic may be off by
};

// The masked softmax in fp64 over the exact input values, and the bound on the kernel's error.
// The kernel's errors, per query: its scores s_j = q.k_j are fp32 sums of D products (exact for
// bf16 inputs, one rounding each for fp32), off by at most g(D+1) S with g(n) = n u / (1 - n u),
// u = 2^-24 and S = max_j sum_d |q_d k_jd|; the exponent scale*(s_j - max) is formed with three more
// roundings of terms at most scale*S; ATen's exp_u20 is within 20 ulps (20 * 2^-23 relative). So
// each weight p_j is off by a relative e <= exp(d) - 1 + 20 * 2^-23 with d = scale (2 g(D+1) S +
// 3 u S), and a convex combination of values with weights off by e moves by at most
// 2 e / (1 - e) max|v|. The sums over the L keys of p_j v_j and of p_j add g(L) each (times max|v|),
// the reciprocal and the product two u, and the output's rounding its dtype's unit roundoff
// (2^-8 for bf16's 8 significant bits, 2^-24 for fp32).
Expected masked_softmax_fp64(const Tensor& q, const Tensor& kc, const Tensor& vc, const std::vector<int64_t>& counts,
                             int64_t window) {
  const int64_t B = q.size(0), Tq = q.size(1), H = q.size(2), D = q.size(3), rep = H / kc.size(2);
  auto qd = q.to(torch::kFloat64).contiguous(), kd = kc.to(torch::kFloat64).contiguous();
  auto vd = vc.to(torch::kFloat64).contiguous();
  auto qa = qd.accessor<double, 4>(), ka = kd.accessor<double, 4>(), va = vd.accessor<double, 4>();
  Tensor out = torch::zeros({B, Tq, H, D}, torch::kFloat64), bound = torch::zeros({B, Tq, H, D}, torch::kFloat64);
  auto oa = out.accessor<double, 4>(), ba = bound.accessor<double, 4>();
  const double u = std::ldexp(1.0, -24), scale = 1.0 / std::sqrt((double)D);
  auto g = [&](double n) { return n * u / (1 - n * u); };
  const double u_out = q.scalar_type() == torch::kBFloat16 ? std::ldexp(1.0, -8) : u;  // 8 and 24 bits
  for (int64_t b = 0; b < B; b++)
    for (int64_t t = 0; t < Tq; t++)
      for (int64_t h = 0; h < H; h++) {
        const int64_t n = counts.size() == 1 ? counts[0] : counts[b], pos = n - Tq + t, hk = h / rep;
        const int64_t lo = window < 0 ? 0 : std::max<int64_t>(0, pos - window);
        std::vector<double> s;
        double S = 0, vmax = 0;
        for (int64_t j = lo; j <= pos; j++) {
          double dot = 0, abs_dot = 0;
          for (int64_t d = 0; d < D; d++) {
            dot += qa[b][t][h][d] * ka[b][j][hk][d];
            abs_dot += std::abs(qa[b][t][h][d] * ka[b][j][hk][d]);
            vmax = std::max(vmax, std::abs(va[b][j][hk][d]));
          }
          s.push_back(dot * scale);
          S = std::max(S, abs_dot);
        }
        const double mx = *std::max_element(s.begin(), s.end());
        double z = 0;
        for (double& x : s) z += (x = std::exp(x - mx));
        const double L = (double)s.size();
        const double dexp = scale * (2 * g(D + 1) * S + 3 * u * S);
        const double e = std::expm1(dexp) + 20 * std::ldexp(1.0, -23);
        const double fp32_err = vmax * (2 * e / (1 - e) + 2 * g(L) + 2 * u);
        for (int64_t d = 0; d < D; d++) {
          double o = 0;
          for (int64_t j = lo; j <= pos; j++) o += s[j - lo] / z * va[b][j][hk][d];
          oa[b][t][h][d] = o;
          ba[b][t][h][d] = fp32_err + u_out * (std::abs(o) + fp32_err);
        }
      }
  return {out, bound};
}

// the kernel's output against the fp64 masked softmax, element by element within its bound
void expect_within_bound(const Tensor& q, const Tensor& kc, const Tensor& vc, const std::vector<int64_t>& counts,
                         int64_t window, const std::string& what) {
  Tensor y = kernels_decode_attention(q, kc, vc, counts, window);
  ASSERT_EQ(y.scalar_type(), q.scalar_type()) << what;
  ASSERT_EQ(y.sizes(), q.sizes()) << what;
  Expected want = masked_softmax_fp64(q, kc, vc, counts, window);
  Tensor excess = (y.to(torch::kFloat64) - want.out).abs() - want.bound;
  EXPECT_LE(excess.max().item<double>(), 0.0)
      << what << ": worst error " << (y.to(torch::kFloat64) - want.out).abs().max().item<double>()
      << ", its bound there " << want.bound.view(-1)[excess.view(-1).argmax()].item<double>();
}

std::string describe(torch::ScalarType dtype, int64_t H, int64_t Hkv, int64_t D, int64_t Tq, int64_t window,
                     const std::vector<int64_t>& counts) {
  std::ostringstream s;
  s << c10::toString(dtype) << " H " << H << " Hkv " << Hkv << " D " << D << " Tq " << Tq << " window " << window
    << " keys";
  for (int64_t n : counts) s << " " << n;
  return s.str();
}

}  // namespace

// fp32 and bf16 caches, GQA, head sizes that are and are not multiples of the vector widths,
// 1 and 3 new queries, windows from 0 to past every row, rows of their own key counts (down to
// only the new keys: 1 key for Tq 1) and one count for all rows; caches that are views of a longer
// cache (rows further apart) and a transposed one (copied to the layout the kernel reads)
TEST(DecodeAttention, KernelEqualsFp64MaskedSoftmax) {
  for (auto dtype : {torch::kFloat, torch::kBFloat16}) {
    if (!decode_kernel_runs(dtype)) GTEST_SKIP() << "no CPU decode kernel here (kernels off or no AVX2)";
    torch::manual_seed(31);
    const int64_t B = 4, Tmax = 50;
    for (auto [H, Hkv] : {std::pair<int64_t, int64_t>{4, 4}, {4, 2}, {6, 1}, {3, 1}})  // 3 or 9 queries: one unpaired
      for (int64_t D : {24, 64, 128})
        for (int64_t Tq : {1, 3}) {
          Tensor q = torch::randn({B, Tq, H, D}).to(dtype);
          Tensor k_long = torch::randn({B, Tmax + 6, Hkv, D}).to(dtype), v_long = torch::randn({B, Tmax + 6, Hkv, D});
          Tensor kc = k_long.narrow(1, 3, Tmax), vc = v_long.to(dtype).narrow(1, 3, Tmax);
          for (int64_t window : {-1, 0, 1, 4, 100})
            for (const std::vector<int64_t>& counts :
                 {std::vector<int64_t>{Tq, 7, 33, Tmax}, std::vector<int64_t>{20}}) {
              expect_within_bound(q, kc, vc, counts, window, describe(dtype, H, Hkv, D, Tq, window, counts));
            }
          // a cache whose heads are not contiguous within a position
          Tensor kt = kc.transpose(2, 3).contiguous().transpose(2, 3);
          expect_within_bound(q, kt, vc, {Tq, 9, 17, 40}, 5,
                              "transposed heads, " + describe(dtype, H, Hkv, D, Tq, 5, {}));
        }
  }
}

// past 256 KB of keys and values the rows' kv heads are split in groups over the threads (3 here:
// B = 1 in groups of 2, 2 and 1 heads; B = 2 in 2 groups each): the same bound holds
TEST(DecodeAttention, HeadGroupsOverThreadsEqualFp64MaskedSoftmax) {
  if (!decode_kernel_runs(torch::kFloat)) GTEST_SKIP() << "no CPU decode kernel here";
  struct Threads {  // the caller's count back however the test ends
    int before = at::get_num_threads();
    ~Threads() { at::set_num_threads(before); }
  } restore;
  at::set_num_threads(3);
  torch::manual_seed(32);
  for (int64_t B : {1, 2}) {
    Tensor q = torch::randn({B, 2, 10, 128}), kc = torch::randn({B, 300, 5, 128}), vc = torch::randn({B, 300, 5, 128});
    expect_within_bound(q, kc, vc, {300}, -1, "B " + std::to_string(B) + ", 5 kv heads over 3 threads");
    const std::vector<int64_t> counts = B == 1 ? std::vector<int64_t>{290} : std::vector<int64_t>{120, 290};
    expect_within_bound(q, kc, vc, counts, 64, "B " + std::to_string(B) + ", window 64");
  }
}

// the inner loops follow ATen's own choice (ctest runs this binary again at each capability
// below the CPU's: ATEN_CPU_CAPABILITY=default, avx2), so every build of them is tested here
TEST(DecodeAttention, InnerLoopsFollowAtensCpuCapability) {
  const char* cap = std::getenv("ATEN_CPU_CAPABILITY");
  const std::string isa = kernels_decode_attention_isa();
  if (cap && std::string(cap) == "default") EXPECT_EQ(isa, "plain C++");
  else if (cap && std::string(cap) == "avx2") EXPECT_EQ(isa, "AVX2");
  else if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"))
    EXPECT_EQ(isa, "AVX-512");  // what ATen picks on such a CPU unless told otherwise
  else EXPECT_EQ(isa, "AVX2");
  std::printf("decode attention inner loops: %s (ATen CPU capability %s)\n", isa.c_str(),
              at::get_cpu_capability().c_str());
}

// bad calls: one error each, naming what is wrong; a call that wants a gradient gets one (the
// reference through autograd), equal to the gradient of the fp64 masked softmax
TEST(DecodeAttention, BadCallsAndGradients) {
  Tensor q = torch::randn({2, 2, 4, 16}), kc = torch::randn({2, 10, 2, 16}), vc = torch::randn({2, 10, 2, 16});
  EXPECT_THROW(kernels_decode_attention(q, kc, vc, {5, 5, 5}, -1), Error);  // 3 counts, 2 rows
  EXPECT_THROW(kernels_decode_attention(q, kc, vc, {1, 5}, -1), Error);     // fewer keys than queries
  EXPECT_THROW(kernels_decode_attention(q, kc, vc, {5, 11}, -1), Error);    // more keys than positions
  EXPECT_THROW(kernels_decode_attention(torch::randn({2, 2, 3, 16}), kc, vc, {5}, -1), Error);  // 3 heads on 2
  Tensor qg = q.clone().requires_grad_();
  Tensor y = kernels_decode_attention(qg, kc, vc, {4, 10}, 3);
  ASSERT_TRUE(y.requires_grad());
  Tensor qd = q.to(torch::kFloat64).requires_grad_();
  Tensor yd = kernels_decode_attention_reference(qd, kc.to(torch::kFloat64), vc.to(torch::kFloat64), {4, 10}, 3);
  Tensor w = torch::randn(y.sizes());
  (y * w).sum().backward();
  (yd * w.to(torch::kFloat64)).sum().backward();
  EXPECT_TRUE(torch::allclose(qg.grad().to(torch::kFloat64), qd.grad(), 1e-4, 1e-5));
}

namespace {

// greedy decode on a tiny model (2 layers of 64 wide, 2 query heads on 1 kv head, windows of 32
// and 64): the engine's two rows at one position, with the logits of every forward's last
// position, then the continuous-batching scheduler's three prompts of their own lengths decoded
// together (rows at positions of their own). Printed as hex floats, one line each.
std::string greedy_report() {
  GPT model = perturbed_gpt(tiny_gpt_config(300), 7, 0.3);
  EngineModel m = engine_model_from_gpt(model);
  auto logits = std::make_shared<std::vector<Tensor>>();
  auto record = std::make_shared<bool>(true);  // the engine's forwards (the scheduler's vary with timing)
  auto forward = m.forward;
  m.forward = [forward, logits, record](const Tensor& ids, KVCache& cache) {
    Tensor l = forward(ids, cache);
    if (*record) logits->push_back(l.select(1, -1).to(torch::kFloat32).contiguous());
    return l;
  };
  auto forward_last = m.forward_last;  // the prompts' forwards
  m.forward_last = [forward_last, logits, record](const Tensor& ids, KVCache& cache, const std::vector<int64_t>& last) {
    Tensor l = forward_last(ids, cache, last);
    if (*record) logits->push_back(l.to(torch::kFloat32).contiguous());
    return l;
  };
  auto engine = std::make_shared<Engine>(m, byte_tokenizer());
  GenerateOptions opt;
  opt.num_samples = 2;
  opt.max_tokens = 24;
  opt.temperature = 0;
  opt.default_stops = false;
  std::ostringstream out;
  GenerateResult r = engine->generate({'T', 'h', 'e', ' ', 'c', 'a', 't', 290, 5}, opt);
  for (auto& row : r.tokens) {
    out << "tokens";
    for (int32_t t : row) out << " " << t;
    out << "\n";
  }
  for (const Tensor& l : *logits) {
    out << "logits";
    const float* p = l.data_ptr<float>();
    for (int64_t i = 0; i < l.numel(); i++) {
      char buf[32];
      std::snprintf(buf, sizeof buf, " %a", p[i]);
      out << buf;
    }
    out << "\n";
  }
  *record = false;
  Scheduler sched(engine, SchedulerOptions{});
  std::vector<std::vector<int32_t>> prompts = {{'a'}, {'H', 'e', 'l', 'l', 'o', ',', ' ', 'w'}, {1, 2, 3, 4, 5}};
  opt.num_samples = 1;
  opt.max_tokens = 16;
  std::vector<std::shared_ptr<Scheduler::Ticket>> tickets;
  for (auto& p : prompts) tickets.push_back(sched.submit(p, opt));
  for (auto& t : tickets) {
    GenerateResult g = sched.run(*t);
    out << "rows";
    for (int32_t tok : g.tokens[0]) out << " " << tok;
    out << "\n";
  }
  return out.str();
}

std::vector<std::string> lines_starting(const std::string& text, const std::string& word) {
  std::vector<std::string> got;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (line.rfind(word + " ", 0) == 0) got.push_back(line);
  return got;
}

std::vector<double> floats_of(const std::string& line) {
  std::istringstream in(line.substr(line.find(' ') + 1));
  std::vector<double> v;
  for (std::string x; in >> x;) v.push_back(std::strtod(x.c_str(), nullptr));
  return v;
}

}  // namespace

// NANOCHAT_KERNELS is read once per process: this binary again, with every kernel off, prints its
// greedy decode for the test below
TEST(DecodeAttentionProbe, GreedyReport) {
  if (!std::getenv("NANOCHAT_TEST_DECODE_PROBE")) GTEST_SKIP() << "run by DecodeAttention.EngineGreedy...";
  std::printf("%s", greedy_report().c_str());
}

// The engine's greedy decode in fp32 with the decode kernel (and every other kernel) against the
// same with NANOCHAT_KERNELS=0: the same tokens, and logits within the fused ops' fp32 agreement.
// Each fused op agrees with its reference within the self-check's fp32 tolerance relative to its
// largest output; a forward composes at most 8 per layer (norms, rotary, attention, MLP, residual
// adds) plus the head, so the logits may differ by 8 * (n_layer + 1) of those, times max |logit|.
TEST(DecodeAttention, EngineGreedyDecodeEqualsKernelsOff) {
  if (!decode_kernel_runs(torch::kFloat)) GTEST_SKIP() << "no CPU decode kernel here";
  char self[4096];
  const ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
  ASSERT_GT(len, 0);
  self[len] = '\0';
  CommandResult off = run_shell("env NANOCHAT_KERNELS=0 NANOCHAT_TEST_DECODE_PROBE=1 '" + std::string(self) +
                                "' --gtest_filter=DecodeAttentionProbe.GreedyReport");
  ASSERT_EQ(off.rc, 0) << off.err;
  const std::string on = greedy_report();
  EXPECT_EQ(lines_starting(on, "tokens"), lines_starting(off.out, "tokens"));
  EXPECT_EQ(lines_starting(on, "rows"), lines_starting(off.out, "rows"));
  ASSERT_EQ(lines_starting(on, "tokens").size(), 2u);
  ASSERT_EQ(lines_starting(on, "rows").size(), 3u);
  const auto lon = lines_starting(on, "logits"), loff = lines_starting(off.out, "logits");
  ASSERT_EQ(lon.size(), loff.size());
  ASSERT_GT(lon.size(), 20u);  // the prefill and every decode step
  const double bound_factor = 8 * (tiny_gpt_config(300).n_layer + 1) * kernels_check_tolerance(torch::kFloat);
  double worst = 0;
  for (size_t i = 0; i < lon.size(); i++) {
    std::vector<double> a = floats_of(lon[i]), b = floats_of(loff[i]);
    ASSERT_EQ(a.size(), b.size());
    double top = 0, diff = 0;
    for (size_t j = 0; j < a.size(); j++) {
      top = std::max(top, std::abs(b[j]));
      diff = std::max(diff, std::abs(a[j] - b[j]));
    }
    EXPECT_LE(diff, bound_factor * top) << "forward " << i;
    worst = std::max(worst, diff / top);
  }
  std::printf("worst logit difference, kernels on against off: %.3g of the largest logit\n", worst);
}
