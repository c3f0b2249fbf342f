// Builds against a LibTorch without CUDA have no NCCL.
#include "nanochat/common/error.h"
#include "nanochat/dist.h"

namespace nanochat {

c10::intrusive_ptr<c10d::Backend> dist_nccl_create(const c10::intrusive_ptr<c10d::Store>&, const DistEnv&,
                                                   std::chrono::milliseconds) {
  fail(
      "this nanochat was built against a LibTorch without CUDA, so it has no NCCL; "
      "rebuild with a CUDA LibTorch or use --device-type=cpu");
}

}  // namespace nanochat
