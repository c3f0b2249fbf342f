// ProcessGroupNCCL: the GPU backend (CUDA builds only; nccl_nocuda.cpp otherwise).
#include <c10/cuda/CUDAFunctions.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>

#include "nanochat/dist.h"

namespace nanochat {

c10::intrusive_ptr<c10d::Backend> dist_nccl_create(const c10::intrusive_ptr<c10d::Store>& store, const DistEnv& env,
                                                   std::chrono::milliseconds timeout) {
  c10::cuda::set_device((c10::DeviceIndex)env.local_rank);
  auto opts = c10d::ProcessGroupNCCL::Options::create();
  opts->timeout = timeout;
  auto pg = c10::make_intrusive<c10d::ProcessGroupNCCL>(store, env.rank, env.world_size, opts);
  // bind the communicator to our GPU now, as init_process_group(device_id=...) does
  pg->eagerConnectSingleDevice(at::Device(at::kCUDA, (c10::DeviceIndex)env.local_rank));
  return pg;
}

}  // namespace nanochat
