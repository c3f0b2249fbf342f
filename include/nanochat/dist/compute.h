// defines: Compute, compute_init
// upstream common.py's compute_init: ranks from the environment, CPU threads, device
// (cuda:LOCAL_RANK or cpu), compute dtype, seed 42, TF32 on CUDA, and the process group.
#pragma once
#include <memory>
#include <string>

#include "nanochat/dist.h"

namespace nanochat {

struct Compute {
  DistEnv env;
  std::string device_type;  // "cuda" or "cpu"
  torch::Device device{torch::kCPU};
  torch::ScalarType dtype = torch::kFloat;
  int cpu_threads = 1;
  std::unique_ptr<Dist> dist;
  bool master() const { return env.rank == 0; }
};

// device_type_flag: "" autodetects (cuda when a GPU is present)
Compute compute_init(const std::string& device_type_flag);

}  // namespace nanochat
