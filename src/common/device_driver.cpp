// The NVIDIA driver next to LibTorch's CUDA: see device_driver.h.
#include "nanochat/common/device_driver.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <regex>

#include <torch/cuda.h>

#include "nanochat/common/env.h"
#include "nanochat/common/error.h"

namespace nanochat {

std::string nvidia_driver_version() {
  // the kernel module's line: "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Wed ..."
  const std::string path = env_get("NANOCHAT_NVIDIA_DRIVER_FILE").value_or("/proc/driver/nvidia/version");
  std::ifstream file(path);
  std::string line;
  if (file && std::getline(file, line)) {
    static const std::regex version_re(R"(\s(\d{3,}\.\d+(\.\d+)?)\s)");
    std::smatch m;
    if (std::regex_search(line, m, version_re)) return m[1];
  }
  // a container may have nvidia-smi without the /proc file
  FILE* p = popen("nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null", "r");
  if (!p) return "";
  std::string out;  // the first GPU's line; the rest read too, so that nvidia-smi ends normally
  char buf[256];
  for (bool first = true; fgets(buf, sizeof buf, p); first = false)
    if (first) out = buf;
  const int status = pclose(p);
  static const std::regex answer_re(R"(^\s*(\d{3,}\.\d+(\.\d+)?)\s*$)");
  std::smatch m;
  if (status == 0 && std::regex_match(out, m, answer_re)) return m[1];
  return "";
}

int cuda_major_for_driver(const std::string& driver_version) {
  const int major = std::atoi(driver_version.c_str());
  if (major >= 580) return 13;
  if (major >= 525) return 12;  // CUDA 12.x through minor-version compatibility
  return 0;
}

std::string gpu_unusable_reason() {
  if (torch::cuda::is_available()) return "";
  const std::string driver = nvidia_driver_version();
  if (driver.empty()) return "";
  const std::string wheel = libtorch_cuda_version();
  const int runs = cuda_major_for_driver(driver);
  const std::string override = "; --device-type cpu runs on the CPU anyway";
  if (wheel.empty())
    return strprintf(
        "this machine has NVIDIA driver %s but this LibTorch has no CUDA (a CPU build): rerun "
        "runs/setup.sh without NANOCHAT_TORCH_INDEX pointing at a CPU index (it installs the wheel for "
        "CUDA %d), then rebuild%s",
        driver.c_str(), runs, override.c_str());
  if (std::atoi(wheel.c_str()) > runs)
    return strprintf(
        "NVIDIA driver %s runs CUDA %d at most, but this LibTorch needs CUDA %s (driver >= %d): rerun "
        "runs/setup.sh (it installs the torch wheel built for CUDA %d on this driver) or upgrade the "
        "driver%s",
        driver.c_str(), runs, wheel.c_str(), std::atoi(wheel.c_str()) >= 13 ? 580 : 525, runs, override.c_str());
  return strprintf(
      "NVIDIA driver %s and this LibTorch's CUDA %s should work, but LibTorch sees no GPU: check "
      "nvidia-smi, CUDA_VISIBLE_DEVICES and the container's GPU access%s",
      driver.c_str(), wheel.c_str(), override.c_str());
}

}  // namespace nanochat
