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
  if (budget.bytes <= 0)
    return {o.device_batch_size, "upstream's default: no GPU here and no --gpu-memory to plan one by"};
  const int64_t fit = gpt_train_memory_fit(config, dtype, world, budget.bytes / 10 * 9, 32, fp8);
  int64_t rows = std::max<int64_t>(1, fit);
  if (dist) rows = base_train_agree_device_batch(rows, *dist);
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
  nlohmann::ordered_json j = plan_json(p);
  j["vocab_assumed"] = !have_tok;
  j["gpu"] = device_type == "cuda" ? nlohmann::json(gpu) : nlohmann::json();
  j["peak_flops"] = std::isfinite(peak) ? nlohmann::json(peak) : nlohmann::json();
  j["mfu"] = o.mfu;
  j["estimated_seconds"] = std::isfinite(seconds) ? nlohmann::json(seconds) : nlohmann::json();
  out << j.dump() << std::endl;
  return 0;
}

}  // namespace nanochat
