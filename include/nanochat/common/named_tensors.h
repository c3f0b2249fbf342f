// Tensors by name, in order (files keep the order the tensors were given in: nanochat's
// state-dict order): a model's parameters, an optimizer's state, a safetensors file.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "nanochat/common/tensor.h"

namespace nanochat {

using NamedTensors = std::vector<std::pair<std::string, torch::Tensor>>;

}  // namespace nanochat
