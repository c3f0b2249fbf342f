// Sampling (upstream engine.py's sample_next_token, plus top-p) for the rows of every request
// in a decode step at once, and dropping finished rows from a KV cache.
//
// Rows sample in batches of requests that compute alike: the greedy ones (one argmax), those
// over the whole vocabulary (softmax of logits / temperature), and those over their top K
// tokens, one batch per K (a request's softmax is then over exactly its K values, as alone).
// Temperature and top-p are per row. Only the noise is per request: each request draws its
// q ~ Exp(1) from its own generator, in the shape multinomial would draw it alone.
#include "nanochat/engine.h"

#include <algorithm>
#include <limits>
#include <map>
#include <ATen/ATen.h>

#include "nanochat/common/error.h"

namespace nanochat {
namespace {

// requests that sample alike, and their rows of the logits, request after request
struct SampleBatch {
  std::vector<const SampleRequest*> requests;
  std::vector<int64_t> rows;
  std::vector<float> temperature, top_p;  // per row
  bool top_p_on = false;
};

torch::Tensor long_tensor(const std::vector<int64_t>& v, const torch::Device& device) {
  return at::tensor(v, at::kLong).to(device);
}

torch::Tensor column(const std::vector<float>& v, const torch::Device& device) {
  return at::tensor(v, at::kFloat).view({-1, 1}).to(device);
}

// each request's multinomial(probs, 1) from its own generator: ATen's own algorithm,
// argmax(probs / q) with q ~ Exp(1) of the request's (rows, K), without its checks that read
// the probabilities back
torch::Tensor draw(const torch::Tensor& probs, const SampleBatch& b) {
  std::vector<torch::Tensor> q;
  for (const SampleRequest* r : b.requests)
    q.push_back(at::empty({(int64_t)r->rows.size(), probs.size(1)}, probs.options()).exponential_(1, *r->rng));
  return at::argmax(probs / at::cat(q), -1, /*keepdim=*/true);
}

// nucleus: drop a token once the tokens before it already hold top_p of the mass (the most
// likely token always stays); the draw renormalises what is left. Rows with top-p off have +inf.
torch::Tensor keep_top_p(const torch::Tensor& probs, const SampleBatch& b) {
  if (!b.top_p_on) return probs;
  torch::Tensor mass_before = probs.cumsum(-1) - probs;
  return probs.masked_fill(mass_before >= column(b.top_p, probs.device()), 0.0);
}

}  // namespace

std::vector<int64_t> engine_sample_rows(const torch::Tensor& logits, const std::vector<SampleRequest>& requests) {
  const int64_t B = logits.size(0), V = logits.size(-1);
  const torch::Device device = logits.device();
  SampleBatch greedy, full;
  std::map<int64_t, SampleBatch> top;  // by K
  for (const SampleRequest& r : requests) {
    if (r.temperature < 0) fail("sampling: temperature must be >= 0, got %g", r.temperature);
    if (!(r.top_p > 0.0 && r.top_p <= 1.0)) fail("sampling: top_p must be in (0, 1], got %g", r.top_p);
    if (r.temperature > 0 && !r.rng) fail("sampling: a request at temperature %g has no generator", r.temperature);
    for (int64_t row : r.rows)
      if (row < 0 || row >= B) fail("sampling: row %lld of %lld", (long long)row, (long long)B);
    // topk sorts descending; with top-p alone it is a full sort
    const int64_t K = r.top_k > 0 ? std::min(r.top_k, V) : V;
    SampleBatch& b = r.temperature == 0.0 ? greedy : (r.top_k > 0 || r.top_p < 1.0) ? top[K] : full;
    b.requests.push_back(&r);
    b.rows.insert(b.rows.end(), r.rows.begin(), r.rows.end());
    b.temperature.insert(b.temperature.end(), r.rows.size(), (float)r.temperature);
    b.top_p.insert(b.top_p.end(), r.rows.size(),
                   r.top_p < 1.0 ? (float)r.top_p : std::numeric_limits<float>::infinity());
    b.top_p_on |= r.top_p < 1.0;
  }

  torch::Tensor out = at::full({B}, -1, logits.options().dtype(at::kLong));
  auto fill = [&](const torch::Tensor& rows, const torch::Tensor& tokens) {
    out.index_copy_(0, rows, tokens.view({-1}));
  };
  if (!greedy.rows.empty()) {
    torch::Tensor rows = long_tensor(greedy.rows, device);
    fill(rows, at::argmax(logits.index_select(0, rows), -1));
  }
  if (!full.rows.empty()) {
    torch::Tensor rows = long_tensor(full.rows, device);
    torch::Tensor probs = at::softmax(logits.index_select(0, rows) / column(full.temperature, device), -1);
    fill(rows, draw(probs, full));
  }
  for (auto& [K, b] : top) {
    torch::Tensor rows = long_tensor(b.rows, device);
    auto [vals, idx] = at::topk(logits.index_select(0, rows), K, -1);
    torch::Tensor probs = at::softmax(vals / column(b.temperature, device), -1);
    fill(rows, idx.gather(1, draw(keep_top_p(probs, b), b)));
  }
  torch::Tensor host = out.cpu();  // the one read-back
  const int64_t* p = host.data_ptr<int64_t>();
  return std::vector<int64_t>(p, p + B);
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
