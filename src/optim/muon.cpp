// upstream optim.py's compiled muon_step_fused:
//   Nesterov momentum (lerp) -> MuonEq row equilibration -> Polar Express (tall/wide branch)
//   -> Muon+ renormalisation -> NorMuon variance reduction -> cautious weight decay + update.
// The steps before and after Polar Express are the kernels module's kernels_muon_prepare and
// kernels_muon_finish (fused passes, or their ATen references); Polar Express is here.
// Every norm and sum is per matrix, so a rank orthogonalising its chunk of a stack gets what
// one rank would for the whole stack.
#include "nanochat/optim.h"

#include <algorithm>
#include <cmath>
#include <torch/torch.h>

#include "nanochat/common/error.h"
#include "nanochat/kernels.h"

namespace nanochat {

const std::vector<std::array<double, 3>>& optim_polar_express_coeffs() {
  static const std::vector<std::array<double, 3>> coeffs = {
      {8.156554524902461, -22.48329292557795, 15.878769915207462},
      {4.042929935166739, -2.808917465908714, 0.5000178451051316},
      {3.8916678022926607, -2.772484153217685, 0.5060648178503393},
      {3.285753657755655, -2.3681294933425376, 0.46449024233003106},
      {2.3465413258596377, -1.7097828382687081, 0.42323551169305323},
  };
  return coeffs;
}

void optim_muon_step(const std::vector<torch::Tensor>& grads, std::vector<torch::Tensor>& params,
                     torch::Tensor momentum_buffer, torch::Tensor second_momentum_buffer, double momentum, double lr,
                     double weight_decay, double beta2, int ns_steps, bool bf16_polar) {
  if (params.empty() || grads.size() != params.size() || momentum_buffer.dim() != 3 ||
      momentum_buffer.size(0) != (int64_t)params.size())
    fail("optim_muon_step: %zu grads and %zu params with a momentum buffer of %s: one matrix of each per buffer row",
         grads.size(), params.size(), c10::str(momentum_buffer.sizes()).c_str());
  for (size_t i = 0; i < params.size(); i++)
    if (params[i].dim() != 2 || !grads[i].sizes().equals(params[i].sizes()) ||
        !momentum_buffer[0].sizes().equals(params[i].sizes()))
      fail("optim_muon_step: grad %s, param %s and momentum buffer %s must be one (rows, cols) shape",
           c10::str(grads[i].sizes()).c_str(), c10::str(params[i].sizes()).c_str(),
           c10::str(momentum_buffer.sizes()).c_str());
  if (ns_steps < 1 || ns_steps > 5) fail("optim_muon_step: ns_steps %d is outside 1..5", ns_steps);

  // Nesterov momentum, MuonEq and the normalisation (kernels module: fused, or its ATen reference)
  torch::Tensor X = kernels_muon_prepare(grads, momentum_buffer, momentum,
                                         bf16_polar ? torch::kBFloat16 : params[0].scalar_type());

  // Polar Express: X -> approximately U V^T of its SVD, on the smaller Gram matrix
  X = kernels_polar_express(X, optim_polar_express_coeffs(), ns_steps);

  // Muon+, NorMuon and the cautious weight-decayed update of each param in place
  kernels_muon_finish(X, params, second_momentum_buffer, lr, weight_decay, beta2);
}

}  // namespace nanochat
