// nanochat's optimizer (upstream nanochat/optim.py): AdamW for embeddings, lm_head and scalars, Muon (Polar
// Express, MuonEq, Muon+, NorMuon, cautious weight decay) for the transformer matrices.
// One class for one rank and many: with a Dist of world > 1 it also averages the gradients
// itself (there is no DDP wrapper, as upstream) and shards its state ZeRO-2 style (DistMuonAdamW):
//   AdamW, numel < 1024   all_reduce(AVG) the grad, every rank updates the whole param
//   AdamW, larger         reduce_scatter(AVG) along dim 0 (shape[0] % world == 0), update
//                         this rank's rows with sharded moments, all_gather the param
//   Muon (K params)       stack, reduce_scatter(AVG) in chunks of ceil(K/world) (zero rows
//                         pad the wire), orthogonalise the owned chunk, all_gather
// All reductions are launched first; then group by group: wait, compute, launch the gather;
// then wait for every gather and copy back (upstream's three phases).
// There is no gradient clipping (upstream has none).
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>
#include "nanochat/common/tensor.h"
#include <torch/ordered_dict.h>

#include "nanochat/common/named_tensors.h"

namespace nanochat {

class Dist;

enum class OptimKind { adamw, muon };

// One param group. Hyperparameters are plain doubles read at every step(), so a schedule may
// change lr / momentum / weight_decay / betas between steps (they are rounded to fp32 at use,
// as upstream's 0-D fp32 tensors are).
struct OptimGroup {
  OptimKind kind = OptimKind::adamw;
  std::string name;                   // for logs and errors: "lm_head", "muon 768x3072"
  std::vector<torch::Tensor> params;  // leaf tensors updated in place; grads from p.grad()
  double lr = 0.0, initial_lr = 0.0;  // initial_lr: what lr schedules multiply
  double weight_decay = 0.0;
  // AdamW
  std::array<double, 2> betas{0.9, 0.999};
  double eps = 1e-10;
  // Muon (all params of a group share one shape of >= 2 dims)
  double momentum = 0.95;
  int ns_steps = 5;    // Polar Express iterations, 1..5
  double beta2 = 0.9;  // NorMuon second moment
};

class MuonAdamW {
 public:
  // dist: null or world 1 means no communication. compute_dtype (upstream's COMPUTE_DTYPE): Polar Express runs
  // in bf16 only when it is kBFloat16. Errors (nanochat::Error) for a Muon group with mixed
  // shapes or < 2 dims, and for an AdamW param with numel >= 1024 whose shape[0] is not a
  // multiple of the world size.
  MuonAdamW(std::vector<OptimGroup> groups, Dist* dist = nullptr, torch::ScalarType compute_dtype = torch::kFloat);

  // one update from the params' .grad() (averaged over ranks here). On one rank, AdamW params
  // without a grad are skipped (as upstream); with several ranks every param needs one.
  void step();
  void zero_grad();  // grads to undefined (set_to_none)

  std::vector<OptimGroup>& groups() { return groups_; }
  const std::vector<OptimGroup>& groups() const { return groups_; }

  // This rank's state (upstream's optim_<step>_rank<r>.pt state dict). Params are numbered globally in group order. Tensors:
  //   state.<i>.exp_avg, state.<i>.exp_avg_sq      AdamW (this rank's rows when sharded)
  //   state.<i>.momentum_buffer (chunk,rows,cols), state.<i>.second_momentum_buffer
  //                                                Muon, on the first param i of the group
  // JSON: {"world_size", "rank", "param_groups": [{kind, name, params: [i...], lr, initial_lr,
  // weight_decay, betas, eps | momentum, ns_steps, beta2}], "state": {"<i>": {"step": n}}}.
  // Tensors are the live buffers (not copies).
  NamedTensors state_tensors() const;
  nlohmann::json state_json() const;
  // Restores state and group hyperparameters (like torch's load_state_dict). The state is
  // per rank: loading state saved under another world size is an Error (no re-sharding),
  // as are mismatched groups, param counts or tensor shapes. Tensors are copied.
  void load_state(const NamedTensors& tensors, const nlohmann::json& json);

 private:
  struct AdamState {
    int64_t step = 0;
    torch::Tensor exp_avg, exp_avg_sq;
  };
  struct MuonState {
    torch::Tensor momentum_buffer, second_momentum_buffer;
  };
  struct Pending;  // collectives in flight during step()

  int world() const;
  int rank() const;
  bool adamw_sharded(const torch::Tensor& p) const;
  void launch_reduce(size_t g, Pending& pending);
  void compute_group(size_t g, Pending& pending);

  std::vector<OptimGroup> groups_;
  Dist* dist_;
  torch::ScalarType compute_dtype_;
  std::vector<std::vector<AdamState>> adam_;  // [group][param], AdamW groups
  std::vector<MuonState> muon_;               // [group], Muon groups
};
// fp16 training's dynamic loss scaling, torch.amp.GradScaler with its defaults as upstream's
// base_train and chat_sft use it: backward runs on scale(loss); step() divides every grad by
// the scale and checks them for inf/NaN (one flag, MAX over ranks, so every rank decides
// alike), skips the optimizer step if any is found, then updates the scale: x backoff
// after an overflow, x growth after growth_interval clean steps in a row.
class GradScaler {
 public:
  explicit GradScaler(torch::Device device, double init_scale = 65536.0, double growth_factor = 2.0,
                      double backoff_factor = 0.5, int64_t growth_interval = 2000);
  torch::Tensor scale(const torch::Tensor& loss) const;  // loss * the current scale
  // unscale, check, opt.step() unless a grad is not finite, update the scale; false = skipped
  bool step(MuonAdamW& opt, Dist* dist);
  double scale_value() const;
  // {"scale", "growth_tracker"}: saved with the optimizer so that a resumed run continues alike
  nlohmann::json state_json() const;
  void load_state(const nlohmann::json& j);

 private:
  torch::Tensor scale_, growth_tracker_, found_inf_;  // on the device, as GradScaler keeps them
  double growth_factor_, backoff_factor_;
  int64_t growth_interval_;
};

// The fused Muon step (upstream muon_step_fused) on n matrices of one (rows, cols) shape: the
// grads are read only; each param, `momentum_buffer` (n,rows,cols) and `second_momentum_buffer`
// ((n,rows,1) if rows >= cols else (n,1,cols)) are updated in place. lr is the effective
// one (the caller applies sqrt(max(1, rows/cols))). bf16_polar: X in bf16 for Polar Express.
// Reductions run in fp32, or in float64 for float64 params (used by tests).
void optim_muon_step(const std::vector<torch::Tensor>& grads, std::vector<torch::Tensor>& params,
                     torch::Tensor momentum_buffer, torch::Tensor second_momentum_buffer, double momentum, double lr,
                     double weight_decay, double beta2, int ns_steps, bool bf16_polar);

// Polar Express coefficients (a, b, c) for num_iters=5, safety 2e-2, cushion 2
const std::vector<std::array<double, 3>>& optim_polar_express_coeffs();

// nanochat's groups (gpt.py GPT.setup_optimizer) from the model's parameter names alone:
//   lm_head.weight | transformer.wte.weight | value_embeds.* | resid_lambdas | x0_lambdas |
//   smear_gate.weight, smear_lambda, backout_lambda -> six AdamW groups (in that order);
//   transformer.h.* -> one Muon group per distinct shape, shapes in sorted order, params in
//   the given order. Any other name is an Error. initial_lr = lr for every group.
std::vector<OptimGroup> optim_param_groups_gpt(const NamedTensors& named_parameters, int64_t n_embd,
                                               double unembedding_lr = 0.004, double embedding_lr = 0.2,
                                               double matrix_lr = 0.02, double weight_decay = 0.0,
                                               double scalar_lr = 0.5);
std::vector<OptimGroup> optim_param_groups_gpt(const torch::OrderedDict<std::string, torch::Tensor>& named_parameters,
                                               int64_t n_embd, double unembedding_lr = 0.004, double embedding_lr = 0.2,
                                               double matrix_lr = 0.02, double weight_decay = 0.0,
                                               double scalar_lr = 0.5);

}  // namespace nanochat
