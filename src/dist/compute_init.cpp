#include "nanochat/compute.h"

#include <cmath>
#include <cstdlib>
#include <limits>

#include <ATen/Context.h>

#include "nanochat/common/device.h"
#include "nanochat/common/error.h"
#include "nanochat/common/log.h"
#include "nanochat/common/peak_flops.h"

namespace nanochat {

Compute compute_init(const std::string& device_type_flag) {
  Compute c;
  c.env = dist_env_from_environment();
  log_set_rank(c.env.rank, c.env.world_size);
  c.cpu_threads = cpu_threads_setup(c.env.local_world_size);
  cpu_malloc_setup();
  c.device_type = device_autodetect(device_type_flag);
  // CUDA's caching allocator with expandable segments (upstream sets it too): less
  // fragmentation across the shapes of training, eval and sampling. Read at the first CUDA
  // allocation, so set here, before any; a user's own setting wins.
  if (c.device_type == "cuda" && !std::getenv("PYTORCH_ALLOC_CONF") && !std::getenv("PYTORCH_CUDA_ALLOC_CONF"))
    setenv("PYTORCH_ALLOC_CONF", "expandable_segments:True", 0);
  c.device = device_for_rank(c.device_type, c.env.local_rank);
  c.dtype = compute_dtype_detect(c.device_type);
  seed_everything(42);  // identical init on every rank: nanochat has no DDP broadcast
  if (c.device_type == "cuda") at::globalContext().setFloat32MatmulPrecision("high");  // TF32
  c.dist = std::make_unique<Dist>(c.env, c.device);
  return c;
}

double compute_peak_flops(const Compute& c) {
  if (c.device_type != "cuda") {
    // no table knows a CPU: measure its matmul rate in the run's dtype, once (~0.3 s)
    const double measured = peak_flops_measure_cpu(c.dtype);
    log_info("CPU: MFU vs measured CPU peak %.1f GFLOP/s (%s matmul, %d threads)", measured / 1e9,
             dtype_name(c.dtype).c_str(), c.cpu_threads);
    return measured > 0 ? measured : std::numeric_limits<double>::infinity();
  }
  std::vector<CudaDeviceInfo> gpus = cuda_device_infos(c.device.index(), /*with_memory=*/false);
  const std::string name = gpus.empty() ? "" : gpus[0].name;
  double peak = peak_flops(name, gpus.empty() ? 0 : gpus[0].multiprocessors);
  log_info("GPU: %s, peak %s", name.c_str(),
           std::isinf(peak) ? "FLOPS unknown (MFU shows 0)" : strprintf("%.1f TFLOPS (bf16)", peak / 1e12).c_str());
  return peak;
}

std::string compute_mfu_label(const Compute& c) {
  if (c.device_type == "cuda") return "bf16_mfu";
  switch (c.dtype) {
    case torch::kBFloat16: return "bf16_mfu";
    case torch::kFloat16: return "fp16_mfu";
    case torch::kFloat32: return "fp32_mfu";
    default: return dtype_name(c.dtype) + "_mfu";
  }
}

}  // namespace nanochat
