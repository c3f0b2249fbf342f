// defines: KVCache
// nanochat's engine.KVCache (upstream engine.py): (L, B, T_max, Hkv, D) in the FA3 layout.
#include "nanochat/attention.h"

#include <ATen/ATen.h>

#include "nanochat/common/error.h"

namespace nanochat {

KVCache::KVCache(int64_t batch_size, int64_t num_kv_heads, int64_t max_seq_len, int64_t head_dim,
                 int64_t num_layers, torch::Device device, torch::ScalarType dtype) {
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
  cache_seqlens.zero_();
  prev_embedding = torch::Tensor();
}

std::pair<torch::Tensor, torch::Tensor> KVCache::get_layer_cache(int64_t layer) {
  return {k_cache.select(0, layer), v_cache.select(0, layer)};
}

void KVCache::advance(int64_t n) {
  pos_ += n;
  cache_seqlens.add_(n);
}

void KVCache::prefill(const KVCache& other) {
  if (pos_ != 0) fail("KVCache::prefill: the destination cache is not empty (position %lld)", (long long)pos_);
  if (max_seq_len() < other.max_seq_len() || num_layers() != other.num_layers() ||
      k_cache.size(3) != other.k_cache.size(3) || k_cache.size(4) != other.k_cache.size(4))
    fail("KVCache::prefill: caches differ in shape or the destination is shorter");
  if (other.batch_size() != 1 && other.batch_size() != batch_size())
    fail("KVCache::prefill: source batch %lld cannot fill batch %lld",
         (long long)other.batch_size(), (long long)batch_size());
  const int64_t n = other.get_pos();
  k_cache.narrow(2, 0, n).copy_(other.k_cache.narrow(2, 0, n));  // broadcasts a batch of 1
  v_cache.narrow(2, 0, n).copy_(other.v_cache.narrow(2, 0, n));
  cache_seqlens.fill_(n);
  pos_ = n;
  if (other.prev_embedding.defined())
    prev_embedding = other.prev_embedding.expand({batch_size(), -1, -1}).clone();
}

}  // namespace nanochat
