// defines: engine_sample_next, engine_cache_select_rows
// Sampling (upstream engine.py's sample_next_token, plus top-p) and dropping finished rows from a KV cache.
#include "nanochat/engine.h"

#include <algorithm>
#include <ATen/ATen.h>

#include "nanochat/common/error.h"

namespace nanochat {

torch::Tensor engine_sample_next(const torch::Tensor& logits, at::Generator& rng, double temperature,
                                 int64_t top_k, double top_p) {
  if (temperature < 0) fail("sampling: temperature must be >= 0, got %g", temperature);
  if (!(top_p > 0.0)) fail("sampling: top_p must be in (0, 1], got %g", top_p);
  if (temperature == 0.0) return at::argmax(logits, -1, /*keepdim=*/true);
  const int64_t V = logits.size(-1);
  if (top_k > 0 || top_p < 1.0) {
    // topk sorts descending; without top-k it is a full sort for top-p
    auto [vals, idx] = at::topk(logits, top_k > 0 ? std::min(top_k, V) : V, -1);
    torch::Tensor probs = at::softmax(vals / temperature, -1);
    if (top_p < 1.0) {
      // nucleus: drop a token once the tokens before it already hold top_p of the mass (the
      // most likely token always stays); multinomial renormalises what is left
      torch::Tensor mass_before = probs.cumsum(-1) - probs;
      probs = probs.masked_fill(mass_before >= top_p, 0.0);
    }
    torch::Tensor choice = at::multinomial(probs, 1, false, rng);
    return idx.gather(1, choice);
  }
  return at::multinomial(at::softmax(logits / temperature, -1), 1, false, rng);
}

KVCache engine_cache_select_rows(const KVCache& cache, const torch::Tensor& rows) {
  // KVCache only allocates: start from a 1x1 cache and swap in the selected tensors
  KVCache out(1, cache.k_cache.size(3), 1, cache.k_cache.size(4), cache.num_layers(), cache.k_cache.device(),
              cache.k_cache.scalar_type());
  out.k_cache = cache.k_cache.index_select(1, rows);
  out.v_cache = cache.v_cache.index_select(1, rows);
  out.cache_seqlens = at::zeros({rows.size(0)}, cache.cache_seqlens.options());
  out.advance(cache.get_pos());
  if (cache.prev_embedding.defined()) out.prev_embedding = cache.prev_embedding.index_select(0, rows);
  return out;
}

}  // namespace nanochat
