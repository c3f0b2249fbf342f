// nanochat's GPT (upstream nanochat/gpt.py), top to bottom as upstream reads: the config, the
// parameter-free ops, the modules, the model and its forward, init, FP8, the named state, generate.
// The parameter and FLOP counts are in counting.cpp, the training-memory estimate in memory.cpp.
#include "nanochat/gpt.h"

#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <algorithm>
#include <cctype>
#include <cmath>
#include <iterator>
#include <limits>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>
#include <unordered_map>
#include <unordered_set>

#include "nanochat/common/device.h"
#include "nanochat/common/error.h"
#include "nanochat/kernels.h"
#include "nanochat/kernels/int8_linear.h"
#include "nanochat/kernels/panel_linear.h"

namespace nanochat {

// ---- config --------------------------------------------------------------------------------------
// nanochat's GPTConfig, the depth dial (base_train.py build_model_meta) and the per-layer window sizes (gpt.py _compute_window_sizes).

GPTConfig gpt_config_from_depth(int64_t depth, int64_t vocab_size, int64_t seq_len, const std::string& window_pattern,
                                int64_t aspect_ratio, int64_t head_dim) {
  if (depth < 1 || aspect_ratio < 1 || head_dim < 2)
    fail("model depth %lld, aspect ratio %lld and head dim %lld must be positive", (long long)depth,
         (long long)aspect_ratio, (long long)head_dim);
  const int64_t base_dim = depth * aspect_ratio;
  const int64_t model_dim = (base_dim + head_dim - 1) / head_dim * head_dim;  // round up
  GPTConfig c;
  c.sequence_len = seq_len;
  c.vocab_size = vocab_size;
  c.n_layer = depth;
  c.n_head = model_dim / head_dim;
  c.n_kv_head = c.n_head;
  c.n_embd = model_dim;
  c.window_pattern = window_pattern;
  gpt_config_validate(c);
  return c;
}

void gpt_config_validate(const GPTConfig& c) {
  auto positive = [](const char* name, int64_t v) {
    if (v < 1) fail("model config: %s must be positive, got %lld", name, (long long)v);
  };
  positive("sequence_len", c.sequence_len);
  positive("vocab_size", c.vocab_size);
  positive("n_layer", c.n_layer);
  positive("n_head", c.n_head);
  positive("n_kv_head", c.n_kv_head);
  positive("n_embd", c.n_embd);
  if (c.n_embd % c.n_head != 0)
    fail("model config: n_embd %lld is not a multiple of n_head %lld", (long long)c.n_embd, (long long)c.n_head);
  if (c.n_head % c.n_kv_head != 0)
    fail("model config: n_head %lld is not a multiple of n_kv_head %lld", (long long)c.n_head, (long long)c.n_kv_head);
  if (c.head_dim() % 2 != 0) fail("model config: head dim %lld must be even (rotary)", (long long)c.head_dim());
  if (c.smear && c.n_embd < kSmearChannels)
    fail("model config: n_embd %lld is below the %lld channels the smear gate reads", (long long)c.n_embd,
         (long long)kSmearChannels);
  if (c.window_pattern.empty()) fail("model config: window_pattern is empty (use letters S and L)");
  for (char ch : c.window_pattern)
    if (std::toupper((unsigned char)ch) != 'S' && std::toupper((unsigned char)ch) != 'L')
      fail("model config: window_pattern '%s' may hold only S and L", c.window_pattern.c_str());
  if (c.value_embeds && c.n_embd < kVeGateChannels)
    fail("model config: n_embd %lld is below the %lld channels the value-embedding gate reads", (long long)c.n_embd,
         (long long)kVeGateChannels);
  if (!(c.rope_theta > 0)) fail("model config: rope_theta must be positive, got %g", c.rope_theta);
  if (!(c.softcap > 0)) fail("model config: softcap must be positive, got %g", c.softcap);
  if (!(c.qk_scale > 0)) fail("model config: qk_scale must be positive, got %g", c.qk_scale);
  if (!(c.norm_eps >= 0) || c.norm_eps > 1)
    fail("model config: norm_eps must be in [0, 1] (0: torch's default), got %g", c.norm_eps);
}

nlohmann::json gpt_config_to_json(const GPTConfig& c) {
  nlohmann::json j{{"sequence_len", c.sequence_len},
                   {"vocab_size", c.vocab_size},
                   {"n_layer", c.n_layer},
                   {"n_head", c.n_head},
                   {"n_kv_head", c.n_kv_head},
                   {"n_embd", c.n_embd},
                   {"window_pattern", c.window_pattern}};
  const GPTConfig d;  // the optional parts only where they differ: current meta files stay as upstream writes them
  if (c.value_embeds != d.value_embeds) j["value_embeds"] = c.value_embeds;
  if (c.smear != d.smear) j["smear"] = c.smear;
  if (c.layer_scalars != d.layer_scalars) j["layer_scalars"] = c.layer_scalars;
  if (c.rope_theta != d.rope_theta) j["rope_theta"] = c.rope_theta;
  if (c.softcap != d.softcap) j["softcap"] = c.softcap;
  if (c.qk_scale != d.qk_scale) j["qk_scale"] = c.qk_scale;
  if (c.norm_eps != d.norm_eps) j["norm_eps"] = c.norm_eps;
  return j;
}

GPTConfig gpt_config_from_json(const nlohmann::json& j) {
  if (!j.is_object()) fail("model_config: expected a JSON object");
  GPTConfig c;
  auto get_int = [&](const char* key, int64_t& out) {
    if (!j.contains(key)) fail("model_config: missing field '%s'", key);
    if (!j[key].is_number_integer()) fail("model_config: field '%s' must be an integer", key);
    out = j[key].get<int64_t>();
  };
  get_int("sequence_len", c.sequence_len);
  get_int("vocab_size", c.vocab_size);
  get_int("n_layer", c.n_layer);
  get_int("n_head", c.n_head);
  get_int("n_kv_head", c.n_kv_head);
  get_int("n_embd", c.n_embd);
  if (!j.contains("window_pattern")) {
    c.window_pattern = "L";  // checkpoints from before sliding windows (checkpoint_manager.py build_model)
  } else {
    if (!j["window_pattern"].is_string()) fail("model_config: field 'window_pattern' must be a string");
    c.window_pattern = j["window_pattern"].get<std::string>();
  }
  auto get_bool = [&](const char* key, bool& out) {
    if (!j.contains(key)) return;
    if (!j[key].is_boolean()) fail("model_config: field '%s' must be true or false", key);
    out = j[key].get<bool>();
  };
  auto get_double = [&](const char* key, double& out) {
    if (!j.contains(key)) return;
    if (!j[key].is_number()) fail("model_config: field '%s' must be a number", key);
    out = j[key].get<double>();
  };
  get_bool("value_embeds", c.value_embeds);
  get_bool("smear", c.smear);
  get_bool("layer_scalars", c.layer_scalars);
  get_double("rope_theta", c.rope_theta);
  get_double("softcap", c.softcap);
  get_double("qk_scale", c.qk_scale);
  get_double("norm_eps", c.norm_eps);
  static const char* const known[] = {"sequence_len", "vocab_size",     "n_layer",      "n_head",  "n_kv_head",
                                      "n_embd",       "window_pattern", "value_embeds", "smear",   "layer_scalars",
                                      "rope_theta",   "softcap",        "qk_scale",     "norm_eps"};
  for (auto& [key, value] : j.items())
    if (std::find(std::begin(known), std::end(known), key) == std::end(known))
      fail("model_config: field '%s' is not supported by this model", key.c_str());
  gpt_config_validate(c);
  return c;
}

int64_t gpt_padded_vocab(int64_t vocab_size) { return (vocab_size + 63) / 64 * 64; }

bool gpt_has_ve(int64_t layer, int64_t n_layer) { return layer % 2 == (n_layer - 1) % 2; }

std::vector<int64_t> gpt_window_sizes(const GPTConfig& c) {
  const int64_t long_w = c.sequence_len;
  const int64_t short_w = (long_w + 511) / 512 * 128;  // -(-long // 4 // 128) * 128
  std::vector<int64_t> w(c.n_layer);
  for (int64_t i = 0; i < c.n_layer; i++) {
    char ch = (char)std::toupper((unsigned char)c.window_pattern[i % c.window_pattern.size()]);
    w[i] = ch == 'L' ? long_w : short_w;
  }
  w.back() = long_w;  // the final layer always sees the full context
  return w;
}

// ---- parameter-free operations -------------------------------------------------------------------
// The model's parameter-free operations (upstream gpt.py's norm, rotary tables, the softcap and the smear),
// shared by the modules; the rotary itself is fused with the QK norm (kernels_rotary_norm).

torch::Tensor gpt_rms_norm(const torch::Tensor& x, double eps) {
  if (eps == 0) return at::rms_norm(x, {x.size(-1)}, std::nullopt, std::nullopt);  // eps=None: torch's default
  return at::rms_norm(x, {x.size(-1)}, std::nullopt, eps);
}

// An imported model's norm eps (transformers' rms_norm_eps) is not the fused kernels' default:
// the kernels' references take it
torch::Tensor gpt_rotary_norm(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin, double scale,
                              double eps) {
  if (eps == 0) return kernels_rotary_norm(x, cos, sin, scale);
  return kernels_rotary_norm_reference(x, cos, sin, scale, eps);
}

std::pair<torch::Tensor, torch::Tensor> gpt_residual_norm(const torch::Tensor& x, const torch::Tensor& y,
                                                          const torch::Tensor& a, const torch::Tensor& b, double eps) {
  if (eps == 0) return kernels_residual_norm(x, y, a, b);
  return kernels_residual_norm_reference(x, y, a, b, eps);
}

std::pair<torch::Tensor, torch::Tensor> gpt_rotary_tables(int64_t seq_len, int64_t head_dim, torch::ScalarType dtype,
                                                          torch::Device device, double base) {
  auto f32 = torch::TensorOptions().dtype(torch::kFloat32).device(device);
  torch::Tensor channel = at::arange(0, head_dim, 2, f32);
  torch::Tensor inv_freq = at::reciprocal(at::pow(base, channel / (double)head_dim));
  torch::Tensor t = at::arange(seq_len, f32);
  torch::Tensor freqs = at::outer(t, inv_freq);  // (seq_len, head_dim/2)
  return {freqs.cos().to(dtype).view({1, seq_len, 1, head_dim / 2}),
          freqs.sin().to(dtype).view({1, seq_len, 1, head_dim / 2})};
}

torch::Tensor gpt_softcap(const torch::Tensor& logits, double cap) { return cap * at::tanh(logits / cap); }

torch::Tensor gpt_smear(const torch::Tensor& x, const torch::Tensor& gate_weight, const torch::Tensor& smear_lambda,
                        const torch::Tensor& prev) {
  const int64_t T = x.size(1);
  torch::Tensor lam = smear_lambda.to(x.scalar_type());
  torch::Tensor w = gate_weight.to(x.scalar_type());
  if (T == 1) {
    if (!prev.defined()) return x;  // the first token has no predecessor
    torch::Tensor gate = lam * at::sigmoid(at::linear(x.narrow(-1, 0, kSmearChannels), w));
    return x + gate * prev;
  }
  torch::Tensor cur = x.narrow(1, 1, T - 1);
  torch::Tensor gate = lam * at::sigmoid(at::linear(cur.narrow(-1, 0, kSmearChannels), w));  // (B,T-1,1)
  return at::cat({x.narrow(1, 0, 1), cur + gate * x.narrow(1, 0, T - 1)}, 1);
}

// ---- modules -------------------------------------------------------------------------------------
// The pieces of a transformer block (upstream gpt.py's CausalSelfAttention, MLP, Block). Storage is allocated uninitialised
// (torch::empty) so that a model can be built on any device, "meta" included.

LinearImpl::LinearImpl(int64_t in, int64_t out, const torch::TensorOptions& options)
    : in_features(in), out_features(out) {
  weight = register_parameter("weight", torch::empty({out, in}, options));
}

torch::Tensor LinearImpl::forward(const torch::Tensor& x) {
  if (panels) return kernels_panel_linear(x, weight, scale, out_features);
  if (int8()) return kernels_int8_linear(x, weight, scale);
  if (fp8) return kernels_fp8_linear(x, weight);
  return kernels_bf16_linear(x, weight);  // the matmul runs in the activation dtype
}

EmbeddingImpl::EmbeddingImpl(int64_t num, int64_t dim, const torch::TensorOptions& options) {
  weight = register_parameter("weight", torch::empty({num, dim}, options));
}

torch::Tensor EmbeddingImpl::forward(const torch::Tensor& idx) { return at::embedding(weight, idx); }

CausalSelfAttentionImpl::CausalSelfAttentionImpl(const GPTConfig& config, int64_t layer,
                                                 const torch::TensorOptions& options)
    : layer_idx(layer),
      n_head(config.n_head),
      n_kv_head(config.n_kv_head),
      head_dim(config.head_dim()),
      qk_scale(config.qk_scale),
      norm_eps(config.norm_eps) {
  const int64_t d = config.n_embd;
  c_q = register_module("c_q", Linear(d, n_head * head_dim, options));
  c_k = register_module("c_k", Linear(d, n_kv_head * head_dim, options));
  c_v = register_module("c_v", Linear(d, n_kv_head * head_dim, options));
  c_proj = register_module("c_proj", Linear(d, d, options));
  if (config.value_embeds && gpt_has_ve(layer, config.n_layer))
    ve_gate = register_module("ve_gate", Linear(kVeGateChannels, n_kv_head, options));
}

torch::Tensor CausalSelfAttentionImpl::forward(const torch::Tensor& x, const torch::Tensor& ve,
                                               const torch::Tensor& cos, const torch::Tensor& sin, int64_t window,
                                               KVCache* kv_cache) {
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
    q = gpt_rotary_norm(q.reshape({1, B * T, n_head, head_dim}), cos, sin, qk_scale, norm_eps)
            .view({B, T, n_head, head_dim});
    k = gpt_rotary_norm(k.reshape({1, B * T, n_kv_head, head_dim}), cos, sin, qk_scale, norm_eps)
            .view({B, T, n_kv_head, head_dim});
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
  if (c_fc->fp8 && c_proj->fp8) return kernels_fp8_mlp(x, c_fc->weight, c_proj->weight);
  // int8 weights, and weights that no longer train (a decode step's few rows: the Linears' matvec
  // and few-rows kernels), go through each Linear: the fused op is a GEMM with autograd
  const bool inference = c_fc->int8() || !c_fc->weight.requires_grad();
  // pair panels (AVX512-BF16): relu^2 applied as c_fc's sums are stored, not as two more ops
  if (c_fc->panels) return c_proj(kernels_panel_linear(x, c_fc->weight, c_fc->scale, c_fc->out_features, true));
  if (c_fc->fp8 || c_proj->fp8 || inference) return c_proj(at::relu(c_fc(x)).square());
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

// ---- GPT -----------------------------------------------------------------------------------------
// nanochat's GPT (upstream gpt.py GPT.__init__ and forward): module registration in nanochat's order and the
// forward, with or without a KV cache.

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
  auto [c, s] = gpt_rotary_tables(10 * config.sequence_len, config.head_dim(), compute_dtype, device,
                                  config.rope_theta);
  cos = register_buffer("cos", c);  // non-persistent in nanochat: not a parameter
  sin = register_buffer("sin", s);
}

void GPTImpl::compute_rotary() {
  auto [c, s] = gpt_rotary_tables(10 * config.sequence_len, config.head_dim(), compute_dtype, wte->weight.device(),
                                  config.rope_theta);
  torch::NoGradGuard no_grad;
  cos.set_data(c);  // in place: the registered buffers are these very tensors
  sin.set_data(s);
}

KVCache GPTImpl::make_kv_cache(int64_t batch_size, int64_t max_seq_len) const {
  return KVCache(batch_size, config.n_kv_head, max_seq_len, config.head_dim(), config.n_layer, cos.device(),
                 compute_dtype);
}

torch::Tensor GPTImpl::hidden(const torch::Tensor& idx, KVCache* kv_cache) {
  if (idx.dim() != 2) fail("GPT forward: idx must be (B, T), got %lld dims", (long long)idx.dim());
  const int64_t T = idx.size(1);
  const int64_t T0 = kv_cache ? kv_cache->get_pos() : 0;
  if (T0 + T > cos.size(1))
    fail("GPT forward: positions up to %lld exceed the rotary cache of %lld (10 x sequence_len)", (long long)(T0 + T),
         (long long)cos.size(1));
  if (idx.device() != cos.device())
    fail("GPT forward: tokens on %s but the model on %s", idx.device().str().c_str(), cos.device().str().c_str());
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
    else normed = gpt_rms_norm(x, config.norm_eps);
    torch::Tensor v = ve[i] ? ve[i](idx).to(x.scalar_type()) : torch::Tensor();
    x = blocks[i](mixed, normed, v, cs, sn, window_sizes[i], kv_cache);
    if (i == backout_layer) x_backout = x;
  }
  if (kv_cache) kv_cache->advance(T);
  if (!config.layer_scalars) return gpt_rms_norm(x, config.norm_eps);
  // "backout": norm(x - backout_lambda * x_backout), the lambda in x's dtype
  return kernels_residual_norm(x, x_backout, {}, -backout_lambda.to(x.scalar_type())).second;
}

torch::Tensor GPTImpl::forward(const torch::Tensor& idx, KVCache* kv_cache) { return logits(hidden(idx, kv_cache)); }

torch::Tensor GPTImpl::logits(const torch::Tensor& h) {
  torch::Tensor logits = lm_head(h).narrow(-1, 0, config.vocab_size);
  // fp32 logits (nanochat's .float()); a float64 model keeps float64 for gradient checks
  logits = logits.to(compute_dtype == torch::kFloat64 ? torch::kFloat64 : torch::kFloat32);
  return gpt_softcap(logits, config.softcap);
}

namespace {

// an int8 lm_head (inference only): the logits of a chunk of rows at a time, then the loss
torch::Tensor gpt_loss_through_logits(GPT& model, const torch::Tensor& x, const torch::Tensor& targets,
                                      LossReduction reduction) {
  constexpr int64_t kRowsPerChunk = 256;
  std::vector<torch::Tensor> losses;
  for (int64_t r = 0; r < x.size(0); r += kRowsPerChunk) {
    const int64_t n = std::min(kRowsPerChunk, x.size(0) - r);
    torch::Tensor logits = model->lm_head(x.narrow(0, r, n)).narrow(-1, 0, model->config.vocab_size);
    logits = gpt_softcap(logits.to(torch::kFloat32), model->config.softcap);
    losses.push_back(at::cross_entropy_loss(logits, targets.narrow(0, r, n), {}, at::Reduction::None, -1));
  }
  torch::Tensor all = at::cat(losses);
  if (reduction == LossReduction::none) return all;
  return all.sum() / (targets != -1).sum();
}

}  // namespace

// the loss never materialises the logits: lm_head, softcap and cross-entropy are one fused
// op over chunks of rows (kernels.h)
torch::Tensor gpt_loss(GPT& model, const torch::Tensor& idx, const torch::Tensor& targets, LossReduction reduction) {
  torch::Tensor x = model->hidden(idx);
  x = x.reshape({-1, x.size(-1)});
  torch::Tensor flat_targets = targets.reshape({-1});
  const int64_t vocab = model->config.vocab_size;
  if (model->lm_head->int8() || model->lm_head->panels)
    return gpt_loss_through_logits(model, x, flat_targets, reduction);
  if (reduction == LossReduction::none)
    return kernels_linear_softcap_ce(x, model->lm_head->weight, flat_targets, vocab, model->config.softcap);
  return kernels_linear_softcap_ce_mean(x, model->lm_head->weight, flat_targets, vocab, model->config.softcap);
}

// ---- init_weights --------------------------------------------------------------------------------
// GPT.init_weights (upstream gpt.py), step by step in nanochat's order: the random draws come
// from one generator in a fixed sequence, so the same seed gives the same weights.

at::Generator gpt_make_generator(torch::Device device, uint64_t seed) {
  // torch.Generator(device).manual_seed(seed): a copy of the device's default generator,
  // reseeded (set_current_seed resets the whole state)
  at::Generator base = at::globalContext().defaultGenerator(device);
  at::Generator gen;
  {
    std::lock_guard<std::mutex> lock(base.mutex());
    gen = base.clone();
  }
  gen.set_current_seed(seed);
  return gen;
}

void gpt_init_weights(GPT& model, uint64_t seed) {
  torch::NoGradGuard no_grad;
  GPTImpl& m = *model;
  const torch::Device device = m.wte->weight.device();
  // a re-init starts from fp32 embeddings again (step 10 casts them at the end)
  m.wte->weight.set_data(m.wte->weight.to(torch::kFloat32));
  for (auto& e : m.ve)
    if (e) e->weight.set_data(e->weight.to(torch::kFloat32));
  if (device.type() == torch::kMeta) return;  // shapes only
  at::Generator gen = gpt_make_generator(device, seed);

  const int64_t L = m.config.n_layer;
  const double s = std::pow(3.0, 0.5) * std::pow((double)m.config.n_embd, -0.5);
  m.wte->weight.normal_(0.0, 0.8, gen);        // 1
  m.lm_head->weight.normal_(0.0, 0.001, gen);  // 2
  for (auto& b : m.blocks) {                   // 3
    b->attn->c_q->weight.uniform_(-s, s, gen);
    b->attn->c_k->weight.uniform_(-s, s, gen);
    b->attn->c_v->weight.uniform_(-s, s, gen);
    b->attn->c_proj->weight.zero_();
    b->mlp->c_fc->weight.uniform_(-0.4 * s, 0.4 * s, gen);
    b->mlp->c_proj->weight.zero_();
  }
  const double denom = (double)std::max<int64_t>(L - 1, 1);
  for (int64_t i = 0; i < L && m.config.layer_scalars; i++) {  // 4, 5 (the optional parts where present)
    m.resid_lambdas[i].fill_(1.15 - 0.10 * (double)i / denom);
    m.x0_lambdas[i].fill_(0.20 - 0.15 * (double)i / denom);
  }
  if (m.config.smear) m.smear_lambda.fill_(0.0);  // 6
  if (m.config.layer_scalars) m.backout_lambda.fill_(0.2);
  if (m.config.smear) m.smear_gate->weight.uniform_(0.0, 0.02, gen);
  for (auto& e : m.ve)  // 7: ascending layer index = ModuleDict order
    if (e) e->weight.uniform_(-s, s, gen);
  for (auto& b : m.blocks)  // 8
    if (b->attn->ve_gate) b->attn->ve_gate->weight.uniform_(0.0, 0.02, gen);
  m.compute_rotary();                        // 9
  if (m.compute_dtype != torch::kFloat16) {  // 10: fp16 keeps fp32 tables (GradScaler)
    m.wte->weight.set_data(m.wte->weight.to(m.compute_dtype));
    for (auto& e : m.ve)
      if (e) e->weight.set_data(e->weight.to(m.compute_dtype));
  }
}

// ---- FP8 training's module filter ----------------------------------------------------------------
// Which of the model's Linears train in FP8, as upstream fp8.py's module filter.

namespace {

// every Linear of the blocks with its state_dict name (lm_head and the gates are not candidates
// for FP8: see gpt.h; int8 inference adds lm_head)
std::vector<std::pair<std::string, Linear>> block_linears_named(GPT& model) {
  std::vector<std::pair<std::string, Linear>> out;
  for (size_t i = 0; i < model->blocks.size(); i++) {
    const std::string at = "transformer.h." + std::to_string(i) + ".";
    Block& b = model->blocks[i];
    out.insert(out.end(), {{at + "attn.c_q", b->attn->c_q},
                           {at + "attn.c_k", b->attn->c_k},
                           {at + "attn.c_v", b->attn->c_v},
                           {at + "attn.c_proj", b->attn->c_proj},
                           {at + "mlp.c_fc", b->mlp->c_fc},
                           {at + "mlp.c_proj", b->mlp->c_proj}});
  }
  return out;
}

std::vector<Linear> block_linears(GPT& model) {
  std::vector<Linear> out;
  for (auto& [name, l] : block_linears_named(model)) out.push_back(l);
  return out;
}

}  // namespace

bool gpt_fp8_eligible(int64_t in, int64_t out) { return in % 16 == 0 && out % 16 == 0 && std::min(in, out) >= 128; }

void gpt_set_fp8(GPT& model, bool on) {
  if (on && model->device().is_cuda()) {
    for (const CudaDeviceInfo& d : cuda_device_infos(model->device().index(), /*with_memory=*/false))
      if (d.major * 10 + d.minor < 89)
        fail("--fp8 needs a GPU of compute capability 8.9 or newer (Ada, Hopper); %s is %d.%d: train without --fp8",
             d.name.c_str(), d.major, d.minor);
  }
  for (Linear& l : block_linears(model)) l->fp8 = on && gpt_fp8_eligible(l->weight.size(1), l->weight.size(0));
}

GptFp8Off::GptFp8Off(GPT& m) : model(m) {
  for (Linear& l : block_linears(model)) {
    was.push_back(l->fp8);
    l->fp8 = false;
  }
}

GptFp8Off::~GptFp8Off() {
  size_t i = 0;
  for (Linear& l : block_linears(model)) l->fp8 = was[i++];
}

// ---- inference weights ---------------------------------------------------------------------------
// The --dtype of the subcommands that only run the model: weights kept in the compute dtype (no
// fp32 master to cast every step), or int8 with a scale per output channel.

torch::ScalarType gpt_inference_compute_dtype(const std::string& dtype, const std::string& device_type) {
  if (dtype.empty()) return compute_dtype_detect(device_type);
  if (dtype == "float32") return torch::kFloat32;
  if (dtype == "bfloat16" || dtype == "int8") return torch::kBFloat16;
  fail("--dtype '%s': expected float32, bfloat16 or int8", dtype.c_str());
}

void gpt_prepare_for_inference(GPT& model, const std::string& dtype) {
  const bool int8 = dtype == "int8";
  if (!dtype.empty() && gpt_inference_compute_dtype(dtype, "cpu") != model->compute_dtype)
    fail("--dtype %s: the model was built in %s", dtype.c_str(), dtype_name(model->compute_dtype).c_str());
  std::vector<std::pair<std::string, Linear>> quantized = block_linears_named(model);  // and lm_head
  quantized.push_back({"lm_head", model->lm_head});
  if (int8)  // every width checked before any weight changes
    for (auto& [name, l] : quantized)
      if (!kernels_int8_linear_supported(l->in_features))
        fail(
            "--dtype int8: %s.weight has %lld input features, the int8 kernel takes multiples of %lld (use --dtype "
            "bfloat16)",
            name.c_str(), (long long)l->in_features, (long long)kInt8LinearWidthMultiple);
  torch::NoGradGuard no_grad;
  for (auto& p : model->parameters()) p.set_requires_grad(false);
  // the panels' kernel takes bf16 rows: a bf16 model's, and int8's (bf16 activations)
  const bool panels = model->compute_dtype == torch::kBFloat16 && kernels_panel_linear_supported();
  for (auto& [name, l] : quantized) {
    if (l->panels) continue;  // prepared before
    if (int8) {
      auto [q, scale] = kernels_int8_quantize(l->weight, model->compute_dtype, name + ".weight");
      l->weight.set_data(q);
      l->scale = scale;
    } else {
      l->weight.set_data(l->weight.to(model->compute_dtype));
    }
    if (panels && l->weight.device().is_cpu() && l->in_features % 2 == 0) {
      l->weight.set_data(kernels_pack_pair_panels(l->weight));
      l->panels = true;
    }
  }
  // the weights just replaced were allocated below glibc's mmap threshold (it grows to 32 MB):
  // freed, they stay in the heap unless trimmed (a d20 model: 0.27 GiB of resident memory)
  if (panels) cpu_heap_trim();
  for (Block& b : model->blocks)
    if (b->attn->ve_gate) b->attn->ve_gate->weight.set_data(b->attn->ve_gate->weight.to(model->compute_dtype));
  if (model->smear_gate) model->smear_gate->weight.set_data(model->smear_gate->weight.to(model->compute_dtype));
}

// ---- the named state -----------------------------------------------------------------------------
// The model's state as a named tensor list (nanochat's state_dict keys and order), for the
// optimizer and the checkpoint module.

namespace {

std::string shape_str(torch::IntArrayRef s) {
  std::string out = "(";
  for (size_t i = 0; i < s.size(); i++) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + (s.size() == 1 ? ",)" : ")");
}

}  // namespace

std::vector<std::pair<std::string, torch::Tensor>> gpt_named_parameters(const GPT& model) {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (const auto& item : model->named_parameters(/*recurse=*/true)) out.emplace_back(item.key(), item.value());
  return out;
}

void gpt_load_named_tensors(GPT& model, const std::vector<std::pair<std::string, torch::Tensor>>& tensors) {
  auto params = gpt_named_parameters(model);
  std::unordered_map<std::string, torch::Tensor> by_name;
  for (auto& [name, p] : params) by_name.emplace(name, p);
  std::unordered_set<std::string> seen;
  for (const auto& [name, t] : tensors) {  // check everything before writing anything
    auto it = by_name.find(name);
    if (it == by_name.end()) fail("model weights: unexpected key '%s' (not a parameter of this model)", name.c_str());
    if (!seen.insert(name).second) fail("model weights: key '%s' appears twice", name.c_str());
    if (!t.defined()) fail("model weights: key '%s' holds no tensor", name.c_str());
    if (t.sizes() != it->second.sizes())
      fail("model weights: '%s' has shape %s, the model expects %s", name.c_str(), shape_str(t.sizes()).c_str(),
           shape_str(it->second.sizes()).c_str());
    if (t.scalar_type() != it->second.scalar_type())
      fail("model weights: '%s' has dtype %s, the model expects %s", name.c_str(), dtype_name(t.scalar_type()).c_str(),
           dtype_name(it->second.scalar_type()).c_str());
  }
  for (const auto& [name, p] : params)
    if (!seen.count(name)) fail("model weights: missing key '%s'", name.c_str());
  torch::NoGradGuard no_grad;
  for (const auto& [name, t] : tensors) by_name.at(name).copy_(t);
}

// ---- generate ------------------------------------------------------------------------------------
// GPT.generate (upstream gpt.py): the naive reference loop, batch 1, the full forward each step.

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
    if (top_k > 0) {                                                        // logits below the k-th largest become -inf
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
