// CUDA-only: compiled when the LibTorch found has CUDA (see CMakeLists.txt).
// Works on machines without a GPU too: every query first asks for the device count.
#include "nanochat/common/device.h"
#include "nanochat/common/device_driver.h"

#include <ATen/cuda/CUDAContext.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime_api.h>
#include <torch/csrc/distributed/c10d/NCCLUtils.hpp>
#include <torch/cuda.h>

#include "nanochat/common/error.h"

namespace nanochat {

bool cuda_built() { return true; }

std::vector<CudaDeviceInfo> cuda_device_infos(int only, bool with_memory) {
  std::vector<CudaDeviceInfo> out;
  if (!torch::cuda::is_available()) return out;
  int n = (int)torch::cuda::device_count();
  for (int i = 0; i < n; i++) {
    if (only >= 0 && i != only) continue;
    const cudaDeviceProp* p = at::cuda::getDeviceProperties(i);  // no context needed
    size_t free_b = 0, total_b = 0;
    if (with_memory) {
      c10::cuda::CUDAGuard guard((c10::DeviceIndex)i);
      if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) free_b = total_b = 0;
    }
    out.push_back({i, p->name, p->major, p->minor, (int64_t)total_b, (int64_t)free_b, p->multiProcessorCount});
  }
  return out;
}

std::string cuda_runtime_version() {
  int v = CUDART_VERSION;  // the toolkit this binary was compiled against
  return strprintf("%d.%d", v / 1000, (v % 1000) / 10);
}

std::string libtorch_cuda_version() {
  // the runtime LibTorch's CUDA library links (the wheel's), which needs no driver to answer
  try {
    const long v = at::detail::getCUDAHooks().versionCUDART();
    return strprintf("%ld.%ld", v / 1000, (v % 1000) / 10);
  } catch (const std::exception&) {
    return "";
  }
}

std::string nccl_version() { return c10d::getNcclVersion(); }

void device_synchronize(torch::Device device) {
  if (device.is_cuda()) torch::cuda::synchronize(device.index());
}

int64_t device_peak_memory_bytes(torch::Device device) {
  if (!device.is_cuda()) return -1;
  auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index());
  return stats.allocated_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)].peak;
}

int64_t device_allocated_memory_bytes(torch::Device device) {
  if (!device.is_cuda()) return -1;
  auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index());
  return stats.allocated_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)].current;
}

int64_t device_free_memory_bytes(torch::Device device) {
  if (!device.is_cuda()) return host_info().memory_available_bytes;
  c10::cuda::CUDAGuard guard(device.index());
  c10::cuda::CUDACachingAllocator::emptyCache();  // blocks it keeps cached are free to us too
  size_t free_b = 0, total_b = 0;
  if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) return -1;
  return (int64_t)free_b;
}

}  // namespace nanochat
