// defines: optim_polar_express_coeffs, optim_muon_step
// upstream optim.py's compiled muon_step_fused, op for op:
//   Nesterov momentum (lerp) -> MuonEq row equilibration -> Polar Express (tall/wide branch)
//   -> Muon+ renormalisation -> NorMuon variance reduction -> cautious weight decay + update.
// Every norm and sum is per matrix (the last two dims), so a rank orthogonalising its chunk of
// a stack gets what one rank would for the whole stack.
#include "nanochat/optim.h"

#include <algorithm>
#include <cmath>
#include <torch/torch.h>

#include "nanochat/common/error.h"

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

// upstream's .float(): fp32 for the reductions; float64 stays float64 (tests only)
static torch::Tensor wide(const torch::Tensor& t) {
  return t.scalar_type() == torch::kDouble ? t : t.to(torch::kFloat);
}

static torch::Tensor fro_norm(const torch::Tensor& t) {
  return torch::linalg_vector_norm(t, 2, std::vector<int64_t>{-2, -1}, /*keepdim=*/true, c10::nullopt);
}

void optim_muon_step(torch::Tensor grads, torch::Tensor params, torch::Tensor momentum_buffer,
                     torch::Tensor second_momentum_buffer, double momentum, double lr,
                     double weight_decay, double beta2, int ns_steps, bool bf16_polar) {
  if (grads.dim() < 3 || !grads.sizes().equals(params.sizes()) ||
      !momentum_buffer.sizes().equals(params.sizes()))
    fail("optim_muon_step: grads %s, params %s and momentum buffer %s must be one (n, rows, cols) shape",
         c10::str(grads.sizes()).c_str(), c10::str(params.sizes()).c_str(),
         c10::str(momentum_buffer.sizes()).c_str());
  if (ns_steps < 1 || ns_steps > 5) fail("optim_muon_step: ns_steps %d is outside 1..5", ns_steps);
  const int64_t rows = params.size(-2), cols = params.size(-1);
  const float mu = (float)momentum, lr_f = (float)lr, wd_f = (float)weight_decay, b2 = (float)beta2;

  // Nesterov momentum: buf <- lerp(buf, G, 1-mu); G <- lerp(G, buf, mu)
  momentum_buffer.lerp_(grads, 1.0f - mu);
  torch::Tensor g = grads.lerp_(momentum_buffer, mu);

  torch::Tensor X = bf16_polar ? g.to(torch::kBFloat16) : g;
  // MuonEq: every row scaled to the mean row norm
  torch::Tensor target = fro_norm(wide(X)) / std::sqrt((double)rows);
  torch::Tensor row_norm =
      torch::linalg_vector_norm(wide(X), 2, std::vector<int64_t>{-1}, true, c10::nullopt).clamp_min(1e-6);
  X = X * (target / row_norm).to(X.scalar_type());

  // Polar Express: X -> approximately U V^T of its SVD, on the smaller Gram matrix
  X = (X / (fro_norm(X) * 1.01 + 1e-6)).reshape({-1, rows, cols});  // baddbmm takes one batch dim
  const auto& coeffs = optim_polar_express_coeffs();
  for (int i = 0; i < ns_steps; i++) {
    const double a = coeffs[i][0], b = coeffs[i][1], c = coeffs[i][2];
    // B = b*A + c*A@A and X = a*X + (X@B or B@X), each one baddbmm: the scaled sum is done in
    // the GEMM's epilogue instead of two more passes over X
    if (rows > cols) {  // tall: Gram matrix XᵀX is (cols, cols)
      torch::Tensor A = torch::matmul(X.mT(), X);
      torch::Tensor B = torch::baddbmm(A, A, A, b, c);
      X = torch::baddbmm(X, X, B, a, 1.0);
    } else {  // wide or square: XXᵀ is (rows, rows)
      torch::Tensor A = torch::matmul(X, X.mT());
      torch::Tensor B = torch::baddbmm(A, A, A, b, c);
      X = torch::baddbmm(X, B, X, a, 1.0);
    }
  }
  g = X.view(params.sizes()).to(params.scalar_type());

  // Muon+: snap the Frobenius norm to sqrt(min(rows, cols)), that of a semi-orthogonal matrix
  const double target_norm = std::sqrt((double)std::min(rows, cols));
  g = g * (target_norm / fro_norm(wide(g)).clamp_min(1e-6)).to(g.scalar_type());

  // NorMuon: factored second moment over the longer dim (per row if rows >= cols)
  const int64_t red_dim = rows >= cols ? -1 : -2;
  const double n = (double)g.size(red_dim);
  torch::Tensor v_mean = wide(g).square().mean(std::vector<int64_t>{red_dim}, /*keepdim=*/true);
  torch::Tensor v_norm = (v_mean.sum(std::vector<int64_t>{-2, -1}, true) * n).sqrt();
  second_momentum_buffer.lerp_(v_mean.to(second_momentum_buffer.scalar_type()), 1.0f - b2);
  torch::Tensor step_size = second_momentum_buffer.clamp_min(1e-10).rsqrt();
  torch::Tensor v_norm_new = ((v_mean * n) * wide(step_size).square()).sum(std::vector<int64_t>{-2, -1}, true).sqrt();
  torch::Tensor final_scale = step_size * (v_norm / v_norm_new.clamp_min(1e-10));
  g = g * final_scale.to(g.scalar_type());

  // cautious weight decay: decay only where the update and the param agree in sign
  torch::Tensor mask = (g * params) >= 0;
  // lr*wd in the param dtype, as upstream multiplies its 0-D tensors after .to(g.dtype)
  const double lr_wd = params.scalar_type() == torch::kDouble ? (double)lr_f * (double)wd_f : (double)(lr_f * wd_f);
  params.sub_(g * lr_f + params * lr_wd * mask);
}

}  // namespace nanochat
