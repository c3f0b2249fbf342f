// defines: kernels_dtype, kernels_launch_softcap_ce_forward, kernels_launch_softcap_ce_backward,
//          kernels_launch_relu_square_forward, kernels_launch_relu_square_backward,
//          kernels_launch_rotary_norm_forward, kernels_launch_rotary_norm_backward,
//          kernels_launch_residual_norm_forward, kernels_launch_residual_norm_backward,
//          kernels_launch_adamw_step, kernels_launch_muon_nesterov, kernels_launch_muon_scale_rows,
//          kernels_launch_muon_sumsq, kernels_launch_muon_update
// The launchers of the CUDA kernels in kernels.cu: raw pointers, sizes, a dtype tag and a
// stream, no torch, so that kernels.cu compiles with nvcc alone. kernels_cuda.cpp checks the
// tensors and calls these. Every pointer is to contiguous device memory; the "compute dtype"
// arrays are of `dtype`, accumulation is always fp32. Each returns the launch's error
// (cudaSuccess when nothing was launched because there was no work).
#pragma once
#include <cstdint>
#include <cuda_runtime_api.h>

namespace nanochat {

enum kernels_dtype { kernels_dtype_f32, kernels_dtype_bf16, kernels_dtype_f16 };

// logits (n, ld), of which the first `vocab` columns count; targets (n,) int64, -1 = ignored.
// loss (n,), lse (n,) fp32: z = cap*tanh(l/cap), lse = logsumexp(z), loss = lse - z[target]
// (0 where ignored, NaN for any other target outside [0, vocab): a kernel cannot raise).
cudaError_t kernels_launch_softcap_ce_forward(const void* logits, const int64_t* targets, int64_t n,
                                              int64_t ld, int64_t vocab, float cap, float* loss,
                                              float* lse, kernels_dtype dtype, cudaStream_t stream);
// in place: logits (n, ld) becomes g * (softmax(z) - onehot(target)) * (1 - (z/cap)^2), with
// g = grad_loss[row * grad_stride] (fp32; a stride of 0 broadcasts one value), 0 in ignored
// rows and in the columns >= vocab.
cudaError_t kernels_launch_softcap_ce_backward(void* logits, const int64_t* targets, const float* lse,
                                               const float* grad_loss, int64_t grad_stride, int64_t n,
                                               int64_t ld, int64_t vocab, float cap, kernels_dtype dtype,
                                               cudaStream_t stream);

// y = relu(h)^2 over numel elements
cudaError_t kernels_launch_relu_square_forward(const void* h, void* y, int64_t numel, kernels_dtype dtype,
                                               cudaStream_t stream);
// dy = 2 * relu(h) * dy, in place
cudaError_t kernels_launch_relu_square_backward(const void* h, void* dy, int64_t numel, kernels_dtype dtype,
                                                cudaStream_t stream);

// rows (R, D) of q or k, D even and <= kernels_rotary_norm_max_dim; cos, sin (T, D/2);
// row r at position (r / H) % T. y = scale * r / rms(r) with r the half-split rotation of
// the row, rstd (R,) fp32 = 1 / sqrt(mean(r^2) + eps).
constexpr int64_t kernels_rotary_norm_max_dim = 256;
cudaError_t kernels_launch_rotary_norm_forward(const void* x, const void* cos, const void* sin, void* y,
                                               float* rstd, int64_t R, int64_t D, int64_t T, int64_t H,
                                               float scale, float eps, kernels_dtype dtype,
                                               cudaStream_t stream);
// dx from dy, the forward's y and rstd (same shapes and positions as above)
cudaError_t kernels_launch_rotary_norm_backward(const void* dy, const void* y, const float* rstd,
                                                const void* cos, const void* sin, void* dx, int64_t R,
                                                int64_t D, int64_t T, int64_t H, float scale,
                                                kernels_dtype dtype, cudaStream_t stream);

// rows (R, D) of the residual stream: h = round(round(a*x) + round(b*y)) (round: to `dtype`;
// a, b point to one fp32 value on the device, or are null for 1), n = round(h * rstd),
// rstd (R,) = 1 / sqrt(mean(h^2) + eps)
cudaError_t kernels_launch_residual_norm_forward(const void* x, const void* y, const float* a, const float* b, void* h,
                                                 void* n, float* rstd, int64_t R, int64_t D, float eps,
                                                 kernels_dtype dtype, cudaStream_t stream);
// g = dh + rstd*(dn - nh*mean(dn*nh)) with nh = h*rstd; dx = a*g; dy = b*g unless dy is null
// (a and b both null: dx serves both); ga_rows[r] = sum(g*x) when ga_rows is not null (x
// then given), gb_rows[r] = sum(g*y) likewise
cudaError_t kernels_launch_residual_norm_backward(const void* dh, const void* dn, const void* h, const float* rstd,
                                                  const void* x, const void* y, const float* a, const float* b,
                                                  void* dx, void* dy, float* ga_rows, float* gb_rows, int64_t R,
                                                  int64_t D, kernels_dtype dtype, cudaStream_t stream);

// AdamW's update in place over n elements (all four arrays of `dtype`), as adamw_step_cpu
cudaError_t kernels_launch_adamw_step(void* p, const void* grad, void* exp_avg, void* exp_avg_sq, int64_t n,
                                     float lr, float beta1, float beta2, float eps, float weight_decay, float bias1,
                                     float bias2, kernels_dtype dtype, cudaStream_t stream);

// Muon's passes over one (rows, cols) matrix (muon_*_cpu in device_kernels.h): grad, buf, p
// and the sums fp32, X of x_dtype. nesterov: buf <- lerp(buf, grad, 1-mu), X = lerp(grad,
// buf, mu), row_sumsq = the rows' sums of X^2; scale_rows: X[r] *= scale[r]; sumsq: the sums of
// X^2 per row (rows,) or per column (cols,); update: g = X * line_scale[row or column],
// p -= g*lr + p*lr_wd*[g*p >= 0]
cudaError_t kernels_launch_muon_nesterov(const float* grad, float* buf, void* X, float* row_sumsq, int64_t rows,
                                         int64_t cols, float mu, kernels_dtype x_dtype, cudaStream_t stream);
cudaError_t kernels_launch_muon_scale_rows(void* X, const float* scale, int64_t rows, int64_t cols,
                                           kernels_dtype x_dtype, cudaStream_t stream);
cudaError_t kernels_launch_muon_sumsq(const void* X, float* out, int64_t rows, int64_t cols, bool by_row,
                                      kernels_dtype x_dtype, cudaStream_t stream);
cudaError_t kernels_launch_muon_update(const void* X, float* p, const float* line_scale, int64_t rows, int64_t cols,
                                       bool by_row, float lr, float lr_wd, kernels_dtype x_dtype, cudaStream_t stream);

}  // namespace nanochat
