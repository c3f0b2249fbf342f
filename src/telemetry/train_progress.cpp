#include "nanochat/telemetry/train_progress.h"

#include <cmath>
#include <utility>

#include "nanochat/common/error.h"
#include "nanochat/common/log.h"
#include "nanochat/common/progress.h"

namespace nanochat {

TrainProgress::TrainProgress(int64_t num_iterations, int64_t tokens_per_step, int64_t flops_per_token,
                             double peak_flops, std::string mfu_label, double smooth_loss, double total_training_time)
    : num_iterations_(num_iterations),
      tokens_per_step_(tokens_per_step),
      flops_per_token_(flops_per_token),
      peak_flops_(peak_flops),
      mfu_label_(std::move(mfu_label)),
      smooth_loss_(smooth_loss),
      total_training_time_(total_training_time) {}

double TrainProgress::debiased_loss(int64_t steps) const { return smooth_loss_ / (1.0 - std::pow(0.9, (double)steps)); }

double TrainProgress::mfu_at(double step_seconds) const {
  const double tok_per_sec = (double)tokens_per_step_ / step_seconds;
  return 100.0 * (double)flops_per_token_ * tok_per_sec / peak_flops_;
}

double TrainProgress::steady_step_seconds() const {
  double sum = 0;
  size_t k = 0;
  for (size_t i = step_seconds_.size() / 2; i < step_seconds_.size(); i++, k++) sum += step_seconds_[i];
  return k ? sum / (double)k : NAN;
}

void TrainProgress::record(const TrainStep& s, MetricsLog& metrics) {
  smooth_loss_ = 0.9 * smooth_loss_ + 0.1 * s.loss;
  const double debiased = debiased_loss(s.step + 1);
  const double tok_per_sec = (double)tokens_per_step_ / s.dt;
  const double mfu = mfu_at(s.dt);
  last_mfu_ = mfu;
  step_seconds_.push_back(s.dt);
  if (s.step > 10) {
    total_training_time_ += s.dt;
    timed_seconds_ += s.dt;
    timed_steps_++;
  }
  const double eta = timed_steps_ ? timed_seconds_ / (double)timed_steps_ * (double)(num_iterations_ - s.step - 1)
                                  : NAN;
  log_info(
      "step %05lld/%05lld (%.2f%%) | loss: %.6f | lrm: %.2f | dt: %.2fms | tok/sec: %s | "
      "%s: %.2f | epoch: %d pq: %d rg: %d | data-wait: %.1f%% | total time: %.2fm%s",
      (long long)s.step, (long long)num_iterations_, 100.0 * (double)s.step / (double)num_iterations_, debiased, s.lrm,
      s.dt * 1000, format_thousands((int64_t)tok_per_sec).c_str(), mfu_label_.c_str(), mfu, s.epoch, s.file,
      s.row_group, 100.0 * s.data_wait / s.dt, total_training_time_ / 60,
      std::isnan(eta) ? "" : strprintf(" | eta: %.1fm", eta / 60).c_str());
  metrics.log({{"step", s.step},
               {"loss", debiased},
               {"loss_raw", s.loss},
               {"lrm", s.lrm},
               {"dt", s.dt},
               {"tok_per_sec", tok_per_sec},
               {"mfu", mfu},
               {"data_wait", s.data_wait / s.dt},
               {"epoch", s.epoch},
               {"total_training_time", total_training_time_},
               {"total_training_flops", (double)flops_per_token_ * (double)tokens_per_step_ * (double)(s.step + 1)}});
}

}  // namespace nanochat
