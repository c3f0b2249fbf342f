// defines: GPTImpl, gpt_to, gpt_loss
// nanochat's GPT (upstream gpt.py GPT.__init__ and forward): module registration in nanochat's order and the
// forward, with or without a KV cache.
#include "nanochat/gpt.h"

#include <ATen/ATen.h>
#include <tuple>

#include "nanochat/common/error.h"
#include "nanochat/kernels.h"

namespace nanochat {

using NamedModules = std::vector<std::pair<std::string, std::shared_ptr<torch::nn::Module>>>;

GPTImpl::GPTImpl(const GPTConfig& cfg, torch::Device device, torch::ScalarType dtype)
    : config(cfg), compute_dtype(dtype) {
  gpt_config_validate(config);
  window_sizes = gpt_window_sizes(config);
  const int64_t vp = gpt_padded_vocab(config.vocab_size), d = config.n_embd;
  const int64_t kvd = config.n_kv_head * config.head_dim();
  auto opts = torch::TensorOptions().dtype(torch::kFloat32).device(device);  // fp32 master weights

  transformer = register_module("transformer", torch::nn::ModuleDict());
  wte = Embedding(vp, d, opts);
  transformer->update(NamedModules{{"wte", wte.ptr()}});
  h = torch::nn::ModuleList();
  for (int64_t i = 0; i < config.n_layer; i++) {
    blocks.push_back(Block(config, i, opts));
    h->push_back(blocks.back());
  }
  transformer->update(NamedModules{{"h", h.ptr()}});
  lm_head = register_module("lm_head", Linear(d, vp, opts));
  // the optional parts (GPTConfig), in nanochat's registration order where present
  if (config.layer_scalars) {
    resid_lambdas = register_parameter("resid_lambdas", torch::empty({config.n_layer}, opts));
    x0_lambdas = register_parameter("x0_lambdas", torch::empty({config.n_layer}, opts));
  }
  if (config.smear) {
    smear_gate = register_module("smear_gate", Linear(kSmearChannels, 1, opts));
    smear_lambda = register_parameter("smear_lambda", torch::empty({1}, opts));
  }
  if (config.layer_scalars) backout_lambda = register_parameter("backout_lambda", torch::empty({1}, opts));
  ve.resize(config.n_layer, Embedding(nullptr));
  if (config.value_embeds) {
    value_embeds = register_module("value_embeds", torch::nn::ModuleDict());
    for (int64_t i = 0; i < config.n_layer; i++) {
      if (!gpt_has_ve(i, config.n_layer)) continue;
      ve[i] = Embedding(vp, kvd, opts);
      value_embeds->update(NamedModules{{std::to_string(i), ve[i].ptr()}});
    }
  }
  auto [c, s] = gpt_rotary_tables(10 * config.sequence_len, config.head_dim(), compute_dtype, device, config.rope_theta);
  cos = register_buffer("cos", c);  // non-persistent in nanochat: not a parameter
  sin = register_buffer("sin", s);
}

void GPTImpl::compute_rotary() {
  auto [c, s] = gpt_rotary_tables(10 * config.sequence_len, config.head_dim(), compute_dtype,
                                  wte->weight.device(), config.rope_theta);
  torch::NoGradGuard no_grad;
  cos.set_data(c);  // in place: the registered buffers are these very tensors
  sin.set_data(s);
}

KVCache GPTImpl::make_kv_cache(int64_t batch_size, int64_t max_seq_len) const {
  return KVCache(batch_size, config.n_kv_head, max_seq_len, config.head_dim(), config.n_layer,
                 cos.device(), compute_dtype);
}

torch::Tensor GPTImpl::hidden(const torch::Tensor& idx, KVCache* kv_cache) {
  if (idx.dim() != 2) fail("GPT forward: idx must be (B, T), got %lld dims", (long long)idx.dim());
  const int64_t T = idx.size(1);
  const int64_t T0 = kv_cache ? kv_cache->get_pos() : 0;
  if (T0 + T > cos.size(1))
    fail("GPT forward: positions up to %lld exceed the rotary cache of %lld (10 x sequence_len)",
         (long long)(T0 + T), (long long)cos.size(1));
  if (idx.device() != cos.device())
    fail("GPT forward: tokens on %s but the model on %s", idx.device().str().c_str(),
         cos.device().str().c_str());
  torch::Tensor cs = cos.narrow(1, T0, T), sn = sin.narrow(1, T0, T);
  if (kv_cache && kv_cache->ragged()) {  // rows at their own positions: (1, B*T, 1, hd/2), row-major
    std::vector<int64_t> at_pos;
    for (int64_t p : kv_cache->row_positions())
      for (int64_t t = 0; t < T; t++) at_pos.push_back(p + t);
    torch::Tensor where = torch::tensor(at_pos, torch::kLong).to(cos.device());
    cs = cos.index_select(1, where);
    sn = sin.index_select(1, where);
  }

  torch::Tensor x = gpt_rms_norm(wte(idx).to(compute_dtype), config.norm_eps);  // norm right after the embedding
  if (!config.smear) {
    // an older architecture: no smear
  } else if (!kv_cache) {
    x = gpt_smear(x, smear_gate->weight, smear_lambda);
  } else {
    torch::Tensor prev = kv_cache->prev_embedding;
    kv_cache->prev_embedding = x.narrow(1, T - 1, 1);  // pre-smear, normed
    if (T == 1) {
      x = gpt_smear(x, smear_gate->weight, smear_lambda, prev);
    } else if (prev.defined() && kv_cache->get_pos() > 0) {  // a prompt continued: its first token smears prev
      x = gpt_smear(at::cat({prev, x}, 1), smear_gate->weight, smear_lambda).narrow(1, 1, T);
    } else {
      x = gpt_smear(x, smear_gate->weight, smear_lambda);
    }
  }

  const torch::Tensor x0 = x;
  const int64_t backout_layer = config.n_layer / 2;
  torch::Tensor x_backout;
  for (int64_t i = 0; i < config.n_layer; i++) {
    // x = resid_lambdas[i] * x + x0_lambdas[i] * x0 (0-dim fp32 scalars keep x's dtype), and
    // the attention's input norm(x), in one fused op
    torch::Tensor mixed = x, normed;
    if (config.layer_scalars)
      std::tie(mixed, normed) = gpt_residual_norm(x, x0, resid_lambdas[i], x0_lambdas[i], config.norm_eps);
    else
      normed = gpt_rms_norm(x, config.norm_eps);
    torch::Tensor v = ve[i] ? ve[i](idx).to(x.scalar_type()) : torch::Tensor();
    x = blocks[i](mixed, normed, v, cs, sn, window_sizes[i], kv_cache);
    if (i == backout_layer) x_backout = x;
  }
  if (kv_cache) kv_cache->advance(T);
  if (!config.layer_scalars) return gpt_rms_norm(x, config.norm_eps);
  // "backout": norm(x - backout_lambda * x_backout), the lambda in x's dtype
  return kernels_residual_norm(x, x_backout, {}, -backout_lambda.to(x.scalar_type())).second;
}

torch::Tensor GPTImpl::forward(const torch::Tensor& idx, KVCache* kv_cache) {
  torch::Tensor logits = lm_head(hidden(idx, kv_cache)).narrow(-1, 0, config.vocab_size);
  // fp32 logits (nanochat's .float()); a float64 model keeps float64 for gradient checks
  logits = logits.to(compute_dtype == torch::kFloat64 ? torch::kFloat64 : torch::kFloat32);
  return gpt_softcap(logits, config.softcap);
}

void gpt_to(GPT& model, torch::Device device) { model->to(device); }

// the loss never materialises the logits: lm_head, softcap and cross-entropy are one fused
// op over chunks of rows (kernels.h)
torch::Tensor gpt_loss(GPT& model, const torch::Tensor& idx, const torch::Tensor& targets,
                       LossReduction reduction) {
  torch::Tensor x = model->hidden(idx);
  x = x.reshape({-1, x.size(-1)});
  torch::Tensor flat_targets = targets.reshape({-1});
  const int64_t vocab = model->config.vocab_size;
  if (reduction == LossReduction::none)
    return kernels_linear_softcap_ce(x, model->lm_head->weight, flat_targets, vocab, model->config.softcap);
  return kernels_linear_softcap_ce_mean(x, model->lm_head->weight, flat_targets, vocab, model->config.softcap);
}

}  // namespace nanochat
