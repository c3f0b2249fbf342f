// defines: gpt_device_memory_budget
// CUDA-only (compiled when the LibTorch found has CUDA; memory_nocuda.cpp otherwise).
#include <c10/cuda/CUDACachingAllocator.h>

#include "nanochat/common/device.h"
#include "nanochat/gpt/memory.h"

namespace nanochat {

int64_t gpt_device_memory_budget(torch::Device device) {
  if (!device.is_cuda()) return -1;
  // free once the cache (e.g. the init's fp32 temporaries) is released, plus what is allocated now
  const int64_t free_b = device_free_memory_bytes(device);
  if (free_b < 0) return -1;
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index());
  const int64_t allocated =
      stats.allocated_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)].current;
  return free_b + allocated;
}

}  // namespace nanochat
