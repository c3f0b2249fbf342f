// The save that base-train and SFT share (checkpoint_flags.cpp), apart from commands.h so that
// the stages that save nothing do not parse LibTorch's tensor header for it.
#pragma once
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "nanochat/common/named_tensors.h"

namespace nanochat {

// a training stage's save, on every rank: checkpoint_save_training (rank 0 passes the model's
// tensors, the others none), then rank 0's --keep-last pruning and one log line
void cli_save_training_checkpoint(const std::string& dir, int64_t step, const NamedTensors& model,
                                  const nlohmann::ordered_json& meta, const NamedTensors& optim,
                                  const nlohmann::ordered_json& optim_state, const OutputFlags& out, Dist& dist);

}  // namespace nanochat
