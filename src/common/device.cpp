#include "nanochat/common/device.h"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <thread>
#include <torch/cuda.h>
#include <torch/utils.h>
#include <ATen/Parallel.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "nanochat/common/device_driver.h"
#include "nanochat/common/env.h"
#include "nanochat/common/error.h"

namespace nanochat {

std::string device_autodetect(const std::string& requested) {
  bool have_cuda = torch::cuda::is_available();
  if (requested.empty()) {
    if (have_cuda) return "cuda";
    const std::string why = gpu_unusable_reason();
    if (!why.empty()) fail("%s", why.c_str());
    return "cpu";
  }
  if (requested == "cpu") return "cpu";
  if (requested == "cuda") {
    if (!have_cuda) {
      const std::string why = gpu_unusable_reason();
      if (!why.empty()) fail("--device-type=cuda: %s", why.c_str());
      fail("--device-type=cuda but no CUDA GPU is visible%s; use --device-type=cpu",
           cuda_built() ? "" : " (this build has no CUDA)");
    }
    return "cuda";
  }
  fail("--device-type='%s' is not one of cuda, cpu", requested.c_str());
}

torch::Device device_for_rank(const std::string& device_type, int local_rank) {
  if (device_type == "cuda") {
    int64_t n = (int64_t)torch::cuda::device_count();
    if (local_rank >= n)
      fail("LOCAL_RANK=%d but only %lld CUDA device(s) are visible; use at most %lld ranks per node", local_rank,
           (long long)n, (long long)n);
    return torch::Device(torch::kCUDA, (c10::DeviceIndex)local_rank);
  }
  return torch::Device(torch::kCPU);
}

torch::ScalarType compute_dtype_detect(const std::string& device_type) {
  if (auto name = env_get("NANOCHAT_DTYPE")) {
    if (*name == "bfloat16") return torch::kBFloat16;
    if (*name == "float16") return torch::kFloat16;
    if (*name == "float32") return torch::kFloat32;
    fail("NANOCHAT_DTYPE='%s' is not one of bfloat16, float16, float32", name->c_str());
  }
  if (device_type == "cuda") {
    auto infos = cuda_device_infos(0, /*with_memory=*/false);
    if (!infos.empty() && infos[0].major >= 8) return torch::kBFloat16;  // Ampere and newer
  }
  return torch::kFloat32;  // older GPUs and CPU: fp16 is opt-in only
}

std::string dtype_name(torch::ScalarType dtype) {
  switch (dtype) {
    case torch::kBFloat16: return "bfloat16";
    case torch::kFloat16: return "float16";
    case torch::kFloat32: return "float32";
    case torch::kFloat64: return "float64";
    case torch::kInt8: return "int8";
    case torch::kUInt8: return "uint8";
    case torch::kInt16: return "int16";
    case torch::kInt32: return "int32";
    case torch::kInt64: return "int64";
    case torch::kBool: return "bool";
    default: return c10::toString(dtype);
  }
}

void seed_everything(uint64_t seed) { torch::manual_seed(seed); }  // seeds CUDA generators too

int cpu_threads_setup(int local_world_size) {
  int threads;
  if (auto n = env_int("OMP_NUM_THREADS", 1, 4096)) {
    threads = (int)*n;
  } else {
    int cores = (int)std::max(1u, std::thread::hardware_concurrency());
    threads = std::max(1, cores / std::max(1, local_world_size));
  }
  at::set_num_threads(threads);
  return threads;
}

void cpu_malloc_setup() {
#if defined(__GLIBC__)
  for (const char* name : {"MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "GLIBC_TUNABLES"})
    if (std::getenv(name)) return;
  mallopt(M_MMAP_THRESHOLD, 1 << 30);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
#endif
}

void cpu_heap_trim() {
#if defined(__GLIBC__)
  malloc_trim(0);
#endif
}

HostInfo host_info() {
  HostInfo h{"unknown", (int)std::max(1u, std::thread::hardware_concurrency()), -1, -1};
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);)
    if (line.rfind("model name", 0) == 0 && line.find(':') != std::string::npos) {
      h.cpu_model = line.substr(line.find(':') + 2);
      break;
    }
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  int64_t kb;
  std::string unit;
  while (meminfo >> key >> kb >> unit) {
    if (key == "MemTotal:") h.memory_total_bytes = kb * 1024;
    if (key == "MemAvailable:") h.memory_available_bytes = kb * 1024;
  }
  return h;
}

}  // namespace nanochat
