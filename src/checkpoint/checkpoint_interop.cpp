// Checkpoints in and out of nanochat's own layout (API in checkpoint_gpt.h): export to one
// safetensors file with config and tokenizer beside it; import of upstream's torch.save
// checkpoints. Both check everything they read before they write anything.
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>

#include "nanochat/checkpoint/checkpoint_gpt.h"
#include "nanochat/checkpoint/torch_pickle.h"
#include "nanochat/common/atomic_file.h"
#include "nanochat/common/base_dir.h"
#include "nanochat/common/error.h"
#include "nanochat/common/files.h"
#include "nanochat/tokenizer.h"

namespace nanochat {
namespace {

std::string step_file(const std::string& dir, const char* prefix, int64_t step, const char* suffix) {
  return dir + "/" + strprintf("%s%06lld%s", prefix, (long long)step, suffix);
}

std::string base_name(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

bool tokenizer_present(const std::string& dir) { return path_exists(dir + "/tokenizer.json"); }

// Upstream's October-2025 checkpoints (the d32 release, early speedruns) have no value
// embeddings, per-layer scalars or smear, rope theta 10000 and no q/k scale: when none of the
// three parts' tensors is present, the meta's model_config gets that architecture (keys it
// already has are kept)
void read_architecture_from_tensors(NamedTensors tensors, nlohmann::ordered_json& meta) {
  checkpoint_strip_compile_prefix(tensors);
  for (const auto& [name, t] : tensors)
    if (name.rfind("value_embeds.", 0) == 0 || name == "resid_lambdas" || name == "smear_gate.weight") return;
  if (!meta.is_object() || !meta.contains("model_config") || !meta["model_config"].is_object()) return;
  nlohmann::ordered_json& mc = meta["model_config"];
  const nlohmann::ordered_json older = {
      {"value_embeds", false}, {"smear", false}, {"layer_scalars", false}, {"rope_theta", 10000.0}, {"qk_scale", 1.0}};
  for (auto& [key, value] : older.items())
    if (!mc.contains(key)) mc[key] = value;
}

// one upstream step, read and checked: tensors with fix-ups applied, meta with its config patched
struct UpstreamStep {
  NamedTensors tensors;
  nlohmann::ordered_json meta;
  GPTConfig config;
};
UpstreamStep read_upstream_step(const std::string& from, int64_t step) {
  UpstreamStep s;
  const std::string meta_path = step_file(from, "meta_", step, ".json");
  const std::string model_path = step_file(from, "model_", step, ".pt");
  if (!path_exists(meta_path))
    fail("%s is missing (every model_<step>.pt needs its meta_<step>.json)", meta_path.c_str());
  s.meta = checkpoint_read_json(meta_path);
  s.tensors = torch_pickle_load_state_dict(model_path);
  read_architecture_from_tensors(s.tensors, s.meta);
  s.config = checkpoint_read_gpt_config(s.meta, meta_path);
  checkpoint_gpt_prepare(s.tensors, s.config, model_path);
  return s;
}

}  // namespace

ExportResult checkpoint_export(const std::string& source, const std::string& tag, int64_t step,
                               const std::string& out_path) {
  ExportResult r;
  r.ref = checkpoint_locate(source, tag, step);
  ModelCheckpoint ck = checkpoint_load_model(r.ref.dir, r.ref.step);
  const std::string meta_path = checkpoint_meta_path(r.ref.dir, r.ref.step);
  GPTConfig config = checkpoint_read_gpt_config(ck.meta, meta_path);
  checkpoint_gpt_prepare(ck.tensors, config, checkpoint_model_path(r.ref.dir, r.ref.step));
  const std::string tok_dir = base_dir_path("tokenizer");
  if (!tokenizer_present(tok_dir))
    fail("cannot export: no tokenizer in %s (the checkpoint needs the tokenizer it was trained with)", tok_dir.c_str());
  Tokenizer tok = tokenizer_load(tok_dir);
  checkpoint_check_vocab(ck.meta, tok.vocab_size(), meta_path);

  nlohmann::ordered_json cfg;
  cfg["source"] = source;
  cfg["model_tag"] = base_name(r.ref.dir);
  cfg["step"] = r.ref.step;
  cfg["model_config"] = ck.meta["model_config"];
  const std::string out_dir = parent_dir(out_path);
  r.model_path = out_path;
  r.config_path = out_dir + "/config.json";
  r.tokenizer_dir = out_dir;
  safetensors_check_savable(out_path, ck.tensors);
  make_dirs(out_dir);
  safetensors_save(out_path, ck.tensors, {{"format", "pt"}, {"nanochat_source", source}});
  atomic_write_file(r.config_path, cfg.dump(2) + "\n");
  tokenizer_save(tok, out_dir);
  for (const auto& [name, t] : ck.tensors) {
    r.num_tensors++;
    r.num_bytes += t.numel() * (int64_t)t.element_size();
  }
  return r;
}

ImportResult checkpoint_import(const ImportOptions& opts) {
  const std::string& from = opts.from_dir;
  checkpoint_source_subdir(opts.source);  // Error for an unknown source, before any work
  if (!is_directory(from)) fail("--from %s is not a directory", from.c_str());
  std::vector<int64_t> steps = checkpoint_list_steps(from, "model_", ".pt");
  if (steps.empty() && path_exists(from + "/config.json"))
    return checkpoint_import_hf(opts);  // a transformers directory
  if (steps.empty())
    fail("no checkpoint in %s: expected model_<step>.pt files (upstream) or config.json (transformers)", from.c_str());
  if (opts.step >= 0) {
    if (std::find(steps.begin(), steps.end(), opts.step) == steps.end())
      fail("%s has no model_%06lld.pt", from.c_str(), (long long)opts.step);
    steps = {opts.step};
  }

  // the tokenizer: the given rank file, DIR's, or the one already in $BASE/tokenizer
  const std::string tok_dir = base_dir_path("tokenizer");
  std::string tok_file = opts.tokenizer_file.empty() ? from + "/tokenizer.tiktoken" : opts.tokenizer_file;
  if (!opts.tokenizer_file.empty() && !path_exists(tok_file)) fail("--tokenizer %s does not exist", tok_file.c_str());
  std::unique_ptr<Tokenizer> tok;
  bool write_tokenizer = false;
  if (path_exists(tok_file)) {
    tok = std::make_unique<Tokenizer>(tokenizer_load_tiktoken(tok_file, "nanochat"));
    if (tokenizer_present(tok_dir)) {
      Tokenizer existing = tokenizer_load(tok_dir);
      if (!existing.same_as(*tok)) {
        if (!opts.force)
          fail("%s holds a different tokenizer than %s (%d vs %d tokens); use --force to replace it", tok_dir.c_str(),
               tok_file.c_str(), existing.vocab_size(), tok->vocab_size());
        write_tokenizer = true;
      }
    } else {
      write_tokenizer = true;
    }
  } else if (tokenizer_present(tok_dir)) {
    tok = std::make_unique<Tokenizer>(tokenizer_load(tok_dir));
  } else {
    fail(
        "no tokenizer: %s has no tokenizer.tiktoken and %s holds none (convert upstream's tokenizer.pkl as the "
        "docs/tokenizer.md shows, or pass --tokenizer FILE)",
        from.c_str(), tok_dir.c_str());
  }

  // pass 1: read and check every step; only the last stays in memory
  UpstreamStep last;
  std::string tag = opts.tag;
  for (int64_t step : steps) {
    last = read_upstream_step(from, step);
    checkpoint_check_vocab(last.meta, tok->vocab_size(), step_file(from, "meta_", step, ".json"));
    if (tag.empty()) {
      std::string name = base_name(from);
      bool d_tag = name.size() > 1 && name[0] == 'd' && std::isdigit((unsigned char)name[1]);
      tag = d_tag ? name : strprintf("d%lld", (long long)last.config.n_layer);
    }
  }
  ImportResult r;
  r.dir = checkpoint_dir(opts.source, tag);
  for (int64_t step : steps) {
    for (const std::string& p : {checkpoint_model_path(r.dir, step), checkpoint_meta_path(r.dir, step)})
      if (path_exists(p) && !opts.force)
        fail("%s already exists; use --force to overwrite it, or --model-tag to import elsewhere", p.c_str());
  }

  // pass 2: write (tokenizer first: a checkpoint is only usable with it)
  if (write_tokenizer) tokenizer_save(*tok, tok_dir);
  r.tokenizer_written = write_tokenizer;
  for (int64_t step : steps) {
    UpstreamStep s = step == steps.back() ? std::move(last) : read_upstream_step(from, step);
    checkpoint_save_model(r.dir, step, s.tensors, s.meta);
    checkpoint_mark_complete(r.dir, step, 0);  // upstream's optimizer state is not converted
    r.steps.push_back(step);
  }
  return r;
}

}  // namespace nanochat
