// The scaling rules and schedules of upstream's base_train.py and chat_sft.py, term by term as upstream writes them.
#include "nanochat/train_schedule.h"

#include <algorithm>
#include <cmath>

#include "nanochat/common/error.h"

namespace nanochat {

int64_t python_round(double x) {
  double r = std::round(x);                                                // halves away from zero ...
  if (std::fabs(x - std::trunc(x)) == 0.5) r = 2.0 * std::round(x / 2.0);  // ... but Python: to even
  return static_cast<int64_t>(r);
}

TrainScaling train_scaling(int64_t scaling_params, int64_t scaling_params_d12, double target_param_data_ratio,
                           int64_t total_batch_size, double weight_decay) {
  TrainScaling s;
  s.target_tokens = static_cast<int64_t>(target_param_data_ratio * static_cast<double>(scaling_params));
  s.tokens_ref = target_param_data_ratio * static_cast<double>(scaling_params_d12);
  const double data_ratio = static_cast<double>(s.target_tokens) / s.tokens_ref;  // D / D_REF
  if (total_batch_size == -1) {
    // Power Lines: the optimal batch grows as D^0.383
    double b = static_cast<double>(kBatchRef) * std::pow(data_ratio, 0.383);
    s.total_batch_size = int64_t{1} << python_round(std::log2(b));
  } else {
    s.total_batch_size = total_batch_size;
  }
  const double batch_ratio = static_cast<double>(s.total_batch_size) / static_cast<double>(kBatchRef);
  s.batch_lr_scale = std::sqrt(batch_ratio);
  s.weight_decay = weight_decay * std::sqrt(batch_ratio) / data_ratio;
  return s;
}

int64_t train_num_iterations(int64_t num_iterations, double target_flops, double flops_per_token,
                             const TrainScaling& scaling, double target_param_data_ratio) {
  if (num_iterations > 0) return num_iterations;
  if (target_flops > 0)
    return python_round(target_flops / (flops_per_token * static_cast<double>(scaling.total_batch_size)));
  if (target_param_data_ratio > 0) return scaling.target_tokens / scaling.total_batch_size;
  fail("no training horizon: set --num-iterations, --target-flops or --target-param-data-ratio (> 0)");
}

int64_t train_grad_accum(int64_t total_batch_size, int64_t device_batch_size, int64_t max_seq_len, int world_size) {
  const int64_t per_step = device_batch_size * max_seq_len * world_size;
  if (per_step <= 0 || total_batch_size <= 0 || total_batch_size % per_step != 0)
    fail(
        "total_batch_size (%lld) must be a multiple of %lld = --device-batch-size %lld x --max-seq-len %lld"
        " x world size %d; change --total-batch-size or --device-batch-size",
        (long long)total_batch_size, (long long)per_step, (long long)device_batch_size, (long long)max_seq_len,
        world_size);
  return total_batch_size / per_step;
}

double lr_multiplier(int64_t it, int64_t num_iterations, int64_t warmup_steps, double warmdown_ratio,
                     double final_lr_frac) {
  const int64_t warmdown_iters = python_round(warmdown_ratio * static_cast<double>(num_iterations));
  if (it < warmup_steps) return static_cast<double>(it + 1) / static_cast<double>(warmup_steps);
  if (it <= num_iterations - warmdown_iters) return 1.0;
  const double progress = static_cast<double>(num_iterations - it) / static_cast<double>(warmdown_iters);
  return progress + (1.0 - progress) * final_lr_frac;
}

double muon_momentum(int64_t it, int64_t num_iterations, double warmdown_ratio) {
  const int64_t warmdown_iters = python_round(warmdown_ratio * static_cast<double>(num_iterations));
  const int64_t warmdown_start = num_iterations - warmdown_iters;
  if (it < 400) {
    const double frac = static_cast<double>(it) / 400.0;
    return (1.0 - frac) * 0.85 + frac * 0.97;
  }
  if (it >= warmdown_start && warmdown_iters > 0) {
    const double p = static_cast<double>(it - warmdown_start) / static_cast<double>(warmdown_iters);
    return 0.97 * (1.0 - p) + 0.90 * p;
  }
  return 0.97;
}

double muon_weight_decay(int64_t it, int64_t num_iterations, double weight_decay) {
  return weight_decay * 0.5 * (1.0 + std::cos(M_PI * static_cast<double>(it) / static_cast<double>(num_iterations)));
}

double sft_lr_multiplier(double progress, double warmup_ratio, double warmdown_ratio, double final_lr_frac) {
  if (progress < warmup_ratio) return (progress + 1e-8) / warmup_ratio;
  if (progress <= 1.0 - warmdown_ratio) return 1.0;
  const double decay = (progress - (1.0 - warmdown_ratio)) / warmdown_ratio;
  return (1.0 - decay) * 1.0 + decay * final_lr_frac;
}

double sft_muon_momentum(int64_t it) {
  const double frac = std::min(static_cast<double>(it) / 300.0, 1.0);
  return (1.0 - frac) * 0.85 + frac * 0.95;
}

}  // namespace nanochat
