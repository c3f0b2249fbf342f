// defines: gpt_device_memory_budget
// Compiled instead of memory_cuda.cpp when the LibTorch found has no CUDA.
#include "nanochat/gpt/memory.h"

namespace nanochat {

int64_t gpt_device_memory_budget(torch::Device) { return -1; }

}  // namespace nanochat
