#include "nanochat/core_eval/leaderboard.h"

#include <algorithm>
#include <map>

#include "nanochat/common/error.h"
#include "nanochat/common/jsonl.h"

namespace nanochat {

TimeToGpt2 leaderboard_time_to_gpt2(std::vector<CorePoint> points) {
  std::map<int64_t, CorePoint> by_step;
  for (const CorePoint& p : points) by_step[p.step] = p;  // a re-evaluated step: the later one
  TimeToGpt2 t;
  if (by_step.empty()) return t;
  t.evaluated = true;
  const CorePoint* at = &by_step.rbegin()->second;  // not reached: how the run ended
  for (const auto& [step, p] : by_step)
    if (p.core > kGpt2Core) {
      t.reached = true;
      at = &p;
      break;
    }
  t.step = at->step;
  t.seconds = at->seconds;
  t.core = at->core;
  t.gap = kGpt2Core - at->core;
  return t;
}

std::vector<CorePoint> leaderboard_core_points(const std::string& metrics_path) {
  std::vector<CorePoint> out;
  jsonl_for_each(metrics_path, "metrics file", [&](const nlohmann::json& v, int64_t, const std::string&) {
    if (!v.is_object() || !v.contains("core_metric") || !v.contains("total_training_time") || !v.contains("step"))
      return;
    if (!v["core_metric"].is_number() || !v["total_training_time"].is_number() || !v["step"].is_number()) return;
    out.push_back({v["step"].get<int64_t>(), v["total_training_time"].get<double>(), v["core_metric"].get<double>()});
  });
  return out;
}

std::string leaderboard_line(const TimeToGpt2& t) {
  if (!t.evaluated) return "unknown (no CORE evaluation)";
  if (t.reached)
    return strprintf("%.2fh (%.1fs) at step %lld, CORE %.4f > %g", t.seconds / 3600, t.seconds, (long long)t.step,
                     t.core, kGpt2Core);
  return strprintf("not reached, final CORE %.4f at step %lld is %.4f below %g", t.core, (long long)t.step, t.gap,
                   kGpt2Core);
}

nlohmann::json leaderboard_metrics_record(const TimeToGpt2& t, int64_t step) {
  nlohmann::json r = {{"step", step}};
  if (t.reached) {
    r["time_to_gpt2"] = t.seconds;
    r["time_to_gpt2_step"] = t.step;
  }
  r["gpt2_core_gap"] = t.gap;
  return r;
}

}  // namespace nanochat
