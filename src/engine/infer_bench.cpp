#include "nanochat/engine/infer_bench.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <map>
#include <numeric>

#include <c10/core/CachingDeviceAllocator.h>
#include <c10/util/Exception.h>
#include <torch/torch.h>

#include "nanochat/common/device.h"
#include "nanochat/common/error.h"
#include "nanochat/common/percentile.h"
#include "nanochat/common/progress.h"
#include "nanochat/engine.h"
#include "nanochat/telemetry/peak_flops.h"

namespace nanochat {

InferBenchStep infer_bench_step_stats(const std::vector<double>& step_sec, int64_t batch_size) {
  InferBenchStep s;
  if (step_sec.empty()) return s;
  s.median_sec = percentile(step_sec, 0.5);
  s.p90_sec = percentile(step_sec, 0.9);
  const double total = std::accumulate(step_sec.begin(), step_sec.end(), 0.0);
  s.tok_per_sec_row = (double)step_sec.size() / total;  // every row gets one token a step
  s.tok_per_sec_total = (double)batch_size * s.tok_per_sec_row;
  return s;
}

double infer_bench_mbu_percent(double bytes_per_step, double step_sec, double peak_bytes_per_sec) {
  if (!(step_sec > 0) || !std::isfinite(peak_bytes_per_sec) || !(peak_bytes_per_sec > 0)) return 0;
  return 100.0 * bytes_per_step / step_sec / peak_bytes_per_sec;
}

int64_t infer_bench_weight_bytes(const GPT& model) {
  int64_t bytes = 0;
  for (const auto& [name, p] : gpt_named_parameters(model)) bytes += p.numel() * (int64_t)p.element_size();
  return bytes;
}

std::vector<int32_t> infer_bench_prompt(const Tokenizer& tok, int64_t n) {
  const std::string paragraph =
      "The history of science is the study of the development of science, including both the natural and social "
      "sciences. Science is a body of empirical, theoretical, and practical knowledge about the natural world. ";
  std::string text;
  std::vector<int32_t> ids;
  while ((int64_t)ids.size() < n) {
    for (int64_t i = 0; i < n / 16 + 1; i++) text += paragraph;  // each paragraph is ~40 tokens or more
    ids = {tok.bos_id()};
    for (int32_t id : tok.encode(text)) ids.push_back(id);
  }
  ids.resize((size_t)n);
  return ids;
}

namespace {

// kB from a "Key:   123 kB" line of /proc/self/status; -1 when absent
int64_t proc_status_kb(const std::string& key) {
  std::ifstream f("/proc/self/status");
  for (std::string line; std::getline(f, line);)
    if (line.rfind(key + ":", 0) == 0) return std::atoll(line.c_str() + key.size() + 1);
  return -1;
}

// the peak memory of a batch size's generations, from the construction on: on a GPU the
// caching allocator's peak of allocated bytes (weights included, as upstream's
// max_memory_allocated); on the CPU the resident set's high-water mark (reset first) above
// `rss_base_kb`, the resident set with the model loaded before any generation. (The C heap
// keeps what it freed resident, so a batch smaller than an earlier one shows the larger peak.)
class PeakMemory {
 public:
  PeakMemory(torch::Device device, int64_t rss_base_kb)
      : device_(device), index_(device.has_index() ? device.index() : 0), rss_base_kb_(rss_base_kb) {
    device_synchronize(device_);
    if (!device_.is_cpu()) c10::getDeviceAllocator(device_.type())->resetPeakStats(index_);
    else std::ofstream("/proc/self/clear_refs") << "5";  // VmHWM back to the current RSS (Linux)
  }
  int64_t bytes() const {
    device_synchronize(device_);
    if (!device_.is_cpu()) {
      auto stats = c10::getDeviceAllocator(device_.type())->getDeviceStats(index_);
      return stats.allocated_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)].peak;
    }
    const int64_t hwm = proc_status_kb("VmHWM");
    return hwm < 0 || rss_base_kb_ < 0 ? -1 : std::max<int64_t>(0, hwm - rss_base_kb_) * 1024;
  }

 private:
  torch::Device device_;
  c10::DeviceIndex index_;
  int64_t rss_base_kb_;
};

struct TimedGeneration {
  double ttft_sec = 0;           // prefill, the copy into the rows, the first token sampled
  std::vector<double> step_sec;  // each later token column: one decode step of every row
};

TimedGeneration timed_generate(const Engine& engine, const std::vector<int32_t>& prompt, int64_t batch, int64_t tokens,
                               double temperature, torch::Device device) {
  GenerateOptions g;
  g.num_samples = batch;
  g.max_tokens = tokens;
  g.temperature = temperature;
  g.use_calculator = false;
  g.default_stops = false;  // every row runs the full budget
  TimedGeneration r;
  bool first = true;
  Timer t;
  engine.generate(prompt, g, [&](const TokenColumn&) {
    device_synchronize(device);  // the column is on the host already; nothing may still run
    const double s = t.seconds();
    if (first) r.ttft_sec = s;
    else r.step_sec.push_back(s);
    first = false;
    t.reset();
    return true;
  });
  return r;
}

nlohmann::json finite_or_null(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(); }

// the options checked; the prompt's length (clamped so that prompt + decode fit sequence_len)
int64_t checked_prompt_len(const InferBenchOptions& o, const GPTConfig& config, FILE* card) {
  if (o.decode_tokens < 2) fail("infer-bench: --decode-tokens must be at least 2 (the first token is the TTFT)");
  if (o.prompt_tokens < 1) fail("infer-bench: --prompt-tokens must be at least 1");
  if (o.batch_sizes.empty()) fail("infer-bench: --batch-sizes is empty");
  for (int64_t b : o.batch_sizes)
    if (b < 1) fail("infer-bench: --batch-sizes holds %lld; every batch size must be >= 1", (long long)b);
  const int64_t max_prompt = config.sequence_len - o.decode_tokens;
  if (max_prompt < 1)
    fail("infer-bench: --decode-tokens %lld leaves no room for a prompt in the model's sequence_len %lld",
         (long long)o.decode_tokens, (long long)config.sequence_len);
  const int64_t prompt_len = std::min(o.prompt_tokens, max_prompt);
  if (prompt_len < o.prompt_tokens)
    std::fprintf(card, "note: prompt clamped to %lld tokens so that prompt + decode fits sequence_len %lld\n",
                 (long long)prompt_len, (long long)config.sequence_len);
  return prompt_len;
}

// the device and its peaks: bandwidth (given, measured on the CPU, or the table's) and compute
struct DevicePeaks {
  std::string name;
  int64_t total_memory = -1;
  double bandwidth = 0, flops = 0;
  std::string bandwidth_source = "given (--peak-bandwidth)", flops_source;
};
DevicePeaks device_peaks(torch::Device device, torch::ScalarType dtype, double given_bandwidth) {
  DevicePeaks d;
  d.bandwidth = given_bandwidth;
  if (device.is_cpu()) {
    HostInfo h = host_info();
    d.name = h.cpu_model.empty() ? "CPU" : h.cpu_model;
    d.total_memory = h.memory_total_bytes;
    if (!(d.bandwidth > 0)) {
      d.bandwidth = peak_bandwidth_measure_cpu();
      d.bandwidth_source = "measured (STREAM triad)";
    }
    d.flops = peak_flops_measure_cpu(dtype);
    d.flops_source = strprintf("measured (%s matmul)", dtype_name(dtype).c_str());
    return d;
  }
  int multiprocessors = 0;
  for (const CudaDeviceInfo& c : cuda_device_infos(device.index())) {
    d.name = c.name;
    d.total_memory = c.total_bytes;
    multiprocessors = c.multiprocessors;
  }
  if (!(d.bandwidth > 0)) {
    d.bandwidth = peak_bandwidth(d.name);
    d.bandwidth_source = std::isfinite(d.bandwidth) ? "table" : "unknown device (MBU shows 0; set --peak-bandwidth)";
  }
  d.flops = peak_flops(d.name, multiprocessors);
  d.flops_source = std::isfinite(d.flops) ? "table (bf16)" : "unknown device (MFU shows 0)";
  return d;
}

// what the architecture implies, before measuring: what a decode step reads and computes
struct StaticCard {
  int64_t weight_bytes = 0, kv_store = 0, context_mid = 0, kv_read = 0, decode_flops = 0;
  double ceiling_bs1 = NAN;
  int64_t max_rows = 0, num_params = 0;
  std::map<std::string, int64_t> dtype_counts;
};
StaticCard static_card(const GPT& model, const DevicePeaks& d, int64_t prompt_len, int64_t decode_tokens) {
  const GPTConfig& config = model->config;
  const torch::ScalarType dtype = model->compute_dtype;
  StaticCard c;
  c.weight_bytes = infer_bench_weight_bytes(model);
  c.kv_store = gpt_kv_bytes_per_token(config, dtype);
  c.context_mid = prompt_len + decode_tokens / 2;  // a representative decode context
  c.kv_read = gpt_kv_read_bytes(config, c.context_mid, dtype);
  c.decode_flops = gpt_estimate_decode_flops(config, c.context_mid);
  c.ceiling_bs1 = std::isfinite(d.bandwidth) ? d.bandwidth / (double)(c.weight_bytes + c.kv_read) : NAN;
  c.max_rows = d.total_memory > c.weight_bytes ? (d.total_memory - c.weight_bytes) / (c.kv_store * config.sequence_len)
                                               : 0;
  for (const auto& [name, p] : gpt_named_parameters(model)) {
    c.dtype_counts[dtype_name(p.scalar_type())] += p.numel();
    c.num_params += p.numel();
  }
  return c;
}

void print_static_card(const GPT& model, const DevicePeaks& d, const StaticCard& c,
                       const nlohmann::ordered_json& checkpoint, FILE* card) {
  const GPTConfig& config = model->config;
  std::string dtypes;
  for (const auto& [t, n] : c.dtype_counts) dtypes += (dtypes.empty() ? "" : ", ") + format_thousands(n) + " " + t;
  const std::string rule(100, '=');
  std::fprintf(card, "%s\n", rule.c_str());
  std::fprintf(card, "Model: %s %s (step %s) | depth %lld, dim %lld, heads %lld, kv heads %lld | compute %s\n",
               checkpoint.value("source", "").c_str(), checkpoint.value("model_tag", "").c_str(),
               checkpoint.contains("step") ? checkpoint["step"].dump().c_str() : "?", (long long)config.n_layer,
               (long long)config.n_embd, (long long)config.n_head, (long long)config.n_kv_head,
               dtype_name(model->compute_dtype).c_str());
  std::fprintf(card, "Device: %s | peak bandwidth %s, %s | peak compute %s, %s | memory %.1f GiB\n", d.name.c_str(),
               std::isfinite(d.bandwidth) ? strprintf("%.1f GB/s", d.bandwidth / 1e9).c_str() : "?",
               d.bandwidth_source.c_str(),
               std::isfinite(d.flops) ? strprintf("%.1f GFLOP/s", d.flops / 1e9).c_str() : "?", d.flops_source.c_str(),
               (double)d.total_memory / (1 << 30));
  std::fprintf(card, "%s\n", std::string(100, '-').c_str());
  std::fprintf(card, "Parameters: %s (%s) | weight bytes as stored: %.1f MiB\n", format_thousands(c.num_params).c_str(),
               dtypes.c_str(), (double)c.weight_bytes / (1 << 20));
  std::fprintf(card, "KV cache: %s bytes/token stored | %s bytes read/step at context %lld (window pattern %s)\n",
               format_thousands(c.kv_store).c_str(), format_thousands(c.kv_read).c_str(), (long long)c.context_mid,
               config.window_pattern.c_str());
  std::fprintf(card,
               "Decode ceiling at batch 1 (weights + KV once a step): %s tok/s | ~%s full-context rows fit in memory\n",
               std::isfinite(c.ceiling_bs1) ? format_thousands((int64_t)c.ceiling_bs1).c_str() : "?",
               format_thousands(c.max_rows).c_str());
  std::fprintf(card, "%s\n", rule.c_str());
}

nlohmann::ordered_json static_payload(const nlohmann::ordered_json& checkpoint, torch::Device device,
                                      torch::ScalarType dtype, const DevicePeaks& d, const StaticCard& c,
                                      int64_t prompt_len, const InferBenchOptions& o) {
  nlohmann::ordered_json payload = checkpoint;
  payload["device"] = d.name;
  payload["device_type"] = device.is_cpu() ? "cpu" : "cuda";
  payload["compute_dtype"] = dtype_name(dtype);
  payload["peak_bandwidth_bytes_per_sec"] = finite_or_null(d.bandwidth);
  payload["peak_bandwidth_source"] = d.bandwidth_source;
  payload["peak_flops_per_sec"] = finite_or_null(d.flops);
  payload["peak_flops_source"] = d.flops_source;
  payload["total_memory_bytes"] = d.total_memory;
  payload["num_params"] = c.num_params;
  payload["param_dtypes"] = c.dtype_counts;
  payload["weight_bytes"] = c.weight_bytes;
  payload["kv_bytes_per_token"] = c.kv_store;
  payload["kv_read_bytes_per_step"] = c.kv_read;
  payload["context_mid"] = c.context_mid;
  payload["decode_flops_per_token"] = c.decode_flops;
  payload["ceiling_bs1_tok_per_sec"] = finite_or_null(c.ceiling_bs1);
  payload["max_full_context_rows"] = c.max_rows;
  payload["prompt_tokens"] = prompt_len;
  payload["decode_tokens"] = o.decode_tokens;
  payload["temperature"] = o.temperature;
  payload["peak_memory_kind"] = device.is_cpu() ? "resident set peak above the loaded model's (VmHWM - VmRSS)"
                                                : "caching allocator peak, weights included";
  return payload;
}

// one batch size of the sweep: its row of the table and its entry
nlohmann::ordered_json sweep_one(const Engine& engine, const std::vector<int32_t>& prompt, int64_t batch,
                                 const InferBenchOptions& o, const DevicePeaks& d, const StaticCard& c,
                                 torch::Device device, int64_t rss_base_kb, FILE* card) {
  TimedGeneration r;
  int64_t peak_memory = -1;
  try {
    PeakMemory memory(device, rss_base_kb);
    timed_generate(engine, prompt, batch, std::min<int64_t>(8, o.decode_tokens), o.temperature, device);  // warm-up
    r = timed_generate(engine, prompt, batch, o.decode_tokens, o.temperature, device);
    peak_memory = memory.bytes();
  } catch (const c10::OutOfMemoryError&) {
    std::fprintf(card, "%6lld  out of memory\n", (long long)batch);
    return {{"batch_size", batch}, {"error", "out of memory"}};
  }
  const InferBenchStep s = infer_bench_step_stats(r.step_sec, batch);
  const double bytes_per_step = (double)c.weight_bytes + (double)batch * (double)c.kv_read;
  const double mbu = infer_bench_mbu_percent(bytes_per_step, s.median_sec, d.bandwidth);
  const double mfu = infer_bench_mbu_percent((double)batch * (double)c.decode_flops, s.median_sec, d.flops);
  std::fprintf(card, "%6lld %9.2f %9.3f %9.3f %10.1f %11.1f %7.2f %8.4f %10s %6zu\n", (long long)batch,
               r.ttft_sec * 1e3, s.median_sec * 1e3, s.p90_sec * 1e3, s.tok_per_sec_row, s.tok_per_sec_total, mbu, mfu,
               peak_memory < 0 ? "?" : strprintf("%.1f", (double)peak_memory / (1 << 20)).c_str(), r.step_sec.size());
  return {{"batch_size", batch},
          {"ttft_sec", r.ttft_sec},
          {"tpot_sec", s.median_sec},
          {"tpot_p90_sec", s.p90_sec},
          {"tok_per_sec_per_row", s.tok_per_sec_row},
          {"tok_per_sec", s.tok_per_sec_total},
          {"bytes_per_step", bytes_per_step},
          {"mbu_percent", mbu},
          {"mfu_percent", mfu},
          {"peak_memory_bytes", peak_memory},
          {"decode_steps", (int64_t)r.step_sec.size()}};
}

}  // namespace

nlohmann::ordered_json infer_bench_run(GPT& model, const Tokenizer& tok, const InferBenchOptions& o,
                                       const nlohmann::ordered_json& checkpoint, FILE* card) {
  torch::NoGradGuard no_grad;
  model->eval();
  const GPTConfig& config = model->config;
  const torch::Device device = model->device();
  const torch::ScalarType dtype = model->compute_dtype;
  const int64_t prompt_len = checked_prompt_len(o, config, card);
  const std::vector<int32_t> prompt = infer_bench_prompt(tok, prompt_len);
  Engine engine(model, tok);

  // ---- the static card: what the architecture implies, before measuring ----
  const DevicePeaks d = device_peaks(device, dtype, o.peak_bandwidth);
  const StaticCard c = static_card(model, d, prompt_len, o.decode_tokens);
  print_static_card(model, d, c, checkpoint, card);
  nlohmann::ordered_json payload = static_payload(checkpoint, device, dtype, d, c, prompt_len, o);

  // ---- prefill: batch 1 and a single decode step, so the TTFT is the prefill (compute-bound: MFU) ----
  const int64_t rss_base_kb = proc_status_kb("VmRSS");          // the loaded model, before any generation
  timed_generate(engine, prompt, 1, 2, o.temperature, device);  // warm-up
  const TimedGeneration pre = timed_generate(engine, prompt, 1, 2, o.temperature, device);
  const double prefill_tok_per_sec = (double)prompt_len / pre.ttft_sec;
  const double prefill_mfu = std::isfinite(d.flops) && d.flops > 0
                                 ? 100.0 * (double)gpt_estimate_prefill_flops(config, prompt_len) / pre.ttft_sec /
                                       d.flops
                                 : 0.0;
  std::fprintf(card, "Prefill (batch 1, %lld tokens): %s tok/s | %.2f ms | MFU %.1f%%\n", (long long)prompt_len,
               format_thousands((int64_t)prefill_tok_per_sec).c_str(), pre.ttft_sec * 1e3, prefill_mfu);
  payload["prefill"] = {{"tok_per_sec", prefill_tok_per_sec}, {"mfu_percent", prefill_mfu}, {"time_sec", pre.ttft_sec}};

  // ---- the sweep: decode reads weights + KV every step (MBU binds at small batch), compute binds at large ----
  const std::string header = strprintf("%6s %9s %9s %9s %10s %11s %7s %8s %10s %6s", "batch", "TTFT ms", "TPOT ms",
                                       "p90 ms", "tok/s/row", "tok/s", "MBU %", "MFU %", "mem MiB", "steps");
  std::fprintf(card, "%s\n%s\n", header.c_str(), std::string(header.size(), '-').c_str());
  nlohmann::ordered_json sweep = nlohmann::ordered_json::array();
  for (int64_t batch : o.batch_sizes)
    sweep.push_back(sweep_one(engine, prompt, batch, o, d, c, device, rss_base_kb, card));
  std::fprintf(card, "%s\n", std::string(header.size(), '-').c_str());
  payload["sweep"] = sweep;
  return payload;
}

}  // namespace nanochat
