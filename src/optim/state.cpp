// The per-rank optimizer state dict (upstream's optim_<step>_rank<r>.pt) split the way the checkpoint module stores it: named tensors
// (safetensors) plus JSON for the step counts and group hyperparameters.
#include <map>
#include <torch/torch.h>

#include "nanochat/common/error.h"
#include "nanochat/optim.h"

namespace nanochat {

static std::string state_name(size_t index, const char* what) { return "state." + std::to_string(index) + "." + what; }

static const char* kind_name(OptimKind k) { return k == OptimKind::adamw ? "adamw" : "muon"; }

NamedTensors MuonAdamW::state_tensors() const {
  NamedTensors out;
  size_t index = 0;
  for (size_t g = 0; g < groups_.size(); g++) {
    if (groups_[g].kind == OptimKind::adamw) {
      for (const AdamState& st : adam_[g]) {
        if (st.exp_avg.defined()) {
          out.emplace_back(state_name(index, "exp_avg"), st.exp_avg);
          out.emplace_back(state_name(index, "exp_avg_sq"), st.exp_avg_sq);
        }
        index++;
      }
    } else {
      if (muon_[g].momentum_buffer.defined()) {
        out.emplace_back(state_name(index, "momentum_buffer"), muon_[g].momentum_buffer);
        out.emplace_back(state_name(index, "second_momentum_buffer"), muon_[g].second_momentum_buffer);
      }
      index += groups_[g].params.size();
    }
  }
  return out;
}

nlohmann::json MuonAdamW::state_json() const {
  nlohmann::json groups = nlohmann::json::array(), state = nlohmann::json::object();
  size_t index = 0;
  for (size_t g = 0; g < groups_.size(); g++) {
    const OptimGroup& grp = groups_[g];
    nlohmann::json j = {{"kind", kind_name(grp.kind)},
                        {"name", grp.name},
                        {"lr", grp.lr},
                        {"initial_lr", grp.initial_lr},
                        {"weight_decay", grp.weight_decay}};
    nlohmann::json params = nlohmann::json::array();
    for (size_t i = 0; i < grp.params.size(); i++) {
      params.push_back(index + i);
      if (grp.kind == OptimKind::adamw && adam_[g][i].exp_avg.defined())
        state[std::to_string(index + i)] = {{"step", adam_[g][i].step}};
    }
    j["params"] = params;
    if (grp.kind == OptimKind::adamw) {
      j["betas"] = {grp.betas[0], grp.betas[1]};
      j["eps"] = grp.eps;
    } else {
      j["momentum"] = grp.momentum;
      j["ns_steps"] = grp.ns_steps;
      j["beta2"] = grp.beta2;
    }
    groups.push_back(j);
    index += grp.params.size();
  }
  return {{"world_size", world()}, {"rank", rank()}, {"param_groups", groups}, {"state", state}};
}

void MuonAdamW::load_state(const NamedTensors& tensors, const nlohmann::json& json) {
  try {
    const int saved_world = json.at("world_size").get<int>(), saved_rank = json.at("rank").get<int>();
    if (saved_world != world())
      fail(
          "optimizer state was saved by %d ranks and this run has %d; the state is sharded per rank "
          "(no re-sharding), so resume with the same number of ranks",
          saved_world, world());
    if (saved_rank != rank())
      fail("optimizer state of rank %d was given to rank %d; load each rank's own file", saved_rank, rank());
    const auto& jgroups = json.at("param_groups");
    if (jgroups.size() != groups_.size())
      fail("optimizer state has %zu param groups, this optimizer %zu", jgroups.size(), groups_.size());
    std::map<std::string, torch::Tensor> by_name;
    for (const auto& [name, t] : tensors) by_name[name] = t;
    size_t used = 0;
    // a saved tensor, checked against the shape this rank expects, copied to the param's dtype/device
    auto take = [&](size_t index, const char* what, const torch::Tensor& like, c10::IntArrayRef shape) {
      std::string name = state_name(index, what);
      auto it = by_name.find(name);
      if (it == by_name.end()) fail("optimizer state lacks tensor %s", name.c_str());
      if (!it->second.sizes().equals(shape))
        fail("optimizer state tensor %s has shape %s, expected %s", name.c_str(), c10::str(it->second.sizes()).c_str(),
             c10::str(shape).c_str());
      used++;
      return it->second.to(like.device(), like.scalar_type(), /*non_blocking=*/false, /*copy=*/true).contiguous();
    };
    const auto& jstate = json.at("state");
    size_t index = 0;
    for (size_t g = 0; g < groups_.size(); g++) {
      OptimGroup& grp = groups_[g];
      const auto& j = jgroups[g];
      if (j.at("kind").get<std::string>() != kind_name(grp.kind) || j.at("params").size() != grp.params.size())
        fail("optimizer state group %zu is %s with %zu params, this optimizer's is %s with %zu", g,
             j.at("kind").get<std::string>().c_str(), j.at("params").size(), kind_name(grp.kind), grp.params.size());
      grp.lr = j.at("lr").get<double>();
      grp.initial_lr = j.at("initial_lr").get<double>();
      grp.weight_decay = j.at("weight_decay").get<double>();
      if (grp.kind == OptimKind::adamw) {
        grp.betas = {j.at("betas").at(0).get<double>(), j.at("betas").at(1).get<double>()};
        grp.eps = j.at("eps").get<double>();
        for (size_t i = 0; i < grp.params.size(); i++) {
          AdamState& st = adam_[g][i];
          st = AdamState();
          auto it = jstate.find(std::to_string(index + i));
          if (it == jstate.end()) continue;  // never stepped
          const torch::Tensor& p = grp.params[i];
          std::vector<int64_t> shape = p.sizes().vec();
          if (adamw_sharded(p)) shape[0] /= world();
          st.step = it->at("step").get<int64_t>();
          st.exp_avg = take(index + i, "exp_avg", p, shape);
          st.exp_avg_sq = take(index + i, "exp_avg_sq", p, shape);
        }
      } else {
        grp.momentum = j.at("momentum").get<double>();
        grp.ns_steps = j.at("ns_steps").get<int>();
        grp.beta2 = j.at("beta2").get<double>();
        muon_[g] = MuonState();
        if (!grp.params.empty() && by_name.count(state_name(index, "momentum_buffer"))) {
          const torch::Tensor& p = grp.params[0];
          const int64_t K = (int64_t)grp.params.size(), chunk = (K + world() - 1) / world();
          const int64_t rows = p.size(0), cols = p.size(1);
          muon_[g].momentum_buffer = take(index, "momentum_buffer", p, {chunk, rows, cols});
          std::vector<int64_t> second = rows >= cols ? std::vector<int64_t>{chunk, rows, 1}
                                                     : std::vector<int64_t>{chunk, 1, cols};
          muon_[g].second_momentum_buffer = take(index, "second_momentum_buffer", p, second);
        }
      }
      index += grp.params.size();
    }
    if (used != by_name.size())
      fail("optimizer state has %zu tensors this optimizer does not know (of %zu)", by_name.size() - used,
           by_name.size());
  } catch (const nlohmann::json::exception& e) {
    fail("optimizer state JSON is malformed: %s", e.what());
  }
}

}  // namespace nanochat
