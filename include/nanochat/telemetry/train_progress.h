// The running numbers behind a training run's per-step line, kept as upstream's base_train.py
// keeps them: the EMA of the loss (beta 0.9) and its bias correction, tokens/s and MFU from the
// step's wall time, the training time (steps after the first 10, which warm up and compile),
// and the ETA from the mean of those steps. Each step is one log line and one metrics.jsonl
// record.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "nanochat/telemetry/metrics_log.h"

namespace nanochat {

struct TrainStep {
  int64_t step = 0;
  double loss = 0;                         // the mean over ranks, raw
  double dt = 0;                           // seconds since the previous step's values arrived
  double lrm = 1;                          // the learning-rate multiplier it ran with
  double data_wait = 0;                    // seconds it waited for the loader
  int epoch = 1, file = 0, row_group = 0;  // where the loader was
};

class TrainProgress {
 public:
  // tokens_per_step over all ranks; peak_flops over all ranks (MFU's denominator); a resumed run
  // passes the EMA and the training time its checkpoint saved
  TrainProgress(int64_t num_iterations, int64_t tokens_per_step, int64_t flops_per_token, double peak_flops,
                std::string mfu_label, double smooth_loss = 0, double total_training_time = 0);

  // one step's values arrived: update, log its line, write its record
  void record(const TrainStep& s, MetricsLog& metrics);

  double smooth_loss() const { return smooth_loss_; }  // to save in a checkpoint (not debiased)
  double debiased_loss(int64_t steps) const;           // the EMA after `steps` steps, bias-corrected
  double total_training_time() const { return total_training_time_; }
  double last_mfu() const { return last_mfu_; }
  // the steady rate: the mean step time over the later half of the steps recorded (the first warm up)
  double steady_step_seconds() const;
  double mfu_at(double step_seconds) const;  // in percent

 private:
  int64_t num_iterations_, tokens_per_step_, flops_per_token_;
  double peak_flops_;
  std::string mfu_label_;
  double smooth_loss_, total_training_time_;
  double timed_seconds_ = 0;  // steps > 10 of this process, for the ETA
  int64_t timed_steps_ = 0;
  double last_mfu_ = 0;
  std::vector<double> step_seconds_;
};

}  // namespace nanochat
