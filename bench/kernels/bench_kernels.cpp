// Forward+backward time of each fused op of the kernels module against its ATen reference,
// measured in the same run on the same inputs (for Muon's optimizer passes, the step around
// Polar Express on one group of the model's matrices; Polar Express itself on the model's Muon
// stacks), and of attention for a long (causal) and a
// short (sliding window) layer; decode attention (forward only) against SDPA. Shapes are a model's at --depth (width 64*depth, head dim
// 128 or 64) with --batch x --seq-len tokens. Each op also gets its roofline: the bytes it must
// move and the FLOPs it must do (formulas from its shapes, beside each op below), against the
// device's memory bandwidth (a large device-to-device copy) and matmul rate (a large GEMM, in
// the bench's dtype and in FP8) measured in the same run; "% of limit" is the time those allow
// over the fused op's time. Last line: one JSON object with every figure.
// usage: bench_kernels [--device cpu|cuda] [--dtype float32|bfloat16] [--depth 4] [--batch 8]
//        [--seq-len 512] [--vocab 32768] [--reps 5] [--threads N]
#include <cstdio>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "nanochat/attention.h"
#include "nanochat/common/device.h"
#include "nanochat/gpt.h"
#include "nanochat/kernels.h"
#include "nanochat/optim.h"
#include "../bench_util.h"

using namespace nanochat;
using torch::Tensor;

namespace {

// the best of `reps` timed calls of f (one untimed call first)
double time_call(const std::function<void()>& f, int reps, torch::Device device) {
  f();
  double best = 1e30;
  for (int r = 0; r < reps; r++) {
    device_synchronize(device);
    auto t0 = bench_clock::now();
    f();
    device_synchronize(device);
    best = std::min(best, bench_seconds_since(t0));
  }
  return best;
}

// every leaf of the bench: their gradients are dropped before each timed call, so that a call
// writes fresh gradients rather than adding into the last call's (a pass more per leaf)
std::vector<Tensor>& bench_leaves() {
  static std::vector<Tensor> leaves;
  return leaves;
}

// fwd+bwd, every output given a gradient of ones (made once, outside the timed calls)
double time_fwd_bwd(const std::function<std::vector<Tensor>()>& fwd, int reps, torch::Device device) {
  std::vector<Tensor> grads;
  for (const Tensor& o : fwd()) grads.push_back(torch::ones_like(o).detach());
  return time_call(
      [&] {
        for (Tensor& l : bench_leaves()) l.mutable_grad() = Tensor();
        torch::autograd::backward(fwd(), grads);
      },
      reps, device);
}

double time_fwd_bwd(const std::function<Tensor()>& fwd, int reps, torch::Device device) {
  return time_fwd_bwd(std::function<std::vector<Tensor>()>([&] { return std::vector<Tensor>{fwd()}; }), reps, device);
}

std::vector<Tensor> both(const std::pair<Tensor, Tensor>& p) { return {p.first, p.second}; }

Tensor leaf(Tensor t) {
  Tensor l = t.detach().requires_grad_(true);
  bench_leaves().push_back(l);
  return l;
}

// ---- the roofline ----------------------------------------------------------------------------
// What the device can do, measured here: bytes/s of a large copy (read + write), FLOP/s of a
// large GEMM in the bench's dtype and through FP8 (_scaled_mm on a GPU of sm89+; on the CPU the
// fp32 GEMM that kernels_fp8_mm runs there); 0 where not measured
struct DeviceLimits {
  double bytes_per_s = 0, flops = 0, fp8_flops = 0;
};

DeviceLimits measure_limits(torch::Device device, torch::ScalarType dtype, int reps) {
  DeviceLimits lim;
  auto opts = torch::TensorOptions().device(device);
  const int64_t copy_bytes = device.is_cuda() ? (int64_t(1) << 30) : (int64_t(1) << 28);  // 1 GiB; 256 MiB
  Tensor src = torch::ones({copy_bytes / 4}, opts), dst = torch::empty_like(src);
  lim.bytes_per_s = 2.0 * (double)copy_bytes / time_call([&] { dst.copy_(src); }, std::max(reps, 3), device);
  const int64_t n = device.is_cuda() ? 8192 : 1024;
  const double gemm_flops = 2.0 * (double)n * (double)n * (double)n;
  Tensor a = torch::randn({n, n}, opts).to(dtype), b = torch::randn({n, n}, opts).to(dtype);
  lim.flops = gemm_flops / time_call([&] { torch::mm(a, b); }, std::max(reps, 3), device);
  bool fp8 = true;
  if (device.is_cuda()) {
    auto infos = cuda_device_infos(device.index() < 0 ? 0 : device.index(), /*with_memory=*/false);
    fp8 = !infos.empty() && infos[0].major * 10 + infos[0].minor >= 89;
  }
  if (fp8) {
    auto [a8, a_inv] = kernels_fp8_quantize(a, torch::kFloat8_e4m3fn);
    auto [b8, b_inv] = kernels_fp8_quantize(b, torch::kFloat8_e4m3fn);
    lim.fp8_flops = gemm_flops / time_call([&] { kernels_fp8_mm(a8, b8.t(), a_inv, b_inv, dtype, true); },
                                           std::max(reps, 3), device);
  }
  return lim;
}

// an op's floor: the slower of moving its bytes and doing its FLOPs at the measured rates, in ms
double limit_ms(const DeviceLimits& lim, double bytes, double flops, bool fp8) {
  const double rate = fp8 ? lim.fp8_flops : lim.flops;
  return 1000 * std::max(lim.bytes_per_s > 0 ? bytes / lim.bytes_per_s : 0.0, rate > 0 ? flops / rate : 0.0);
}

// every op of the self-check's registry (the one list of the ops: a new op is here without an
// edit of this file) at its check's shapes -- d24's on a GPU, small ones on the CPU -- forward
// and backward through its kernel and its reference, the best of `reps` checks
void registry_table(torch::Device device, torch::ScalarType dtype, int reps, nlohmann::json& j) {
  std::map<std::string, kernels_check_result> best;
  for (int r = 0; r < std::max(1, reps); r++)
    for (const kernels_check_result& k : kernels_self_check(device, dtype)) {
      if (!k.applies) continue;
      auto [it, first] = best.emplace(k.op, k);
      if (first) continue;
      it->second.fused_ms = std::min(it->second.fused_ms, k.fused_ms);
      it->second.reference_ms = std::min(it->second.reference_ms, k.reference_ms);
    }
  std::printf("\nevery registered op at its self-check's shapes (%s), best of %d:\n",
              device.is_cuda() ? "d24's" : "small", std::max(1, reps));
  for (const auto& [op, k] : best) {
    std::printf("%-22s %12.2f %14.2f %9.2fx\n", op.c_str(), k.fused_ms, k.reference_ms, k.reference_ms / k.fused_ms);
    j["registry"][op] = {
        {"fused_ms", k.fused_ms}, {"reference_ms", k.reference_ms}, {"speedup", k.reference_ms / k.fused_ms}};
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_kernels: fused ops against their ATen references, fwd+bwd"};
  std::string device_name = "cpu", dtype_name_flag = "float32";
  int64_t depth = 4, batch = 8, seq_len = 512, vocab = 32768;
  int reps = 5, threads = 0;
  app.add_option("--device", device_name)->check(CLI::IsMember({"cpu", "cuda"}));
  app.add_option("--dtype", dtype_name_flag)->check(CLI::IsMember({"float32", "bfloat16"}));
  app.add_option("--depth", depth);
  app.add_option("--batch", batch);
  app.add_option("--seq-len", seq_len);
  app.add_option("--vocab", vocab);
  app.add_option("--reps", reps);
  app.add_option("--threads", threads);
  CLI11_PARSE(app, argc, argv);
  if (threads > 0) setenv("OMP_NUM_THREADS", std::to_string(threads).c_str(), 1);
  threads = cpu_threads_setup(1);
  if (device_name == "cuda" && !torch::cuda::is_available()) {
    std::fprintf(stderr, "bench_kernels: --device cuda, but no CUDA GPU is visible\n");
    return 1;
  }
  torch::Device device(device_name == "cuda" ? torch::kCUDA : torch::kCPU);
  const torch::ScalarType dtype = dtype_name_flag == "bfloat16" ? torch::kBFloat16 : torch::kFloat;
  GPTConfig c = gpt_config_from_depth(depth, vocab, seq_len, "SSSL", 64, depth <= 8 ? 64 : 128);
  const int64_t B = batch, T = seq_len, C = c.n_embd, H = c.n_head, D = c.head_dim(), N = B * T;
  std::printf(
      "bench_kernels: %s, %s, %d threads, d%lld (C=%lld, H=%lld, D=%lld), B=%lld T=%lld vocab %lld, "
      "kernels %s\n\n",
      device.str().c_str(), dtype_name(dtype).c_str(), threads, (long long)depth, (long long)C, (long long)H,
      (long long)D, (long long)B, (long long)T, (long long)vocab,
      kernels_enabled() ? "on" : "off (NANOCHAT_KERNELS=0: both columns run the reference)");
  auto opts = torch::TensorOptions().device(device);
  torch::manual_seed(0);

  const DeviceLimits lim = measure_limits(device, dtype, reps);
  std::printf("measured limits: copy %.1f GB/s, %s GEMM %.2f TFLOP/s, FP8 GEMM %.2f TFLOP/s\n\n", lim.bytes_per_s / 1e9,
              dtype_name(dtype).c_str(), lim.flops / 1e12, lim.fp8_flops / 1e12);

  // bytes and FLOPs of the fused op, fwd+bwd; fp8: its FLOPs run at the FP8 GEMM's rate
  struct Row {
    std::string op;
    double fused_ms, reference_ms, bytes, flops;
    bool fp8 = false;
  };
  std::vector<Row> rows;
  auto compare = [&](const std::string& op, const auto& fused, const auto& ref, double bytes, double flops,
                     bool fp8 = false) {  // one output or several
    rows.push_back(
        {op, 1000 * time_fwd_bwd(fused, reps, device), 1000 * time_fwd_bwd(ref, reps, device), bytes, flops, fp8});
  };
  // the element size, and a GEMM (m, n) = (m, k) @ (k, n): its FLOPs, and its bytes with inputs of
  // `in` bytes an element and an output of `out`
  const double es = (double)torch::elementSize(dtype);
  auto gemm_flops = [](double m, double n, double k) { return 2 * m * n * k; };
  auto gemm_bytes = [](double m, double n, double k, double in, double out) {
    return (m * k + k * n) * in + m * n * out;
  };

  // lm_head + softcap + cross-entropy: per-token losses (eval, SFT, RL), then the mean (pretraining)
  const int64_t vp = gpt_padded_vocab(vocab);
  Tensor x = leaf(torch::randn({N, C}, opts).to(dtype)), w = leaf(torch::randn({vp, C}, opts) * 0.05);
  Tensor targets = torch::randint(vocab, {N}, opts.dtype(torch::kLong));
  // per-token losses: backward recomputes the logits (4 GEMMs of N x Vp x C: logits twice, dx, dW);
  // x and W (in the compute dtype) read twice, dx and the fp32 dW written; targets, losses, lse
  const double Nd = (double)N, Cd = (double)C, Vd = (double)vp;
  compare(
      "lm_head+softcap+CE", [&] { return kernels_linear_softcap_ce(x, w, targets, vocab, kSoftcap); },
      [&] { return kernels_linear_softcap_ce_reference(x, w, targets, vocab, kSoftcap); },
      3 * Nd * Cd * es + Vd * Cd * (2 * es + 4) + 16 * Nd, 4 * gemm_flops(Nd, Vd, Cd));
  // the mean: the gradients need only one pass of logits (3 GEMMs), x and W read once
  const double ce_mean_bytes = 2 * Nd * Cd * es + Vd * Cd * (es + 4) + 16 * Nd,
               ce_mean_flops = 3 * gemm_flops(Nd, Vd, Cd);
  setenv("NANOCHAT_CE_PASSES", "2", 1);  // the default: forward then backward kernel on CUDA
  compare(
      "  ... mean (training)", [&] { return kernels_linear_softcap_ce_mean(x, w, targets, vocab, kSoftcap); },
      [&] { return kernels_linear_softcap_ce_mean_reference(x, w, targets, vocab, kSoftcap); }, ce_mean_bytes,
      ce_mean_flops);
  if (device.is_cuda()) {  // the one-pass kernel beside it: the faster becomes the default
    setenv("NANOCHAT_CE_PASSES", "1", 1);
    compare(
        "  ... mean, one pass", [&] { return kernels_linear_softcap_ce_mean(x, w, targets, vocab, kSoftcap); },
        [&] { return kernels_linear_softcap_ce_mean_reference(x, w, targets, vocab, kSoftcap); }, ce_mean_bytes,
        ce_mean_flops);
    setenv("NANOCHAT_CE_PASSES", "2", 1);
  }
  // MLP with ReLU^2
  Tensor xm = leaf(torch::randn({B, T, C}, opts).to(dtype));
  Tensor wfc = leaf((torch::randn({4 * C, C}, opts) * 0.05).to(dtype)),
         wpr = leaf((torch::randn({C, 4 * C}, opts) * 0.05).to(dtype));
  // 6 GEMMs of N x 4C x C (fwd: c_fc, c_proj; bwd: dW_proj, da, dx, dW_fc), each reading its
  // operands and writing its output once; relu^2 over N x 4C: read h, write a (forward, and again
  // in backward for dW_proj), then read h and da, write dh
  const double H4 = 4 * Cd, act = Nd * H4 * es;
  compare(
      "MLP relu^2", [&] { return kernels_mlp_relu_square(xm, wfc, wpr); },
      [&] { return kernels_mlp_relu_square_reference(xm, wfc, wpr); },
      gemm_bytes(Nd, H4, Cd, es, es) * 3 + gemm_bytes(Nd, Cd, H4, es, es) * 3 + 7 * act, 6 * gemm_flops(Nd, H4, Cd));
  // the same through FP8 (fp32 masters, as the model's): against the eager composition the model
  // ran before (relu and square between two fp8 linears). 7 FP8 GEMMs (c_fc's output recomputed
  // in backward) of 1-byte operands; the quantisations read their input twice and write it and its
  // transpose in 1 byte: x and the output's gradient (N x C), a and dh (N x 4C)
  Tensor wfc32 = leaf(torch::randn({4 * C, C}, opts) * 0.05), wpr32 = leaf(torch::randn({C, 4 * C}, opts) * 0.05);
  const double nc = Nd * Cd;
  if (device.is_cpu() || lim.fp8_flops > 0)
    compare(
        "FP8 MLP relu^2", [&] { return kernels_fp8_mlp(xm, wfc32, wpr32); },
        [&] { return kernels_fp8_linear(at::relu(kernels_fp8_linear(xm, wfc32)).square(), wpr32); },
        4 * gemm_bytes(Nd, H4, Cd, 1, es) + 3 * gemm_bytes(Nd, Cd, H4, 1, es) + 2 * (nc + Nd * H4) * (2 * es + 2) +
            5 * act,
        7 * gemm_flops(Nd, H4, Cd), /*fp8=*/true);
  // rotary + QK norm + x1.2 on q
  auto [cs, sn] = gpt_rotary_tables(T, D, dtype, device);
  Tensor q = leaf(torch::randn({B, T, H, D}, opts).to(dtype));
  // forward reads x, writes y; backward reads dy and y, writes dx (5 passes over N x H x D), the
  // cos and sin tables (T x D/2 each) read each way, one fp32 rstd per row written and read;
  // about 6 FLOPs an element forward (rotation 3, square-sum 2, scale 1) and 10 backward
  const double nhd = Nd * (double)(H * D);
  compare(
      "rotary+QKnorm", [&] { return kernels_rotary_norm(q, cs, sn, 1.2); },
      [&] { return kernels_rotary_norm_reference(q, cs, sn, 1.2); },
      5 * nhd * es + 2 * (double)(T * D) * es + 8 * Nd * (double)H, 16 * nhd);
  // the residual stream into the norm: a*x + b*x0 with the layer's lambdas, and norm of that
  Tensor xr = leaf(torch::randn({B, T, C}, opts).to(dtype)), x0 = leaf(torch::randn({B, T, C}, opts).to(dtype));
  Tensor la = leaf(torch::tensor(0.9f, opts)), lb = leaf(torch::tensor(0.1f, opts));
  // forward reads x, x0, writes h, n; backward reads dh, dn, h, x, x0 (the lambdas' gradients),
  // writes dx, dx0: 11 passes over N x C, and per row rstd (written, read) and the lambdas' two
  // partial sums; about 7 FLOPs an element forward and 12 backward
  compare(
      "resid mix+RMSNorm", [&] { return both(kernels_residual_norm(xr, x0, la, lb)); },
      [&] { return both(kernels_residual_norm_reference(xr, x0, la, lb)); }, 11 * nc * es + 16 * Nd, 19 * nc);

  // Muon around Polar Express (prepare, then finish on its output) for the stack of the
  // model's MLP input matrices (tall, NorMuon per row) and output matrices (wide, per column)
  for (bool tall : {true, false}) {
    const int64_t r = tall ? 4 * C : C, cc = tall ? C : 4 * C;
    std::vector<Tensor> grads, params;
    for (int64_t k = 0; k < depth; k++) {
      grads.push_back(torch::randn({r, cc}, opts) * 0.01);
      params.push_back(torch::randn({r, cc}, opts) * 0.05);
    }
    Tensor buf = torch::zeros({depth, r, cc}, opts);
    Tensor second = tall ? torch::zeros({depth, r, 1}, opts) : torch::zeros({depth, 1, cc}, opts);
    const auto x_dtype = dtype == torch::kBFloat16 ? torch::kBFloat16 : torch::kFloat;  // Polar Express's dtype
    auto fused = [&] {
      kernels_muon_finish(kernels_muon_prepare(grads, buf, 0.95, x_dtype), params, second, 0.02, 0.1, 0.95);
    };
    auto ref = [&] {
      kernels_muon_finish_reference(kernels_muon_prepare_reference(grads, buf, 0.95, x_dtype), params, second, 0.02,
                                    0.1, 0.95);
    };
    // per element: the fp32 gradient read, the momentum read and written, X written and read back
    // in x_dtype, the param read and written: 20 + 2 * |x_dtype| bytes; ~20 FLOPs
    const double elems = (double)(depth * r * cc), xs = (double)torch::elementSize(x_dtype);
    rows.push_back({tall ? "Muon step, MLP in" : "Muon step, MLP out", 1000 * time_call(fused, reps, device),
                    1000 * time_call(ref, reps, device), elems * (20 + 2 * xs), 20 * elems});
  }

  // Polar Express (5 iterations) on the model's Muon stacks: attention's (4*depth square, C x C;
  // k and v as q when there is no GQA), the MLP's inputs (tall) and outputs (wide). Only the CPU
  // in fp32 has a path of its own; elsewhere both sides would be the reference.
  if (device.is_cpu() && dtype == torch::kFloat) {
    const struct {
      const char* name;
      int64_t n, r, cc;
    } stacks[] = {{"Polar Express, attn", 4 * depth, C, C},
                  {"Polar Express, MLP in", depth, 4 * C, C},
                  {"Polar Express, MLP out", depth, C, 4 * C}};
    for (const auto& st : stacks) {
      Tensor X = torch::randn({st.n, st.r, st.cc}, opts);
      X = X / (X.norm(2, {1, 2}, true) * 1.02);
      const auto& coeffs = optim_polar_express_coeffs();
      // 5 iterations of A = X X^T (m x m from m x M), A @ A, then (b A + c A A) @ X with m the
      // smaller side: 2 m^2 M + 2 m^3 + 2 m^2 M FLOPs each; X read and written each iteration
      const double m = (double)std::min(st.r, st.cc), M = (double)std::max(st.r, st.cc), n = (double)st.n;
      rows.push_back({st.name, 1000 * time_call([&] { kernels_polar_express(X, coeffs, 5); }, reps, device),
                      1000 * time_call([&] { kernels_polar_express_reference(X, coeffs, 5); }, reps, device),
                      5 * n * m * M * 8, 5 * n * (4 * m * m * M + 2 * m * m * m)});
    }
  }

  // attention: the long layer (causal) and a short one (window T/4), reported alone
  Tensor qa = leaf(torch::randn({B, T, H, D}, opts).to(dtype)), ka = leaf(torch::randn({B, T, H, D}, opts).to(dtype));
  Tensor va = leaf(torch::randn({B, T, H, D}, opts).to(dtype));
  const int64_t short_window = gpt_window_sizes(c)[0];
  double attn_l = 1000 * time_fwd_bwd([&] { return attention_causal(qa, ka, va, -1); }, reps, device);
  double attn_s = 1000 * time_fwd_bwd([&] { return attention_causal(qa, ka, va, short_window); }, reps, device);
  // the (query, key) pairs a layer scores: sum over t of min(t, window) + 1; 4 FLOPs a pair and
  // head dim forward (scores, P @ V), 10 backward (the scores again, dV, dP, dQ, dK); q, k, v read
  // each way, o written and read, do read, dq, dk, dv written: 12 passes over N x H x D
  auto attn_pairs = [&](int64_t window) {
    double p = 0;
    for (int64_t t = 0; t < T; t++) p += (double)((window < 0 ? t : std::min(t, window)) + 1);
    return p;
  };
  auto attn_flops = [&](int64_t window) { return 14 * (double)(B * H * D) * attn_pairs(window); };
  const double attn_bytes = 12 * nhd * es;
  if (kernels_attention_available(qa))  // the CPU kernel against the SDPA path it replaces
    for (int64_t w : {int64_t(-1), short_window})
      rows.push_back({w < 0 ? "attention L vs SDPA" : "attention S vs SDPA", w < 0 ? attn_l : attn_s,
                      1000 * time_fwd_bwd([&] { return attention_causal_sdpa(qa, ka, va, w); }, reps, device),
                      attn_bytes, attn_flops(w)});

  // decode attention (forward only): one new query per row over a KV cache of T positions, the
  // CPU decode kernel against the SDPA calls the attention module made before it: one row over
  // its keys, no mask; B rows at positions of their own (T/4 .. T keys) under the rows' mask over
  // the longest row's keys. Bytes: the keys and values the rows see; FLOPs: 4 per (query, key, dim)
  {
    const int decode_reps = 20 * reps;  // calls of tens of us: more of them for the best
    Tensor kc = torch::randn({B, T, c.n_kv_head, D}, opts).to(dtype),
           vc = torch::randn({B, T, c.n_kv_head, D}, opts).to(dtype);
    Tensor qd = torch::randn({B, 1, H, D}, opts).to(dtype);
    if (kernels_decode_attention_available(qd, kc, vc)) {
      auto sdpa = [&](const Tensor& q, const Tensor& k, const Tensor& v, const std::optional<Tensor>& mask) {
        return at::scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), mask, 0.0,
                                                false, std::nullopt, q.size(2) != k.size(2));
      };
      auto kv_bytes = [&](double keys) { return 2 * keys * (double)(c.n_kv_head * D) * es; };
      Tensor q1 = qd.narrow(0, 0, 1), k1 = kc.narrow(0, 0, 1), v1 = vc.narrow(0, 0, 1);
      rows.push_back({"decode 1 row vs SDPA",
                      1000 * time_call([&] { kernels_decode_attention(q1, k1, v1, {T}, -1); }, decode_reps, device),
                      1000 * time_call([&] { sdpa(q1, k1, v1, std::nullopt); }, decode_reps, device),
                      kv_bytes((double)T), 4.0 * H * D * T});
      std::vector<int64_t> pos, counts;
      double keys = 0;
      for (int64_t b = 0; b < B; b++) {
        counts.push_back(T / 4 + (T - T / 4) * (b + 1) / B);
        pos.push_back(counts.back() - 1);
        keys += (double)counts.back();
      }
      Tensor mask = attention_rows_mask(pos, 1, 0, T, -1, device);
      rows.push_back({"decode rows vs SDPA",
                      1000 * time_call([&] { kernels_decode_attention(qd, kc, vc, counts, -1); }, decode_reps, device),
                      1000 * time_call([&] { sdpa(qd, kc, vc, mask); }, decode_reps, device), kv_bytes(keys),
                      4.0 * H * D * keys});
    }
  }

  std::printf("%-22s %10s %12s %9s %10s %9s %9s %7s\n", "op (fwd+bwd; Muon: step)", "fused ms", "reference ms",
              "speed-up", "MB moved", "GFLOP", "limit ms", "% limit");
  nlohmann::json j = {
      {"bench", "kernels"}, {"device", device.str()}, {"dtype", dtype_name(dtype)}, {"depth", depth}, {"batch", B},
      {"seq_len", T},       {"vocab", vocab},         {"threads", threads}};
  j["limits"] = {{"copy_bytes_per_s", lim.bytes_per_s}, {"gemm_flops", lim.flops}, {"fp8_gemm_flops", lim.fp8_flops}};
  for (const Row& r : rows) {
    const double floor_ms = limit_ms(lim, r.bytes, r.flops, r.fp8);
    std::printf("%-22s %10.2f %12.2f %8.2fx %10.1f %9.2f %9.3f %6.0f%%\n", r.op.c_str(), r.fused_ms, r.reference_ms,
                r.reference_ms / r.fused_ms, r.bytes / 1e6, r.flops / 1e9, floor_ms, 100 * floor_ms / r.fused_ms);
    j["ops"][r.op] = {{"fused_ms", r.fused_ms},
                      {"reference_ms", r.reference_ms},
                      {"speedup", r.reference_ms / r.fused_ms},
                      {"bytes", r.bytes},
                      {"flops", r.flops},
                      {"limit_ms", floor_ms},
                      {"fraction_of_limit", floor_ms / r.fused_ms}};
  }
  const double attn_l_floor = limit_ms(lim, attn_bytes, attn_flops(-1), false),
               attn_s_floor = limit_ms(lim, attn_bytes, attn_flops(short_window), false);
  std::printf("\nattention L (causal):        %8.2f ms   %s, %.0f%% of its limit (%.3f ms)\n", attn_l,
              attention_kernel_name(qa, ka, -1).c_str(), 100 * attn_l_floor / attn_l, attn_l_floor);
  std::printf("attention S (window %4lld):   %8.2f ms   %s, %.0f%% of its limit (%.3f ms)\n", (long long)short_window,
              attn_s, attention_kernel_name(qa, ka, short_window).c_str(), 100 * attn_s_floor / attn_s, attn_s_floor);
  j["attention"] = {{"long_ms", attn_l},
                    {"short_ms", attn_s},
                    {"short_window", short_window},
                    {"long_kernel", attention_kernel_name(qa, ka, -1)},
                    {"short_kernel", attention_kernel_name(qa, ka, short_window)},
                    {"long_fraction_of_limit", attn_l_floor / attn_l},
                    {"short_fraction_of_limit", attn_s_floor / attn_s}};
  registry_table(device, dtype, reps, j);
  std::printf("%s\n", j.dump().c_str());
  return 0;
}
