// Host -> device staging of the loader's batches (see stager.h).
#include "stager.h"

#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <ATen/ops/empty.h>

namespace nanochat {

DeviceStager::DeviceStager(torch::Device device, int64_t batch_size, int64_t seq_len)
    : device_(device), B_(batch_size), T_(seq_len) {
  for (auto& d : dev_) d = at::empty({2 * B_ * T_}, torch::TensorOptions().dtype(torch::kLong).device(device));
  if (!device.is_cpu()) {
    c10::impl::VirtualGuardImpl impl(device.type());
    side_ = impl.getStreamFromGlobalPool(device_, /*isHighPriority=*/false);
    copied_.emplace(device.type());
    released_[0].emplace(device.type());
    released_[1].emplace(device.type());
  }
}

DeviceStager::~DeviceStager() {
  if (side_) side_->synchronize();
}

std::pair<torch::Tensor, torch::Tensor> DeviceStager::stage(const torch::Tensor& host) {
  int d = (int)(count_ % 2);
  torch::Tensor& dst = dev_[d];
  if (!side_) {
    dst.copy_(host);
  } else {
    c10::impl::VirtualGuardImpl impl(device_.type());
    c10::Stream compute = impl.getStream(device_);
    // everything enqueued so far on the compute stream includes the last use of the batch
    // handed out previously (buffer 1 - d); the copy into buffer d waits for the event
    // recorded one call earlier, which covered the batch before that (the last user of d)
    released_[1 - d]->record(compute);
    released_[d]->block(*side_);
    {
      c10::StreamGuard guard(*side_);
      dst.copy_(host, /*non_blocking=*/true);
      copied_->record(*side_);
    }
    copied_->block(compute);
  }
  count_++;
  int64_t n = B_ * T_;
  return {dst.narrow(0, 0, n).view({B_, T_}), dst.narrow(0, n, n).view({B_, T_})};
}

void DeviceStager::wait_host() {
  if (copied_) copied_->synchronize();
}

}  // namespace nanochat
