// Checkpoint files, directories and step selection (API and layout in
// include/nanochat/checkpoint.h).

#include "nanochat/checkpoint.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <csignal>
#include <dirent.h>
#include <fstream>
#include <sstream>
#include <sys/stat.h>
#include <unistd.h>

#include "nanochat/common/atomic_file.h"
#include "nanochat/common/base_dir.h"
#include "nanochat/common/regular_file.h"
#include "nanochat/common/error.h"
#include "nanochat/common/files.h"
#include "nanochat/common/log.h"
#include "nanochat/dist.h"

namespace nanochat {

namespace {

std::vector<std::string> list_dir(const std::string& dir) {
  std::vector<std::string> names;
  DIR* d = opendir(dir.c_str());
  if (!d) fail("cannot list %s: %s", dir.c_str(), std::strerror(errno));
  while (dirent* e = readdir(d)) {
    std::string name = e->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

// the number of a run of decimal digits; false if empty, not all digits, or too long
bool parse_digits(const std::string& s, int64_t& v) {
  if (s.empty() || s.size() > 18 || s.find_first_not_of("0123456789") != std::string::npos) return false;
  v = std::stoll(s);
  return true;
}

std::string step_name(const char* prefix, int64_t step, const char* suffix) {
  return strprintf("%s%06lld%s", prefix, (long long)step, suffix);
}

}  // namespace

nlohmann::ordered_json checkpoint_read_json(const std::string& path) {
  return checkpoint_parse_json(read_regular_file(path), path);
}

namespace {

void remove_file(const std::string& path) {
  if (unlink(path.c_str()) != 0 && errno != ENOENT) fail("cannot remove %s: %s", path.c_str(), std::strerror(errno));
}

void rename_file(const std::string& from, const std::string& to) {
  if (std::rename(from.c_str(), to.c_str()) != 0)
    fail("cannot rename %s to %s: %s", from.c_str(), to.c_str(), std::strerror(errno));
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// done_<S>.next: the marker of a re-save past its commit point (see checkpoint.h)
std::string pending_marker_path(const std::string& dir, int64_t step) {
  return checkpoint_done_path(dir, step) + ".next";
}

// a step already marked (or mid-swap) is re-saved beside its files, not over them
bool is_resave(const std::string& dir, int64_t step) {
  return path_exists(checkpoint_done_path(dir, step)) || path_exists(pending_marker_path(dir, step));
}

// a file of step S: model_S..., meta_S..., optim_S_rank..., done_S[...]; never a path
bool step_file(const std::string& name, int64_t& step) {
  if (name.find('/') != std::string::npos) return false;
  for (const char* prefix : {"model_", "meta_", "optim_", "done_"}) {
    size_t n = std::strlen(prefix);
    if (name.compare(0, n, prefix) != 0) continue;
    size_t end = name.find_first_not_of("0123456789", n);
    if (end == std::string::npos) end = name.size();
    return parse_digits(name.substr(n, end - n), step) && (end == name.size() || name[end] == '.' || name[end] == '_');
  }
  return false;
}

// AtomicFile's "<path>.tmp.<pid>": the writer's pid, 0 for any other name
long temp_file_pid(const std::string& name) {
  size_t at = name.rfind(".tmp.");
  int64_t pid;
  if (at == std::string::npos || !parse_digits(name.substr(at + 5), pid) || pid <= 0 || pid > 0x7fffffff) return 0;
  return (long)pid;
}

bool process_alive(long pid) { return kill((pid_t)pid, 0) == 0 || errno == EPERM; }

// the files a marker lists, each a file name of its step (a marker naming anything else,
// "../x" say, is not ours to act on)
std::vector<std::string> marker_files(const std::string& marker_path, int64_t step) {
  nlohmann::ordered_json marker = checkpoint_read_json(marker_path);
  if (!marker.is_object() || !marker.contains("files") || !marker["files"].is_array())
    fail("%s: not a checkpoint marker (no \"files\" list)", marker_path.c_str());
  std::vector<std::string> files;
  for (const auto& f : marker["files"]) {
    int64_t s = -1;
    if (!f.is_string() || !step_file(f.get<std::string>(), s) || s != step)
      fail("%s: %s is not a file of step %lld", marker_path.c_str(), f.dump().c_str(), (long long)step);
    files.push_back(f.get<std::string>());
  }
  return files;
}

// the swap after a re-save's commit point: the old marker goes, each new file takes its
// name, the old optimizer files of ranks the new save did not have go, the new marker goes
// last. Every step can be redone, so a crash anywhere in it is finished by running it again.
void finish_resave(const std::string& dir, int64_t step) {
  const std::string done = checkpoint_done_path(dir, step), pending = pending_marker_path(dir, step);
  std::vector<std::string> files = marker_files(pending, step);
  remove_file(done);
  fsync_parent_dir(done);
  for (const std::string& f : files)
    if (path_exists(dir + "/" + f + ".next")) rename_file(dir + "/" + f + ".next", dir + "/" + f);
  for (const std::string& f : files)
    if (!path_exists(dir + "/" + f))
      fail("cannot finish re-saving step %lld in %s: %s is missing", (long long)step, dir.c_str(), f.c_str());
  const std::string old_optim = step_name("optim_", step, "_rank");
  for (const std::string& name : list_dir(dir))
    if (name.compare(0, old_optim.size(), old_optim) == 0 && !temp_file_pid(name) && !ends_with(name, ".next") &&
        std::find(files.begin(), files.end(), name) == files.end())
      remove_file(dir + "/" + name);
  fsync_parent_dir(done);
  rename_file(pending, done);
  fsync_parent_dir(done);
}

std::string shape_str(c10::IntArrayRef shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); i++) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

const std::map<std::string, std::string> kFileMetadata = {{"format", "pt"}};  // what HF tools expect

}  // namespace

std::string checkpoint_source_subdir(const std::string& source) {
  if (source == "base") return "base_checkpoints";
  if (source == "sft") return "chatsft_checkpoints";
  if (source == "rl") return "chatrl_checkpoints";
  fail("unknown checkpoint source '%s': use base, sft or rl", source.c_str());
}

std::string checkpoint_root(const std::string& source) { return base_dir() + "/" + checkpoint_source_subdir(source); }
void checkpoint_check_tag(const std::string& tag) {
  if (tag.empty() || tag == "." || tag == ".." || tag.find('/') != std::string::npos ||
      tag.find('\0') != std::string::npos)
    fail("--model-tag '%s' is not a folder name: a tag is one path component (no '/', and not '.' or '..')",
         tag.c_str());
}

std::string checkpoint_dir(const std::string& source, const std::string& tag) {
  checkpoint_check_tag(tag);
  return checkpoint_root(source) + "/" + tag;
}

std::string checkpoint_model_path(const std::string& dir, int64_t step) {
  return dir + "/" + step_name("model_", step, ".safetensors");
}
std::string checkpoint_meta_path(const std::string& dir, int64_t step) {
  return dir + "/" + step_name("meta_", step, ".json");
}
std::string checkpoint_optim_path(const std::string& dir, int64_t step, int rank) {
  return dir + "/" + step_name("optim_", step, strprintf("_rank%d.safetensors", rank).c_str());
}
std::string checkpoint_optim_json_path(const std::string& dir, int64_t step, int rank) {
  return dir + "/" + step_name("optim_", step, strprintf("_rank%d.json", rank).c_str());
}
std::string checkpoint_done_path(const std::string& dir, int64_t step) {
  return dir + "/" + step_name("done_", step, "");
}

std::string checkpoint_find_largest_tag(const std::string& root) {
  if (!is_directory(root)) fail("no checkpoints: %s does not exist (train or import a model first)", root.c_str());
  std::string best, newest;
  int64_t best_n = -1;
  struct timespec newest_t = {0, 0};
  for (const std::string& name : list_dir(root)) {
    struct stat st;
    if (stat((root + "/" + name).c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) continue;
    // re.match(r"d(\d+)", name): d followed by at least one digit, at the start
    size_t end = 1;
    while (end < name.size() && std::isdigit((unsigned char)name[end])) end++;
    int64_t n;
    if (name[0] == 'd' && parse_digits(name.substr(1, end - 1), n) && n > best_n) {
      best_n = n;
      best = name;
    }
    if (newest.empty() ||
        std::tie(st.st_mtim.tv_sec, st.st_mtim.tv_nsec) > std::tie(newest_t.tv_sec, newest_t.tv_nsec)) {
      newest = name;
      newest_t = st.st_mtim;
    }
  }
  if (!best.empty()) return best;
  if (!newest.empty()) return newest;
  fail("no checkpoints in %s: it has no model tag directories (train or import a model first)", root.c_str());
}

std::vector<int64_t> checkpoint_list_steps(const std::string& dir, const std::string& prefix,
                                           const std::string& suffix) {
  std::vector<int64_t> steps;
  for (const std::string& name : list_dir(dir)) {
    int64_t step;
    if (name.size() > prefix.size() + suffix.size() && name.compare(0, prefix.size(), prefix) == 0 &&
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0 &&
        parse_digits(name.substr(prefix.size(), name.size() - prefix.size() - suffix.size()), step))
      steps.push_back(step);
  }
  std::sort(steps.begin(), steps.end());
  steps.erase(std::unique(steps.begin(), steps.end()), steps.end());
  return steps;
}

bool checkpoint_is_complete(const std::string& dir, int64_t step) {
  std::string done = checkpoint_done_path(dir, step);
  if (!path_exists(done)) return false;
  nlohmann::ordered_json marker;
  try {
    marker = checkpoint_read_json(done);
  } catch (const Error&) {
    return false;
  }
  if (!marker.is_object() || !marker.contains("files") || !marker["files"].is_array()) return false;
  for (const auto& f : marker["files"])
    if (!f.is_string() || !path_exists(dir + "/" + f.get<std::string>())) return false;
  return true;
}

int64_t checkpoint_find_last_step(const std::string& dir) {
  if (!is_directory(dir)) fail("no checkpoint directory %s", dir.c_str());
  std::vector<int64_t> steps = checkpoint_list_steps(dir, "model_", ".safetensors");
  std::string incomplete;
  for (size_t i = steps.size(); i-- > 0;) {
    if (checkpoint_is_complete(dir, steps[i])) return steps[i];
    incomplete += (incomplete.empty() ? "" : ", ") + std::to_string(steps[i]);
  }
  if (!incomplete.empty())
    fail("no complete checkpoint in %s: step(s) %s have no done marker (interrupted while saving)", dir.c_str(),
         incomplete.c_str());
  fail("no checkpoint in %s (no model_<step>.safetensors)", dir.c_str());
}

CheckpointRef checkpoint_locate(const std::string& source, const std::string& tag, int64_t step) {
  std::string root = checkpoint_root(source);
  CheckpointRef ref;
  if (!tag.empty()) checkpoint_check_tag(tag);
  ref.dir = root + "/" + (tag.empty() ? checkpoint_find_largest_tag(root) : tag);
  if (!is_directory(ref.dir)) fail("no checkpoint directory %s: check --model-tag", ref.dir.c_str());
  ref.step = step < 0 ? checkpoint_find_last_step(ref.dir) : step;
  return ref;
}

void checkpoint_save_model(const std::string& dir, int64_t step, const NamedTensors& tensors,
                           const nlohmann::ordered_json& meta) {
  safetensors_check_savable(checkpoint_model_path(dir, step), tensors);  // bad input: the old files stay complete
  make_dirs(dir);
  const std::string next = is_resave(dir, step) ? ".next" : "";
  safetensors_save(checkpoint_model_path(dir, step) + next, tensors, kFileMetadata);
  atomic_write_file(checkpoint_meta_path(dir, step) + next, meta.dump(2));  // json.dump(meta, indent=2)
}

void checkpoint_save_optim(const std::string& dir, int64_t step, int rank, const NamedTensors& tensors,
                           const nlohmann::ordered_json& state) {
  safetensors_check_savable(checkpoint_optim_path(dir, step, rank), tensors);
  // test hook: a save as slow as a large model's (tests of launch's grace period)
  if (const char* ms = std::getenv("NANOCHAT_TEST_SAVE_DELAY_MS")) usleep((useconds_t)std::atol(ms) * 1000);
  make_dirs(dir);
  const std::string next = is_resave(dir, step) ? ".next" : "";
  safetensors_save(checkpoint_optim_path(dir, step, rank) + next, tensors, kFileMetadata);
  atomic_write_file(checkpoint_optim_json_path(dir, step, rank) + next, state.dump(2));
}

void checkpoint_mark_complete(const std::string& dir, int64_t step, int optim_ranks) {
  std::vector<std::string> files = {checkpoint_model_path(dir, step), checkpoint_meta_path(dir, step)};
  for (int r = 0; r < optim_ranks; r++) {
    files.push_back(checkpoint_optim_path(dir, step, r));
    files.push_back(checkpoint_optim_json_path(dir, step, r));
  }
  const bool resave = is_resave(dir, step);
  const std::string next = resave ? ".next" : "";
  nlohmann::ordered_json marker = {{"step", step}, {"files", nlohmann::ordered_json::array()}};
  for (const std::string& f : files) {
    if (!path_exists(f + next))
      fail("cannot mark checkpoint step %lld complete: %s is missing", (long long)step, (f + next).c_str());
    marker["files"].push_back(f.substr(dir.size() + 1));
  }
  if (!resave) return atomic_write_file(checkpoint_done_path(dir, step), marker.dump(2));
  atomic_write_file(pending_marker_path(dir, step), marker.dump(2));  // the commit point
  finish_resave(dir, step);
}

void checkpoint_save_training(const std::string& dir, int64_t step, const NamedTensors& model,
                              const nlohmann::ordered_json& meta, const NamedTensors& optim,
                              const nlohmann::ordered_json& optim_state, Dist& dist) {
  if (dist.rank() == 0) checkpoint_save_model(dir, step, model, meta);
  checkpoint_save_optim(dir, step, dist.rank(), optim, optim_state);
  dist.barrier();
  if (dist.rank() == 0) checkpoint_mark_complete(dir, step, dist.world_size());
  dist.barrier();
}

std::vector<int64_t> checkpoint_saved_steps(const std::string& dir) {
  if (!is_directory(dir)) return {};
  std::vector<int64_t> steps = checkpoint_list_steps(dir, "done_", ""),
                       pending = checkpoint_list_steps(dir, "done_", ".next");
  steps.insert(steps.end(), pending.begin(), pending.end());
  std::sort(steps.begin(), steps.end());
  steps.erase(std::unique(steps.begin(), steps.end()), steps.end());
  return steps;
}

int checkpoint_recover_dir(const std::string& dir) {
  if (!is_directory(dir)) return 0;
  int changed = 0;
  for (const std::string& name : list_dir(dir)) {
    long pid = temp_file_pid(name);
    if (pid > 0 && pid != (long)getpid() && !process_alive(pid)) {
      remove_file(dir + "/" + name);
      changed++;
    }
  }
  std::vector<int64_t> unfinished;
  for (int64_t step : checkpoint_list_steps(dir, "done_", ".next")) {
    try {
      finish_resave(dir, step);
      log_warn("%s: finished re-saving step %lld (interrupted after its new files were written)", dir.c_str(),
               (long long)step);
      changed++;
    } catch (const Error& e) {
      log_warn("%s; step %lld stays incomplete", e.what(), (long long)step);
      unfinished.push_back(step);
    }
  }
  // new files of re-saves interrupted before their commit point: the old step is the one that counts
  for (const std::string& name : list_dir(dir)) {
    int64_t step;
    if (ends_with(name, ".next") && !temp_file_pid(name) && step_file(name, step) &&
        std::find(unfinished.begin(), unfinished.end(), step) == unfinished.end()) {
      remove_file(dir + "/" + name);
      changed++;
    }
  }
  if (changed) fsync_parent_dir(dir + "/.");
  return changed;
}

std::vector<int64_t> checkpoint_remove_steps(const std::string& dir) {
  if (!is_directory(dir)) return {};
  std::vector<int64_t> removed;
  // markers first: from the first removal on, no step lacking a file counts as complete
  for (bool markers : {true, false}) {
    for (const std::string& name : list_dir(dir)) {
      int64_t step;
      if (!step_file(name, step) || temp_file_pid(name) || (name.compare(0, 5, "done_") == 0) != markers) continue;
      remove_file(dir + "/" + name);
      removed.push_back(step);
    }
    fsync_parent_dir(dir + "/.");
  }
  std::sort(removed.begin(), removed.end());
  removed.erase(std::unique(removed.begin(), removed.end()), removed.end());
  return removed;
}

std::vector<int64_t> checkpoint_prune(const std::string& dir, int64_t saved, int64_t keep_last) {
  if (keep_last <= 0) return {};
  std::vector<int64_t> older;  // complete, not mid-swap, before `saved`; newest first
  for (int64_t step : checkpoint_list_steps(dir, "done_", ""))
    if (step < saved && checkpoint_is_complete(dir, step) && !path_exists(pending_marker_path(dir, step)))
      older.insert(older.begin(), step);
  std::vector<int64_t> removed;
  for (size_t i = (size_t)keep_last - 1; i < older.size(); i++) {
    const std::string done = checkpoint_done_path(dir, older[i]);
    std::vector<std::string> files = marker_files(done, older[i]);
    remove_file(done);  // incomplete from here on
    fsync_parent_dir(done);
    for (const std::string& f : files) remove_file(dir + "/" + f);
    removed.push_back(older[i]);
  }
  if (!removed.empty()) fsync_parent_dir(dir + "/.");
  return removed;
}

ModelCheckpoint checkpoint_load_model(const std::string& dir, int64_t step) {
  if (!checkpoint_is_complete(dir, step)) {
    if (!path_exists(checkpoint_model_path(dir, step)))
      fail("no checkpoint step %lld in %s (no %s)", (long long)step, dir.c_str(),
           step_name("model_", step, ".safetensors").c_str());
    fail("checkpoint step %lld in %s is incomplete (no valid %s: saving was interrupted); pick another --step",
         (long long)step, dir.c_str(), step_name("done_", step, "").c_str());
  }
  ModelCheckpoint ck;
  ck.tensors = safetensors_load(checkpoint_model_path(dir, step)).tensors;
  ck.meta = checkpoint_read_json(checkpoint_meta_path(dir, step));
  if (!ck.meta.is_object()) fail("%s: not a JSON object", checkpoint_meta_path(dir, step).c_str());
  return ck;
}

std::optional<OptimCheckpoint> checkpoint_load_optim(const std::string& dir, int64_t step, int rank) {
  std::string st = checkpoint_optim_path(dir, step, rank), js = checkpoint_optim_json_path(dir, step, rank);
  bool has_st = path_exists(st), has_js = path_exists(js);
  if (!has_st && !has_js) return std::nullopt;
  if (!has_st || !has_js)
    fail("%s is missing (its pair %s exists)", (has_st ? js : st).c_str(), (has_st ? st : js).c_str());
  OptimCheckpoint ck;
  ck.tensors = safetensors_load(st).tensors;
  ck.state = checkpoint_read_json(js);
  return ck;
}

void checkpoint_check_tensors(const std::vector<TensorSpec>& expected, const NamedTensors& loaded,
                              const std::string& where) {
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < loaded.size(); i++)
    if (!index.emplace(loaded[i].first, i).second)
      fail("%s: tensor '%s' appears twice", where.c_str(), loaded[i].first.c_str());
  std::map<std::string, bool> wanted;
  for (const TensorSpec& spec : expected) {
    wanted[spec.name] = true;
    auto it = index.find(spec.name);
    std::string want = shape_str(spec.shape) + (spec.dtype ? std::string(" ") + c10::toString(*spec.dtype) : "");
    if (it == index.end())
      fail("%s: missing tensor '%s' (the model expects %s)", where.c_str(), spec.name.c_str(), want.c_str());
    const torch::Tensor& t = loaded[it->second].second;
    if (t.sizes() != c10::IntArrayRef(spec.shape) || (spec.dtype && t.scalar_type() != *spec.dtype))
      fail("%s: tensor '%s' is %s %s but the model expects %s", where.c_str(), spec.name.c_str(),
           shape_str(t.sizes()).c_str(), c10::toString(t.scalar_type()), want.c_str());
  }
  for (const auto& [name, t] : loaded)
    if (!wanted.count(name))
      fail("%s: unexpected tensor '%s' %s: the checkpoint is not for this model", where.c_str(), name.c_str(),
           shape_str(t.sizes()).c_str());
}

void checkpoint_check_vocab(const nlohmann::ordered_json& meta, int64_t tokenizer_vocab_size,
                            const std::string& where) {
  const nlohmann::ordered_json* v = nullptr;
  if (meta.is_object() && meta.contains("model_config") && meta["model_config"].is_object() &&
      meta["model_config"].contains("vocab_size"))
    v = &meta["model_config"]["vocab_size"];
  if (!v || !v->is_number_integer()) fail("%s: meta has no integer model_config.vocab_size", where.c_str());
  if (v->get<int64_t>() != tokenizer_vocab_size)
    fail(
        "%s: the model's vocab_size is %lld but the tokenizer has %lld tokens: the checkpoint was trained with "
        "another tokenizer",
        where.c_str(), (long long)v->get<int64_t>(), (long long)tokenizer_vocab_size);
}

void checkpoint_strip_compile_prefix(NamedTensors& tensors) {
  static const std::string prefix = "_orig_mod.";
  for (auto& [name, t] : tensors)
    if (name.compare(0, prefix.size(), prefix) == 0) name = name.substr(prefix.size());
}

void checkpoint_cast_bf16_to_f32(NamedTensors& tensors) {
  for (auto& [name, t] : tensors)
    if (t.scalar_type() == torch::kBFloat16) t = t.to(at::kFloat);
}

void checkpoint_patch_config(nlohmann::ordered_json& model_config) {
  if (model_config.is_object() && !model_config.contains("window_pattern")) model_config["window_pattern"] = "L";
}

void checkpoint_patch_tensors(NamedTensors& tensors, int64_t n_layer) {
  auto has = [&](const std::string& name) {
    return std::any_of(tensors.begin(), tensors.end(), [&](const auto& p) { return p.first == name; });
  };
  if (!has("resid_lambdas")) tensors.emplace_back("resid_lambdas", torch::ones({n_layer}));
  if (!has("x0_lambdas")) tensors.emplace_back("x0_lambdas", torch::zeros({n_layer}));
}

double checkpoint_meta_number(const nlohmann::ordered_json& meta, const char* key, double fallback) {
  if (!meta.contains(key) || meta[key].is_null()) return fallback;
  if (!meta[key].is_number()) fail("checkpoint meta: '%s' is not a number", key);
  return meta[key].get<double>();
}

}  // namespace nanochat
