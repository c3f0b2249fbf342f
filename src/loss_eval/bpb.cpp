// Bits per byte, as upstream's loss_eval.evaluate_bpb: the sums are kept on the device and
// read once per batch, in float64 so long evals do not lose precision.
#include "nanochat/loss_eval.h"

#include <cmath>
#include <limits>

#include <torch/torch.h>

#include "nanochat/dist.h"
#include "nanochat/tokenizer.h"

namespace nanochat {

torch::Tensor bpb_token_bytes(const Tokenizer& tok, torch::Device device) {
  std::vector<int32_t> counts = tok.token_byte_counts();
  return torch::tensor(std::vector<int64_t>(counts.begin(), counts.end()), torch::kLong).to(device);
}

void bpb_accumulate(BpbSums& sums, const torch::Tensor& loss, const torch::Tensor& targets,
                    const torch::Tensor& token_bytes) {
  torch::Tensor y = targets.reshape({-1});
  torch::Tensor valid = y >= 0;
  // bytes of each target; ignored positions (-1) look up token 0 and are then zeroed
  torch::Tensor nb = torch::where(valid, token_bytes.index_select(0, y.clamp_min(0)), torch::zeros_like(y));
  torch::Tensor counted = nb > 0;
  torch::Tensor nats = (loss.reshape({-1}).to(torch::kFloat64) * counted).sum();
  torch::Tensor bytes = nb.to(torch::kFloat64).sum();
  sums.nats += nats.item<double>();
  sums.bytes += bytes.item<double>();
}

double bpb_finish(BpbSums sums, Dist* dist) {
  if (dist && dist->world_size() > 1) {
    torch::Tensor t = torch::tensor({sums.nats, sums.bytes}, torch::kFloat64).to(dist->device());
    dist->all_reduce(t, ReduceOp::SUM);
    t = t.cpu();
    sums.nats = t[0].item<double>();
    sums.bytes = t[1].item<double>();
  }
  if (sums.bytes == 0) return std::numeric_limits<double>::infinity();
  return sums.nats / (std::log(2.0) * sums.bytes);
}

double evaluate_bpb(const BpbLossFn& loss_fn, const BpbBatchFn& next_batch, int64_t steps,
                    const torch::Tensor& token_bytes, Dist* dist) {
  torch::NoGradGuard no_grad;
  BpbSums sums;
  for (int64_t i = 0; i < steps; i++) {
    auto [x, y] = next_batch();
    bpb_accumulate(sums, loss_fn(x, y), y, token_bytes);
  }
  return bpb_finish(sums, dist);
}

}  // namespace nanochat
