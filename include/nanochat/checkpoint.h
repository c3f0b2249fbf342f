// nanochat's checkpoints (upstream's checkpoint_manager.py), in safetensors instead of pickles. In
// $NANOCHAT_BASE_DIR/{base,chatsft,chatrl}_checkpoints/<tag>/ (sources base, sft, rl), step S
// is the files
//   model_<S:06d>.safetensors   the model's tensors under nanochat's state-dict names (rank 0)
//   meta_<S:06d>.json           the meta JSON of upstream's save_checkpoint, indent 2 (rank 0)
//   optim_<S:06d>_rank<r>.safetensors + optim_<S:06d>_rank<r>.json
//                               each rank's optimizer tensors and its scalars (optional)
//   done_<S:06d>                written last, by rank 0 after a barrier: lists the files
// Every file is written atomically (temp + fsync + rename), and a step counts only once its
// done marker exists and every file it lists is there, so a crash mid-save leaves the
// previous checkpoint as the latest one. Saving a step that is already complete (a resumed
// run passing it again) keeps the old files and marker until the new ones are all written:
// they go to "<file>.next", then rank 0 writes the new marker as done_<S>.next (the commit
// point), removes the old marker, renames each .next into place and the new marker last. A
// crash before the commit point leaves the old step complete; after it, the next run's
// checkpoint_recover_dir finishes the swap. This module knows nothing about the model or
// the optimizer: it moves ordered lists of named tensors plus JSON.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "nanochat/checkpoint/safetensors.h"

namespace nanochat {

class Dist;

// ---- where ------------------------------------------------------------------------------
std::string checkpoint_source_subdir(const std::string& source);  // "base" -> "base_checkpoints"; sft, rl
std::string checkpoint_root(const std::string& source);           // $BASE/<subdir>
// a model tag is one folder name: Error for "", ".", ".." or one holding '/' (so no tag
// reaches outside its source's folder)
void checkpoint_check_tag(const std::string& tag);
std::string checkpoint_dir(const std::string& source, const std::string& tag);  // checks the tag
std::string checkpoint_model_path(const std::string& dir, int64_t step);
std::string checkpoint_meta_path(const std::string& dir, int64_t step);
std::string checkpoint_optim_path(const std::string& dir, int64_t step, int rank);       // .safetensors
std::string checkpoint_optim_json_path(const std::string& dir, int64_t step, int rank);  // .json
std::string checkpoint_done_path(const std::string& dir, int64_t step);

// upstream's find_largest_model: among subdirectories whose name starts with d<digits>, the
// largest number (d24_jan29 counts as 24; ties: first by name); with none, the most
// recently modified subdirectory. Error when `root` has no subdirectory.
std::string checkpoint_find_largest_tag(const std::string& root);
// steps S of the files <prefix>S<suffix> in dir, ascending (e.g. "model_", ".pt" for upstream)
std::vector<int64_t> checkpoint_list_steps(const std::string& dir, const std::string& prefix,
                                           const std::string& suffix);
bool checkpoint_is_complete(const std::string& dir, int64_t step);
// the largest complete step; Error naming dir (and any incomplete steps) when there is none
int64_t checkpoint_find_last_step(const std::string& dir);

struct CheckpointRef {
  std::string dir;
  int64_t step;
};
// --source/--model-tag/--step as the CLI takes them: tag "" = largest, step < 0 = last complete
CheckpointRef checkpoint_locate(const std::string& source, const std::string& tag = "", int64_t step = -1);

// ---- save (each rank its own files; then barrier; then rank 0 marks) ---------------------
// A step without a marker is written in place; a complete one (re-saved) to "<file>.next".
void checkpoint_save_model(const std::string& dir, int64_t step, const NamedTensors& tensors,
                           const nlohmann::ordered_json& meta);
void checkpoint_save_optim(const std::string& dir, int64_t step, int rank, const NamedTensors& tensors,
                           const nlohmann::ordered_json& state);
// checks model, meta and optim files of ranks 0..optim_ranks-1 exist (0: none, as for RL),
// then writes done_<step> (a re-save: the swap described above); Error naming the first
// missing file
void checkpoint_mark_complete(const std::string& dir, int64_t step, int optim_ranks);
// a training stage's checkpoint, called by every rank: rank 0 saves the model and its meta, each rank
// its optimizer shard and state, and once all have written (a barrier) rank 0 marks the step
// complete; returns after a second barrier, when the step is complete for everyone
void checkpoint_save_training(const std::string& dir, int64_t step, const NamedTensors& model,
                              const nlohmann::ordered_json& meta, const NamedTensors& optim,
                              const nlohmann::ordered_json& optim_state, Dist& dist);

// ---- a training run's output directory ------------------------------------------------------
// steps that have a done marker or a re-save past its commit point: a previous run's steps
std::vector<int64_t> checkpoint_saved_steps(const std::string& dir);
// start-up repair, by one process before the run reads or writes dir: finishes the re-saves
// interrupted after their commit point, removes the .next files of those interrupted before
// it, and the temp files (*.tmp.<pid>) whose process is gone (a live process's are kept).
// Returns how many files it removed or put in place.
int checkpoint_recover_dir(const std::string& dir);
// every step of dir, marked or not (markers first, so none is complete with files missing);
// temp files of live processes are kept. Returns the steps removed.
std::vector<int64_t> checkpoint_remove_steps(const std::string& dir);
// --keep-last: after step `saved` was marked, removes the complete steps before it except the
// keep_last - 1 newest (keep_last <= 0: none). Never `saved`, a step after it, or a step
// without a marker (being written). Returns the steps removed.
std::vector<int64_t> checkpoint_prune(const std::string& dir, int64_t saved, int64_t keep_last);

// ---- load ---------------------------------------------------------------------------------
struct ModelCheckpoint {
  NamedTensors tensors;  // CPU, in the saved dtypes
  nlohmann::ordered_json meta;
};
struct OptimCheckpoint {
  NamedTensors tensors;
  nlohmann::ordered_json state;
};
// Error if the step is incomplete or a file is bad
ModelCheckpoint checkpoint_load_model(const std::string& dir, int64_t step);
// nullopt when this rank saved no optimizer state (upstream returns None)
std::optional<OptimCheckpoint> checkpoint_load_optim(const std::string& dir, int64_t step, int rank);

// a JSON file (meta, optimizer state, marker); Error naming the file when unreadable or invalid
nlohmann::ordered_json checkpoint_read_json(const std::string& path);
// JSON text as Python's json.dump writes it (upstream's meta): NaN, Infinity and -Infinity are
// read as those doubles; Error naming `where` when invalid
nlohmann::ordered_json checkpoint_parse_json(const std::string& text, const std::string& where);
// meta[key] as a number; `fallback` when missing or null (nlohmann writes inf and nan as null)
double checkpoint_meta_number(const nlohmann::ordered_json& meta, const char* key, double fallback);

// ---- checks and fix-ups (checkpoint_manager.py's build_model) ---------------------------------------------
struct TensorSpec {
  std::string name;
  std::vector<int64_t> shape;
  std::optional<at::ScalarType> dtype;  // nullopt: any dtype (load_state_dict(assign=True) keeps the saved one)
};
// first mismatch in `expected` order: missing tensor, wrong shape, wrong dtype; then the
// first tensor `loaded` has beyond `expected`. One Error line starting with `where`.
void checkpoint_check_tensors(const std::vector<TensorSpec>& expected, const NamedTensors& loaded,
                              const std::string& where);
// meta.model_config.vocab_size == the tokenizer's vocab size
void checkpoint_check_vocab(const nlohmann::ordered_json& meta, int64_t tokenizer_vocab_size, const std::string& where);
// step 3: "_orig_mod." prefixes (torch.compile) removed
void checkpoint_strip_compile_prefix(NamedTensors& tensors);
// step 2: bf16 tensors to fp32 (upstream does it on cpu/mps)
void checkpoint_cast_bf16_to_f32(NamedTensors& tensors);
// step 4, old checkpoints: window_pattern "L" if missing from model_config ...
void checkpoint_patch_config(nlohmann::ordered_json& model_config);
// ... and resid_lambdas = ones(n_layer), x0_lambdas = zeros(n_layer) (fp32) if missing
void checkpoint_patch_tensors(NamedTensors& tensors, int64_t n_layer);

}  // namespace nanochat
