// Forward+backward time of each fused op of the kernels module against its ATen reference,
// measured in the same run on the same inputs (for Muon's optimizer passes, the step around
// Polar Express on one group of the model's matrices; Polar Express itself on the model's Muon
// stacks), and of attention for a long (causal) and a
// short (sliding window) layer. Shapes are a model's at --depth (width 64*depth, head dim
// 128 or 64) with --batch x --seq-len tokens. Last line: one JSON object with every figure.
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

// fwd+bwd, every output given a gradient of ones
double time_fwd_bwd(const std::function<std::vector<Tensor>()>& fwd, int reps, torch::Device device) {
  return time_call(
      [&] {
        std::vector<Tensor> outs = fwd(), grads;
        for (const Tensor& o : outs) grads.push_back(torch::ones_like(o));
        torch::autograd::backward(outs, grads);
      },
      reps, device);
}

double time_fwd_bwd(const std::function<Tensor()>& fwd, int reps, torch::Device device) {
  return time_fwd_bwd(std::function<std::vector<Tensor>()>([&] { return std::vector<Tensor>{fwd()}; }), reps, device);
}

std::vector<Tensor> both(const std::pair<Tensor, Tensor>& p) { return {p.first, p.second}; }

Tensor leaf(Tensor t) { return t.detach().requires_grad_(true); }

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

  struct Row {
    std::string op;
    double fused_ms, reference_ms;
  };
  std::vector<Row> rows;
  auto compare = [&](const std::string& op, const auto& fused, const auto& ref) {  // one output or several
    rows.push_back({op, 1000 * time_fwd_bwd(fused, reps, device), 1000 * time_fwd_bwd(ref, reps, device)});
  };

  // lm_head + softcap + cross-entropy: per-token losses (eval, SFT, RL), then the mean (pretraining)
  const int64_t vp = gpt_padded_vocab(vocab);
  Tensor x = leaf(torch::randn({N, C}, opts).to(dtype)), w = leaf(torch::randn({vp, C}, opts) * 0.05);
  Tensor targets = torch::randint(vocab, {N}, opts.dtype(torch::kLong));
  compare(
      "lm_head+softcap+CE", [&] { return kernels_linear_softcap_ce(x, w, targets, vocab, kSoftcap); },
      [&] { return kernels_linear_softcap_ce_reference(x, w, targets, vocab, kSoftcap); });
  setenv("NANOCHAT_CE_PASSES", "2", 1);  // the default: forward then backward kernel on CUDA
  compare(
      "  ... mean (training)", [&] { return kernels_linear_softcap_ce_mean(x, w, targets, vocab, kSoftcap); },
      [&] { return kernels_linear_softcap_ce_mean_reference(x, w, targets, vocab, kSoftcap); });
  if (device.is_cuda()) {  // the one-pass kernel beside it: the faster becomes the default
    setenv("NANOCHAT_CE_PASSES", "1", 1);
    compare(
        "  ... mean, one pass", [&] { return kernels_linear_softcap_ce_mean(x, w, targets, vocab, kSoftcap); },
        [&] { return kernels_linear_softcap_ce_mean_reference(x, w, targets, vocab, kSoftcap); });
    setenv("NANOCHAT_CE_PASSES", "2", 1);
  }
  // MLP with ReLU^2
  Tensor xm = leaf(torch::randn({B, T, C}, opts).to(dtype));
  Tensor wfc = leaf((torch::randn({4 * C, C}, opts) * 0.05).to(dtype)),
         wpr = leaf((torch::randn({C, 4 * C}, opts) * 0.05).to(dtype));
  compare(
      "MLP relu^2", [&] { return kernels_mlp_relu_square(xm, wfc, wpr); },
      [&] { return kernels_mlp_relu_square_reference(xm, wfc, wpr); });
  // rotary + QK norm + x1.2 on q
  auto [cs, sn] = gpt_rotary_tables(T, D, dtype, device);
  Tensor q = leaf(torch::randn({B, T, H, D}, opts).to(dtype));
  compare(
      "rotary+QKnorm", [&] { return kernels_rotary_norm(q, cs, sn, 1.2); },
      [&] { return kernels_rotary_norm_reference(q, cs, sn, 1.2); });
  // the residual stream into the norm: a*x + b*x0 with the layer's lambdas, and norm of that
  Tensor xr = leaf(torch::randn({B, T, C}, opts).to(dtype)), x0 = leaf(torch::randn({B, T, C}, opts).to(dtype));
  Tensor la = leaf(torch::tensor(0.9f, opts)), lb = leaf(torch::tensor(0.1f, opts));
  compare(
      "resid mix+RMSNorm", [&] { return both(kernels_residual_norm(xr, x0, la, lb)); },
      [&] { return both(kernels_residual_norm_reference(xr, x0, la, lb)); });

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
    rows.push_back({tall ? "Muon step, MLP in" : "Muon step, MLP out", 1000 * time_call(fused, reps, device),
                    1000 * time_call(ref, reps, device)});
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
      rows.push_back({st.name, 1000 * time_call([&] { kernels_polar_express(X, coeffs, 5); }, reps, device),
                      1000 * time_call([&] { kernels_polar_express_reference(X, coeffs, 5); }, reps, device)});
    }
  }

  // attention: the long layer (causal) and a short one (window T/4), reported alone
  Tensor qa = leaf(torch::randn({B, T, H, D}, opts).to(dtype)), ka = leaf(torch::randn({B, T, H, D}, opts).to(dtype));
  Tensor va = leaf(torch::randn({B, T, H, D}, opts).to(dtype));
  const int64_t short_window = gpt_window_sizes(c)[0];
  double attn_l = 1000 * time_fwd_bwd([&] { return attention_causal(qa, ka, va, -1); }, reps, device);
  double attn_s = 1000 * time_fwd_bwd([&] { return attention_causal(qa, ka, va, short_window); }, reps, device);
  if (kernels_attention_available(qa))  // the CPU kernel against the SDPA path it replaces
    for (int64_t w : {int64_t(-1), short_window})
      rows.push_back({w < 0 ? "attention L vs SDPA" : "attention S vs SDPA", w < 0 ? attn_l : attn_s,
                      1000 * time_fwd_bwd([&] { return attention_causal_sdpa(qa, ka, va, w); }, reps, device)});

  std::printf("%-22s %12s %14s %10s\n", "op (fwd+bwd; Muon: step)", "fused ms", "reference ms", "speed-up");
  nlohmann::json j = {
      {"bench", "kernels"}, {"device", device.str()}, {"dtype", dtype_name(dtype)}, {"depth", depth}, {"batch", B},
      {"seq_len", T},       {"vocab", vocab},         {"threads", threads}};
  for (const Row& r : rows) {
    std::printf("%-22s %12.2f %14.2f %9.2fx\n", r.op.c_str(), r.fused_ms, r.reference_ms, r.reference_ms / r.fused_ms);
    j["ops"][r.op] = {
        {"fused_ms", r.fused_ms}, {"reference_ms", r.reference_ms}, {"speedup", r.reference_ms / r.fused_ms}};
  }
  std::printf("\nattention L (causal):        %8.2f ms   %s\n", attn_l, attention_kernel_name(qa, ka, -1).c_str());
  std::printf("attention S (window %4lld):   %8.2f ms   %s\n", (long long)short_window, attn_s,
              attention_kernel_name(qa, ka, short_window).c_str());
  j["attention"] = {{"long_ms", attn_l},
                    {"short_ms", attn_s},
                    {"short_window", short_window},
                    {"long_kernel", attention_kernel_name(qa, ka, -1)},
                    {"short_kernel", attention_kernel_name(qa, ka, short_window)}};
  registry_table(device, dtype, reps, j);
  std::printf("%s\n", j.dump().c_str());
  return 0;
}
