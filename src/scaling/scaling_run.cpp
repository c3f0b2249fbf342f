// One base-train run as the scaling analysis sees it: sizes from the saved model config, the
// horizon recomputed from the saved flags (so a run stopped early is told from a finished one),
// the final val bpb and CORE from metrics.jsonl.
#include <cmath>

#include "nanochat/checkpoint.h"
#include "nanochat/checkpoint/checkpoint_gpt.h"
#include "nanochat/common.h"
#include "nanochat/common/jsonl.h"
#include "nanochat/gpt.h"
#include "nanochat/scaling.h"
#include "nanochat/train_schedule.h"

namespace nanochat {

namespace {

double flag_number(const nlohmann::ordered_json& user_config, const char* key, double fallback) {
  auto it = user_config.find(key);
  return it != user_config.end() && it->is_number() ? it->get<double>() : fallback;
}

std::string last_component(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

}  // namespace

ScalingRun scaling_run_load(const std::string& dir) {
  ScalingRun r;
  r.dir = dir;
  r.tag = last_component(dir);
  r.step = checkpoint_find_last_step(dir);
  const std::string meta_path = checkpoint_meta_path(dir, r.step);
  nlohmann::ordered_json meta = checkpoint_read_json(meta_path);
  const GPTConfig config = checkpoint_read_gpt_config(meta, meta_path);
  const ScalingParams counts = gpt_num_scaling_params(config);
  const double flops_per_token = (double)gpt_estimate_flops(config);
  const int64_t total_batch = (int64_t)checkpoint_meta_number(meta, "total_batch_size", 0);
  if (total_batch <= 0) fail("%s has no total_batch_size: is it a base-train checkpoint?", meta_path.c_str());
  r.depth = config.n_layer;
  r.params = counts.transformer_matrices + counts.lm_head;
  r.params_total = counts.total;
  r.tokens = total_batch * r.step;
  r.flops = flops_per_token * (double)r.tokens;

  // base-train's horizon from the flags it ran with (train_num_iterations: the batch it
  // resolved is in the meta, the tokens target is ratio x N)
  const nlohmann::ordered_json user_config = meta.contains("user_config") ? meta["user_config"]
                                                                          : nlohmann::ordered_json::object();
  const double target_flops = flag_number(user_config, "target_flops", -1);
  const double ratio = flag_number(user_config, "target_param_data_ratio", -1);
  const int64_t num_iterations = (int64_t)flag_number(user_config, "num_iterations", -1);
  if (target_flops > 0) r.flops_budget = target_flops;
  TrainScaling horizon;
  horizon.total_batch_size = total_batch;
  horizon.target_tokens = (int64_t)(ratio * (double)r.params);
  r.planned_steps = num_iterations > 0 || target_flops > 0 || ratio > 0
                        ? train_num_iterations(num_iterations, target_flops, flops_per_token, horizon, ratio)
                        : -1;

  // the last step's eval lines (a resumed run rewrites the file from its checkpoint on)
  const std::string metrics_path = dir + "/metrics.jsonl";
  if (path_exists(metrics_path))
    jsonl_for_each(metrics_path, "metrics", [&](const nlohmann::json& line, int64_t, const std::string& where) {
      if (!line.is_object() || !line.contains("step") || !line["step"].is_number_integer())
        fail("%s: a metrics line without an integer \"step\"", where.c_str());
      if (line["step"].get<int64_t>() != r.step) return;
      if (line.contains("val_bpb") && line["val_bpb"].is_number()) r.val_bpb = line["val_bpb"].get<double>();
      if (line.contains("core_metric") && line["core_metric"].is_number()) r.core = line["core_metric"].get<double>();
    });
  r.finished = r.step > 0 && r.step == r.planned_steps && r.val_bpb > 0 && std::isfinite(r.val_bpb);
  return r;
}

}  // namespace nanochat
