// The last hop of a batch: host slot -> persistent device buffer. On CUDA (any accelerator
// with streams) one non-blocking copy per batch on a side stream; the compute stream waits on
// its event, and the side stream first waits until the compute stream is done with the
// device buffer it overwrites (two buffers, so batch n's copy overlaps step n-1). On the CPU a
// plain copy. Device-generic through c10's virtual guard; used on the consumer thread only.
#pragma once
#include <c10/core/Event.h>
#include <c10/core/Stream.h>
#include <optional>
#include "nanochat/common/tensor.h"

namespace nanochat {

class DeviceStager {
 public:
  DeviceStager(torch::Device device, int64_t batch_size, int64_t seq_len);
  ~DeviceStager();  // waits for a copy in flight
  // host: 2*B*T int64 (inputs then targets), pinned on CUDA. Returns (inputs, targets) views
  // of the device buffer; host may be reused after wait_host().
  std::pair<torch::Tensor, torch::Tensor> stage(const torch::Tensor& host);
  void wait_host();  // blocks until the last copy has read its host slot

 private:
  torch::Device device_;
  int64_t B_, T_;
  torch::Tensor dev_[2];
  int64_t count_ = 0;
  std::optional<c10::Stream> side_;
  std::optional<c10::Event> copied_, released_[2];
};

}  // namespace nanochat
