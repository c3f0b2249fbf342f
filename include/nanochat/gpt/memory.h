// How much memory one rank's training step needs (from the configuration alone, so a plan
// costs nothing), what makes it up, and how much of a device's memory training can use:
// base-train's default --device-batch-size on a GPU and its --dry-run plan.
#pragma once
#include <cstdint>

#include "nanochat/common/tensor.h"

#include "nanochat/gpt.h"

namespace nanochat {

// One rank's peak, in bytes, part by part (see memory.cpp for what each part counts). The
// model state lives all the time; on top of it the step peaks either at the end of forward
// / start of backward (activations saved, the fused loss's buffers, one layer's backward
// transients) or in the optimizer step (activations gone, the collectives' buffers).
struct TrainMemory {
  int64_t weights = 0;         // parameters as stored
  int64_t grads = 0;           // their gradients, in the same dtypes
  int64_t optimizer = 0;       // AdamW moments and Muon buffers: this rank's ZeRO shard
  int64_t weight_copies = 0;   // the block matrices cast to the compute dtype, kept for backward
  int64_t activations = 0;     // what autograd saves over one micro-batch
  int64_t loss_saved = 0;      // the fused loss's gradients, kept from forward to backward
  int64_t loss_transient = 0;  // during the fused loss: lm_head cast, one chunk of logits
  int64_t backward = 0;        // one layer's backward transients
  int64_t optimizer_step = 0;  // the optimizer step's transients
  int64_t total = 0;           // state + max(forward/backward, optimizer step)
};

// device_batch_size rows of config.sequence_len tokens, compute dtype `dtype`, world_size
// ranks (the optimizer state is sharded over them); fp8: the block matmuls in FP8 (gpt_set_fp8)
TrainMemory gpt_train_memory(const GPTConfig& config, int64_t device_batch_size, torch::ScalarType dtype,
                             int world_size, bool fp8 = false);
// the largest power of two <= max_batch whose total fits in budget_bytes (0 when not even 1 does)
int64_t gpt_train_memory_fit(const GPTConfig& config, torch::ScalarType dtype, int world_size, int64_t budget_bytes,
                             int64_t max_batch, bool fp8 = false);

// What training can have of `device`'s memory: the caching allocator's cache is released
// first, then free memory plus what the allocator holds now (the model, if built: it is part
// of the estimate). The CUDA context, NCCL's buffers and other processes are left out.
// -1 on the CPU (or without CUDA).
int64_t gpt_device_memory_budget(torch::Device device);

}  // namespace nanochat
