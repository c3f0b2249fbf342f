// The tables of upstream's common.get_peak_flops, in upstream's order (order matters: "h100 nvl" before "h100"),
// and the two probes that stand in for a table on a CPU.
#include "nanochat/telemetry/peak_flops.h"

#include <algorithm>
#include <cmath>
#include <cctype>
#include <limits>
#include <sstream>
#include <vector>

#include <torch/torch.h>

#include "nanochat/common/device.h"
#include "nanochat/common/error.h"
#include "nanochat/common/log.h"
#include "nanochat/common/ascii.h"
#include "nanochat/common/progress.h"

namespace nanochat {

namespace {

struct Entry {
  const char* words;  // all must appear in the lower-cased name
  double value;
};

const Entry kPeakFlops[] = {
    {"gb200", 2.5e15},     {"grace blackwell", 2.5e15},
    {"b200", 2.25e15},     {"b100", 1.8e15},
    {"h200 nvl", 836e12},  {"h200 pcie", 836e12},
    {"h200", 989e12},      {"h100 nvl", 835e12},
    {"h100 pcie", 756e12}, {"h100", 989e12},
    {"h800 nvl", 989e12},  {"h800", 756e12},
    {"a100", 312e12},      {"a800", 312e12},
    {"a40", 149.7e12},     {"a30", 165e12},
    {"l40s", 362e12},      {"l40-s", 362e12},
    {"l40 s", 362e12},     {"l4", 121e12},
    {"mi355", 2.5e15},     {"mi325", 1.3074e15},
    {"mi300x", 1.3074e15}, {"mi300a", 980.6e12},
    {"mi250x", 383e12},    {"mi250", 362.1e12},
    {"5090", 209.5e12},    {"4090", 165.2e12},
    {"3090", 71e12},
};

const Entry kPeakBandwidth[] = {
    {"gb200", 8.0e12},     {"grace blackwell", 8.0e12},
    {"b200", 8.0e12},      {"b100", 8.0e12},
    {"h200", 4.8e12},      {"h100 nvl", 3.9e12},
    {"h100 pcie", 2.0e12}, {"h100", 3.35e12},
    {"h800 pcie", 2.0e12}, {"h800", 3.35e12},
    {"a100", 2.0e12},      {"a800", 2.0e12},
    {"a40", 696e9},        {"a30", 933e9},
    {"l40s", 864e9},       {"l4", 300e9},
    {"mi355", 8.0e12},     {"mi325", 6.0e12},
    {"mi300x", 5.3e12},    {"mi300a", 5.3e12},
    {"mi250x", 3.28e12},   {"mi250", 3.28e12},
    {"5090", 1.79e12},     {"4090", 1.01e12},
    {"3090", 936e9},
};

bool has_all_words(const std::string& name, const char* words) {
  std::istringstream in(words);
  std::string w;
  while (in >> w)
    if (name.find(w) == std::string::npos) return false;
  return true;
}

template <size_t N>
double lookup(const Entry (&table)[N], const std::string& name) {
  for (const Entry& e : table)
    if (has_all_words(name, e.words)) return e.value;
  return std::numeric_limits<double>::infinity();
}

}  // namespace

double peak_flops(const std::string& device_name, int compute_units) {
  const std::string name = ascii_lower(device_name);
  if (name.find("data center gpu max 1550") != std::string::npos && compute_units > 0)
    return 512.0 * compute_units * 1300e6;
  return lookup(kPeakFlops, name);
}

double peak_bandwidth(const std::string& device_name) { return lookup(kPeakBandwidth, ascii_lower(device_name)); }

double peak_flops_measure_cpu(c10::ScalarType dtype, double seconds) {
  torch::NoGradGuard no_grad;
  double best = 0;
  Timer total;
  for (int64_t n : {512, 1024}) {
    torch::Tensor a = torch::rand({n, n}, torch::dtype(dtype)), b = torch::rand({n, n}, torch::dtype(dtype));
    torch::Tensor c = torch::empty({n, n}, torch::dtype(dtype));
    Timer warm;
    at::mm_out(c, a, b);  // first call: packing buffers, thread start-up
    // a size that takes longer than the whole budget once (a slow dtype) is not tried
    if (n > 512 && warm.seconds() > seconds / 2) break;
    const double flops = 2.0 * (double)n * (double)n * (double)n;  // n^2 outputs, n multiply-adds each
    Timer phase;
    do {
      Timer t;
      at::mm_out(c, a, b);
      best = std::max(best, flops / std::max(t.seconds(), 1e-9));
    } while (phase.seconds() < seconds / 2 && total.seconds() < seconds);
  }
  return best;
}

double peak_bandwidth_measure_cpu(double seconds) {
  torch::NoGradGuard no_grad;
  const int64_t n = 16 << 20;  // 16M floats = 64 MiB per array
  torch::Tensor a = torch::empty({n}), b = torch::ones({n}), c = torch::ones({n});
  at::add_out(a, b, c, 3.0);  // a = b + 3c; also faults every page in
  double best = 0;
  Timer phase;
  do {
    Timer t;
    at::add_out(a, b, c, 3.0);
    best = std::max(best, 3.0 * (double)n * sizeof(float) / std::max(t.seconds(), 1e-9));  // read b, c; write a
  } while (phase.seconds() < seconds);
  return best;
}

double peak_flops_of_run(const c10::Device& device, c10::ScalarType dtype, int cpu_threads) {
  if (!device.is_cuda()) {
    // no table knows a CPU: measure its matmul rate in the run's dtype, once (~0.3 s)
    const double measured = peak_flops_measure_cpu(dtype);
    log_info("CPU: MFU vs measured CPU peak %.1f GFLOP/s (%s matmul, %d threads)", measured / 1e9,
             dtype_name(dtype).c_str(), cpu_threads);
    return measured > 0 ? measured : std::numeric_limits<double>::infinity();
  }
  std::vector<CudaDeviceInfo> gpus = cuda_device_infos(device.index(), /*with_memory=*/false);
  const std::string name = gpus.empty() ? "" : gpus[0].name;
  double peak = peak_flops(name, gpus.empty() ? 0 : gpus[0].multiprocessors);
  log_info("GPU: %s, peak %s", name.c_str(),
           std::isinf(peak) ? "FLOPS unknown (MFU shows 0)" : strprintf("%.1f TFLOPS (bf16)", peak / 1e12).c_str());
  return peak;
}

std::string mfu_label_for(const c10::Device& device, c10::ScalarType dtype) {
  if (device.is_cuda()) return "bf16_mfu";
  switch (dtype) {
    case torch::kBFloat16: return "bf16_mfu";
    case torch::kFloat16: return "fp16_mfu";
    case torch::kFloat32: return "fp32_mfu";
    default: return dtype_name(dtype) + "_mfu";
  }
}

}  // namespace nanochat
