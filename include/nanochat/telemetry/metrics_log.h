// One JSON object per line in <checkpoint dir>/metrics.jsonl: what a run measured, step by
// step (training lines, eval lines), for the report and for plotting. Only rank 0 writes.
// Lines are flushed as they are written, so a crash loses at most the line being written.
// The same scalars (every finite number of a line but "step") go to a TensorBoard event file
// in the same directory, so `tensorboard --logdir <checkpoint dir>` shows them live;
// NANOCHAT_TENSORBOARD=0 turns that off. A TensorBoard file that cannot be written is a
// warning, never the end of a run.
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

#include "nanochat/telemetry/tensorboard_writer.h"

namespace nanochat {

class MetricsLog {
 public:
  MetricsLog() = default;  // disabled: log() does nothing
  // resume_step >= 0: a resumed run; lines of steps >= resume_step (written after the
  // checkpoint we resume from) are dropped first, so the file reads like one run
  MetricsLog(const std::string& path, int64_t resume_step);
  ~MetricsLog();
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;
  MetricsLog(MetricsLog&& other) noexcept;
  MetricsLog& operator=(MetricsLog&& other) noexcept;

  void log(const nlohmann::json& record);  // must carry "step"
  const std::string& path() const { return path_; }
  const std::string& tensorboard_path() const { return tensorboard_.path(); }  // "" when off

 private:
  std::string path_;
  FILE* file_ = nullptr;
  TensorBoardWriter tensorboard_;
};

}  // namespace nanochat
