// Compiled instead of cuda_device.cpp when the LibTorch found has no CUDA.
#include "nanochat/common/device.h"

namespace nanochat {

bool cuda_built() { return false; }
std::vector<CudaDeviceInfo> cuda_device_infos(int, bool) { return {}; }
std::string cuda_runtime_version() { return ""; }
std::string nccl_version() { return ""; }
void device_synchronize(torch::Device) {}
int64_t device_peak_memory_bytes(torch::Device) { return -1; }

}  // namespace nanochat
