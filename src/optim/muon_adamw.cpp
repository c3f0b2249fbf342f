// The three phases of upstream's DistMuonAdamW.step(), which on one rank reduce to
// MuonAdamW.step(): no collectives, the same kernels on whole params.
#include "nanochat/optim.h"

#include <algorithm>
#include <cmath>
#include <torch/torch.h>

#include "nanochat/common/error.h"
#include "nanochat/dist.h"
#include "nanochat/kernels.h"

namespace nanochat {

// AdamW params below this many elements are all-reduced and updated whole on every rank
static constexpr int64_t kAdamwShardMinNumel = 1024;

struct MuonAdamW::Pending {
  std::vector<std::vector<DistWork>> adam_reduce;  // [group][param]; no work = no grad (skip)
  std::vector<std::vector<bool>> adam_has_grad;
  std::vector<DistWork> muon_reduce;  // [group]: this rank's chunk of the averaged stack
  struct Gather {
    DistWork work;
    std::vector<torch::Tensor> params;  // Muon: row i of the result is params[i]; AdamW: none (in place)
  };
  std::vector<Gather> gathers;
};

static std::string shape_str(const torch::Tensor& t) { return c10::str(t.sizes()); }

MuonAdamW::MuonAdamW(std::vector<OptimGroup> groups, Dist* dist, torch::ScalarType compute_dtype)
    : groups_(std::move(groups)), dist_(dist), compute_dtype_(compute_dtype) {
  adam_.resize(groups_.size());
  muon_.resize(groups_.size());
  for (size_t g = 0; g < groups_.size(); g++) {
    const OptimGroup& grp = groups_[g];
    for (const auto& p : grp.params)
      if (!p.defined()) fail("optimizer group %zu (%s) holds an undefined tensor", g, grp.name.c_str());
    if (grp.kind == OptimKind::adamw) {
      adam_[g].resize(grp.params.size());
      for (const auto& p : grp.params)
        if (adamw_sharded(p) && p.size(0) % world() != 0)
          fail(
              "AdamW group %s: a param of shape %s is sharded along dim 0 over %d ranks, so "
              "shape[0] must be a multiple of the world size; change the number of ranks or "
              "the model size",
              grp.name.c_str(), shape_str(p).c_str(), world());
    } else {
      if (grp.ns_steps < 1 || grp.ns_steps > 5)
        fail("Muon group %s: ns_steps %d is outside 1..5", grp.name.c_str(), grp.ns_steps);
      for (const auto& p : grp.params)
        if (p.dim() != 2 || !p.sizes().equals(grp.params[0].sizes()))
          fail("Muon group %s: every param must be a matrix of one shape, got %s and %s", grp.name.c_str(),
               shape_str(grp.params[0]).c_str(), shape_str(p).c_str());
    }
  }
}

int MuonAdamW::world() const { return dist_ ? dist_->world_size() : 1; }
int MuonAdamW::rank() const { return dist_ ? dist_->rank() : 0; }

bool MuonAdamW::adamw_sharded(const torch::Tensor& p) const { return world() > 1 && p.numel() >= kAdamwShardMinNumel; }

void MuonAdamW::zero_grad() {
  for (auto& grp : groups_)
    for (auto& p : grp.params)
      if (p.grad().defined()) p.mutable_grad().reset();
}

// identity "collective" for one rank
static DistWork done(torch::Tensor t) {
  return {nullptr, [t] { return t; }};
}

// phase 1: launch this group's gradient reductions without waiting
void MuonAdamW::launch_reduce(size_t g, Pending& pending) {
  const OptimGroup& grp = groups_[g];
  const int W = world();
  if (grp.kind == OptimKind::adamw) {
    for (size_t i = 0; i < grp.params.size(); i++) {
      torch::Tensor grad = grp.params[i].grad();
      pending.adam_has_grad[g].push_back(grad.defined());
      if (!grad.defined()) {
        if (W > 1)
          fail(
              "rank %d: param %zu of optimizer group %s has no gradient; with several ranks "
              "every param needs one (the gradients are averaged across ranks)",
              rank(), i, grp.name.c_str());
        pending.adam_reduce[g].push_back(done(grad));
        continue;
      }
      if (W == 1) pending.adam_reduce[g].push_back(done(grad));
      else if (!adamw_sharded(grp.params[i]))
        pending.adam_reduce[g].push_back(dist_->all_reduce_async(grad, ReduceOp::AVG));
      else pending.adam_reduce[g].push_back(dist_->reduce_scatter_async(grad, ReduceOp::AVG));
    }
    return;
  }
  if (grp.params.empty()) {
    pending.muon_reduce[g] = done(torch::Tensor());
    return;
  }
  std::vector<torch::Tensor> grads;
  for (size_t i = 0; i < grp.params.size(); i++) {
    torch::Tensor grad = grp.params[i].grad();
    if (!grad.defined()) fail("rank %d: param %zu of Muon group %s has no gradient", rank(), i, grp.name.c_str());
    grads.push_back(grad);
  }
  if (W == 1) {  // one rank reads the grads where they are
    pending.muon_reduce[g] = done(torch::Tensor());
    return;
  }
  // (K, rows, cols); the dist layer zero-pads it to ceil(K/W)*W rows on the wire
  pending.muon_reduce[g] = dist_->reduce_scatter_async(torch::stack(grads), ReduceOp::AVG);
}

// phase 2: wait for this group's reductions, update, launch the gathers
void MuonAdamW::compute_group(size_t g, Pending& pending) {
  OptimGroup& grp = groups_[g];
  const int W = world(), R = rank();
  if (grp.kind == OptimKind::adamw) {
    for (size_t i = 0; i < grp.params.size(); i++) {
      torch::Tensor grad_slice = pending.adam_reduce[g][i].wait();
      if (!pending.adam_has_grad[g][i]) continue;
      torch::Tensor p = grp.params[i];
      const bool sharded = adamw_sharded(p);
      torch::Tensor p_slice = p;
      if (sharded) {
        const int64_t rs = p.size(0) / W;
        p_slice = p.narrow(0, R * rs, rs);
      }
      AdamState& st = adam_[g][i];
      if (!st.exp_avg.defined()) {
        st.step = 0;
        st.exp_avg = torch::zeros_like(p_slice);
        st.exp_avg_sq = torch::zeros_like(p_slice);
      }
      st.step++;
      kernels_adamw_step(p_slice, grad_slice, st.exp_avg, st.exp_avg_sq, st.step, grp.lr, grp.betas[0], grp.betas[1],
                         grp.eps, grp.weight_decay);
      if (sharded) pending.gathers.push_back({dist_->all_gather_into_async(p), {}});  // p_slice is p's rows
    }
    return;
  }
  if (grp.params.empty()) return;
  torch::Tensor grad_chunk = pending.muon_reduce[g].wait();
  const torch::Tensor& p0 = grp.params[0];
  const int64_t K = (int64_t)grp.params.size(), rows = p0.size(0), cols = p0.size(1);
  const int64_t chunk = (K + W - 1) / W;
  auto [begin, end] = dist_shard_range(K, W, R);  // rank R owns params [R*chunk, min(K, (R+1)*chunk))
  const int64_t owned = end - begin;
  MuonState& st = muon_[g];
  if (!st.momentum_buffer.defined()) {
    st.momentum_buffer = torch::zeros({chunk, rows, cols}, p0.options());
    st.second_momentum_buffer = rows >= cols ? torch::zeros({chunk, rows, 1}, p0.options())
                                             : torch::zeros({chunk, 1, cols}, p0.options());
  }
  // the owned params are updated in place, from their own grads (one rank) or the averaged chunk
  std::vector<torch::Tensor> owned_params(grp.params.begin() + begin, grp.params.begin() + end), grads;
  for (int64_t i = 0; i < owned; i++) grads.push_back(W == 1 ? owned_params[(size_t)i].grad() : grad_chunk[i]);
  if (owned > 0) {
    const double lr = grp.lr * std::sqrt(std::max(1.0, (double)rows / (double)cols));
    optim_muon_step(grads, owned_params, st.momentum_buffer.narrow(0, 0, owned),
                    st.second_momentum_buffer.narrow(0, 0, owned), grp.momentum, lr, grp.weight_decay, grp.beta2,
                    grp.ns_steps, compute_dtype_ == torch::kBFloat16);
  }
  if (W == 1) return;
  torch::Tensor updated = owned > 0 ? torch::stack(owned_params) : torch::empty({0, rows, cols}, p0.options());
  std::vector<torch::Tensor> params(grp.params.begin(), grp.params.end());
  pending.gathers.push_back({dist_->all_gather_async(updated, K), params});
}

void MuonAdamW::step() {
  torch::NoGradGuard no_grad;
  Pending pending;
  pending.adam_reduce.resize(groups_.size());
  pending.adam_has_grad.resize(groups_.size());
  pending.muon_reduce.resize(groups_.size());
  for (size_t g = 0; g < groups_.size(); g++) launch_reduce(g, pending);
  for (size_t g = 0; g < groups_.size(); g++) compute_group(g, pending);
  // phase 3: every gather done (AdamW's landed in their params), then each Muon group's stack
  // copied back in one foreach copy (padding ignored), as upstream
  for (auto& gather : pending.gathers) {
    torch::Tensor result = gather.work.wait();
    if (!gather.params.empty()) at::_foreach_copy_(gather.params, result.unbind(0));
  }
  kernels_fp8_weights_changed();  // FP8 training's weight copies: made anew at the next forward
}

}  // namespace nanochat
