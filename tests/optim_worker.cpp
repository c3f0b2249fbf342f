// One rank of the distributed optimizer test (tests/test_optim.cpp starts 1, 2 and 3 of these
// as real Gloo processes). Every rank computes the gradient of its slice of a global batch of
// 6 synthetic samples, so the average over ranks is the one-rank gradient. After 5 steps each
// rank writes its params as float64 to OUT.rank<r>; the test compares them across worlds.
// Also checked here: save after 3 steps / load into a fresh optimizer / continue is bitwise
// the uninterrupted run (sharded state), and an unshardable AdamW param is a clear error.
#include <cstdio>
#include <fstream>
#include <map>
#include <ATen/record_function.h>
#include <torch/torch.h>

#include "nanochat/common/error.h"
#include "nanochat/compute.h"
#include "nanochat/kernels.h"
#include "nanochat/optim.h"
#include "../src/kernels/op_dispatch.h"  // kernels_cpu_supported

using namespace nanochat;

static const int kBatch = 6, kSteps = 5;

// the params: AdamW fp32 sharded (6x256), AdamW fp32 all-reduced (7x5), AdamW bf16 sharded
// (6x200, like wte), Muon K=5 wide (8x16), Muon K=4 tall (24x8; over 3 ranks the last owns
// none), Muon K=1 square (8x8)
static std::vector<std::vector<int64_t>> shapes() {
  std::vector<std::vector<int64_t>> s = {{6, 256}, {7, 5}, {6, 200}};
  for (int k = 0; k < 5; k++) s.push_back({8, 16});
  for (int k = 0; k < 4; k++) s.push_back({24, 8});
  s.push_back({8, 8});
  return s;
}

static std::vector<torch::Tensor> make_params() {
  std::vector<torch::Tensor> params;
  auto sh = shapes();
  for (size_t i = 0; i < sh.size(); i++) {
    auto gen = at::detail::createCPUGenerator(1000 + i);
    torch::Tensor p = torch::randn(sh[i], gen);
    params.push_back(i == 2 ? p.to(torch::kBFloat16) : p);
  }
  return params;
}

static std::vector<OptimGroup> make_groups(const std::vector<torch::Tensor>& p) {
  OptimGroup a;
  a.name = "adamw";
  a.params = {p[0], p[1], p[2]};
  a.lr = a.initial_lr = 0.01;
  a.betas = {0.8, 0.95};
  a.weight_decay = 0.01;
  auto muon = [&](size_t begin, size_t end) {
    OptimGroup m;
    m.kind = OptimKind::muon;
    m.name = "muon";
    m.params.assign(p.begin() + begin, p.begin() + end);
    m.lr = m.initial_lr = 0.02;
    m.weight_decay = 0.2;
    return m;
  };
  return {a, muon(3, 8), muon(8, 12), muon(12, 13)};
}

// sample b's gradient for param i at step s: small multiples of 3/64, so that every sum and
// every mean over 2, 3 or 6 samples is exact in fp32 and all worlds see the same gradient
static torch::Tensor sample_grad(int step, size_t i, int b, const std::vector<int64_t>& shape) {
  auto gen = at::detail::createCPUGenerator(100000 * step + 100 * i + b);
  return torch::randint(-21, 22, shape, gen, torch::kFloat) * (3.0 / 64.0);
}

static void set_grads(const std::vector<torch::Tensor>& params, int step, int rank, int world) {
  const int per_rank = kBatch / world;
  for (size_t i = 0; i < params.size(); i++) {
    auto shape = params[i].sizes().vec();
    torch::Tensor g = torch::zeros(shape);
    for (int b = rank * per_rank; b < (rank + 1) * per_rank; b++) g += sample_grad(step, i, b, shape);
    params[i].mutable_grad() = (g / per_rank).to(params[i].scalar_type());  // this rank's mean
  }
}

static void run_step(MuonAdamW& opt, const std::vector<torch::Tensor>& params, int step, const Dist& d) {
  set_grads(params, step, d.rank(), d.world_size());
  for (auto& g : opt.groups()) g.lr = g.initial_lr * (1.0 - 0.15 * step);  // a schedule
  for (auto& g : opt.groups()) g.momentum = 0.85 + 0.02 * step;
  opt.step();
}

// The copies into the params that one step makes, as the dispatcher sees them (RecordFunction,
// on this thread): aten::copy_ and aten::_foreach_copy_ called by the optimizer itself, not
// nested in another op, whose destination is a param
struct ParamCopies {
  int copies = 0, foreach_copies = 0;
};
static thread_local int op_depth = 0;
static std::map<const void*, int64_t> copy_targets;  // the params' data and sizes
static ParamCopies counted;
// a whole param: a copy into part of one is a shard's update (the references' fp32 write-back
// of a bf16 shard) or Gloo's own copy out of its gather buffer, which NCCL's in-place gather has not
static bool is_param(const torch::Tensor& t) {
  auto it = copy_targets.find(t.data_ptr());
  return it != copy_targets.end() && it->second == t.numel();
}
static std::unique_ptr<at::ObserverContext> on_op_start(const at::RecordFunction& fn) {
  if (op_depth++ > 0) return nullptr;
  const std::string name = fn.name();
  auto inputs = fn.inputs();
  if (inputs.empty()) return nullptr;
  if (name == "aten::copy_" && inputs[0].isTensor() && is_param(inputs[0].toTensor())) counted.copies++;
  if (name == "aten::_foreach_copy_" && inputs[0].isTensorList()) {
    bool all = true;
    for (size_t i = 0; i < inputs[0].toTensorList().size(); i++) all &= is_param(inputs[0].toTensorList().get(i));
    if (all) counted.foreach_copies++;
  }
  return nullptr;
}
static void on_op_end(const at::RecordFunction&, at::ObserverContext*) { op_depth--; }

static ParamCopies count_param_copies(const std::vector<torch::Tensor>& params, const std::function<void()>& step) {
  copy_targets.clear();
  for (const auto& p : params) copy_targets[p.data_ptr()] = p.numel();
  counted = {};
  auto handle = at::addThreadLocalCallback(
      at::RecordFunctionCallback(on_op_start, on_op_end).needsInputs(true).scopes({at::RecordScope::FUNCTION}));
  step();
  at::removeCallback(handle);
  return counted;
}

// one step's all-gathers and copies against upstream's DistMuonAdamW: every sharded AdamW param
// gathered into itself (all_gather_into_tensor(p, p_slice): its bytes, no copy), every Muon group
// gathered as a stack of ceil(K/W)*W matrices and copied back in one _foreach_copy_
static int check_gathers_and_copies(MuonAdamW& opt, const std::vector<torch::Tensor>& params, int step, Dist& d) {
  const int W = d.world_size();
  int64_t want_gathers = 0, want_bytes = 0, want_foreach = 0;
  for (const OptimGroup& g : opt.groups()) {
    if (W == 1) break;  // one rank: no collective, nothing copied back
    if (g.kind == OptimKind::adamw) {
      for (const auto& p : g.params)
        if (p.numel() >= 1024) {  // upstream shards AdamW params of 1024 elements and more
          want_gathers++;
          want_bytes += p.numel() * (int64_t)p.element_size();
        }
      continue;
    }
    const int64_t K = (int64_t)g.params.size(), chunk = (K + W - 1) / W;
    want_gathers++;
    want_bytes += chunk * W * g.params[0].numel() * (int64_t)g.params[0].element_size();
    want_foreach++;
  }
  const DistTraffic before = d.traffic();
  ParamCopies copies = count_param_copies(params, [&] { run_step(opt, params, step, d); });
  const int64_t gathers = d.traffic().all_gathers - before.all_gathers;
  const int64_t bytes = d.traffic().all_gather_bytes - before.all_gather_bytes;
  // the references (NANOCHAT_KERNELS=0, a CPU without AVX2) write Muon's stacked update back
  // into each whole param with copy_: counted only on the kernels
  const bool fused = kernels_enabled() && kernels_cpu_supported();
  int failures = 0;
  if (gathers != want_gathers || bytes != want_bytes || (fused && copies.copies != 0) ||
      copies.foreach_copies != want_foreach) {
    std::fprintf(stderr,
                 "FAIL rank %d: a step made %lld all-gathers of %lld bytes, %d copies and %d foreach copies into the "
                 "params; upstream's formula: %lld of %lld bytes, 0 and %lld\n",
                 d.rank(), (long long)gathers, (long long)bytes, copies.copies, copies.foreach_copies,
                 (long long)want_gathers, (long long)want_bytes, (long long)want_foreach);
    failures++;
  }
  return failures;
}

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: optim_worker OUT\n");
    return 2;
  }
  Compute c = compute_init("cpu");
  Dist& d = *c.dist;

  int failures = 0;
  std::vector<torch::Tensor> params = make_params();
  MuonAdamW opt(make_groups(params), &d);
  for (int s = 0; s < kSteps - 1; s++) run_step(opt, params, s, d);
  failures += check_gathers_and_copies(opt, params, kSteps - 1, d);  // the last step, counted

  // interrupted run: 3 steps, save, fresh optimizer and params, load, 2 more
  std::vector<torch::Tensor> p2 = make_params();
  NamedTensors saved;
  std::string json_text;
  {
    MuonAdamW first(make_groups(p2), &d);
    for (int s = 0; s < 3; s++) run_step(first, p2, s, d);
    for (auto& [name, t] : first.state_tensors()) saved.emplace_back(name, t.clone());
    json_text = first.state_json().dump();
  }
  std::vector<torch::Tensor> p3;
  for (auto& p : p2) p3.push_back(p.detach().clone());
  MuonAdamW second(make_groups(p3), &d);
  second.load_state(saved, nlohmann::json::parse(json_text));
  for (int s = 3; s < kSteps; s++) run_step(second, p3, s, d);
  for (size_t i = 0; i < params.size(); i++)
    if (!torch::equal(params[i], p3[i])) {
      std::fprintf(stderr, "FAIL rank %d: param %zu after save/load differs from the uninterrupted run\n", d.rank(), i);
      failures++;
    }
  // the sharded moments of the (6, 256) param hold this rank's rows only
  if (saved[0].first != "state.0.exp_avg" || saved[0].second.size(0) != 6 / d.world_size()) {
    std::fprintf(stderr, "FAIL rank %d: %s has %ld rows\n", d.rank(), saved[0].first.c_str(),
                 (long)saved[0].second.size(0));
    failures++;
  }

  // an AdamW param of >= 1024 elements whose rows do not split over the ranks
  if (d.world_size() > 1) {
    OptimGroup bad;
    bad.name = "bad";
    bad.params = {torch::zeros({5, 300})};
    try {
      MuonAdamW oops({bad}, &d);
      std::fprintf(stderr, "FAIL rank %d: a (5, 300) AdamW param was accepted over %d ranks\n", d.rank(),
                   d.world_size());
      failures++;
    } catch (const Error& e) {
      if (std::string(e.what()).find("multiple of the world size") == std::string::npos) {
        std::fprintf(stderr, "FAIL rank %d: unclear error: %s\n", d.rank(), e.what());
        failures++;
      }
    }
  }

  std::ofstream out(std::string(argv[1]) + ".rank" + std::to_string(d.rank()), std::ios::binary);
  for (auto& p : params) {
    torch::Tensor v = p.to(torch::kDouble).contiguous();
    out.write((const char*)v.data_ptr<double>(), v.numel() * sizeof(double));
  }
  out.close();
  d.barrier();
  std::printf("rank %d of %d: %d failures\n", d.rank(), d.world_size(), failures);
  return failures == 0 && out ? 0 : 1;
}
