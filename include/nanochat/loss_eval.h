// Bits per byte (upstream's loss_eval.evaluate_bpb): the model's summed cross-entropy in nats over the bytes those
// target tokens stand for, so models with different tokenizers compare. Special tokens
// have 0 bytes and count in neither sum; targets -1 (masked) count in neither.
#pragma once
#include <functional>
#include <utility>

#include "nanochat/common/tensor.h"

namespace nanochat {

class Dist;
class Tokenizer;

// bytes per token id, 0 for special tokens, as an int64 tensor on `device`
torch::Tensor bpb_token_bytes(const Tokenizer& tok, torch::Device device);

struct BpbSums {
  double nats = 0;   // sum of per-token losses over counted tokens
  double bytes = 0;  // sum of their byte lengths
};

// adds one batch: loss (B*T,) per-token cross-entropy (reduction none), targets (B,T) with
// -1 for ignored positions, token_bytes (vocab,) int on the same device
void bpb_accumulate(BpbSums& sums, const torch::Tensor& loss, const torch::Tensor& targets,
                    const torch::Tensor& token_bytes);
// sums over ranks (when dist is given and world > 1), then nats / (ln 2 * bytes); inf when
// no byte was counted
double bpb_finish(BpbSums sums, Dist* dist);

// the whole loop of upstream's evaluate_bpb: `steps` batches from next_batch, the model's
// per-token loss from loss_fn (called under no_grad)
using BpbLossFn = std::function<torch::Tensor(const torch::Tensor& inputs, const torch::Tensor& targets)>;
using BpbBatchFn = std::function<std::pair<torch::Tensor, torch::Tensor>()>;
double evaluate_bpb(const BpbLossFn& loss_fn, const BpbBatchFn& next_batch, int64_t steps,
                    const torch::Tensor& token_bytes, Dist* dist);

}  // namespace nanochat
