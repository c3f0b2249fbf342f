// defines: train_peak_flops, train_token_bytes, train_model_tensors,
//          train_loader_state_upstream, train_loader_state_from_checkpoint, train_sample_greedy,
//          train_json_number, train_resume_command, train_any_rank,
//          train_resume_model
// Small pieces every training stage (base, SFT, RL) needs between the modules: the
// accelerator's peak FLOPS for MFU, token byte lengths on the device, model tensors to and
// from a checkpoint, loader state in and out of checkpoint JSON, greedy samples.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <torch/types.h>

#include "nanochat/checkpoint.h"
#include "nanochat/compute.h"
#include "nanochat/dataloader.h"
#include "nanochat/engine.h"
#include "nanochat/gpt.h"
#include "nanochat/safetensors.h"

namespace nanochat {

class Dist;
class Tokenizer;

// the GPU's nominal BF16 FLOPS (spec §0.6), logged; +inf on the CPU (MFU then shows 0)
double train_peak_flops(const Compute& c);
// bytes per token id, 0 for special tokens, as an int64 tensor on `device` (for bpb)
torch::Tensor train_token_bytes(const Tokenizer& tok, torch::Device device);

// the model's tensors under nanochat's names, detached (what a checkpoint stores)
NamedTensors train_model_tensors(const GPT& model);

// upstream's {"pq_idx", "rg_idx", "epoch"} of a loader state (the start when there is none)
nlohmann::ordered_json train_loader_state_upstream(const std::optional<LoaderState>& state);
// this rank's exact loader state from its optimizer JSON when present, else upstream's
// fields from the meta (row-group resume); nullopt when the run had not consumed a batch
std::optional<LoaderState> train_loader_state_from_checkpoint(const nlohmann::ordered_json& meta,
                                                              const nlohmann::ordered_json& rank_state);

// "<prompt><greedy completion of up to max_tokens tokens>", the prompt prefixed with
// <|bos|>, through the engine (KV cache; stops at <|bos|>/<|assistant_end|>) as upstream
std::string train_sample_greedy(const Engine& engine, const std::string& prompt, int64_t max_tokens);

// j[key] as a number; `fallback` when missing or null (nlohmann writes inf and nan as null)
double train_json_number(const nlohmann::ordered_json& j, const char* key, double fallback);

// the command line `argv` with its --resume* flags replaced by --resume-from-step <step>
std::string train_resume_command(const std::vector<std::string>& argv, int64_t step);

// step >= 0: loads `dir`'s checkpoint of that step into `model` (checking the vocab) and
// returns it, for the meta; nullopt when step < 0 (a fresh run)
std::optional<ModelCheckpoint> train_resume_model(GPT& model, const std::string& dir, int64_t step, int64_t vocab_size);

// true on every rank when `flag` is true on any (an all-reduce MAX): a decision all ranks share
bool train_any_rank(bool flag, Dist& dist, torch::Device device);

}  // namespace nanochat
