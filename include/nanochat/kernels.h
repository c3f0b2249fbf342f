// The kernels module: the model's fused hot paths. Each op is an autograd function with a
// CPU kernel (at::parallel_for + at::vec, one pass over memory), a CUDA kernel (.cu) and a
// plain ATen composition -- the `_reference` twin -- that the tests compare both against.
// One rule picks between them (src/kernels/op_dispatch.h): the kernel runs where this
// build has one for the tensor's device and dtype and it passed its self-check there, the
// reference everywhere else. NANOCHAT_KERNELS=0 makes every op run its reference;
// NANOCHAT_KERNELS=strict makes a failed self-check fatal (both read once, at the first call).
#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>
#include "nanochat/common/tensor.h"
#include "nanochat/kernels/self_check.h"  // the self-check: table, agreement, registry

namespace nanochat {

bool kernels_enabled();

// Per-token losses of cross_entropy(softcap * tanh((x @ weight^T)[:, :vocab] / softcap), targets)
// with targets -1 ignored (loss 0): x (N, C) in the compute dtype, weight (Vp >= vocab, C) the
// fp32 master (cast to x's dtype for the matmul, as gpt.Linear does), targets (N,) int64.
// Returns (N,) fp32 (fp64 for an fp64 x). The fused op walks the rows in chunks and never
// holds more than one chunk's logits: backward recomputes them from x and the log-sum-exp
// saved per row. The weight's gradient is accumulated in fp32. chunk_rows <= 0: ~128 MB of
// logits a chunk on the CPU, ~1 GB on a GPU (tests ask for small chunks).
torch::Tensor kernels_linear_softcap_ce(const torch::Tensor& x, const torch::Tensor& weight,
                                        const torch::Tensor& targets, int64_t vocab, double softcap,
                                        int64_t chunk_rows = 0);
torch::Tensor kernels_linear_softcap_ce_reference(const torch::Tensor& x, const torch::Tensor& weight,
                                                  const torch::Tensor& targets, int64_t vocab, double softcap);

// the same loss averaged over the counted tokens (cross_entropy's mean; NaN when none counts).
// With a gradient wanted, the fused op computes x's and weight's gradients in the forward,
// while each chunk's logits are at hand, and backward scales them: one matmul less.
torch::Tensor kernels_linear_softcap_ce_mean(const torch::Tensor& x, const torch::Tensor& weight,
                                             const torch::Tensor& targets, int64_t vocab, double softcap,
                                             int64_t chunk_rows = 0);
torch::Tensor kernels_linear_softcap_ce_mean_reference(const torch::Tensor& x, const torch::Tensor& weight,
                                                       const torch::Tensor& targets, int64_t vocab, double softcap);

// the MLP: relu(x @ w_fc^T)^2 @ w_proj^T, weights already in x's dtype. The fused op saves x
// and the pre-activation only, and recomputes relu(h)^2 for w_proj's gradient.
torch::Tensor kernels_mlp_relu_square(const torch::Tensor& x, const torch::Tensor& w_fc, const torch::Tensor& w_proj);
torch::Tensor kernels_mlp_relu_square_reference(const torch::Tensor& x, const torch::Tensor& w_fc,
                                                const torch::Tensor& w_proj);

// scale * rms_norm(rotary(x)) for q or k: x (B,T,H,D) with D even, cos and sin (1,T,1,D/2) in
// x's dtype (half-split rotary, rms_norm without weight, eps = epsilon of the accumulation
// type as at::rms_norm). The fused op saves its output and one fp32 rstd per row.
torch::Tensor kernels_rotary_norm(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                                  double scale);
// eps > 0: the norm's epsilon (an imported model's; the fused op has the default only)
torch::Tensor kernels_rotary_norm_reference(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                                            double scale, double eps = 0);

// The residual stream into an RMSNorm: (h, rms_norm(h)) with h = a*x + b*y over the last dim.
// a and b are 0-dim lambdas (fp32 parameters, or any float dtype) or undefined for 1; x and y of
// one shape and dtype. a and b, a*x, b*y and their sum are each rounded to x's dtype as the
// eager ops round them, the norm is at::rms_norm's (no weight, eps of the accumulation type). The fused
// op is one pass each way and keeps h and one fp32 rstd per row (plus x and y when a or b
// needs a gradient); the model uses it for its per-layer lambdas (a*x + b*x0), for the add
// before the MLP's norm (a, b undefined) and for the final "backout".
std::pair<torch::Tensor, torch::Tensor> kernels_residual_norm(const torch::Tensor& x, const torch::Tensor& y,
                                                              const torch::Tensor& a, const torch::Tensor& b);
// eps > 0: the norm's epsilon (an imported model's; the fused op has the default only)
std::pair<torch::Tensor, torch::Tensor> kernels_residual_norm_reference(const torch::Tensor& x, const torch::Tensor& y,
                                                                        const torch::Tensor& a, const torch::Tensor& b,
                                                                        double eps = 0);

// Causal attention with a left window (FA3's semantics: a query at t sees the keys t - window
// .. t; window < 0 unlimited), q (B,T,H,D), k and v (B,T,Hkv,D), softmax scale 1/sqrt(D).
// The CPU kernel walks each head's queries in blocks against only the keys they may see (about
// half the work of a full T x T when causal, T x (window + block) with a window, where the
// attention module's SDPA path runs padded chunks of twice the window), with MKL's GEMMs and an
// exact softmax per row; it saves o and one fp32 log-sum-exp per row. Available on the CPU for
// fp32 and bf16 when LibTorch has MKL; kernels_attention runs the reference otherwise. The
// reference materialises the (B, H, T, T) scores (tests, small shapes). No CUDA kernel: on a GPU
// the attention module uses LibTorch's flash kernels.
bool kernels_attention_available(const torch::Tensor& q);
torch::Tensor kernels_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, int64_t window);
torch::Tensor kernels_attention_reference(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                          int64_t window);

// Decode attention: Tq new queries of each row over its keys in a KV cache (inference only).
// q (B,Tq,H,D), k_cache and v_cache (B,Tmax,Hkv,D) with H a multiple of Hkv; key_counts one per
// row or one for all: row b holds keys at positions 0..n_b-1, its query t sits at n_b - Tq + t and
// sees the keys at or before it within `window` (FA3's); softmax scale 1/sqrt(D). The CPU kernel
// (fp32 and bf16, no gradient) reads each row's keys and values once per kv head, fp32 sums and
// softmax, the output rounded once to q's dtype, with AVX-512, AVX2 or plain loops as ATen's CPU
// capability says (kernels_decode_attention_isa); anything else runs the reference (fp32 matmuls
// under a mask over the longest row's keys). No CUDA kernel: the GPU runs flash.
bool kernels_decode_attention_available(const torch::Tensor& q, const torch::Tensor& k_cache,
                                        const torch::Tensor& v_cache);
torch::Tensor kernels_decode_attention(const torch::Tensor& q, const torch::Tensor& k_cache,
                                       const torch::Tensor& v_cache, const std::vector<int64_t>& key_counts,
                                       int64_t window);
torch::Tensor kernels_decode_attention_reference(const torch::Tensor& q, const torch::Tensor& k_cache,
                                                 const torch::Tensor& v_cache, const std::vector<int64_t>& key_counts,
                                                 int64_t window);
std::string kernels_decode_attention_isa();  // "AVX-512", "AVX2" or "plain C++"

// FP8 training's linear (upstream fp8.py, tensorwise): x (..., in) in the compute dtype times
// the fp32 master weight (out, in)^T, through e4m3 inputs and weights and e5m2 gradients with
// one dynamic scale per tensor (kernels_fp8_mm; CPU and CUDA sm89+). Both dimensions must be
// multiples of 16. The reference is the quantise-dequantise emulation: every operand rounded
// through its fp8 format and back, the products in fp32, through autograd of ATen ops.
torch::Tensor kernels_fp8_linear(const torch::Tensor& x, const torch::Tensor& weight);
torch::Tensor kernels_fp8_linear_reference(const torch::Tensor& x, const torch::Tensor& weight);
// The fused op quantizes each weight once and keeps its FP8 copy until the weight's version moves
// (ATen's in-place ops) or this is called: the weights changed past their version counter (the
// optimizer's step, whose kernels and all-gathers write the data directly). The next use quantizes anew.
void kernels_fp8_weights_changed();
// x through several weights (q, k and v): one output each, as kernels_fp8_linear of each, with
// x quantized once; x's gradient sums the weights' terms in their order
std::vector<torch::Tensor> kernels_fp8_linear_shared(const torch::Tensor& x, const std::vector<torch::Tensor>& weights);
// The MLP with both linears in FP8: kernels_fp8_linear(relu(kernels_fp8_linear(x, w_fc))^2, w_proj)
// with relu^2 in one pass (mlp_relu_square's kernel) and no (N, 4C) activation kept for backward:
// it recomputes c_fc's output from the saved FP8 input. The reference: the same through the
// linears' emulation and ATen's relu and square.
torch::Tensor kernels_fp8_mlp(const torch::Tensor& x, const torch::Tensor& w_fc, const torch::Tensor& w_proj);
torch::Tensor kernels_fp8_mlp_reference(const torch::Tensor& x, const torch::Tensor& w_fc, const torch::Tensor& w_proj);
// (x quantized to `fp8`, 1/scale) with scale = fp8_max / max|x| (fp32; 448 for e4m3fn,
// 57344 for e5m2), values clamped to +-fp8_max
std::pair<torch::Tensor, torch::Tensor> kernels_fp8_quantize(const torch::Tensor& x, at::ScalarType fp8);
// the same of a 2-D x, with q_t = q^T contiguous: the column-major operand _scaled_mm wants in
// backward (on a GPU written by the quantising pass itself)
struct Fp8Quantized {
  torch::Tensor q, q_t, inv;
};
Fp8Quantized kernels_fp8_quantize_transposed(const torch::Tensor& x, at::ScalarType fp8);
// (a8 @ b8) * a_inv * b_inv in out_dtype: at::_scaled_mm on CUDA (b8 column-major), the same
// products through an fp32 GEMM on the CPU
torch::Tensor kernels_fp8_mm(const torch::Tensor& a8, const torch::Tensor& b8, const torch::Tensor& a_inv,
                             const torch::Tensor& b_inv, at::ScalarType out_dtype, bool use_fast_accum);

// AdamW's update of one param in place (upstream's compiled adamw_step_fused): decoupled weight
// decay, the moments' lerps, bias corrections, fp32 math whatever the dtype of p (bf16 for
// wte). The fused op is one pass over the four tensors (contiguous, one dtype: fp32 or bf16)
// in the order of the reference, upstream's eager composition, whose bits it has but where
// ATen's fp32 sqrt, which is not correctly rounded on the CPU, is a bit off; other tensors run that.
void kernels_adamw_step(torch::Tensor& p, const torch::Tensor& grad, torch::Tensor& exp_avg, torch::Tensor& exp_avg_sq,
                        int64_t step, double lr, double beta1, double beta2, double eps, double weight_decay);
void kernels_adamw_step_reference(torch::Tensor& p, const torch::Tensor& grad, torch::Tensor& exp_avg,
                                  torch::Tensor& exp_avg_sq, int64_t step, double lr, double beta1, double beta2,
                                  double eps, double weight_decay);

// Muon's steps around Polar Express (upstream's compiled muon_step_fused) on n matrices of one
// (rows, cols) shape. Not autograd functions: optimizer passes, like kernels_adamw_step. The
// fused versions run for fp32 params (fp64 on the CPU) and contiguous tensors on one device,
// and fall back to their `_reference` ATen compositions otherwise; sums are fp32 (fp64).
//
// prepare: Nesterov momentum (momentum_buffer (n, rows, cols) updated in place; the grads,
// n matrices, are not written), MuonEq (each row scaled to the mean row norm) and the
// Frobenius normalisation that starts Polar Express. Returns X (n, rows, cols) in x_dtype.
torch::Tensor kernels_muon_prepare(const std::vector<torch::Tensor>& grads, torch::Tensor& momentum_buffer,
                                   double momentum, at::ScalarType x_dtype);
torch::Tensor kernels_muon_prepare_reference(const std::vector<torch::Tensor>& grads, torch::Tensor& momentum_buffer,
                                             double momentum, at::ScalarType x_dtype);
// finish, from Polar Express's X: Muon+ (the Frobenius norm snapped to sqrt(min(rows, cols))),
// NorMuon (second_momentum_buffer (n, rows, 1) if rows >= cols else (n, 1, cols), updated) and
// the cautious weight-decayed update of each param (rows, cols) in place; lr is the effective one.
void kernels_muon_finish(const torch::Tensor& X, std::vector<torch::Tensor>& params,
                         torch::Tensor& second_momentum_buffer, double lr, double weight_decay, double beta2);
void kernels_muon_finish_reference(const torch::Tensor& X, std::vector<torch::Tensor>& params,
                                   torch::Tensor& second_momentum_buffer, double lr, double weight_decay, double beta2);

// Polar Express on a batch X (b, rows, cols): `steps` iterations X <- a X + (b A + c A@A) X with
// A = X X^T, or X <- a X + X (b A + c A@A) with A = X^T X for tall X (rows > cols), (a, b, c) =
// coeffs[i]. On the CPU in fp32 each matrix runs every iteration on one thread (the batch split
// across the threads), its symmetric products from the blocks on and above the diagonal; elsewhere,
// and as the reference, the batched matmul / baddbmm composition. Returns a new tensor.
torch::Tensor kernels_polar_express(const torch::Tensor& X, const std::vector<std::array<double, 3>>& coeffs,
                                    int steps);
torch::Tensor kernels_polar_express_reference(torch::Tensor X, const std::vector<std::array<double, 3>>& coeffs,
                                              int steps);

}  // namespace nanochat
