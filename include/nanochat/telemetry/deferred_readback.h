// Reading a step's few scalars (the loss, a stop flag) one step late, so that a training loop
// waits on the device at most once a step and never while it has nothing queued: push()
// starts a copy into pinned host memory and records an event behind it; take() waits for the
// oldest such event -- by then the device is already busy with the next step. On the CPU
// there is nothing to overlap: the lag is 0 and take() returns the value just pushed.
#pragma once
#include <deque>
#include <optional>
#include <vector>

#include <c10/core/Event.h>
#include "nanochat/common/tensor.h"

namespace nanochat {

class DeferredReadback {
 public:
  explicit DeferredReadback(torch::Device device);
  void push(const torch::Tensor& values);  // 1-D floating values on the device
  bool due() const;                        // more values in flight than the lag allows: take() one now
  bool empty() const { return pending_.empty(); }
  std::vector<double> take();  // the oldest pushed values (waits for their copy)

 private:
  struct Pending {
    torch::Tensor host;
    std::optional<c10::Event> done;
  };
  torch::Device device_;
  size_t lag_;
  std::deque<Pending> pending_;
};

}  // namespace nanochat
