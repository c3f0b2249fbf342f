// The save that base-train and SFT share (checkpoint_flags.cpp), and their graceful stop, apart
// from commands.h so that the stages that save nothing do not parse LibTorch's tensor header for it.
#pragma once
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "nanochat/common/log.h"
#include "nanochat/common/named_tensors.h"

namespace nanochat {

// a training stage's save, on every rank: checkpoint_save_training (rank 0 passes the model's
// tensors, the others none), then rank 0's --keep-last pruning and one log line
void cli_save_training_checkpoint(const std::string& dir, int64_t step, const NamedTensors& model,
                                  const nlohmann::ordered_json& meta, const NamedTensors& optim,
                                  const nlohmann::ordered_json& optim_state, const OutputFlags& out, Dist& dist);

// A graceful stop, once every rank has seen SIGINT/SIGTERM after the same step: the state after
// the last step that ran saved as `next_step` (save(next_step), on every rank), and the command
// that resumes it said. Returns the exit code, 0.
template <class Save>
int cli_stop_and_save(Save&& save, int64_t next_step) {
  save(next_step);
  log_info("stopped by signal after step %lld. Resume with:\n  %s", (long long)(next_step - 1),
           cli_resume_command(cli_argv(), next_step).c_str());
  return 0;
}

}  // namespace nanochat
