// The end of a training step that the three training stages share (train_schedule/train_step.h).
#include "nanochat/train_schedule/train_step.h"

#include <ATen/ops/full.h>
#include <ATen/ops/stack.h>

#include "nanochat/common/log.h"
#include "nanochat/common/stop_signal.h"

namespace nanochat {

void train_optimizer_step(MuonAdamW& opt, GradScaler* scaler, const StepSchedule& s, int64_t step, Dist& dist) {
  for (OptimGroup& g : opt.groups()) {
    g.lr = g.initial_lr * s.lrm;
    if (g.kind != OptimKind::muon) continue;
    if (s.muon_momentum) g.momentum = *s.muon_momentum;
    if (s.muon_weight_decay) g.weight_decay = *s.muon_weight_decay;
  }
  if (!scaler) opt.step();
  else if (!scaler->step(opt, &dist))
    log_warn("step %lld: fp16 gradients overflowed; step skipped, loss scale now %g", (long long)step,
             scaler->scale_value());
  opt.zero_grad();
}

StepReadback::StepReadback(torch::Device device, Dist& dist) : readback_(device), dist_(dist) {}

void StepReadback::begin_step() {
  if (readback_.empty()) since_last_.reset();
}

void StepReadback::push(const torch::Tensor& loss) {
  // the loss summed over ranks and the stop flag (any rank), in one collective
  auto f32 = loss.options().dtype(torch::kFloat32);
  torch::Tensor stats = at::stack(
      {loss.to(torch::kFloat32).reshape({}), at::full({}, stop_signal_received() ? 1.0 : 0.0, f32)});
  dist_.all_reduce(stats, ReduceOp::SUM);
  readback_.push(stats);
}

StepReadback::Arrived StepReadback::take() {
  const std::vector<double> v = readback_.take();
  const double dt = since_last_.seconds();
  since_last_.reset();
  return {v[0] / dist_.world_size(), v[1] > 0, dt};
}

}  // namespace nanochat
