// defines: softcap_ce_forward_cpu/_cuda, softcap_ce_backward_cpu/_cuda, softcap_ce_forward_backward_cpu,
//          relu_square_forward_cpu/_cuda, relu_square_backward_cpu/_cuda,
//          rotary_norm_forward_cpu/_cuda, rotary_norm_backward_cpu/_cuda,
//          residual_norm_forward_cpu/_cuda, residual_norm_backward_cpu/_cuda, adamw_step_cpu/_cuda,
//          muon_nesterov_cpu/_cuda, muon_scale_rows_cpu/_cuda, muon_sumsq_cpu/_cuda, muon_update_cpu/_cuda,
//          cast_float_bfloat16_cpu, cpu_kernel_threads, attention_cpu_supported, attention_forward_cpu,
//          attention_backward_cpu
// The element-wise and row-wise device kernels behind the autograd functions of kernels.h.
// Matmuls stay in the autograd functions (at::mm on whatever device); these do the passes
// over memory between them. Every tensor argument is contiguous unless said otherwise;
// dtypes are float32, bfloat16, float16 (and float64 on the CPU, for gradient checks).
// The _cuda versions live in kernels_cuda.cpp (launching the .cu kernels on the current
// stream); in a build without CUDA they raise.
#pragma once
#include <cstdint>
#include <utility>
#include <vector>
#include <torch/types.h>

namespace nanochat {

// softcapped cross-entropy over one chunk of rows. logits (n, ld) in the compute dtype, of which
// the first `vocab` columns count; targets (n,) int64 (-1 = ignored). Writes loss (n,) and
// lse (n,) (float32, float64 for float64 logits): z = cap*tanh(l/cap), lse = logsumexp(z),
// loss = lse - z[target] (0 where ignored).
void softcap_ce_forward_cpu(const torch::Tensor& logits, const torch::Tensor& targets, int64_t vocab,
                            double cap, torch::Tensor& loss, torch::Tensor& lse);
void softcap_ce_forward_cuda(const torch::Tensor& logits, const torch::Tensor& targets, int64_t vocab,
                             double cap, torch::Tensor& loss, torch::Tensor& lse);
// in place: logits (n, ld) becomes d loss / d logits for grad_loss (n,) (fp32/fp64):
// dl = grad * (softmax(z) - onehot(target)) * (1 - (z/cap)^2), 0 in rows whose target is -1
// and in the columns >= vocab.
void softcap_ce_backward_cpu(torch::Tensor& logits, const torch::Tensor& targets, const torch::Tensor& lse,
                             const torch::Tensor& grad_loss, int64_t vocab, double cap);
void softcap_ce_backward_cuda(torch::Tensor& logits, const torch::Tensor& targets, const torch::Tensor& lse,
                              const torch::Tensor& grad_loss, int64_t vocab, double cap);
// both at once, for a gradient known before backward (a mean loss): loss and lse as the
// forward, and logits replaced by their gradient for grad_loss, the row read while in cache
void softcap_ce_forward_backward_cpu(torch::Tensor& logits, const torch::Tensor& targets, const torch::Tensor& grad_loss,
                                     int64_t vocab, double cap, torch::Tensor& loss, torch::Tensor& lse);

// y = relu(h)^2; dh = 2 * relu(h) * dy (written into dy's storage: dy is consumed)
torch::Tensor relu_square_forward_cpu(const torch::Tensor& h);
torch::Tensor relu_square_forward_cuda(const torch::Tensor& h);
void relu_square_backward_cpu(const torch::Tensor& h, torch::Tensor& dy);
void relu_square_backward_cuda(const torch::Tensor& h, torch::Tensor& dy);

// whether the CUDA rotary kernel takes heads this wide (it holds a row in a warp's registers,
// kernels_rotary_norm_max_dim): wider heads run the ATen reference
bool rotary_norm_cuda_takes(int64_t head_dim);

// x (R, D) rows of q or k (R = B*T*H), cos and sin (T, D/2) contiguous, row r at position
// (r / H) % T. Forward returns y (R, D) in x's dtype = scale * r / rms(r) with r the rotated row,
// and rstd (R,) float32 (float64 for float64); backward gives dx from dy, y and rstd.
std::pair<torch::Tensor, torch::Tensor> rotary_norm_forward_cpu(const torch::Tensor& x, const torch::Tensor& cos,
                                                                const torch::Tensor& sin, int64_t T, int64_t H,
                                                                double scale, double eps);
std::pair<torch::Tensor, torch::Tensor> rotary_norm_forward_cuda(const torch::Tensor& x, const torch::Tensor& cos,
                                                                 const torch::Tensor& sin, int64_t T, int64_t H,
                                                                 double scale, double eps);
torch::Tensor rotary_norm_backward_cpu(const torch::Tensor& dy, const torch::Tensor& y, const torch::Tensor& rstd,
                                       const torch::Tensor& cos, const torch::Tensor& sin, int64_t T, int64_t H,
                                       double scale);
torch::Tensor rotary_norm_backward_cuda(const torch::Tensor& dy, const torch::Tensor& y, const torch::Tensor& rstd,
                                        const torch::Tensor& cos, const torch::Tensor& sin, int64_t T, int64_t H,
                                        double scale);

// x, y (R, D); a, b 0-dim in the accumulation dtype (fp32; fp64 for fp64 x) on x's device, or
// undefined for 1. Forward returns h = round(round(a*x) + round(b*y)) and n = round(h*rstd) in
// x's dtype (round: to x's dtype), and rstd (R,) fp32 (fp64) = 1/sqrt(mean(h^2) + eps).
struct ResidualNormOut {
  torch::Tensor h, n, rstd;
};
ResidualNormOut residual_norm_forward_cpu(const torch::Tensor& x, const torch::Tensor& y, const torch::Tensor& a,
                                          const torch::Tensor& b, double eps);
ResidualNormOut residual_norm_forward_cuda(const torch::Tensor& x, const torch::Tensor& y, const torch::Tensor& a,
                                           const torch::Tensor& b, double eps);
// backward from dh and dn (R, D): g = dh + rstd*(dn - nh*mean(dn*nh)) with nh = h*rstd; dx = a*g and
// dy = b*g in x's dtype (dy is dx itself when a and b are both undefined), and per row
// sum(g*x) into ga_rows, sum(g*y) into gb_rows (R,) (accumulation dtype) when a, b are defined
struct ResidualNormGrads {
  torch::Tensor dx, dy, ga_rows, gb_rows;
};
ResidualNormGrads residual_norm_backward_cpu(const torch::Tensor& dh, const torch::Tensor& dn, const torch::Tensor& h,
                                             const torch::Tensor& rstd, const torch::Tensor& x, const torch::Tensor& y,
                                             const torch::Tensor& a, const torch::Tensor& b);
ResidualNormGrads residual_norm_backward_cuda(const torch::Tensor& dh, const torch::Tensor& dn, const torch::Tensor& h,
                                              const torch::Tensor& rstd, const torch::Tensor& x, const torch::Tensor& y,
                                              const torch::Tensor& a, const torch::Tensor& b);

// AdamW's update of one tensor in place (kernels_adamw_step): p, grad, exp_avg, exp_avg_sq
// contiguous, of one dtype (fp32 or bf16); the scalars as optim_adamw_step rounds them to fp32
void adamw_step_cpu(torch::Tensor& p, const torch::Tensor& grad, torch::Tensor& exp_avg, torch::Tensor& exp_avg_sq,
                    float lr, float beta1, float beta2, float eps, float weight_decay, float bias1, float bias2);
void adamw_step_cuda(torch::Tensor& p, const torch::Tensor& grad, torch::Tensor& exp_avg, torch::Tensor& exp_avg_sq,
                     float lr, float beta1, float beta2, float eps, float weight_decay, float bias1, float bias2);

// causal attention with a left window (window < 0: unlimited; a query at t sees the keys
// t - window .. t), q (B,T,H,D), k and v (B,T,Hkv,D), contiguous, float32 or bfloat16, softmax
// scale 1/sqrt(D). Forward returns o (B,T,H,D) and the log-sum-exp of each row's scaled scores
// (B,H,T) float32; backward returns dq, dk, dv. Supported when the LibTorch loaded has MKL's
// fp32-output GEMMs (cpu_gemm.h).
bool attention_cpu_supported(const torch::Tensor& q);
std::pair<torch::Tensor, torch::Tensor> attention_forward_cpu(const torch::Tensor& q, const torch::Tensor& k,
                                                              const torch::Tensor& v, int64_t window);
std::vector<torch::Tensor> attention_backward_cpu(const torch::Tensor& dout, const torch::Tensor& q,
                                                  const torch::Tensor& k, const torch::Tensor& v,
                                                  const torch::Tensor& o, const torch::Tensor& lse, int64_t window);

// how many threads an at::parallel_for in the CPU kernels' files really runs on: at::get_num_threads()
// when they are built with OpenMP, 1 when a build drops -fopenmp (its pragma then compiles to nothing)
int cpu_kernel_threads();

// float32 -> bfloat16 or bfloat16 -> float32 (x contiguous) through the CPU kernels' row
// conversions, for tests: the bits of x.to() (round to nearest even; a NaN stays a NaN, its
// payload may differ from ATen's, which has two of its own)
torch::Tensor cast_float_bfloat16_cpu(const torch::Tensor& x);

// Muon's passes (kernels_muon_prepare / kernels_muon_finish), one (rows, cols) matrix a call.
// grad, buf and p are fp32 (fp64 on the CPU); X is of the Polar Express dtype (fp32 or bf16;
// fp64 with fp64 params); sums are fp32 (fp64), one per row or column.
// buf <- lerp(buf, grad, 1-mu); X = lerp(grad, buf, mu) rounded to X's dtype;
// row_sumsq[r] = sum over the row of X^2 (of the rounded values)
void muon_nesterov_cpu(const torch::Tensor& grad, torch::Tensor& buf, torch::Tensor& X, torch::Tensor& row_sumsq,
                       double mu);
void muon_nesterov_cuda(const torch::Tensor& grad, torch::Tensor& buf, torch::Tensor& X, torch::Tensor& row_sumsq,
                        double mu);
// X[r, :] *= scale[r], in place
void muon_scale_rows_cpu(torch::Tensor& X, const torch::Tensor& scale);
void muon_scale_rows_cuda(torch::Tensor& X, const torch::Tensor& scale);
// out (rows,) or (cols,) = the sums of squares of X's rows (by_row) or columns
void muon_sumsq_cpu(const torch::Tensor& X, bool by_row, torch::Tensor& out);
void muon_sumsq_cuda(const torch::Tensor& X, bool by_row, torch::Tensor& out);
// the cautious update in place: g = X * line_scale[row or column]; p -= g*lr + p*lr_wd*[g*p >= 0]
void muon_update_cpu(const torch::Tensor& X, torch::Tensor& p, const torch::Tensor& line_scale, bool by_row,
                     double lr, double lr_wd);
void muon_update_cuda(const torch::Tensor& X, torch::Tensor& p, const torch::Tensor& line_scale, bool by_row,
                      double lr, double lr_wd);

}  // namespace nanochat
