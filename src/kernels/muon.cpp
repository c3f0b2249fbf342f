// Muon's element-wise work around Polar Express, fused. Eagerly, upstream's muon_step_fused
// is ~25 ATen ops over the stacked matrices (lerps, dtype copies, norms, products, the mask),
// plus stacking the params and copying them back: at d8 on the CPU that was twice the time
// of Polar Express's matmuls. Fused, the step reads the gradients and the momentum once, X
// three times and the params once, and updates each param in place. The row and column sums
// come out of those passes; what is computed from them (MuonEq's and NorMuon's scales) is a
// handful of ATen ops on (n, rows) or (n, cols) vectors, shared by CPU and CUDA.
#include "nanochat/kernels.h"

#include <algorithm>
#include <cmath>

#include <ATen/ATen.h>

#include "op_dispatch.h"
#include "nanochat/common/error.h"

namespace nanochat {

// the kernels, one (rows, cols) matrix a call (muon_cpu.cpp, muon.cu). grad, buf and p are fp32
// (fp64 on the CPU); X is of the Polar Express dtype (fp32 or bf16; fp64 with fp64 params); sums
// are fp32 (fp64), one per row or column.
// nesterov: buf <- lerp(buf, grad, 1-mu); X = lerp(grad, buf, mu) rounded to X's dtype;
//   row_sumsq[r] = the sum over the row of X^2 (of the rounded values)
// scale_rows: X[r, :] *= scale[r], in place
// sumsq: out (rows,) or (cols,) = the sums of squares of X's rows (by_row) or columns
// update, the cautious step in place: g = X * line_scale[row or column]; p -= g*lr + p*lr_wd*[g*p >= 0]
void muon_nesterov_cpu(const torch::Tensor& grad, torch::Tensor& buf, torch::Tensor& X, torch::Tensor& row_sumsq,
                       double mu);
void muon_scale_rows_cpu(torch::Tensor& X, const torch::Tensor& scale);
void muon_sumsq_cpu(const torch::Tensor& X, bool by_row, torch::Tensor& out);
void muon_update_cpu(const torch::Tensor& X, torch::Tensor& p, const torch::Tensor& line_scale, bool by_row, double lr,
                     double lr_wd);
void muon_nesterov_cuda(const torch::Tensor& grad, torch::Tensor& buf, torch::Tensor& X, torch::Tensor& row_sumsq,
                        double mu);
void muon_scale_rows_cuda(torch::Tensor& X, const torch::Tensor& scale);
void muon_sumsq_cuda(const torch::Tensor& X, bool by_row, torch::Tensor& out);
void muon_update_cuda(const torch::Tensor& X, torch::Tensor& p, const torch::Tensor& line_scale, bool by_row, double lr,
                      double lr_wd);

namespace {

using torch::Tensor;

// upstream's .float(): fp32 for the reductions; float64 stays float64 (tests only)
Tensor wide(const Tensor& t) { return t.scalar_type() == at::kDouble ? t : t.to(at::kFloat); }

Tensor fro_norm(const Tensor& t) {
  return at::linalg_vector_norm(t, 2, std::vector<int64_t>{-2, -1}, /*keepdim=*/true, c10::nullopt);
}

// whether the fused passes take these: params (and grads, buffers) fp32 -- or fp64 on the
// CPU, with an fp64 X -- contiguous and on one device; X fp32 or bf16
bool muon_fusable(const std::vector<Tensor>& mats, const Tensor& state, at::ScalarType x_dtype) {
  // the verdict of X's dtype: the check in that dtype is the one that ran these passes with it
  if (mats.empty() || !kernels_use_fused("muon", mats[0], x_dtype)) return false;
  const Tensor& m0 = mats[0];
  const auto t = m0.scalar_type();
  const bool dtypes_ok = (t == at::kFloat && (x_dtype == at::kFloat || x_dtype == at::kBFloat16)) ||
                         (t == at::kDouble && x_dtype == at::kDouble && m0.is_cpu());
  if (!dtypes_ok) return false;
  for (const Tensor& m : mats)
    if (m.scalar_type() != t || m.device() != m0.device() || !m.is_contiguous() || !m.sizes().equals(m0.sizes()))
      return false;
  return state.scalar_type() == t && state.device() == m0.device() && state.is_contiguous();
}

void nesterov(const Tensor& grad, Tensor& buf, Tensor& X, Tensor& row_sumsq, double mu) {
  KERNELS_CUDA_OR_CPU(grad.is_cuda(), muon_nesterov_cuda(grad, buf, X, row_sumsq, mu),
                      muon_nesterov_cpu(grad, buf, X, row_sumsq, mu));
}
void scale_rows(Tensor& X, const Tensor& scale) {
  KERNELS_CUDA_OR_CPU(X.is_cuda(), muon_scale_rows_cuda(X, scale), muon_scale_rows_cpu(X, scale));
}
void sumsq(const Tensor& X, bool by_row, Tensor& out) {
  KERNELS_CUDA_OR_CPU(X.is_cuda(), muon_sumsq_cuda(X, by_row, out), muon_sumsq_cpu(X, by_row, out));
}
void update(const Tensor& X, Tensor& p, const Tensor& line_scale, bool by_row, double lr, double lr_wd) {
  KERNELS_CUDA_OR_CPU(X.is_cuda(), muon_update_cuda(X, p, line_scale, by_row, lr, lr_wd),
                      muon_update_cpu(X, p, line_scale, by_row, lr, lr_wd));
}

// lr*wd in the param dtype, as upstream multiplies its 0-D fp32 tensors
double lr_times_wd(double lr, double weight_decay, at::ScalarType t) {
  const float lr_f = (float)lr, wd_f = (float)weight_decay;
  return t == at::kDouble ? (double)lr_f * (double)wd_f : (double)(lr_f * wd_f);
}

}  // namespace

Tensor kernels_muon_prepare_reference(const std::vector<Tensor>& grads, Tensor& momentum_buffer, double momentum,
                                      at::ScalarType x_dtype) {
  const float mu = (float)momentum;
  Tensor g = at::stack(grads);  // a copy: the grads stay as they are
  const int64_t rows = g.size(-2);
  // Nesterov momentum: buf <- lerp(buf, G, 1-mu); G <- lerp(G, buf, mu)
  momentum_buffer.lerp_(g, 1.0f - mu);
  g.lerp_(momentum_buffer, mu);
  Tensor X = g.to(x_dtype);
  // MuonEq: every row scaled to the mean row norm
  Tensor target = fro_norm(wide(X)) / std::sqrt((double)rows);
  Tensor row_norm = at::linalg_vector_norm(wide(X), 2, std::vector<int64_t>{-1}, true, c10::nullopt).clamp_min(1e-6);
  X = X * (target / row_norm).to(X.scalar_type());
  // Polar Express starts from X / ||X||_F (a little less, so that every singular value is < 1)
  return X / (fro_norm(X) * 1.01 + 1e-6);
}

Tensor kernels_muon_prepare(const std::vector<Tensor>& grads, Tensor& momentum_buffer, double momentum,
                            at::ScalarType x_dtype) {
  if (!muon_fusable(grads, momentum_buffer, x_dtype) || momentum_buffer.dim() != 3 ||
      momentum_buffer.size(0) != (int64_t)grads.size() || !momentum_buffer[0].sizes().equals(grads[0].sizes()))
    return kernels_muon_prepare_reference(grads, momentum_buffer, momentum, x_dtype);
  const int64_t K = (int64_t)grads.size(), rows = grads[0].size(0), cols = grads[0].size(1);
  Tensor X = at::empty({K, rows, cols}, grads[0].options().dtype(x_dtype));
  Tensor row_sumsq = at::empty({K, rows}, grads[0].options());
  for (int64_t k = 0; k < K; k++) {
    Tensor buf = momentum_buffer[k], x = X[k], ss = row_sumsq[k];
    nesterov(grads[k], buf, x, ss, (float)momentum);  // fp32, as the reference (upstream's 0-D tensors)
  }
  // MuonEq's row scales to the mean row norm, times 1/(||X||_F*1.01 + 1e-6) of the scaled X,
  // whose squared norm is the sum of the rows' scaled sums of squares
  Tensor target = row_sumsq.sum(-1, true).sqrt() / std::sqrt((double)rows);
  Tensor scale = target / row_sumsq.sqrt().clamp_min(1e-6);
  Tensor fro = (scale.square() * row_sumsq).sum(-1, true).sqrt();
  scale = scale / (fro * 1.01 + 1e-6);
  for (int64_t k = 0; k < K; k++) {
    Tensor x = X[k];
    scale_rows(x, scale[k]);
  }
  kernels_fault_("muon", X);
  return X;
}

void kernels_muon_finish_reference(const Tensor& X, std::vector<Tensor>& params, Tensor& second_momentum_buffer,
                                   double lr, double weight_decay, double beta2) {
  const int64_t rows = X.size(-2), cols = X.size(-1);
  Tensor P = at::stack(params);
  Tensor g = X.to(P.scalar_type());
  // Muon+: snap the Frobenius norm to sqrt(min(rows, cols)), that of a semi-orthogonal matrix
  const double target_norm = std::sqrt((double)std::min(rows, cols));
  g = g * (target_norm / fro_norm(wide(g)).clamp_min(1e-6)).to(g.scalar_type());
  // NorMuon: factored second moment over the longer dim (per row if rows >= cols)
  const int64_t red_dim = rows >= cols ? -1 : -2;
  const double n = (double)g.size(red_dim);
  Tensor v_mean = wide(g).square().mean(std::vector<int64_t>{red_dim}, /*keepdim=*/true);
  Tensor v_norm = (v_mean.sum(std::vector<int64_t>{-2, -1}, true) * n).sqrt();
  second_momentum_buffer.lerp_(v_mean.to(second_momentum_buffer.scalar_type()), 1.0f - (float)beta2);
  Tensor step_size = second_momentum_buffer.clamp_min(1e-10).rsqrt();
  Tensor v_norm_new = ((v_mean * n) * wide(step_size).square()).sum(std::vector<int64_t>{-2, -1}, true).sqrt();
  Tensor final_scale = step_size * (v_norm / v_norm_new.clamp_min(1e-10));
  g = g * final_scale.to(g.scalar_type());
  // cautious weight decay: decay only where the update and the param agree in sign
  Tensor mask = (g * P) >= 0;
  P.sub_(g * (float)lr + P * lr_times_wd(lr, weight_decay, P.scalar_type()) * mask);
  for (size_t i = 0; i < params.size(); i++) params[i].copy_(P[(int64_t)i]);
}

void kernels_muon_finish(const Tensor& X, std::vector<Tensor>& params, Tensor& second_momentum_buffer, double lr,
                         double weight_decay, double beta2) {
  const int64_t K = (int64_t)params.size();
  if (!muon_fusable(params, second_momentum_buffer, X.scalar_type()) || !X.is_contiguous() || X.dim() != 3 ||
      X.size(0) != K || !X[0].sizes().equals(params[0].sizes()) || X.device() != params[0].device())
    return kernels_muon_finish_reference(X, params, second_momentum_buffer, lr, weight_decay, beta2);
  const int64_t rows = X.size(1), cols = X.size(2);
  const bool by_row = rows >= cols;  // NorMuon's second moment: per row, or per column of a wide matrix
  const int64_t lines = by_row ? rows : cols, n = by_row ? cols : rows;
  Tensor line_sumsq = at::empty({K, lines}, params[0].options());
  for (int64_t k = 0; k < K; k++) {
    Tensor out = line_sumsq[k];
    sumsq(X[k], by_row, out);
  }
  // Muon+ scales g = X*s to the norm sqrt(min(rows, cols)); NorMuon's mean squares are then s^2 * sums / n
  Tensor s = std::sqrt((double)std::min(rows, cols)) / line_sumsq.sum(-1, true).sqrt().clamp_min(1e-6);
  Tensor v_mean = line_sumsq * s.square() / (double)n;
  Tensor v_norm = (v_mean.sum(-1, true) * (double)n).sqrt();
  Tensor second = second_momentum_buffer.view({K, lines});
  second.lerp_(v_mean, 1.0f - (float)beta2);
  Tensor step_size = second.clamp_min(1e-10).rsqrt();
  Tensor v_norm_new = (v_mean * (double)n * step_size.square()).sum(-1, true).sqrt();
  Tensor line_scale = s * step_size * (v_norm / v_norm_new.clamp_min(1e-10));
  const double lr_wd = lr_times_wd(lr, weight_decay, params[0].scalar_type());
  for (int64_t k = 0; k < K; k++) update(X[k], params[(size_t)k], line_scale[k], by_row, (float)lr, lr_wd);
}

namespace {

// the self-check: one step of two wide (24, 40) and of two tall (40, 24) matrices, fp32 params
// (fp64 for fp64) with X in the checked dtype, as the optimizer runs it; on a GPU also d24's
// MLP matrices, (1536, 6144) and (6144, 1536)
std::vector<Tensor> muon_check(at::Device device, at::ScalarType dtype, bool fused) {
  if (dtype == at::kHalf || (dtype == at::kDouble && !device.is_cpu())) return {};
  const at::ScalarType pdt = dtype == at::kDouble ? at::kDouble : at::kFloat;
  auto gen = kernels_check_generator(device, 11);
  std::vector<std::pair<int64_t, int64_t>> shapes = {{24, 40}, {40, 24}};
  if (kernels_check_real_shapes(device))
    shapes.insert(shapes.end(), {{d24::n_embd, d24::mlp_hidden}, {d24::mlp_hidden, d24::n_embd}});
  std::vector<Tensor> out;
  for (auto [rows, cols] : shapes) {
    auto rand = [&](std::vector<int64_t> shape) { return at::randn(shape, gen, at::device(device)).to(device, pdt); };
    std::vector<Tensor> grads = {rand({rows, cols}), rand({rows, cols})},
                        params = {rand({rows, cols}), rand({rows, cols})};
    Tensor momentum = rand({2, rows, cols}) * 0.1,
           second = rand(rows >= cols ? std::vector<int64_t>{2, rows, 1} : std::vector<int64_t>{2, 1, cols}).abs();
    Tensor X = fused ? kernels_muon_prepare(grads, momentum, 0.95, dtype)
                     : kernels_muon_prepare_reference(grads, momentum, 0.95, dtype);
    if (fused) kernels_muon_finish(X, params, second, 0.02, 0.1, 0.95);
    else kernels_muon_finish_reference(X, params, second, 0.02, 0.1, 0.95);
    out.insert(out.end(), {X, momentum, second, params[0], params[1]});
  }
  return out;
}
const bool muon_check_registered = kernels_register_check({"muon", muon_check});

}  // namespace

}  // namespace nanochat
