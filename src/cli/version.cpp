// `nanochat --version`: nanochat, LibTorch, CUDA devices, NCCL, CPU threads.
#include <ATen/Parallel.h>
#include <torch/version.h>

#include "cli/commands.h"
#include "nanochat/common/device.h"
#include "nanochat/common/error.h"

namespace nanochat {

std::string cli_version_text() {
  std::string s = strprintf("nanochat %s\nLibTorch %s", NANOCHAT_VERSION, TORCH_VERSION);
  if (cuda_built()) s += " (built with CUDA " + cuda_runtime_version() + ")";
  auto gpus = cuda_device_infos();
  if (!cuda_built()) s += "\nCUDA: not built";
  else if (gpus.empty()) s += "\nCUDA: no GPU visible";
  else {
    s += strprintf("\nCUDA: %zu device(s)", gpus.size());
    for (auto& g : gpus) s += strprintf("\n  cuda:%d %s (sm_%d%d)", g.index, g.name.c_str(), g.major, g.minor);
  }
  s += "\nNCCL: " + (cuda_built() ? nccl_version() : std::string("not built"));
  s += strprintf("\nCPU threads: %d of %d", at::get_num_threads(), host_info().hardware_threads);
  return s;
}

}  // namespace nanochat
