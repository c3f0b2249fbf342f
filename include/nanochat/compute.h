// The wiring of a stage's compute, above dist and kernels (upstream common.py's compute_init):
// ranks from the environment, CPU threads, device (cuda:LOCAL_RANK or cpu), compute dtype,
// seed 42, TF32 on CUDA, the process group, and the kernels' self-checks agreed across ranks
// before any other collective.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "nanochat/dist.h"
#include "nanochat/kernels/self_check.h"

namespace nanochat {

// while alive, the kernels' verdicts are agreed through a Dist (kernels_set_agreement); clears
// that when it goes, which a Compute does before its Dist (declared after it)
class KernelsAgreement {
 public:
  KernelsAgreement() = default;
  explicit KernelsAgreement(Dist* dist);
  KernelsAgreement(KernelsAgreement&& other) noexcept : active_(other.active_) { other.active_ = false; }
  KernelsAgreement& operator=(KernelsAgreement&& other) noexcept;
  ~KernelsAgreement();

 private:
  bool active_ = false;
};

struct Compute {
  DistEnv env;
  std::string device_type;  // "cuda" or "cpu"
  torch::Device device{torch::kCPU};
  torch::ScalarType dtype = torch::kFloat;
  int cpu_threads = 1;
  std::unique_ptr<Dist> dist;
  KernelsAgreement agreement;                       // after dist: cleared before the group goes
  std::vector<kernels_check_result> kernel_checks;  // the checks at start (none under NANOCHAT_KERNELS=0)
  bool master() const { return env.rank == 0; }
};

// device_type_flag: "" autodetects (cuda when a GPU is present). Every rank then runs the fused
// kernels' self-check on its device in the compute dtype and in fp32 (the FP8 ops are among
// them, checked in the compute dtype) and the ranks agree on the verdicts: the first
// collectives after the group is up. announce_checks: log each op's name before its check.
Compute compute_init(const std::string& device_type_flag, bool announce_checks = false);

}  // namespace nanochat
