// defines: LinearImpl, EmbeddingImpl, CausalSelfAttentionImpl, MLPImpl, BlockImpl
// The pieces of a transformer block (upstream gpt.py's CausalSelfAttention, MLP, Block). Storage is allocated uninitialised
// (torch::empty) so that a model can be built on any device, "meta" included.
#include "nanochat/gpt.h"

#include <ATen/ATen.h>

#include "nanochat/kernels.h"

namespace nanochat {

LinearImpl::LinearImpl(int64_t in, int64_t out, const torch::TensorOptions& options) {
  weight = register_parameter("weight", torch::empty({out, in}, options));
}

torch::Tensor LinearImpl::forward(const torch::Tensor& x) {
  if (fp8) return kernels_fp8_linear(x, weight);
  return at::linear(x, weight.to(x.scalar_type()));  // the matmul runs in the activation dtype
}

EmbeddingImpl::EmbeddingImpl(int64_t num, int64_t dim, const torch::TensorOptions& options) {
  weight = register_parameter("weight", torch::empty({num, dim}, options));
}

torch::Tensor EmbeddingImpl::forward(const torch::Tensor& idx) { return at::embedding(weight, idx); }

CausalSelfAttentionImpl::CausalSelfAttentionImpl(const GPTConfig& config, int64_t layer,
                                                 const torch::TensorOptions& options)
    : layer_idx(layer), n_head(config.n_head), n_kv_head(config.n_kv_head), head_dim(config.head_dim()),
      qk_scale(config.qk_scale), norm_eps(config.norm_eps) {
  const int64_t d = config.n_embd;
  c_q = register_module("c_q", Linear(d, n_head * head_dim, options));
  c_k = register_module("c_k", Linear(d, n_kv_head * head_dim, options));
  c_v = register_module("c_v", Linear(d, n_kv_head * head_dim, options));
  c_proj = register_module("c_proj", Linear(d, d, options));
  if (config.value_embeds && gpt_has_ve(layer, config.n_layer))
    ve_gate = register_module("ve_gate", Linear(kVeGateChannels, n_kv_head, options));
}

torch::Tensor CausalSelfAttentionImpl::forward(const torch::Tensor& x, const torch::Tensor& ve,
                                               const torch::Tensor& cos, const torch::Tensor& sin,
                                               int64_t window, KVCache* kv_cache) {
  const int64_t B = x.size(0), T = x.size(1), C = x.size(2);
  torch::Tensor q, k, v;
  if (c_q->fp8 && c_k->fp8 && c_v->fp8) {  // their shared input quantized once
    auto qkv = kernels_fp8_linear_shared(x, {c_q->weight, c_k->weight, c_v->weight});
    q = qkv[0], k = qkv[1], v = qkv[2];
  } else {
    q = c_q(x), k = c_k(x), v = c_v(x);
  }
  q = q.view({B, T, n_head, head_dim});
  k = k.view({B, T, n_kv_head, head_dim});
  v = v.view({B, T, n_kv_head, head_dim});
  if (ve.defined()) {  // value residual: v += 3*sigmoid(gate(x[..., :12])) * ve, per kv head
    torch::Tensor gate = 3 * at::sigmoid(ve_gate(x.narrow(-1, 0, kVeGateChannels)));  // (B,T,Hkv)
    v = v + gate.unsqueeze(-1) * ve.view({B, T, n_kv_head, head_dim});
  }
  torch::Tensor y;
  if (kv_cache && kv_cache->ragged()) {  // rows at their own positions: cos, sin are (1, B*T, 1, hd/2)
    q = gpt_rotary_norm(q.reshape({1, B * T, n_head, head_dim}), cos, sin, qk_scale, norm_eps).view({B, T, n_head, head_dim});
    k = gpt_rotary_norm(k.reshape({1, B * T, n_kv_head, head_dim}), cos, sin, qk_scale, norm_eps).view({B, T, n_kv_head, head_dim});
    auto [kc, vc] = kv_cache->get_layer_cache(layer_idx);
    y = attention_with_kvcache_rows(q, kc, vc, k, v, kv_cache->row_positions(), window);
    return c_proj(y.reshape({B, T, C}));
  }
  q = gpt_rotary_norm(q, cos, sin, qk_scale, norm_eps);  // rotary, QK norm, then "sharper attention"
  k = gpt_rotary_norm(k, cos, sin, qk_scale, norm_eps);
  if (kv_cache) {
    auto [kc, vc] = kv_cache->get_layer_cache(layer_idx);
    y = attention_with_kvcache(q, kc, vc, k, v, kv_cache->get_pos(), window);
  } else {
    y = attention_causal(q, k, v, window);
  }
  return c_proj(y.reshape({B, T, C}));
}

MLPImpl::MLPImpl(const GPTConfig& config, const torch::TensorOptions& options) {
  c_fc = register_module("c_fc", Linear(config.n_embd, 4 * config.n_embd, options));
  c_proj = register_module("c_proj", Linear(4 * config.n_embd, config.n_embd, options));
}

torch::Tensor MLPImpl::forward(const torch::Tensor& x) {
  if (c_fc->fp8 || c_proj->fp8) return c_proj(at::relu(c_fc(x)).square());
  const auto dt = x.scalar_type();
  return kernels_mlp_relu_square(x, c_fc->weight.to(dt), c_proj->weight.to(dt));
}

BlockImpl::BlockImpl(const GPTConfig& config, int64_t layer, const torch::TensorOptions& options)
    : norm_eps(config.norm_eps) {
  attn = register_module("attn", CausalSelfAttention(config, layer, options));
  mlp = register_module("mlp", MLP(config, options));
}

torch::Tensor BlockImpl::forward(const torch::Tensor& x, const torch::Tensor& x_normed, const torch::Tensor& ve,
                                 const torch::Tensor& cos, const torch::Tensor& sin, int64_t window,
                                 KVCache* kv_cache) {
  // h = x + attn(norm(x)), and norm(h) for the MLP, in one fused op
  auto [h, h_normed] = gpt_residual_norm(x, attn(x_normed, ve, cos, sin, window, kv_cache), {}, {}, norm_eps);
  return h + mlp(h_normed);
}

}  // namespace nanochat
