// Parameter counts and FLOP estimates of gpt.py (num_scaling_params, estimate_flops), from the configuration's arithmetic
// (gpt_count_params measures a real model; the tests check that both agree).
#include "nanochat/gpt.h"

#include <algorithm>
#include <c10/core/ScalarType.h>

#include "nanochat/common/error.h"

namespace nanochat {
namespace {

int64_t num_ve_layers(const GPTConfig& c) {
  if (!c.value_embeds) return 0;
  int64_t n = 0;
  for (int64_t i = 0; i < c.n_layer; i++) n += gpt_has_ve(i, c.n_layer);
  return n;
}

// one block's matrices: c_q, c_k, c_v, c_proj, c_fc, mlp.c_proj (ve_gate counted apart)
int64_t block_matrix_params(const GPTConfig& c) {
  const int64_t d = c.n_embd, hd = c.head_dim();
  return d * c.n_head * hd + 2 * d * c.n_kv_head * hd + d * d + 8 * d * d;
}

}  // namespace

ScalingParams gpt_num_scaling_params(const GPTConfig& c) {
  const int64_t vp = gpt_padded_vocab(c.vocab_size), d = c.n_embd, kvd = c.n_kv_head * c.head_dim();
  ScalingParams p;
  p.wte = vp * d;
  p.value_embeds = num_ve_layers(c) * vp * kvd;
  p.lm_head = vp * d;
  p.transformer_matrices = c.n_layer * block_matrix_params(c) + num_ve_layers(c) * c.n_kv_head * kVeGateChannels;
  p.scalars = (c.layer_scalars ? 2 * c.n_layer + 1 : 0) +
              (c.smear ? kSmearChannels + 1 : 0);  // resid, x0, backout; smear_gate, smear_lambda
  p.total = p.wte + p.value_embeds + p.lm_head + p.transformer_matrices + p.scalars;
  return p;
}

int64_t gpt_num_matmul_params(const GPTConfig& c) {
  ScalingParams p = gpt_num_scaling_params(c);
  return p.transformer_matrices + p.lm_head + (c.smear ? kSmearChannels : 0);  // + smear_gate (1 x 24)
}

int64_t gpt_estimate_flops(const GPTConfig& c) {
  const int64_t T = c.sequence_len;
  int64_t attn = 0;
  for (int64_t w : gpt_window_sizes(c)) attn += 12 * c.n_head * c.head_dim() * (w < 0 ? T : std::min(w, T));
  return 6 * gpt_num_matmul_params(c) + attn;
}

int64_t gpt_estimate_decode_flops(const GPTConfig& c, int64_t ctx) {
  int64_t attn = 0;
  for (int64_t w : gpt_window_sizes(c)) attn += 4 * c.n_head * c.head_dim() * (w < 0 ? ctx : std::min(ctx, w));
  return 2 * gpt_num_matmul_params(c) + attn;
}

int64_t gpt_estimate_prefill_flops(const GPTConfig& c, int64_t n) {
  int64_t attn = 0;
  for (int64_t win : gpt_window_sizes(c)) {
    const int64_t w = win < 0 ? n : std::min(win, n);
    attn += 4 * c.n_head * c.head_dim() * (w * (w + 1) / 2 + (n - w) * w);
  }
  return 2 * gpt_num_matmul_params(c) * n + attn;
}

int64_t gpt_kv_bytes_per_token(const GPTConfig& c, torch::ScalarType dtype) {
  return c.n_layer * 2 * c.n_kv_head * c.head_dim() * (int64_t)c10::elementSize(dtype);
}

int64_t gpt_kv_read_bytes(const GPTConfig& c, int64_t ctx, torch::ScalarType dtype) {
  int64_t total = 0;
  for (int64_t w : gpt_window_sizes(c))
    total += 2 * c.n_kv_head * c.head_dim() * (int64_t)c10::elementSize(dtype) * (w < 0 ? ctx : std::min(ctx, w));
  return total;
}

ScalingParams gpt_count_params(const GPT& model) {
  ScalingParams p{0, 0, 0, 0, 0, 0};
  for (const auto& [name, t] : gpt_named_parameters(model)) {
    const int64_t n = t.numel();
    if (name == "transformer.wte.weight") p.wte += n;
    else if (name.rfind("value_embeds.", 0) == 0) p.value_embeds += n;
    else if (name == "lm_head.weight") p.lm_head += n;
    else if (name.rfind("transformer.h.", 0) == 0) p.transformer_matrices += n;
    else p.scalars += n;
    p.total += n;
  }
  return p;
}

}  // namespace nanochat
