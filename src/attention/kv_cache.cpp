// nanochat's engine.KVCache (upstream engine.py): (L, B, T_max, Hkv, D) in the FA3 layout.
#include "nanochat/attention.h"

#include <algorithm>
#include <utility>

#include <ATen/ATen.h>

#include "nanochat/common/error.h"

namespace nanochat {

KVCache::KVCache(int64_t batch_size, int64_t num_kv_heads, int64_t max_seq_len, int64_t head_dim, int64_t num_layers,
                 torch::Device device, torch::ScalarType dtype) {
  if (batch_size < 1 || num_kv_heads < 1 || max_seq_len < 1 || head_dim < 1 || num_layers < 1)
    fail("KVCache: every size must be positive (batch %lld, heads %lld, len %lld, dim %lld, layers %lld)",
         (long long)batch_size, (long long)num_kv_heads, (long long)max_seq_len, (long long)head_dim,
         (long long)num_layers);
  auto opts = torch::TensorOptions().dtype(dtype).device(device);
  k_cache = at::zeros({num_layers, batch_size, max_seq_len, num_kv_heads, head_dim}, opts);
  v_cache = at::zeros({num_layers, batch_size, max_seq_len, num_kv_heads, head_dim}, opts);
  cache_seqlens = at::zeros({batch_size}, opts.dtype(torch::kInt32));
}

void KVCache::reset() {
  pos_ = 0;
  row_pos_.clear();
  cache_seqlens.zero_();
  prev_embedding = torch::Tensor();
}

std::pair<torch::Tensor, torch::Tensor> KVCache::get_layer_cache(int64_t layer) {
  return {k_cache.select(0, layer), v_cache.select(0, layer)};
}

void KVCache::advance(int64_t n) {
  pos_ += n;
  for (int64_t& p : row_pos_) p += n;
  cache_seqlens.add_(n);
}

void KVCache::prefill(const KVCache& other) {
  if (pos_ != 0) fail("KVCache::prefill: the destination cache is not empty (position %lld)", (long long)pos_);
  if (max_seq_len() < other.max_seq_len() || num_layers() != other.num_layers() ||
      k_cache.size(3) != other.k_cache.size(3) || k_cache.size(4) != other.k_cache.size(4))
    fail("KVCache::prefill: caches differ in shape or the destination is shorter");
  if (other.batch_size() != 1 && other.batch_size() != batch_size())
    fail("KVCache::prefill: source batch %lld cannot fill batch %lld", (long long)other.batch_size(),
         (long long)batch_size());
  const int64_t n = other.get_pos();
  k_cache.narrow(2, 0, n).copy_(other.k_cache.narrow(2, 0, n));  // broadcasts a batch of 1
  v_cache.narrow(2, 0, n).copy_(other.v_cache.narrow(2, 0, n));
  cache_seqlens.fill_(n);
  pos_ = n;
  if (other.prev_embedding.defined()) prev_embedding = other.prev_embedding.expand({batch_size(), -1, -1}).clone();
}

void KVCache::set_row_positions(std::vector<int64_t> pos) {
  if ((int64_t)pos.size() != batch_size())
    fail("KVCache::set_row_positions: %zu positions for %lld rows", pos.size(), (long long)batch_size());
  int64_t top = 0;
  for (int64_t p : pos) {
    if (p < 0 || p > max_seq_len())
      fail("KVCache::set_row_positions: position %lld outside 0..%lld", (long long)p, (long long)max_seq_len());
    top = std::max(top, p);
  }
  cache_seqlens.copy_(torch::tensor(pos, torch::kLong).to(torch::kInt32));
  row_pos_ = std::move(pos);
  pos_ = top;
}

KVCache KVCache::view_rows(int64_t first, int64_t n, int64_t pos) const {
  if (first < 0 || n < 1 || first + n > batch_size() || pos < 0 || pos > max_seq_len())
    fail("KVCache::view_rows: rows %lld..%lld at %lld outside the cache's %lld rows of %lld", (long long)first,
         (long long)(first + n), (long long)pos, (long long)batch_size(), (long long)max_seq_len());
  KVCache v;
  v.k_cache = k_cache.narrow(1, first, n);
  v.v_cache = v_cache.narrow(1, first, n);
  v.cache_seqlens = cache_seqlens.narrow(0, first, n);
  v.cache_seqlens.fill_(pos);
  if (prev_embedding.defined() && pos > 0) v.prev_embedding = prev_embedding.narrow(0, first, n).clone();
  v.pos_ = pos;
  return v;
}

}  // namespace nanochat
