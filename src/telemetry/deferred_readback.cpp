#include "nanochat/telemetry/deferred_readback.h"

#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <ATen/ops/empty.h>

namespace nanochat {

DeferredReadback::DeferredReadback(torch::Device device) : device_(device), lag_(device.is_cpu() ? 0 : 1) {}

void DeferredReadback::push(const torch::Tensor& values) {
  Pending p;
  if (device_.is_cpu()) {
    p.host = values.to(torch::kDouble, /*non_blocking=*/false, /*copy=*/true);  // one copy, never an alias
  } else {
    auto pinned = torch::TensorOptions().dtype(values.scalar_type()).pinned_memory(true);
    p.host = at::empty(values.sizes(), pinned);
    p.host.copy_(values, /*non_blocking=*/true);
    p.done.emplace(device_.type());
    p.done->record(c10::impl::getDeviceGuardImpl(device_.type())->getStream(device_));
  }
  pending_.push_back(std::move(p));
}

bool DeferredReadback::due() const { return pending_.size() > lag_; }

std::vector<double> DeferredReadback::take() {
  Pending p = std::move(pending_.front());
  pending_.pop_front();
  if (p.done) p.done->synchronize();  // the one wait of a step
  torch::Tensor v = p.host.to(torch::kDouble);
  return std::vector<double>(v.data_ptr<double>(), v.data_ptr<double>() + v.numel());
}

}  // namespace nanochat
