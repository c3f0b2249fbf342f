// defines: gpt_config_from_depth, gpt_config_to_json, gpt_config_from_json,
//          gpt_config_validate, gpt_config_is_current, gpt_padded_vocab, gpt_has_ve, gpt_window_sizes
// nanochat's GPTConfig, the depth dial (base_train.py build_model_meta) and the per-layer window sizes (gpt.py _compute_window_sizes).
#include "nanochat/gpt.h"

#include <algorithm>
#include <cctype>
#include <iterator>
#include <nlohmann/json.hpp>

#include "nanochat/common/error.h"

namespace nanochat {

GPTConfig gpt_config_from_depth(int64_t depth, int64_t vocab_size, int64_t seq_len,
                                const std::string& window_pattern, int64_t aspect_ratio,
                                int64_t head_dim) {
  if (depth < 1 || aspect_ratio < 1 || head_dim < 2)
    fail("model depth %lld, aspect ratio %lld and head dim %lld must be positive",
         (long long)depth, (long long)aspect_ratio, (long long)head_dim);
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
    fail("model config: n_embd %lld is below the %lld channels the smear gate reads",
         (long long)c.n_embd, (long long)kSmearChannels);
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

bool gpt_config_is_current(const GPTConfig& c) {
  const GPTConfig d;
  return c.value_embeds == d.value_embeds && c.smear == d.smear && c.layer_scalars == d.layer_scalars &&
         c.rope_theta == d.rope_theta && c.softcap == d.softcap && c.qk_scale == d.qk_scale &&
         c.norm_eps == d.norm_eps;
}

nlohmann::json gpt_config_to_json(const GPTConfig& c) {
  nlohmann::json j{{"sequence_len", c.sequence_len}, {"vocab_size", c.vocab_size},
                   {"n_layer", c.n_layer},           {"n_head", c.n_head},
                   {"n_kv_head", c.n_kv_head},       {"n_embd", c.n_embd},
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
  static const char* const known[] = {"sequence_len", "vocab_size", "n_layer",       "n_head",     "n_kv_head",
                                      "n_embd",       "window_pattern", "value_embeds", "smear", "layer_scalars",
                                      "rope_theta",   "softcap",    "qk_scale",      "norm_eps"};
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

}  // namespace nanochat
