// base-train's plan (upstream base_train.py's set-up arithmetic: parameter counts, FLOPs per
// token, the d12-referenced batch, lr and weight decay scaling, the horizon, the device batch,
// gradient accumulation) plus one rank's memory estimate, printed by the run at its start and
// by `base-train --dry-run`, which builds no model and reads no data: on a laptop, for the node
// it plans.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <tuple>
#include <vector>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include "cli/base_train.h"
#include "nanochat/common.h"
#include "nanochat/dist.h"
#include "nanochat/telemetry/peak_flops.h"
#include "nanochat/telemetry/train_progress.h"
#include "nanochat/tokenizer.h"

namespace nanochat {

MemoryBudget base_train_memory_budget(const BaseTrainFlags& o, const std::string& device_type, torch::Device gpu,
                                      const std::string& gpu_name) {
  MemoryBudget b;
  if (device_type != "cuda") return b;
  if (!o.gpu_memory.empty()) {
    b.bytes = base_train_parse_memory_size(o.gpu_memory, "--gpu-memory");
    b.source = "--gpu-memory " + o.gpu_memory;
  } else if (!gpu_name.empty()) {
    b.bytes = gpt_device_memory_budget(gpu);
    b.source = "what " + gpu_name + " can give";
  }
  return b;
}

int64_t base_train_agree_device_batch(int64_t rows, Dist& dist) {
  // MIN as MAX of the negation (the collectives have no MIN)
  at::Tensor t = at::full({1}, -rows, at::TensorOptions().dtype(at::kLong).device(dist.device()));
  dist.all_reduce(t, ReduceOp::MAX);
  const int64_t agreed = -t.cpu().item<int64_t>();
  if (agreed != rows)
    log_info("device batch size: this rank fits %lld rows, another only %lld: every rank takes %lld", (long long)rows,
             (long long)agreed, (long long)agreed);
  return agreed;
}

namespace {

// rows per micro-step and why: the flag, or on a GPU the largest power of two up to
// upstream's 32 whose estimate fits in 90% of the budget, the smallest over the ranks
std::pair<int64_t, std::string> device_batch_of(const BaseTrainFlags& o, const GPTConfig& config,
                                                const std::string& device_type, torch::ScalarType dtype, int world,
                                                bool fp8, const MemoryBudget& budget, Dist* dist) {
  if (o.device_batch_size_given) return {o.device_batch_size, "--device-batch-size"};
  if (device_type != "cuda") return {o.device_batch_size, "the flag's default"};
  // A rank whose memory query gave nothing still joins the agreement, with the flag's default:
  // skipping it would pair the other ranks' all-reduce with this rank's next collective.
  const bool known = budget.bytes > 0;
  const int64_t fit = known ? gpt_train_memory_fit(config, dtype, world, budget.bytes / 10 * 9, 32, fp8) : 0;
  int64_t rows = known ? std::max<int64_t>(1, fit) : o.device_batch_size;
  if (dist) rows = base_train_agree_device_batch(rows, *dist);
  if (!known)
    return {rows, std::string("upstream's default: no GPU here and no --gpu-memory to plan one by") +
                      (dist && world > 1 ? ", the smallest over the ranks" : "")};
  log_info(
      "device batch size %lld: the largest power of two up to 32 whose estimate (%.1f GiB) fits in 90%% of "
      "%s (--device-batch-size overrides)%s",
      (long long)rows, (double)gpt_train_memory(config, rows, dtype, world, fp8).total / (1 << 30),
      budget.source.c_str(), fit == 0 ? "; not even 1 row fits: expect an out-of-memory error" : "");
  return {rows, "the largest power of two up to 32 whose estimate fits in 90% of " + budget.source +
                    (dist && world > 1 ? ", the smallest over the ranks" : "")};
}

}  // namespace

BaseTrainPlan base_train_plan(const BaseTrainFlags& o, int64_t vocab_size, int world, const std::string& device_type,
                              torch::ScalarType dtype, const MemoryBudget& budget, Dist* dist) {
  BaseTrainPlan p;
  p.config = gpt_config_from_depth(o.depth, vocab_size, o.max_seq_len, o.window_pattern, o.aspect_ratio, o.head_dim);
  p.counts = gpt_num_scaling_params(p.config);
  p.flops_per_token = gpt_estimate_flops(p.config);
  auto scaling_of = [](const ScalingParams& s) { return s.transformer_matrices + s.lm_head; };
  p.scaling_params = scaling_of(p.counts);
  // the d12 reference, built with the same flags (upstream's build_model_meta(12))
  GPTConfig ref = gpt_config_from_depth(12, vocab_size, o.max_seq_len, o.window_pattern, o.aspect_ratio, o.head_dim);
  p.scaling = train_scaling(p.scaling_params, scaling_of(gpt_num_scaling_params(ref)), o.target_param_data_ratio,
                            o.total_batch_size, o.weight_decay);
  p.dmodel_lr_scale = std::pow((double)p.config.n_embd / 768.0, -0.5);
  p.num_iterations = train_num_iterations(o.num_iterations, o.target_flops, (double)p.flops_per_token, p.scaling,
                                          o.target_param_data_ratio);
  p.total_tokens = p.scaling.total_batch_size * p.num_iterations;
  p.world = world;
  p.dtype = dtype;
  p.fp8 = o.fp8 && device_type == "cuda";  // FP8 on a GPU only
  p.budget = budget;
  std::tie(p.device_batch_size, p.device_batch_source) = device_batch_of(o, p.config, device_type, dtype, world, p.fp8,
                                                                         budget, dist);
  if (p.fp8 && p.device_batch_size * o.max_seq_len % 16 != 0)
    fail(
        "--fp8: a micro-batch's %lld x %lld tokens must be a multiple of 16 (the inner dimension of the weight "
        "gradient's FP8 matmul): change --device-batch-size or --max-seq-len",
        (long long)p.device_batch_size, (long long)o.max_seq_len);
  p.grad_accum = train_grad_accum(p.scaling.total_batch_size, p.device_batch_size, o.max_seq_len, world);
  p.memory = gpt_train_memory(p.config, p.device_batch_size, dtype, world, p.fp8);
  return p;
}

namespace {

// the H200's figures (docs/log.md, 2026-12-04): d20 (C 1280, 10 heads of 128, vocab 32768),
// bf16, B=16, T=2048, forward+backward; the bandwidth measured (4.3 TB/s of a nominal 4.8)
namespace h200 {
constexpr double kPeak = 989e12, kBandwidth = 4.3e12, kNominalBandwidth = 4.8e12;
constexpr double kTokens = 16 * 2048, kWidth = 1280, kHeads = 10, kHeadDim = 128, kVocab = 32768, kT = 2048;
constexpr double kMlpSeconds = 4.15e-3;         // one layer's MLP: two GEMMs and the fused relu^2
constexpr double kCeSeconds = 13.97e-3;         // lm_head+softcap+CE, the training mean, fused
constexpr double kCausalSeconds = 1.64e-3;      // an L layer's attention (SDPA's cuDNN, causal)
constexpr double kWindowSeconds = 1.69e-3;      // an S layer's (flash with a real window of 512)
constexpr double kResidNormSeconds = 0.82e-3;   // resid mix + RMSNorm
constexpr double kRotaryNormSeconds = 0.33e-3;  // rotary + QK norm, of q or of k
// upstream (torch.compile, 16 x 2048 x 8 micro-steps): tok/s at window pattern L and SSSL
constexpr double kUpstreamL = 157537, kUpstreamSSSL = 133969;
}  // namespace h200

constexpr double kUpstreamNormFraction = 0.8;  // inductor's fused elementwise kernels (assumed)
constexpr double kResidNormBytes = 20;         // per element: 4 bf16 passes forward, 6 backward
constexpr double kRotaryNormBytes = 12;        // per element of q or k: 2 forward, 4 backward

double block_matmul_flops(double tokens, double C, double H, double Hkv, double D, double layers) {
  return 6 * tokens * layers * (C * H * D + 2 * C * Hkv * D + H * D * C + 8 * C * C);
}
// (query, key) pairs of a causal window of `window` earlier keys (< 0: all) over T positions
double attention_pairs(double T, double window) {
  if (window < 0 || window >= T - 1) return T * (T + 1) / 2;
  return T * (window + 1) - window * (window + 1) / 2;
}
// forward 4*D FLOPs a pair and head (QK^T and PV), backward 2.5 times that
double attention_flops(double B, double H, double D, double pairs) { return 14 * B * H * D * pairs; }

// the rates the H200's figures imply, each ms at its reference shape
struct Rates {
  double matmul, ce, causal, window, masked, resid_fraction, rotary_fraction, other_bytes;
};
Rates h200_rates();

StepTimeModel model_at(double tokens, double B, double T, double C, double H, double Hkv, double D, double V,
                       const std::vector<double>& windows, const Rates& r, double compute_scale, double bandwidth,
                       bool upstream, double norm_fraction) {
  StepTimeModel m;
  const double layers = (double)windows.size();
  m.matmuls = block_matmul_flops(tokens, C, H, Hkv, D, layers) / (r.matmul * compute_scale);
  for (double w : windows) {
    const bool full = w < 0 || w >= T - 1;
    if (full) m.attention += attention_flops(B, H, D, attention_pairs(T, -1)) / (r.causal * compute_scale);
    else if (upstream) m.attention += attention_flops(B, H, D, T * T) / (r.masked * compute_scale);
    else m.attention += attention_flops(B, H, D, attention_pairs(T, w)) / (r.window * compute_scale);
  }
  const double ce_flops = 6 * tokens * C * V;
  // upstream's logits: written by the GEMM, read by the CE forward and backward, dlogits written
  m.lm_head_ce = upstream ? ce_flops / (r.matmul * compute_scale) + 8 * tokens * V / (kUpstreamNormFraction * bandwidth)
                          : ce_flops / (r.ce * compute_scale);
  const double resid_f = upstream ? kUpstreamNormFraction : norm_fraction > 0 ? norm_fraction : r.resid_fraction;
  const double rotary_f = upstream ? kUpstreamNormFraction : norm_fraction > 0 ? norm_fraction : r.rotary_fraction;
  m.norms = (2 * layers + 1) * kResidNormBytes * tokens * C / (resid_f * bandwidth) +
            layers * kRotaryNormBytes * tokens * (H + Hkv) * D / (rotary_f * bandwidth);
  m.other = r.other_bytes * tokens * C * layers / bandwidth;
  return m;
}

Rates h200_rates() {
  using namespace h200;
  Rates r{};
  r.matmul = 6 * kTokens * 8 * kWidth * kWidth / kMlpSeconds;
  r.ce = 6 * kTokens * kWidth * kVocab / kCeSeconds;
  r.causal = attention_flops(16, kHeads, kHeadDim, attention_pairs(kT, -1)) / kCausalSeconds;
  r.window = attention_flops(16, kHeads, kHeadDim, attention_pairs(kT, 512)) / kWindowSeconds;
  // upstream's S layer: its SSSL step less its L step, over its 15 S layers, on top of an L layer's
  const double s_extra = (1 / kUpstreamSSSL - 1 / kUpstreamL) * kTokens / 15;
  r.masked = attention_flops(16, kHeads, kHeadDim, kT * kT) / (kCausalSeconds + s_extra);
  r.resid_fraction = kResidNormBytes * kTokens * kWidth / (kResidNormSeconds * kBandwidth);
  r.rotary_fraction = kRotaryNormBytes * kTokens * kWidth / (kRotaryNormSeconds * kBandwidth);
  // other: upstream's measured micro-step at L less its modelled ops, as bytes an element a layer
  r.other_bytes = 0;
  const std::vector<double> full(20, -1.0);
  const StepTimeModel up = model_at(kTokens, 16, kT, kWidth, kHeads, kHeads, kHeadDim, kVocab, full, r, 1.0, kBandwidth,
                                    /*upstream=*/true, 0);
  r.other_bytes = (kTokens / kUpstreamL - up.total()) * kBandwidth / (kTokens * kWidth * 20);
  return r;
}

}  // namespace

StepTimeModel base_train_step_model(const GPTConfig& config, int64_t B, int64_t T, double peak, double bandwidth,
                                    bool upstream, double norm_fraction) {
  const double D = (double)config.head_dim();
  std::vector<double> windows;
  GPTConfig at_t = config;
  at_t.sequence_len = T;
  for (int64_t w : gpt_window_sizes(at_t)) windows.push_back((double)w);
  // compute by the peak, memory by the bandwidth the H200 reached of its nominal
  const double effective_bandwidth = bandwidth * (h200::kBandwidth / h200::kNominalBandwidth);
  return model_at((double)(B * T), (double)B, (double)T, (double)config.n_embd, (double)config.n_head,
                  (double)config.n_kv_head, D, (double)gpt_padded_vocab(config.vocab_size), windows, h200_rates(),
                  peak / h200::kPeak, effective_bandwidth, upstream, norm_fraction);
}

int base_train_preflight_report(const BaseTrainPlan& plan, const TrainProgress& progress, int64_t steps,
                                int64_t peak_memory_bytes, bool master) {
  const double dt = progress.steady_step_seconds();
  const double tok_per_sec = (double)plan.scaling.total_batch_size / dt;
  const double mfu = progress.mfu_at(dt);
  const double projected = dt * (double)plan.num_iterations;
  const double loss = progress.debiased_loss(steps);
  log_info(
      "preflight: %lld steps | %s tok/sec | bf16_mfu %.2f | peak memory %s vs estimate %.2f GiB | "
      "projected pretraining time %.1fm (%lld iterations) | loss %.4f",
      (long long)steps, format_thousands((int64_t)tok_per_sec).c_str(), mfu,
      peak_memory_bytes >= 0 ? strprintf("%.2f GiB", (double)peak_memory_bytes / (1 << 30)).c_str() : "n/a (CPU)",
      (double)plan.memory.total / (1 << 30), projected / 60, (long long)plan.num_iterations, loss);
  if (!std::isfinite(loss))
    fail("preflight: the training loss is not finite (%f) after %lld steps", loss, (long long)steps);
  if (master) {
    auto number_or_null = [](double x) { return std::isfinite(x) ? nlohmann::json(x) : nlohmann::json(); };
    nlohmann::ordered_json j;
    j["preflight_steps"] = steps;
    j["tok_per_sec"] = number_or_null(tok_per_sec);
    j["mfu"] = number_or_null(mfu);
    j["peak_memory_bytes"] = peak_memory_bytes >= 0 ? nlohmann::json(peak_memory_bytes) : nlohmann::json();
    j["estimated_peak_memory_bytes"] = plan.memory.total;
    j["num_iterations"] = plan.num_iterations;
    j["projected_seconds"] = number_or_null(projected);
    j["loss"] = loss;
    std::printf("%s\n", j.dump().c_str());
    std::fflush(stdout);
  }
  return 0;
}

int64_t base_train_parse_memory_size(const std::string& text, const char* flag) {
  const char* s = text.c_str();
  char* end = nullptr;
  const double v = std::strtod(s, &end);
  std::string unit(end);
  while (!unit.empty() && unit.front() == ' ') unit.erase(0, 1);
  for (char& ch : unit) ch = (char)std::toupper((unsigned char)ch);
  double scale = 0;
  const char* units[] = {"B", "KB", "MB", "GB", "TB"};
  const char* iunits[] = {"B", "KIB", "MIB", "GIB", "TIB"};
  for (int i = 0; i < 5; i++) {
    if (unit == units[i]) scale = std::pow(1000.0, i);
    if (unit == iunits[i]) scale = std::pow(1024.0, i);
  }
  if (end == s || !(v > 0) || !std::isfinite(v) || scale == 0)
    fail("%s '%s': expected a size with a unit, e.g. 80GB or 80GiB (B, kB, MB, GB, TB or KiB, MiB, GiB, TiB)", flag,
         text.c_str());
  return (int64_t)(v * scale);
}

namespace {

std::string gib(int64_t bytes) { return strprintf("%.2f GiB", (double)bytes / (double)(int64_t(1) << 30)); }

std::string duration_text(double seconds) {
  if (!std::isfinite(seconds)) return "unknown";
  const int64_t s = (int64_t)std::llround(seconds);
  return strprintf("%lldh %02lldm %02llds", (long long)(s / 3600), (long long)(s / 60 % 60), (long long)(s % 60));
}

}  // namespace

void base_train_plan_print(const BaseTrainPlan& p, const BaseTrainFlags& o, std::ostream& out) {
  out << "Model config:\n" << gpt_config_to_json(p.config).dump(2) << "\n";
  out << "Parameter counts:\n";
  const std::pair<const char*, int64_t> rows[] = {
      {"wte", p.counts.wte},         {"value_embeds", p.counts.value_embeds},
      {"lm_head", p.counts.lm_head}, {"transformer_matrices", p.counts.transformer_matrices},
      {"scalars", p.counts.scalars}, {"total", p.counts.total}};
  for (const auto& [name, n] : rows) out << strprintf("%-24s: %s\n", name, format_thousands(n).c_str());
  out << strprintf("Estimated FLOPs per token: %e\n", (double)p.flops_per_token);
  if (o.total_batch_size == -1)
    out << "Auto-computed optimal batch size: " << format_thousands(p.scaling.total_batch_size) << " tokens\n";
  if (p.scaling.total_batch_size != kBatchRef)
    out << strprintf("Scaling LRs by %.4f for batch size %s (reference: %s)\n", p.scaling.batch_lr_scale,
                     format_thousands(p.scaling.total_batch_size).c_str(), format_thousands(kBatchRef).c_str());
  if (p.scaling.weight_decay != o.weight_decay)
    out << strprintf("Scaling weight decay from %.6f to %.6f for depth %lld\n", o.weight_decay, p.scaling.weight_decay,
                     (long long)o.depth);
  out << strprintf("Scaling the LR for the AdamW parameters 1/sqrt(%lld/768) = %.6f\n", (long long)p.config.n_embd,
                   p.dmodel_lr_scale);
  if (o.num_iterations > 0) out << "Using user-provided number of iterations: ";
  else if (o.target_flops > 0) out << "Calculated number of iterations from target FLOPs: ";
  else out << "Calculated number of iterations from target data:param ratio: ";
  out << format_thousands(p.num_iterations) << "\n";
  out << "Total number of training tokens: " << format_thousands(p.total_tokens) << "\n";
  out << strprintf("Tokens : Scaling params ratio: %.2f\n", (double)p.total_tokens / (double)p.scaling_params);
  out << strprintf("Total training FLOPs estimate: %e\n", (double)p.flops_per_token * (double)p.total_tokens);
  const int64_t per_rank = p.device_batch_size * o.max_seq_len;
  out << strprintf("Tokens / micro-batch / rank: %lld x %lld = %s\n", (long long)p.device_batch_size,
                   (long long)o.max_seq_len, format_thousands(per_rank).c_str());
  out << "Tokens / micro-batch: " << format_thousands(per_rank * p.world) << "\n";
  out << "Total batch size " << format_thousands(p.scaling.total_batch_size)
      << " => gradient accumulation steps: " << p.grad_accum << "\n";
  out << strprintf("World size %d, compute dtype %s%s, device batch %lld (%s)\n", p.world, dtype_name(p.dtype).c_str(),
                   p.fp8 ? " with FP8 block matmuls" : "", (long long)p.device_batch_size,
                   p.device_batch_source.c_str());
  if (!base_train_plan_fits(p))
    out << "WARNING: the estimate exceeds 90% of " << gib(p.budget.bytes) << " (" << p.budget.source
        << "): expect an out-of-memory error; lower --device-batch-size\n";
  const TrainMemory& m = p.memory;
  out << "Estimated peak memory per rank: " << gib(m.total);
  if (p.budget.bytes > 0) out << " of " << gib(p.budget.bytes);
  out << "\n";
  const std::pair<const char*, int64_t> parts[] = {{"weights", m.weights},
                                                   {"grads", m.grads},
                                                   {"optimizer (ZeRO shard)", m.optimizer},
                                                   {"weight copies (for backward)", m.weight_copies},
                                                   {"activations", m.activations},
                                                   {"loss (saved)", m.loss_saved},
                                                   {"loss (transient)", m.loss_transient},
                                                   {"backward (transient)", m.backward},
                                                   {"optimizer step (transient)", m.optimizer_step}};
  for (const auto& [name, n] : parts) out << strprintf("  %-30s %s\n", name, gib(n).c_str());
}

bool base_train_plan_fits(const BaseTrainPlan& p) {
  return p.budget.bytes <= 0 || p.memory.total <= p.budget.bytes / 10 * 9;
}

namespace {

// the dry run's last line: the plan as one JSON object
nlohmann::ordered_json plan_json(const BaseTrainPlan& p) {
  nlohmann::ordered_json j;
  j["num_params"] = p.counts.total;
  j["param_counts"] = {{"wte", p.counts.wte},         {"value_embeds", p.counts.value_embeds},
                       {"lm_head", p.counts.lm_head}, {"transformer_matrices", p.counts.transformer_matrices},
                       {"scalars", p.counts.scalars}, {"total", p.counts.total}};
  j["scaling_params"] = p.scaling_params;
  j["flops_per_token"] = p.flops_per_token;
  j["total_batch_size"] = p.scaling.total_batch_size;
  j["batch_lr_scale"] = p.scaling.batch_lr_scale;
  j["weight_decay"] = p.scaling.weight_decay;
  j["dmodel_lr_scale"] = p.dmodel_lr_scale;
  j["num_iterations"] = p.num_iterations;
  j["total_tokens"] = p.total_tokens;
  j["total_flops"] = (double)p.flops_per_token * (double)p.total_tokens;
  j["world_size"] = p.world;
  j["device_batch_size"] = p.device_batch_size;
  j["grad_accum_steps"] = p.grad_accum;
  j["vocab_size"] = p.config.vocab_size;
  j["compute_dtype"] = dtype_name(p.dtype);
  j["fp8"] = p.fp8;
  const TrainMemory& m = p.memory;
  j["estimated_peak_memory_bytes"] = m.total;
  j["memory"] = {{"weights", m.weights},
                 {"grads", m.grads},
                 {"optimizer", m.optimizer},
                 {"weight_copies", m.weight_copies},
                 {"activations", m.activations},
                 {"loss_saved", m.loss_saved},
                 {"loss_transient", m.loss_transient},
                 {"backward", m.backward},
                 {"optimizer_step", m.optimizer_step}};
  j["memory_budget_bytes"] = p.budget.bytes > 0 ? nlohmann::json(p.budget.bytes) : nlohmann::json();
  j["device_batch_fits"] = base_train_plan_fits(p);
  return j;
}

}  // namespace

int base_train_dry_run(const BaseTrainFlags& o) {
  // what is planned: a GPU unless --device-type cpu says otherwise
  const std::string device_type = o.device_type.empty() ? "cuda" : o.device_type;
  const std::vector<CudaDeviceInfo> gpus = device_type == "cuda" ? cuda_device_infos(0, /*with_memory=*/false)
                                                                 : std::vector<CudaDeviceInfo>();
  torch::ScalarType dtype = compute_dtype_detect(device_type);
  if (device_type == "cuda" && gpus.empty() && !std::getenv("NANOCHAT_DTYPE")) dtype = torch::kBFloat16;
  const int world = o.world_size > 0 ? o.world_size : dist_env_from_environment().world_size;

  // the vocabulary: the trained tokenizer's, or the speedrun's 32768
  const std::string tok_dir = base_dir_path("tokenizer");
  const bool have_tok = path_exists(tok_dir + "/tokenizer.json");
  const int64_t vocab = have_tok ? tokenizer_load(tok_dir).vocab_size() : 32768;
  const MemoryBudget budget = base_train_memory_budget(o, device_type, torch::Device(torch::kCUDA, 0),
                                                       gpus.empty() ? "" : gpus[0].name);
  const BaseTrainPlan p = base_train_plan(o, vocab, world, device_type, dtype, budget, nullptr);

  // the wall-clock at --mfu of the GPU's peak
  std::string gpu = o.gpu_name;
  if (gpu.empty()) gpu = gpus.empty() ? kDefaultPlanGpu : gpus[0].name;
  double peak = device_type == "cuda" ? peak_flops(gpu, gpus.empty() ? 0 : gpus[0].multiprocessors)
                                      : peak_flops_measure_cpu(dtype);
  if (device_type == "cuda" && !o.gpu_name.empty() && std::isinf(peak))
    fail("--gpu-name '%s' is not in the peak-FLOPS table (e.g. H100, H200, A100, B200, RTX 4090)", o.gpu_name.c_str());
  const double total_flops = (double)p.flops_per_token * (double)p.total_tokens;
  const double seconds = total_flops / (o.mfu * peak * (double)world);

  auto& out = std::cout;
  out << "base-train --dry-run: the plan only; no weights allocated, no data read\n";
  if (have_tok) out << "Vocab size: " << format_thousands(vocab) << " (" << tok_dir << ")\n";
  else out << "Vocab size: " << format_thousands(vocab) << " (assumed: no trained tokenizer in " << tok_dir << ")\n";
  base_train_plan_print(p, o, out);
  out << strprintf("Wall-clock at %.0f%% MFU of %s (%s per device, %d device(s)): %s\n", 100 * o.mfu,
                   device_type == "cuda" ? gpu.c_str() : "this CPU's measured matmul peak",
                   std::isfinite(peak) ? strprintf("%.0f TFLOPS", peak / 1e12).c_str() : "peak unknown", world,
                   duration_text(seconds).c_str());
  // the step-time model's wall-clock: micro-steps x the modelled micro-step (GPUs in the tables only)
  const double bandwidth = device_type == "cuda" ? peak_bandwidth(gpu) : 0;
  const bool modelled = std::isfinite(peak) && std::isfinite(bandwidth) && bandwidth > 0;
  StepTimeModel ours, theirs;
  if (modelled) {
    ours = base_train_step_model(p.config, p.device_batch_size, o.max_seq_len, peak, bandwidth, false);
    theirs = base_train_step_model(p.config, p.device_batch_size, o.max_seq_len, peak, bandwidth, true);
    out << strprintf(
        "Wall-clock by the step-time model (docs/gpu.md) on %d x %s: %s (a micro-step of %lld x %lld tokens: "
        "%.1f ms; upstream's %.1f ms: %.2fx its speed%s)\n",
        world, gpu.c_str(), duration_text(ours.total() * (double)(p.grad_accum * p.num_iterations)).c_str(),
        (long long)p.device_batch_size, (long long)o.max_seq_len, 1e3 * ours.total(), 1e3 * theirs.total(),
        theirs.total() / ours.total(), p.fp8 ? "; bf16 modelled, FP8 not" : "");
  }
  nlohmann::ordered_json j = plan_json(p);
  j["vocab_assumed"] = !have_tok;
  j["gpu"] = device_type == "cuda" ? nlohmann::json(gpu) : nlohmann::json();
  j["peak_flops"] = std::isfinite(peak) ? nlohmann::json(peak) : nlohmann::json();
  j["mfu"] = o.mfu;
  j["estimated_seconds"] = std::isfinite(seconds) ? nlohmann::json(seconds) : nlohmann::json();
  auto ms = [](const StepTimeModel& m) {
    return nlohmann::ordered_json{{"matmuls", 1e3 * m.matmuls},       {"attention", 1e3 * m.attention},
                                  {"lm_head_ce", 1e3 * m.lm_head_ce}, {"norms", 1e3 * m.norms},
                                  {"other", 1e3 * m.other},           {"total", 1e3 * m.total()}};
  };
  j["model_micro_step_ms"] = modelled ? ms(ours) : nlohmann::ordered_json();
  j["model_upstream_micro_step_ms"] = modelled ? ms(theirs) : nlohmann::ordered_json();
  j["model_seconds"] = modelled ? nlohmann::ordered_json(ours.total() * (double)(p.grad_accum * p.num_iterations))
                                : nlohmann::ordered_json();
  out << j.dump() << std::endl;
  return 0;
}

}  // namespace nanochat
