#include "nanochat/compute.h"

#include <cstdlib>

#include <ATen/Context.h>
#include <torch/torch.h>

#include "nanochat/common/device.h"
#include "nanochat/common/error.h"
#include "nanochat/common/log.h"
#include "nanochat/kernels.h"

namespace nanochat {

// every rank runs the same path of each fused op: it runs its kernel only where the kernel passed
// its self-check on every rank (a rank alone on its reference would still train, but slower and
// with other roundings than the rest). The MIN of the ok flags, as the MAX of the failed ones:
// Dist reduces by SUM, AVG and MAX.
KernelsAgreement::KernelsAgreement(Dist* dist) : active_(true) {
  kernels_set_agreement([dist](std::vector<int64_t>& ok) {
    torch::Tensor failed = 1 - torch::tensor(ok, torch::kLong);
    failed = failed.to(dist->device());
    dist->all_reduce(failed, ReduceOp::MAX);
    failed = failed.cpu();
    for (size_t i = 0; i < ok.size(); i++) ok[i] = 1 - failed[(int64_t)i].item<int64_t>();
  });
}

KernelsAgreement& KernelsAgreement::operator=(KernelsAgreement&& other) noexcept {
  if (this != &other) {
    if (active_) kernels_set_agreement(nullptr);
    active_ = other.active_;
    other.active_ = false;
  }
  return *this;
}

KernelsAgreement::~KernelsAgreement() {
  if (active_) kernels_set_agreement(nullptr);
}

Compute compute_init(const std::string& device_type_flag, bool announce_checks) {
  Compute c;
  c.env = dist_env_from_environment();
  log_set_rank(c.env.rank, c.env.world_size);
  c.cpu_threads = cpu_threads_setup(c.env.local_world_size);
  cpu_malloc_setup();
  c.device_type = device_autodetect(device_type_flag);
  // CUDA's caching allocator with expandable segments (upstream sets it too): less
  // fragmentation across the shapes of training, eval and sampling. Read at the first CUDA
  // allocation, so set here, before any; a user's own setting wins.
  if (c.device_type == "cuda" && !std::getenv("PYTORCH_ALLOC_CONF") && !std::getenv("PYTORCH_CUDA_ALLOC_CONF"))
    setenv("PYTORCH_ALLOC_CONF", "expandable_segments:True", 0);
  c.device = device_for_rank(c.device_type, c.env.local_rank);
  c.dtype = compute_dtype_detect(c.device_type);
  seed_everything(42);  // identical init on every rank: nanochat has no DDP broadcast
  if (c.device_type == "cuda") at::globalContext().setFloat32MatmulPrecision("high");  // TF32
  c.dist = std::make_unique<Dist>(c.env, c.device);
  if (c.env.world_size > 1) c.agreement = KernelsAgreement(c.dist.get());
  // Before any other collective: a rank that met a dtype first, later, would pair the verdicts'
  // agreement with another rank's next collective. The checks draw from their own generator:
  // the seed's stream is untouched.
  c.kernel_checks = kernels_check_at_start(c.device, {c.dtype, torch::kFloat32}, announce_checks);
  return c;
}

}  // namespace nanochat
