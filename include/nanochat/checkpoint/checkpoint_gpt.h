// The bridge between the checkpoint module (named tensors + JSON) and the gpt module:
// upstream checkpoint_manager.py's build_model, steps 1-7. A checkpoint from anywhere (ours, or upstream's .pt converted by
// `nanochat import`) goes through the same fix-ups: "_orig_mod." prefixes stripped, missing
// resid/x0 lambdas patched, floating tensors cast to the dtype the model keeps each parameter
// in, then every name, shape and dtype checked before a single weight is written.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "nanochat/checkpoint.h"
#include "nanochat/gpt.h"

namespace nanochat {

// the dtype the model stores wte and value_embeds in (upstream's precision policy): the compute dtype, except fp32
// when it is fp16 (GradScaler); every other parameter is an fp32 master weight
torch::ScalarType checkpoint_gpt_embedding_dtype(torch::ScalarType compute_dtype);

// names, shapes and dtypes of the model's parameters, in state-dict order
std::vector<TensorSpec> checkpoint_gpt_tensor_specs(const GPT& model);

// steps 3-4 on a tensor list from any source (step 4 only where the config has the per-layer
// scalars), vocab tables of older checkpoints padded to gpt_padded_vocab with zero rows, then
// the check of names and shapes against `config` (dtypes: any floating type). Tensors keep their dtypes (like assign=True), so an
// import stores upstream's bf16 embeddings as bf16. Error starting with `where`.
void checkpoint_gpt_prepare(NamedTensors& tensors, const GPTConfig& config, const std::string& where);

// steps 2-6 into a built model: prepare, cast each floating tensor to the model's dtype for
// that parameter (bf16 checkpoint on CPU -> fp32; fp32 embeddings -> bf16 on a bf16 GPU),
// check names/shapes/dtypes (a non-floating tensor is a wrong dtype), copy in. After the
// checks the embeddings are put in checkpoint_gpt_embedding_dtype(model->compute_dtype), as
// gpt_init_weights leaves them. Nothing is written into the model on any error.
void checkpoint_load_into_gpt(GPT& model, NamedTensors tensors, const std::string& where);

// meta["model_config"] with step 4's patch, as a validated GPTConfig within
// checkpoint_check_config_limits; Error naming `where`
GPTConfig checkpoint_read_gpt_config(nlohmann::ordered_json& meta, const std::string& where);

// a config's numbers against sane limits (layers, widths, heads, vocab, context): checked
// before any shape is built from them, so a hostile config costs no memory. Error naming `where`.
void checkpoint_check_config_limits(const GPTConfig& c, const std::string& where);
// the config against the tensors present, before a model is built: as many blocks as n_layer
// (transformer.h.<i>.*, i < n_layer, each present) and a wte of (vocab, padded vocab) x n_embd.
// Error naming `where`.
void checkpoint_check_config_tensors(const GPTConfig& c, const NamedTensors& tensors, const std::string& where);

struct LoadedGPT {
  GPT model{nullptr};
  GPTConfig config;
  nlohmann::ordered_json meta;
  CheckpointRef ref;
};
// build_model for --source/--model-tag/--step (tag "" = largest, step < 0 = last complete):
// locate, read the model and meta, check the vocab against the tokenizer's
// (tokenizer_vocab_size < 0 skips the check), build the GPT on `device` in `compute_dtype`,
// load, eval mode
LoadedGPT checkpoint_load_gpt(const std::string& source, const std::string& tag, int64_t step, torch::Device device,
                              torch::ScalarType compute_dtype, int64_t tokenizer_vocab_size);

// the model's tensors under nanochat's names, detached: what a training run saves
NamedTensors checkpoint_gpt_tensors(const GPT& model);

// a training run's resume: step >= 0 loads `dir`'s checkpoint of that step into `model`
// (checking the vocab) and returns it, for its meta; nullopt when step < 0 (a fresh run)
std::optional<ModelCheckpoint> checkpoint_resume_gpt(GPT& model, const std::string& dir, int64_t step,
                                                     int64_t vocab_size);

// ---- interop (src/checkpoint/checkpoint_interop.cpp) -----------------------------------
// `nanochat export`: the checkpoint's model tensors (nanochat's names, saved dtypes) as one
// safetensors file at `out_path`, and beside it config.json {"source", "model_tag", "step",
// "model_config"} and the tokenizer files of $BASE/tokenizer (tokenizer.tiktoken,
// tokenizer.json, token_bytes.bin). Everything is read and checked (tensors against the
// config, vocab against the tokenizer) before any file is written; each file is atomic.
struct ExportResult {
  CheckpointRef ref;
  std::string model_path, config_path, tokenizer_dir;
  int64_t num_tensors = 0, num_bytes = 0;
};
ExportResult checkpoint_export(const std::string& source, const std::string& tag, int64_t step,
                               const std::string& out_path);

// `nanochat import`: upstream nanochat's checkpoint directory (model_<S>.pt from
// torch.save(model.state_dict()), meta_<S>.json) into $BASE/<source dir>/<tag>/ as our
// safetensors checkpoints (model + meta + done marker, no optimizer state), and the
// tokenizer (a tiktoken rank file; nanochat's split pattern and 9 special tokens are added)
// into $BASE/tokenizer when none is there. Every step is read and checked first (names,
// shapes, floating dtypes, vocab vs tokenizer, existing files); only then is anything written.
struct ImportOptions {
  std::string from_dir;
  std::string source = "base";      // base, sft, rl
  std::string tag;                  // "": DIR's name when it is d<digits>..., else d<n_layer>
  std::string tokenizer_file;       // "": DIR/tokenizer.tiktoken if present
  int64_t step = -1;                // < 0: every step in DIR
  bool force = false;               // overwrite existing steps / a different $BASE/tokenizer
  bool allow_custom_regex = false;  // a tokenizer.json whose split regex is not a known one
};
struct ImportResult {
  std::string dir;
  std::vector<int64_t> steps;
  bool tokenizer_written = false;
};
ImportResult checkpoint_import(const ImportOptions& opts);

// ---- transformers' `nanochat` model type (src/checkpoint/checkpoint_hf.cpp) -------------------------
// its config.json as our GPTConfig (the older architecture: no value embeddings, smear or
// per-layer scalars; rope theta, softcap and norm eps from the file); anything else it says
// (another model_type or activation, biases, tied embeddings, rope scaling, ...) is one Error
// naming `where` and the field
GPTConfig checkpoint_hf_config(const nlohmann::ordered_json& config_json, const std::string& where);
// `nanochat import --from DIR` where DIR holds config.json, model.safetensors (or the shards
// of model.safetensors.index.json) and tokenizer.json: one step (opts.step, default 0) of
// opts.source/tag and the tokenizer into $BASE/tokenizer, as checkpoint_import does. Every
// file and tensor is read and checked first; an Error names the file and the tensor.
ImportResult checkpoint_import_hf(const ImportOptions& opts);
// `nanochat export --format hf`: config.json, model.safetensors, tokenizer.json and
// tokenizer_config.json in `out_dir` for transformers' AutoModelForCausalLM/AutoTokenizer.
// A model of the current architecture is refused with one line (transformers' class cannot
// express it); nothing is written on any error.
ExportResult checkpoint_export_hf(const std::string& source, const std::string& tag, int64_t step,
                                  const std::string& out_dir);

}  // namespace nanochat
