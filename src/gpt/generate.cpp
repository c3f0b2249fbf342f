// defines: gpt_generate
// GPT.generate (upstream gpt.py): the naive reference loop, batch 1, the full forward each step.
#include "nanochat/gpt.h"

#include <limits>
#include <ATen/ATen.h>

#include "nanochat/common/error.h"

namespace nanochat {

std::vector<int64_t> gpt_generate(GPT& model, const std::vector<int64_t>& tokens, int64_t max_tokens,
                                  double temperature, int64_t top_k, uint64_t seed,
                                  const std::function<void(int64_t)>& on_token) {
  if (tokens.empty()) fail("generate: the prompt holds no tokens");
  if (temperature < 0) fail("generate: temperature must be >= 0, got %g", temperature);
  torch::NoGradGuard no_grad;
  const torch::Device device = model->device();
  at::Generator rng = gpt_make_generator(device, seed);
  torch::Tensor ids = torch::tensor(tokens, torch::kLong).to(device).unsqueeze(0);  // (1,T)
  std::vector<int64_t> out;
  for (int64_t step = 0; step < max_tokens; step++) {
    torch::Tensor logits = model->forward(ids).select(1, ids.size(1) - 1);  // (1,V)
    if (top_k > 0) {  // logits below the k-th largest become -inf
      auto [vals, idx] = at::topk(logits, std::min<int64_t>(top_k, logits.size(-1)));
      torch::Tensor kth = vals.narrow(-1, vals.size(-1) - 1, 1);
      logits = logits.masked_fill(logits < kth, -std::numeric_limits<double>::infinity());
    }
    torch::Tensor next;
    if (temperature > 0) {
      torch::Tensor probs = at::softmax(logits / temperature, -1);
      next = at::multinomial(probs, 1, false, rng);
    } else {
      next = at::argmax(logits, -1, true);
    }
    ids = at::cat({ids, next}, 1);
    const int64_t token = next.item<int64_t>();
    out.push_back(token);
    if (on_token) on_token(token);
  }
  return out;
}

}  // namespace nanochat
