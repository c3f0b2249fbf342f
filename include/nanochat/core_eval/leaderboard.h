// The leaderboard's one number, "time to GPT-2": the training-loop wall time (evaluations and
// logging excluded, the first 10 steps excluded, as base-train's total_training_time) at the
// first CORE evaluation whose score beats GPT-2 (1.6B)'s 0.256525. A run that never beats it
// has no time; it says how far below GPT-2 its last CORE ended instead.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace nanochat {

constexpr double kGpt2Core = 0.256525;  // GPT-2 1.6B's CORE score, the bar to beat (strictly)

struct CorePoint {
  int64_t step;
  double seconds;  // total_training_time when CORE was evaluated at this step
  double core;
};

struct TimeToGpt2 {
  bool evaluated = false;  // there was at least one CORE evaluation
  bool reached = false;    // some CORE > kGpt2Core
  int64_t step = -1;       // reached: the first such step; else the last evaluated step
  double seconds = 0;      // training-loop time at `step`
  double core = 0;         // CORE at `step`
  double gap = 0;          // kGpt2Core - core (> 0: below GPT-2)
};

// points in any order (they are taken by step); a later point of the same step wins
TimeToGpt2 leaderboard_time_to_gpt2(std::vector<CorePoint> points);

// the CORE lines of a base-train metrics.jsonl ({"step", "core_metric", "total_training_time"});
// lines without a training time (written before it was recorded) are left out
std::vector<CorePoint> leaderboard_core_points(const std::string& metrics_path);

// one line without ':' (the report's summary splits on it), e.g.
// "2.91h (10493.0s) at step 14889, CORE 0.2578 > 0.256525" or
// "not reached, final CORE 0.2100 at step 500 is 0.0465 below 0.256525"
std::string leaderboard_line(const TimeToGpt2& t);

// the metrics.jsonl record of the result, at `step`: time_to_gpt2 (seconds) and
// time_to_gpt2_step when reached, and always gpt2_core_gap (kGpt2Core - that CORE)
nlohmann::json leaderboard_metrics_record(const TimeToGpt2& t, int64_t step);

}  // namespace nanochat
