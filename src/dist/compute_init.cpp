#include "nanochat/compute.h"

#include <ATen/Context.h>

#include "nanochat/common/device.h"
#include "nanochat/common/log.h"

namespace nanochat {

Compute compute_init(const std::string& device_type_flag) {
  Compute c;
  c.env = dist_env_from_environment();
  log_set_rank(c.env.rank, c.env.world_size);
  c.cpu_threads = cpu_threads_setup(c.env.local_world_size);
  c.device_type = device_autodetect(device_type_flag);
  c.device = device_for_rank(c.device_type, c.env.local_rank);
  c.dtype = compute_dtype_detect(c.device_type);
  seed_everything(42);  // identical init on every rank: nanochat has no DDP broadcast
  if (c.device_type == "cuda") at::globalContext().setFloat32MatmulPrecision("high");  // TF32
  c.dist = std::make_unique<Dist>(c.env, c.device);
  return c;
}

}  // namespace nanochat
