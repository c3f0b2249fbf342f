// upstream checkpoint_manager.py's build_model: a checkpoint's tensors and meta into a GPT (API in checkpoint_gpt.h).
#include "nanochat/checkpoint/checkpoint_gpt.h"

#include <cstdlib>
#include <map>

#include "nanochat/common/error.h"
#include "nanochat/common/log.h"

namespace nanochat {

torch::ScalarType checkpoint_gpt_embedding_dtype(torch::ScalarType compute_dtype) {
  return compute_dtype == torch::kFloat16 ? torch::kFloat32 : compute_dtype;
}

std::vector<TensorSpec> checkpoint_gpt_tensor_specs(const GPT& model) {
  std::vector<TensorSpec> specs;
  for (const auto& [name, p] : gpt_named_parameters(model)) specs.push_back({name, p.sizes().vec(), p.scalar_type()});
  return specs;
}

void checkpoint_check_config_limits(const GPTConfig& c, const std::string& where) {
  // far past any nanochat (d34: 34 layers, 2176 wide, 65536 tokens, 2048 context) and the
  // transformers nanochat models; a GPT on the meta device still costs memory per layer, and
  // the rotary tables are 10 x sequence_len long
  struct Limit {
    const char* name;
    int64_t value, max;
  };
  const Limit limits[] = {{"n_layer", c.n_layer, 256},
                          {"n_embd", c.n_embd, 32768},
                          {"n_head", c.n_head, 1024},
                          {"n_kv_head", c.n_kv_head, 1024},
                          {"vocab_size", c.vocab_size, 1 << 21},
                          {"sequence_len", c.sequence_len, 1 << 16}};
  for (const Limit& l : limits)
    if (l.value < 1 || l.value > l.max)
      fail("%s: %s %lld is outside [1, %lld]: refused before building the model", where.c_str(), l.name,
           (long long)l.value, (long long)l.max);
}

void checkpoint_check_config_tensors(const GPTConfig& c, const NamedTensors& tensors, const std::string& where) {
  checkpoint_check_config_limits(c, where);
  std::vector<bool> block(c.n_layer, false);
  const std::string prefix = "transformer.h.";
  bool wte = false;
  for (const auto& [raw, t] : tensors) {
    const std::string name = raw.rfind("_orig_mod.", 0) == 0 ? raw.substr(10) : raw;  // torch.compile's prefix
    if (name == "transformer.wte.weight") {
      const bool rows = t.dim() == 2 && (t.size(0) == c.vocab_size || t.size(0) == gpt_padded_vocab(c.vocab_size));
      if (!rows || t.size(1) != c.n_embd)
        fail("%s: transformer.wte.weight is %s, but the config says vocab_size %lld and n_embd %lld", where.c_str(),
             c10::str(t.sizes()).c_str(), (long long)c.vocab_size, (long long)c.n_embd);
      wte = true;
    }
    if (name.rfind(prefix, 0) != 0) continue;
    const int64_t i = std::atoll(name.c_str() + prefix.size());
    if (i < 0 || i >= c.n_layer)
      fail("%s: tensor %s is past the config's n_layer %lld", where.c_str(), name.c_str(), (long long)c.n_layer);
    block[i] = true;
  }
  if (!wte) fail("%s: missing tensor 'transformer.wte.weight'", where.c_str());  // as checkpoint_load_into_gpt says it
  for (int64_t i = 0; i < c.n_layer; i++)
    if (!block[i])
      fail("%s: the config says n_layer %lld but there is no tensor of block %lld (transformer.h.%lld.*)",
           where.c_str(), (long long)c.n_layer, (long long)i, (long long)i);
}

void checkpoint_gpt_prepare(NamedTensors& tensors, const GPTConfig& config, const std::string& where) {
  checkpoint_check_config_tensors(config, tensors, where);                      // before any shape is built
  checkpoint_strip_compile_prefix(tensors);                                     // step 3
  if (config.layer_scalars) checkpoint_patch_tensors(tensors, config.n_layer);  // step 4 (old checkpoints)
  // older checkpoints' vocab tables are not padded to a multiple of 64: zero rows (never read)
  const int64_t vp = gpt_padded_vocab(config.vocab_size);
  for (auto& [name, t] : tensors) {
    bool vocab_table = name == "transformer.wte.weight" || name == "lm_head.weight" ||
                       name.rfind("value_embeds.", 0) == 0;
    if (vocab_table && t.dim() == 2 && t.size(0) == config.vocab_size && vp > config.vocab_size)
      t = at::cat({t, torch::zeros({vp - config.vocab_size, t.size(1)}, t.options())}, 0);
  }
  // the names and shapes from a shapes-only model: no memory, no init
  GPT shapes(config, torch::Device(torch::kMeta), torch::kFloat32);
  std::vector<TensorSpec> specs = checkpoint_gpt_tensor_specs(shapes);
  for (TensorSpec& s : specs) s.dtype.reset();
  checkpoint_check_tensors(specs, tensors, where);
  for (const auto& [name, t] : tensors)
    if (!at::isFloatingType(t.scalar_type()))
      fail("%s: tensor '%s' has dtype %s but model weights are floating point", where.c_str(), name.c_str(),
           c10::toString(t.scalar_type()));
}

void checkpoint_load_into_gpt(GPT& model, NamedTensors tensors, const std::string& where) {
  checkpoint_gpt_prepare(tensors, model->config, where);
  // the dtypes the model keeps: fp32 masters, and the embedding tables as gpt_init_weights
  // step 10 leaves them (whatever this model holds now)
  const torch::ScalarType emb = checkpoint_gpt_embedding_dtype(model->compute_dtype);
  std::vector<TensorSpec> specs = checkpoint_gpt_tensor_specs(model);
  std::map<std::string, torch::ScalarType> want;
  for (TensorSpec& s : specs) {
    if (s.name == "transformer.wte.weight" || s.name.rfind("value_embeds.", 0) == 0) s.dtype = emb;
    want[s.name] = *s.dtype;
  }
  for (auto& [name, t] : tensors)  // step 2 generalised: every floating tensor to the model's dtype
    if (at::isFloatingType(t.scalar_type()) && t.scalar_type() != want.at(name)) t = t.to(want.at(name));
  checkpoint_check_tensors(specs, tensors, where);
  {
    torch::NoGradGuard no_grad;
    model->wte->weight.set_data(model->wte->weight.to(emb));
    for (auto& e : model->ve)
      if (e) e->weight.set_data(e->weight.to(emb));
  }
  gpt_load_named_tensors(model, tensors);
}

GPTConfig checkpoint_read_gpt_config(nlohmann::ordered_json& meta, const std::string& where) {
  if (!meta.is_object() || !meta.contains("model_config") || !meta["model_config"].is_object())
    fail("%s: meta has no model_config object", where.c_str());
  checkpoint_patch_config(meta["model_config"]);
  GPTConfig c;
  try {
    c = gpt_config_from_json(nlohmann::json::parse(meta["model_config"].dump()));
  } catch (const Error& e) {
    fail("%s: %s", where.c_str(), e.what());
  }
  checkpoint_check_config_limits(c, where);
  return c;
}

LoadedGPT checkpoint_load_gpt(const std::string& source, const std::string& tag, int64_t step, torch::Device device,
                              torch::ScalarType compute_dtype, int64_t tokenizer_vocab_size) {
  LoadedGPT out;
  out.ref = checkpoint_locate(source, tag, step);
  ModelCheckpoint ck = checkpoint_load_model(out.ref.dir, out.ref.step);
  const std::string where = checkpoint_model_path(out.ref.dir, out.ref.step);
  out.config = checkpoint_read_gpt_config(ck.meta, checkpoint_meta_path(out.ref.dir, out.ref.step));
  if (tokenizer_vocab_size >= 0)  // step 7, checked before the model costs any memory
    checkpoint_check_vocab(ck.meta, tokenizer_vocab_size, checkpoint_meta_path(out.ref.dir, out.ref.step));
  out.meta = std::move(ck.meta);
  checkpoint_check_config_tensors(out.config, ck.tensors, where);  // before the model costs memory
  // step 5: the constructor computes the rotary tables, so no init is needed before loading
  out.model = GPT(out.config, device, compute_dtype);
  checkpoint_load_into_gpt(out.model, std::move(ck.tensors), where);  // step 6
  out.model->eval();
  return out;
}

NamedTensors checkpoint_gpt_tensors(const GPT& model) {
  NamedTensors out;
  for (auto& [name, t] : gpt_named_parameters(model)) out.emplace_back(name, t.detach());
  return out;
}

std::optional<ModelCheckpoint> checkpoint_resume_gpt(GPT& model, const std::string& dir, int64_t step,
                                                     int64_t vocab_size) {
  if (step < 0) return std::nullopt;
  log_info("resuming from %s step %lld", dir.c_str(), (long long)step);
  ModelCheckpoint ckpt = checkpoint_load_model(dir, step);
  checkpoint_check_vocab(ckpt.meta, vocab_size, dir);
  checkpoint_load_into_gpt(model, ckpt.tensors, checkpoint_model_path(dir, step));
  return ckpt;
}

}  // namespace nanochat
