// Reads files written by Python's torch.save (the zip format of PyTorch >= 1.6: data.pkl
// plus one data/<key> record per storage) with a restricted unpickler, so upstream
// nanochat checkpoints (model_*.pt, optim_*.pt) load without Python. Like
// torch.load(weights_only=True), and stricter: only the opcodes of plain containers and
// numbers, and only the globals that rebuild tensors (collections.OrderedDict,
// torch._utils._rebuild_tensor_v2 / _rebuild_parameter, torch.<Type>Storage). Any other
// global (os.system, builtins.eval, ...) is refused before anything runs: one Error naming
// the file and the global. LibTorch's own torch::pickle_load cannot read an OrderedDict
// state_dict, hence this reader.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

#include "nanochat/checkpoint/safetensors.h"

namespace nanochat {

// any picklable tree of dicts/lists/tuples/numbers/strings/tensors, split in two:
// `tensors` holds each tensor under its dotted path ("state.0.exp_avg", "param_groups.1.x"),
// and `tree` is the rest as JSON, each tensor replaced by {"tensor": "<its dotted path>"}.
// Tuples become arrays, None null, int dict keys their decimal string.
struct TorchPickle {
  nlohmann::ordered_json tree;
  NamedTensors tensors;
};
TorchPickle torch_pickle_load(const std::string& path);

// torch.save(model.state_dict()): an (Ordered)dict of name -> tensor, in the saved order.
// Tensors keep their dtype; views of one storage keep sharing it, as in Python.
NamedTensors torch_pickle_load_state_dict(const std::string& path);

}  // namespace nanochat
