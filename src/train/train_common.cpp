#include "train/train_common.h"

#include <cctype>
#include <cstring>
#include <limits>

#include <torch/torch.h>

#include "nanochat/checkpoint.h"
#include "nanochat/checkpoint_gpt.h"
#include "nanochat/common.h"
#include "nanochat/dist.h"
#include "nanochat/tokenizer.h"

namespace nanochat {

double train_peak_flops(const Compute& c) {
  if (c.device_type != "cuda") return std::numeric_limits<double>::infinity();
  std::vector<CudaDeviceInfo> gpus = cuda_device_infos();
  const std::string name = c.env.local_rank < (int)gpus.size() ? gpus[c.env.local_rank].name : "";
  double peak = peak_flops(name, gpus.empty() ? 0 : gpus[c.env.local_rank].multiprocessors);
  log_info("GPU: %s, peak %s", name.c_str(),
           std::isinf(peak) ? "FLOPS unknown (MFU shows 0)" : strprintf("%.1f TFLOPS (bf16)", peak / 1e12).c_str());
  return peak;
}

torch::Tensor train_token_bytes(const Tokenizer& tok, torch::Device device) {
  std::vector<int32_t> counts = tok.token_byte_counts();
  return torch::tensor(std::vector<int64_t>(counts.begin(), counts.end()), torch::kLong).to(device);
}

NamedTensors train_model_tensors(const GPT& model) {
  NamedTensors out;
  for (auto& [name, t] : gpt_named_parameters(model)) out.emplace_back(name, t.detach());
  return out;
}

nlohmann::ordered_json train_loader_state_upstream(const std::optional<LoaderState>& state) {
  DocPosition last = state ? state->last : DocPosition();
  return {{"pq_idx", last.file}, {"rg_idx", last.row_group}, {"epoch", last.epoch}};
}

std::optional<LoaderState> train_loader_state_from_checkpoint(const nlohmann::ordered_json& meta,
                                                              const nlohmann::ordered_json& rank_state) {
  if (rank_state.contains("dataloader_state")) {
    const auto& s = rank_state["dataloader_state"];
    if (s.is_null()) return std::nullopt;  // saved before the first batch was trained
    return loader_state_from_json(s);
  }
  if (meta.contains("dataloader_state_dict") && meta["dataloader_state_dict"].is_object())
    return loader_state_from_json(meta["dataloader_state_dict"]);  // upstream's: row-group resume
  return std::nullopt;
}

std::string train_sample_greedy(const Engine& engine, const std::string& prompt, int64_t max_tokens) {
  const Tokenizer& tok = engine.tokenizer();
  std::vector<int32_t> ids = {tok.bos_id()};
  for (int32_t id : tok.encode(prompt)) ids.push_back(id);
  GenerateOptions go;
  go.max_tokens = max_tokens;
  go.temperature = 0.0;
  GenerateResult r = engine.generate_batch(ids, go);
  return tok.decode(std::vector<int32_t>(r.tokens[0].begin() + 1, r.tokens[0].end()));
}

}  // namespace nanochat

namespace nanochat {

double train_json_number(const nlohmann::ordered_json& j, const char* key, double fallback) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  if (!j[key].is_number()) fail("checkpoint meta: '%s' is not a number", key);
  return j[key].get<double>();
}

namespace {
// `a` as one shell word: as is when it is plain, else in single quotes
std::string shell_quote(const std::string& a) {
  bool plain = !a.empty();
  for (char ch : a) plain = plain && (std::isalnum((unsigned char)ch) || (ch && std::strchr("_./=:,+-@%", ch)));
  if (plain) return a;
  std::string q = "'";
  for (char ch : a) q += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
  return q + "'";
}
}  // namespace

std::string train_resume_command(const std::vector<std::string>& argv, int64_t step) {
  std::string cmd;
  for (size_t i = 0; i < argv.size(); i++) {
    const std::string& a = argv[i];
    if (a.rfind("--resume", 0) == 0) {
      if (a.find('=') == std::string::npos && i + 1 < argv.size()) i++;  // and its value
      continue;
    }
    cmd += (cmd.empty() ? "" : " ") + shell_quote(a);
  }
  return strprintf("%s --resume-from-step %lld", cmd.c_str(), (long long)step);
}

bool train_any_rank(bool flag, Dist& dist, torch::Device device) {
  torch::Tensor t = torch::tensor({(int64_t)flag}, torch::kLong).to(device);
  dist.all_reduce(t, ReduceOp::MAX);
  return t.item<int64_t>() != 0;
}

std::optional<ModelCheckpoint> train_resume_model(GPT& model, const std::string& dir, int64_t step, int64_t vocab_size) {
  if (step < 0) return std::nullopt;
  log_info("resuming from %s step %lld", dir.c_str(), (long long)step);
  ModelCheckpoint ckpt = checkpoint_load_model(dir, step);
  checkpoint_check_vocab(ckpt.meta, vocab_size, dir);
  checkpoint_load_into_gpt(model, ckpt.tensors, checkpoint_model_path(dir, step));
  return ckpt;
}

}  // namespace nanochat
