// The end of a training step, as base-train, SFT and RL all end theirs: the schedule's values
// pushed into the optimizer's groups, the step (through the fp16 loss scaler where there is
// one), and the step's loss with the stop flag read back one step late, so that the host queues
// the next step before it waits for this one.
#pragma once
#include <cstdint>
#include <optional>

#include "nanochat/common/progress.h"
#include "nanochat/common/tensor.h"
#include "nanochat/dist.h"
#include "nanochat/optim.h"
#include "nanochat/telemetry/deferred_readback.h"

namespace nanochat {

// a step's place in its schedule: every group's lr is initial_lr * lrm; the Muon groups'
// momentum and weight decay where given (else left as they are)
struct StepSchedule {
  double lrm = 1;
  std::optional<double> muon_momentum, muon_weight_decay;
};

// one optimizer step at `s`, then the gradients zeroed; with a scaler (fp16) a step whose
// gradients overflowed is skipped with a warning naming `step`
void train_optimizer_step(MuonAdamW& opt, GradScaler* scaler, const StepSchedule& s, int64_t step, Dist& dist);

// Each step's loss (the mean over ranks) and whether any rank was signalled, in one collective,
// read back one step late on a GPU (at once on the CPU). A step's time is the time between two
// arrivals, which is the device's step time once the queue is steady.
class StepReadback {
 public:
  StepReadback(torch::Device device, Dist& dist);
  void begin_step();                            // before the step's work: with nothing in flight its time starts now
  void push(const torch::Tensor& loss);         // this rank's loss of the step just queued (a scalar on the device)
  bool due() const { return readback_.due(); }  // take() one now
  bool empty() const { return readback_.empty(); }
  struct Arrived {
    double loss;  // the mean over ranks
    bool stop;    // a rank received SIGINT/SIGTERM
    double dt;    // seconds since the previous arrival
  };
  Arrived take();  // the oldest step pushed (waits for its copy)

 private:
  DeferredReadback readback_;
  Dist& dist_;
  Timer since_last_;
};

}  // namespace nanochat
