// transformers' `nanochat` model type (NanoChatConfig, NanoChatForCausalLM: the October-2025
// architecture of upstream nanochat) in and out (API in checkpoint_gpt.h). Its tensors are
// ours under other names, with the vocab unpadded:
//   model.embed_tokens.weight               transformer.wte.weight (rows padded to 64)
//   model.layers.{i}.self_attn.{q,k,v}_proj transformer.h.{i}.attn.c_{q,k,v}
//   model.layers.{i}.self_attn.o_proj       transformer.h.{i}.attn.c_proj
//   model.layers.{i}.mlp.fc1, fc2           transformer.h.{i}.mlp.c_fc, c_proj
//   lm_head.weight                          lm_head.weight (rows padded to 64)
// and its norms carry no weights. The vocab rows are permuted into our token order when the
// tokenizer.json's ids are not ours (tokenizer_read_hf_json's file_ids: BpeTrainer puts the
// specials at 0..8), and the file's ids are kept beside our tokenizer (tokenizer_save_hf_ids);
// export permutes the rows back and writes those ids, so that a round trip gives transformers
// its own ids. In our config it is:
// no value embeddings, no smear, no per-layer scalars, q/k scale 1, full windows, rope theta,
// softcap and norm eps as given.
#include <algorithm>
#include <cctype>
#include <cfloat>
#include <cmath>
#include <map>
#include <memory>
#include <set>

#include "nanochat/checkpoint/checkpoint_gpt.h"
#include "nanochat/common/atomic_file.h"
#include "nanochat/common/base_dir.h"
#include "nanochat/common/error.h"
#include "nanochat/common/files.h"
#include "nanochat/tokenizer/hf_json.h"

namespace nanochat {

extern const char* const kHfRemoteConfigPy;  // hf_remote_code.cpp
extern const char* const kHfRemoteModelingPy;

namespace {

// our name for a transformers name; "" when it is not one of the model's tensors
std::string our_name(const std::string& hf) {
  if (hf == "model.embed_tokens.weight") return "transformer.wte.weight";
  if (hf == "lm_head.weight") return "lm_head.weight";
  const std::string prefix = "model.layers.";
  if (hf.rfind(prefix, 0) != 0) return "";
  size_t dot = hf.find('.', prefix.size());
  if (dot == std::string::npos) return "";
  const std::string layer = hf.substr(prefix.size(), dot - prefix.size());
  if (layer.empty() || !std::all_of(layer.begin(), layer.end(), ::isdigit)) return "";
  static const std::map<std::string, std::string> parts = {
      {"self_attn.q_proj.weight", "attn.c_q.weight"}, {"self_attn.k_proj.weight", "attn.c_k.weight"},
      {"self_attn.v_proj.weight", "attn.c_v.weight"}, {"self_attn.o_proj.weight", "attn.c_proj.weight"},
      {"mlp.fc1.weight", "mlp.c_fc.weight"},          {"mlp.fc2.weight", "mlp.c_proj.weight"}};
  auto it = parts.find(hf.substr(dot + 1));
  return it == parts.end() ? "" : "transformer.h." + layer + "." + it->second;
}

std::string hf_name(const std::string& ours) {
  if (ours == "transformer.wte.weight") return "model.embed_tokens.weight";
  if (ours == "lm_head.weight") return "lm_head.weight";
  const std::string prefix = "transformer.h.";
  size_t dot = ours.find('.', prefix.size());
  static const std::map<std::string, std::string> parts = {
      {"attn.c_q.weight", "self_attn.q_proj.weight"}, {"attn.c_k.weight", "self_attn.k_proj.weight"},
      {"attn.c_v.weight", "self_attn.v_proj.weight"}, {"attn.c_proj.weight", "self_attn.o_proj.weight"},
      {"mlp.c_fc.weight", "mlp.fc1.weight"},          {"mlp.c_proj.weight", "mlp.fc2.weight"}};
  if (ours.rfind(prefix, 0) != 0 || dot == std::string::npos) return "";
  auto it = parts.find(ours.substr(dot + 1));
  return it == parts.end() ? "" : "model.layers." + ours.substr(prefix.size(), dot - prefix.size()) + "." + it->second;
}

// row i of the result is row file_ids[i] of t: the file's vocab order into ours
torch::Tensor permute_rows(const torch::Tensor& t, const std::vector<int32_t>& file_ids) {
  if (tokenizer_hf_ids_identity(file_ids)) return t;
  std::vector<int64_t> index(file_ids.begin(), file_ids.end());
  return t.index_select(0, torch::tensor(index, torch::kLong));
}

// the inverse: row file_ids[i] of the result is row i of t (rows past the ids, the padding, stay)
torch::Tensor unpermute_rows(const torch::Tensor& t, const std::vector<int32_t>& file_ids) {
  if (tokenizer_hf_ids_identity(file_ids)) return t;
  const int64_t n = (int64_t)file_ids.size();
  torch::Tensor out = t.clone();
  out.narrow(0, 0, n).index_copy_(0, torch::tensor(std::vector<int64_t>(file_ids.begin(), file_ids.end())),
                                  t.narrow(0, 0, n));
  return out;
}

// (vocab, d) -> (padded vocab, d) with zero rows: our embedding and lm_head are padded to 64
torch::Tensor pad_rows(const torch::Tensor& t, int64_t rows) {
  if (t.size(0) == rows) return t;
  return at::cat({t, torch::zeros({rows - t.size(0), t.size(1)}, t.options())}, 0);
}

// the safetensors files of DIR: model.safetensors, or the shards its index names
std::vector<std::string> weight_files(const std::string& dir) {
  const std::string single = dir + "/model.safetensors", index = dir + "/model.safetensors.index.json";
  if (path_exists(single)) return {single};
  if (!path_exists(index)) fail("%s has neither model.safetensors nor model.safetensors.index.json", dir.c_str());
  nlohmann::ordered_json j = checkpoint_read_json(index);
  if (!j.contains("weight_map") || !j["weight_map"].is_object()) fail("%s: no weight_map object", index.c_str());
  std::set<std::string> files;
  for (auto& [tensor, file] : j["weight_map"].items()) {
    if (!file.is_string() || file.get<std::string>().find('/') != std::string::npos)
      fail("%s: tensor %s maps to %s, not a file name in this directory", index.c_str(), tensor.c_str(),
           file.dump().c_str());
    if (!path_exists(dir + "/" + file.get<std::string>()))
      fail("%s: tensor %s is in %s, which does not exist", index.c_str(), tensor.c_str(),
           file.get<std::string>().c_str());
    files.insert(dir + "/" + file.get<std::string>());
  }
  return {files.begin(), files.end()};
}

// config.json's model part: transformers' nanochat type, or our model_config for the remote code
nlohmann::ordered_json hf_config_json(const GPTConfig& c, bool remote_code) {
  nlohmann::ordered_json cfg;
  if (remote_code) {  // our model_config, every field (the defaults too): the remote code reads them all
    cfg["architectures"] = {"NanochatCppForCausalLM"};
    cfg["model_type"] = "nanochat_cpp";
    cfg["auto_map"] = {{"AutoConfig", "configuration_nanochat_cpp.NanochatCppConfig"},
                       {"AutoModelForCausalLM", "modeling_nanochat_cpp.NanochatCppForCausalLM"}};
    const nlohmann::json ours = gpt_config_to_json(c);
    for (auto& [key, value] : ours.items()) cfg[key] = value;
    cfg["value_embeds"] = c.value_embeds;
    cfg["smear"] = c.smear;
    cfg["layer_scalars"] = c.layer_scalars;
    cfg["rope_theta"] = c.rope_theta;
    cfg["softcap"] = c.softcap;
    cfg["qk_scale"] = c.qk_scale;
    cfg["norm_eps"] = c.norm_eps;
    // the standard names, for tools that read config.json (the remote config derives the same)
    cfg["num_hidden_layers"] = c.n_layer;
    cfg["hidden_size"] = c.n_embd;
    cfg["num_attention_heads"] = c.n_head;
    cfg["num_key_value_heads"] = c.n_kv_head;
    cfg["head_dim"] = c.n_embd / c.n_head;
    cfg["max_position_embeddings"] = c.sequence_len;
    nlohmann::ordered_json layer_types = nlohmann::ordered_json::array();
    int64_t short_window = -1;  // transformers' sliding window counts the query's own token: ours + 1
    for (int64_t w : gpt_window_sizes(c)) {
      layer_types.push_back(w < c.sequence_len ? "sliding_attention" : "full_attention");
      if (w < c.sequence_len) short_window = short_window < 0 ? w : std::min(short_window, w);
    }
    cfg["layer_types"] = layer_types;
    cfg["sliding_window"] = short_window < 0 ? nlohmann::ordered_json(nullptr)
                                             : nlohmann::ordered_json(short_window + 1);
  } else {
    cfg["architectures"] = {"NanoChatForCausalLM"};
    cfg["model_type"] = "nanochat";
    cfg["vocab_size"] = c.vocab_size;
    cfg["hidden_size"] = c.n_embd;
    cfg["intermediate_size"] = 4 * c.n_embd;
    cfg["num_hidden_layers"] = c.n_layer;
    cfg["num_attention_heads"] = c.n_head;
    cfg["num_key_value_heads"] = c.n_kv_head;
    cfg["max_position_embeddings"] = c.sequence_len;
    cfg["hidden_act"] = "relu2";
    cfg["rms_norm_eps"] = c.norm_eps == 0 ? (double)FLT_EPSILON : c.norm_eps;  // torch's default, as a number
    cfg["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", c.rope_theta}};
    cfg["final_logit_softcapping"] = c.softcap;
    cfg["attention_bias"] = false;
    cfg["attention_dropout"] = 0.0;
  }
  return cfg;
}

}  // namespace

GPTConfig checkpoint_hf_config(const nlohmann::ordered_json& j, const std::string& where) {
  auto has = [&](const char* key) { return j.contains(key) && !j[key].is_null(); };
  auto refuse = [&](const char* key, const std::string& why) {
    fail("%s: %s %s is not supported (%s)", where.c_str(), key, j.contains(key) ? j[key].dump().c_str() : "(missing)",
         why.c_str());
  };
  auto get_int = [&](const char* key) -> int64_t {
    if (!has(key) || !j[key].is_number_integer()) refuse(key, "an integer is needed");
    return j[key].get<int64_t>();
  };
  auto get_number = [&](const char* key) -> double {
    if (!has(key) || !j[key].is_number()) refuse(key, "a number is needed");
    return j[key].get<double>();
  };
  if (!j.is_object()) fail("%s: expected a JSON object", where.c_str());
  if (!j.contains("model_type") || j["model_type"] != "nanochat") refuse("model_type", "only transformers' nanochat");
  if (has("hidden_act") && j["hidden_act"] != "relu2") refuse("hidden_act", "the MLP is relu(x)^2");
  for (const char* key : {"attention_bias", "mlp_bias", "tie_word_embeddings"})
    if (has(key) && j[key] != false) refuse(key, "the model has no biases and an untied lm_head");
  for (const char* key : {"rope_scaling", "sliding_window", "layer_types"})
    if (has(key)) refuse(key, "only plain rotary embeddings over the full context");
  if (has("final_logit_softcapping") == false) refuse("final_logit_softcapping", "a softcap is needed");

  GPTConfig c;
  c.vocab_size = get_int("vocab_size");
  c.n_embd = get_int("hidden_size");
  c.n_layer = get_int("num_hidden_layers");
  c.n_head = get_int("num_attention_heads");
  c.n_kv_head = has("num_key_value_heads") ? get_int("num_key_value_heads") : c.n_head;
  c.sequence_len = get_int("max_position_embeddings");
  c.window_pattern = "L";
  c.value_embeds = c.smear = c.layer_scalars = false;
  c.qk_scale = 1.0;
  c.softcap = get_number("final_logit_softcapping");
  c.norm_eps = has("rms_norm_eps") ? get_number("rms_norm_eps") : 1e-6;  // NanoChatConfig's default
  if (c.norm_eps == FLT_EPSILON) c.norm_eps = 0;                         // torch's default: the fused kernels' own
  if (c.n_head > 0 && has("head_dim") && get_int("head_dim") * c.n_head != c.n_embd)
    refuse("head_dim", "it must be hidden_size / num_attention_heads");
  if (has("intermediate_size") && get_int("intermediate_size") != 4 * c.n_embd)
    refuse("intermediate_size", "it must be 4 x hidden_size");
  c.rope_theta = 10000.0;
  if (has("rope_parameters")) {
    const auto& rope = j["rope_parameters"];
    if (!rope.is_object() || (rope.contains("rope_type") && rope["rope_type"] != "default"))
      refuse("rope_parameters", "only rope_type default");
    for (auto& [key, value] : rope.items())
      if (key != "rope_type" && key != "rope_theta") refuse("rope_parameters", "only rope_type and rope_theta");
    if (rope.contains("rope_theta")) {
      if (!rope["rope_theta"].is_number()) refuse("rope_parameters", "rope_theta must be a number");
      c.rope_theta = rope["rope_theta"].get<double>();
    }
  } else if (has("rope_theta")) {
    c.rope_theta = get_number("rope_theta");
  }
  try {
    gpt_config_validate(c);
  } catch (const Error& e) {
    fail("%s: %s", where.c_str(), e.what());
  }
  checkpoint_check_config_limits(c, where);
  return c;
}

ImportResult checkpoint_import_hf(const ImportOptions& opts) {
  const std::string& from = opts.from_dir;
  checkpoint_source_subdir(opts.source);
  const std::string config_path = from + "/config.json", tok_path = from + "/tokenizer.json";
  GPTConfig config = checkpoint_hf_config(checkpoint_read_json(config_path), config_path);
  if (!path_exists(tok_path))
    fail("%s is missing (a transformers nanochat directory has its tokenizer.json)", tok_path.c_str());
  HfTokenizer hf_tok = tokenizer_read_hf_json(tok_path, opts.allow_custom_regex);
  const Tokenizer& tok = hf_tok.tok;
  const std::vector<int32_t>& tok_ids = hf_tok.file_ids;  // our id -> the file's (the rows' order)
  if (tok.vocab_size() != config.vocab_size)
    fail("%s: vocab_size %lld but %s has %d tokens", config_path.c_str(), (long long)config.vocab_size,
         tok_path.c_str(), tok.vocab_size());

  // every tensor, renamed; the config's numbers against them before any shape is built
  std::map<std::string, std::string> file_of;  // our name -> the file it came from
  std::map<std::string, std::string> hf_of;    // our name -> transformers' name
  NamedTensors tensors;
  for (const std::string& file : weight_files(from)) {
    SafetensorsFile st = safetensors_load(file);
    for (auto& [hf, t] : st.tensors) {
      const std::string name = our_name(hf);
      if (name.empty()) fail("%s: tensor %s is not part of a transformers nanochat model", file.c_str(), hf.c_str());
      if (file_of.count(name))
        fail("%s: tensor %s appears twice (also in %s)", file.c_str(), hf.c_str(), file_of[name].c_str());
      file_of[name] = file;
      hf_of[name] = hf;
      tensors.emplace_back(name, t);
    }
  }
  checkpoint_check_config_tensors(config, tensors, config_path);
  const int64_t vp = gpt_padded_vocab(config.vocab_size);
  GPT shapes(config, torch::Device(torch::kMeta), torch::kFloat32);
  std::map<std::string, std::vector<int64_t>> want;
  for (const TensorSpec& s : checkpoint_gpt_tensor_specs(shapes)) want[s.name] = s.shape;
  for (auto& [name, t] : tensors) {
    const std::string &file = file_of[name], &hf = hf_of[name];
    if (!want.count(name))
      fail("%s: tensor %s is not part of a nanochat model of this config.json", file.c_str(), hf.c_str());
    std::vector<int64_t> shape = want[name];
    const bool vocab_rows = name == "transformer.wte.weight" || name == "lm_head.weight";
    if (vocab_rows) shape[0] = config.vocab_size;  // transformers' tables are not padded
    if (t.sizes().vec() != shape)
      fail("%s: tensor %s has shape %s, config.json needs %s", file.c_str(), hf.c_str(), c10::str(t.sizes()).c_str(),
           c10::str(at::IntArrayRef(shape)).c_str());
    if (!at::isFloatingType(t.scalar_type()))
      fail("%s: tensor %s has dtype %s, model weights are floating point", file.c_str(), hf.c_str(),
           c10::toString(t.scalar_type()));
    if (vocab_rows) t = pad_rows(permute_rows(t, tok_ids), vp);
  }
  for (const auto& [name, shape] : want)
    if (!file_of.count(name)) fail("%s: tensor %s is missing", from.c_str(), hf_name(name).c_str());
  // in our state-dict order
  std::map<std::string, int64_t> order;
  for (const TensorSpec& s : checkpoint_gpt_tensor_specs(shapes)) order[s.name] = (int64_t)order.size();
  std::sort(tensors.begin(), tensors.end(), [&](auto& a, auto& b) { return order[a.first] < order[b.first]; });
  checkpoint_gpt_prepare(tensors, config, from);

  std::string tag = opts.tag;
  if (tag.empty()) {
    std::string name = from;
    while (name.size() > 1 && name.back() == '/') name.pop_back();
    name = name.substr(name.rfind('/') == std::string::npos ? 0 : name.rfind('/') + 1);
    bool d_tag = name.size() > 1 && name[0] == 'd' && std::isdigit((unsigned char)name[1]);
    tag = d_tag ? name : strprintf("d%lld", (long long)config.n_layer);
  }
  const int64_t step = opts.step >= 0 ? opts.step : 0;
  ImportResult r;
  r.dir = checkpoint_dir(opts.source, tag);
  for (const std::string& p : {checkpoint_model_path(r.dir, step), checkpoint_meta_path(r.dir, step)})
    if (path_exists(p) && !opts.force)
      fail("%s already exists; use --force to overwrite it, or --model-tag to import elsewhere", p.c_str());
  const std::string tok_dir = base_dir_path("tokenizer");
  bool write_tokenizer = true;
  if (path_exists(tok_dir + "/tokenizer.json")) {
    Tokenizer existing = tokenizer_load(tok_dir);
    write_tokenizer = !existing.same_as(tok);
    if (write_tokenizer && !opts.force)
      fail("%s holds a different tokenizer than %s (%d vs %d tokens); use --force to replace it", tok_dir.c_str(),
           tok_path.c_str(), existing.vocab_size(), tok.vocab_size());
  }

  nlohmann::ordered_json meta;
  meta["step"] = step;
  meta["model_config"] = gpt_config_to_json(config);
  meta["user_config"] = {{"imported_from", from}, {"format", "transformers nanochat"}};
  if (write_tokenizer) tokenizer_save(tok, tok_dir);  // first: a checkpoint is only usable with it
  tokenizer_save_hf_ids(tok_dir, tok_ids);            // this import's id layout, for export
  r.tokenizer_written = write_tokenizer;
  checkpoint_save_model(r.dir, step, tensors, meta);
  checkpoint_mark_complete(r.dir, step, 0);
  r.steps.push_back(step);
  return r;
}

ExportResult checkpoint_export_hf(const std::string& source, const std::string& tag, int64_t step,
                                  const std::string& out_dir) {
  ExportResult r;
  r.ref = checkpoint_locate(source, tag, step);
  ModelCheckpoint ck = checkpoint_load_model(r.ref.dir, r.ref.step);
  const std::string meta_path = checkpoint_meta_path(r.ref.dir, r.ref.step);
  GPTConfig c = checkpoint_read_gpt_config(ck.meta, meta_path);
  checkpoint_gpt_prepare(ck.tensors, c, checkpoint_model_path(r.ref.dir, r.ref.step));
  bool full_windows = true;
  for (int64_t w : gpt_window_sizes(c)) full_windows &= w >= c.sequence_len;
  // transformers' own class, or (value embeddings, smear, scalars, q/k scale, windows) our code beside it
  const bool remote_code = c.value_embeds || c.smear || c.layer_scalars || c.qk_scale != 1.0 || !full_windows;
  const std::string tok_dir = base_dir_path("tokenizer");
  if (!path_exists(tok_dir + "/tokenizer.json"))
    fail("cannot export: no tokenizer in %s (the checkpoint needs the tokenizer it was trained with)", tok_dir.c_str());
  Tokenizer tok = tokenizer_load(tok_dir);
  checkpoint_check_vocab(ck.meta, tok.vocab_size(), meta_path);

  NamedTensors out;
  for (auto& [name, t] : ck.tensors) {
    if (remote_code) {  // our names and padded tables, as the remote code's modules hold them
      out.emplace_back(name, t);
      continue;
    }
    const std::string hf = hf_name(name);
    if (hf.empty())
      fail("%s: tensor %s has no transformers name", checkpoint_model_path(r.ref.dir, r.ref.step).c_str(),
           name.c_str());
    const bool vocab_rows = name == "transformer.wte.weight" || name == "lm_head.weight";
    out.emplace_back(hf, vocab_rows ? t.narrow(0, 0, c.vocab_size).contiguous() : t);
  }
  // an imported tokenizer's own ids (the identity for ours): rows and tokenizer.json alike
  const std::vector<int32_t> file_ids = tokenizer_load_hf_ids(tok_dir, tok.vocab_size());
  for (auto& [name, t] : out)
    if (name == "transformer.wte.weight" || name == "model.embed_tokens.weight" || name == "lm_head.weight")
      t = unpermute_rows(t, file_ids);
  const std::string tok_json = tokenizer_hf_json(tok, file_ids);
  nlohmann::ordered_json cfg = hf_config_json(c, remote_code);
  cfg["tie_word_embeddings"] = false;
  // EOS ends a chat turn; pad must be a token no prompt holds (a pad id equal to BOS makes
  // transformers mask every prompt's first token when generate() gets no attention mask), so
  // it is EOS as in nanochat's own configs: generate() infers no mask when pad == EOS. The ids
  // are the ones tokenizer.json gives them.
  int32_t eos_ours = tok.bos_id();  // a base tokenizer without chat tokens: BOS
  for (auto& [name, id] : tok.specials())
    if (name == "<|assistant_end|>") eos_ours = id;
  const int32_t bos = file_ids[tok.bos_id()], eos = file_ids[eos_ours];
  cfg["bos_token_id"] = bos;
  cfg["eos_token_id"] = eos;
  cfg["pad_token_id"] = eos;
  nlohmann::ordered_json gen_cfg;
  gen_cfg["bos_token_id"] = bos;
  gen_cfg["eos_token_id"] = eos;
  gen_cfg["pad_token_id"] = eos;
  gen_cfg["max_length"] = c.sequence_len;
  nlohmann::ordered_json tok_cfg;
  tok_cfg["tokenizer_class"] = "PreTrainedTokenizerFast";
  tok_cfg["bos_token"] = tok.decode_single_token_bytes(tok.bos_id());
  tok_cfg["eos_token"] = tok.decode_single_token_bytes(eos_ours);
  tok_cfg["pad_token"] = tok_cfg["eos_token"];
  tok_cfg["model_max_length"] = c.sequence_len;

  // everything is built; now the files, each atomically
  r.model_path = out_dir + "/model.safetensors";
  r.config_path = out_dir + "/config.json";
  r.tokenizer_dir = out_dir;
  safetensors_check_savable(r.model_path, out);
  make_dirs(out_dir);
  safetensors_save(r.model_path, out, {{"format", "pt"}, {"nanochat_source", source}});
  atomic_write_file(r.config_path, cfg.dump(2) + "\n");
  atomic_write_file(out_dir + "/generation_config.json", gen_cfg.dump(2) + "\n");
  atomic_write_file(out_dir + "/tokenizer.json", tok_json);
  atomic_write_file(out_dir + "/tokenizer_config.json", tok_cfg.dump(2) + "\n");
  if (remote_code) {
    atomic_write_file(out_dir + "/configuration_nanochat_cpp.py", kHfRemoteConfigPy);
    atomic_write_file(out_dir + "/modeling_nanochat_cpp.py", kHfRemoteModelingPy);
  }
  for (const auto& [name, t] : out) {
    r.num_tensors++;
    r.num_bytes += t.numel() * (int64_t)t.element_size();
  }
  return r;
}

}  // namespace nanochat
