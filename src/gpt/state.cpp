// defines: gpt_named_parameters, gpt_load_named_tensors
// The model's state as a named tensor list (nanochat's state_dict keys and order), for the
// optimizer and the checkpoint module.
#include "nanochat/gpt.h"

#include <string>
#include <unordered_map>
#include <unordered_set>

#include "nanochat/common/device.h"
#include "nanochat/common/error.h"

namespace nanochat {
namespace {

std::string shape_str(torch::IntArrayRef s) {
  std::string out = "(";
  for (size_t i = 0; i < s.size(); i++) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + (s.size() == 1 ? ",)" : ")");
}

}  // namespace

std::vector<std::pair<std::string, torch::Tensor>> gpt_named_parameters(const GPT& model) {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (const auto& item : model->named_parameters(/*recurse=*/true)) out.emplace_back(item.key(), item.value());
  return out;
}

void gpt_load_named_tensors(GPT& model, const std::vector<std::pair<std::string, torch::Tensor>>& tensors) {
  auto params = gpt_named_parameters(model);
  std::unordered_map<std::string, torch::Tensor> by_name;
  for (auto& [name, p] : params) by_name.emplace(name, p);
  std::unordered_set<std::string> seen;
  for (const auto& [name, t] : tensors) {  // check everything before writing anything
    auto it = by_name.find(name);
    if (it == by_name.end()) fail("model weights: unexpected key '%s' (not a parameter of this model)", name.c_str());
    if (!seen.insert(name).second) fail("model weights: key '%s' appears twice", name.c_str());
    if (!t.defined()) fail("model weights: key '%s' holds no tensor", name.c_str());
    if (t.sizes() != it->second.sizes())
      fail("model weights: '%s' has shape %s, the model expects %s", name.c_str(),
           shape_str(t.sizes()).c_str(), shape_str(it->second.sizes()).c_str());
    if (t.scalar_type() != it->second.scalar_type())
      fail("model weights: '%s' has dtype %s, the model expects %s", name.c_str(),
           dtype_name(t.scalar_type()).c_str(), dtype_name(it->second.scalar_type()).c_str());
  }
  for (const auto& [name, p] : params)
    if (!seen.count(name)) fail("model weights: missing key '%s'", name.c_str());
  torch::NoGradGuard no_grad;
  for (const auto& [name, t] : tensors) by_name.at(name).copy_(t);
}

}  // namespace nanochat
