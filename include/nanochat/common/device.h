// The device and precision policy of upstream's common.py (compute_init, COMPUTE_DTYPE), in one place.
#pragma once
#include <cstdint>
#include <string>
#include <vector>
#include "nanochat/common/tensor.h"

namespace nanochat {

// "cuda" when a GPU is present, else "cpu"; `requested` ("", "cuda", "cpu") overrides,
// with an Error when cuda is asked for and unavailable
std::string device_autodetect(const std::string& requested = "");
// the torch device for this process: cuda:LOCAL_RANK on CUDA, cpu otherwise
torch::Device device_for_rank(const std::string& device_type, int local_rank);

// NANOCHAT_DTYPE (bfloat16|float16|float32) if set; bf16 on CUDA with capability >= 8.0;
// else float32
torch::ScalarType compute_dtype_detect(const std::string& device_type);
std::string dtype_name(torch::ScalarType dtype);

void seed_everything(uint64_t seed);  // torch CPU and CUDA generators

// LibTorch may start with one intra-op thread; use the cores this rank may have:
// OMP_NUM_THREADS if set, else hardware threads / local ranks. Returns the count set.
int cpu_threads_setup(int local_world_size);

// glibc's malloc serves every tensor above its mmap threshold (at most 32 MB) with a fresh
// mmap and returns it on free, so a CPU training step page-faults in its activations, logits
// chunks and gradients anew every step (~9% of a d8 step here). Raise the mmap and trim
// thresholds to 1 GB so that freed blocks are reused, unless the user tuned malloc through
// MALLOC_MMAP_THRESHOLD_, MALLOC_TRIM_THRESHOLD_ or GLIBC_TUNABLES. No-op elsewhere than glibc.
void cpu_malloc_setup();
// Returns glibc's freed heap memory to the system (malloc_trim): blocks below the mmap threshold
// stay in the heap when freed, which keeps, say, weights just replaced by a repacked copy
// resident. No-op elsewhere than glibc.
void cpu_heap_trim();

struct CudaDeviceInfo {
  int index;
  std::string name;
  int major, minor;  // compute capability
  int64_t total_bytes, free_bytes;
  int multiprocessors;
};
struct HostInfo {
  std::string cpu_model;
  int hardware_threads;
  int64_t memory_total_bytes, memory_available_bytes;  // -1 if unknown
};
HostInfo host_info();  // from /proc/cpuinfo and /proc/meminfo

bool cuda_built();  // this binary was compiled with CUDA support
// every GPU (empty without one), or only the one of index `only` (none if it does not exist).
// Free and total memory come from the GPU's CUDA context, which the query creates: a rank asks
// for its own GPU only (eight ranks listing eight GPUs would hold 64 contexts, ~0.5 GB each),
// and with_memory = false (memory left 0) touches no context at all.
std::vector<CudaDeviceInfo> cuda_device_infos(int only = -1, bool with_memory = true);
std::string cuda_runtime_version();  // "13.0", or "" when not built with CUDA
std::string nccl_version();          // "2.28.9", or "" when not built with NCCL

// waits for the device's queued work (a no-op on the CPU): for honest step timings
void device_synchronize(torch::Device device);
// peak bytes allocated by the CUDA caching allocator on `device` (-1 on the CPU)
int64_t device_peak_memory_bytes(torch::Device device);
// bytes the CUDA caching allocator has handed out on `device` now (-1 on the CPU)
int64_t device_allocated_memory_bytes(torch::Device device);
// what can still be allocated on `device`: on CUDA the free memory once the caching allocator
// has released its cache, on the CPU /proc/meminfo's MemAvailable; -1 if unknown
int64_t device_free_memory_bytes(torch::Device device);

}  // namespace nanochat
