// Compiled instead of device_cuda.cpp when the LibTorch found has no CUDA.
#include "nanochat/common/device.h"
#include "nanochat/common/device_driver.h"

namespace nanochat {

bool cuda_built() { return false; }
std::vector<CudaDeviceInfo> cuda_device_infos(int, bool) { return {}; }
std::string cuda_runtime_version() { return ""; }
std::string libtorch_cuda_version() { return ""; }
std::string nccl_version() { return ""; }
void device_synchronize(torch::Device) {}
int64_t device_peak_memory_bytes(torch::Device) { return -1; }
int64_t device_allocated_memory_bytes(torch::Device) { return -1; }
int64_t device_free_memory_bytes(torch::Device device) {
  return device.is_cuda() ? -1 : host_info().memory_available_bytes;
}

}  // namespace nanochat
