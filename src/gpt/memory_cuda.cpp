// defines: gpt_device_memory_budget
// CUDA-only (compiled when the LibTorch found has CUDA; memory_nocuda.cpp otherwise).
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime_api.h>

#include "nanochat/gpt/memory.h"

namespace nanochat {

int64_t gpt_device_memory_budget(torch::Device device) {
  if (!device.is_cuda()) return -1;
  c10::cuda::CUDAGuard guard(device.index());
  // the cache (e.g. the init's fp32 temporaries) back to the device, so that free memory is real
  c10::cuda::CUDACachingAllocator::emptyCache();
  size_t free_b = 0, total_b = 0;
  if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) return -1;
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index());
  const int64_t allocated =
      stats.allocated_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)].current;
  return (int64_t)free_b + allocated;
}

}  // namespace nanochat
