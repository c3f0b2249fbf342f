// defines: gpt_rms_norm, gpt_rotary_tables, gpt_softcap, gpt_smear, gpt_rotary_norm, gpt_residual_norm
// The model's parameter-free operations (upstream gpt.py's norm, rotary tables, the softcap and the smear),
// shared by the modules; the rotary itself is fused with the QK norm (kernels_rotary_norm).
#include "nanochat/gpt.h"

#include <ATen/ATen.h>

#include "nanochat/kernels.h"

namespace nanochat {

torch::Tensor gpt_rms_norm(const torch::Tensor& x, double eps) {
  if (eps == 0) return at::rms_norm(x, {x.size(-1)}, std::nullopt, std::nullopt);  // eps=None: torch's default
  return at::rms_norm(x, {x.size(-1)}, std::nullopt, eps);
}

// An imported model's norm eps (transformers' rms_norm_eps) is not the fused kernels' default: the plain ops then
torch::Tensor gpt_rotary_norm(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                              double scale, double eps) {
  if (eps == 0) return kernels_rotary_norm(x, cos, sin, scale);
  const int64_t half = x.size(-1) / 2;
  torch::Tensor x1 = x.narrow(-1, 0, half), x2 = x.narrow(-1, half, half);
  torch::Tensor r = at::cat({x1 * cos + x2 * sin, x1 * (-sin) + x2 * cos}, -1);
  return gpt_rms_norm(r, eps) * scale;
}

std::pair<torch::Tensor, torch::Tensor> gpt_residual_norm(const torch::Tensor& x, const torch::Tensor& y,
                                                          const torch::Tensor& a, const torch::Tensor& b,
                                                          double eps) {
  if (eps == 0) return kernels_residual_norm(x, y, a, b);
  const auto dt = x.scalar_type();
  torch::Tensor h = (a.defined() ? a.to(dt) * x : x) + (b.defined() ? b.to(dt) * y : y);
  return {h, gpt_rms_norm(h, eps)};
}

std::pair<torch::Tensor, torch::Tensor> gpt_rotary_tables(int64_t seq_len, int64_t head_dim,
                                                          torch::ScalarType dtype, torch::Device device,
                                                          double base) {
  auto f32 = torch::TensorOptions().dtype(torch::kFloat32).device(device);
  torch::Tensor channel = at::arange(0, head_dim, 2, f32);
  torch::Tensor inv_freq = at::reciprocal(at::pow(base, channel / (double)head_dim));
  torch::Tensor t = at::arange(seq_len, f32);
  torch::Tensor freqs = at::outer(t, inv_freq);  // (seq_len, head_dim/2)
  return {freqs.cos().to(dtype).view({1, seq_len, 1, head_dim / 2}),
          freqs.sin().to(dtype).view({1, seq_len, 1, head_dim / 2})};
}

torch::Tensor gpt_softcap(const torch::Tensor& logits, double cap) { return cap * at::tanh(logits / cap); }

torch::Tensor gpt_smear(const torch::Tensor& x, const torch::Tensor& gate_weight,
                        const torch::Tensor& smear_lambda, const torch::Tensor& prev) {
  const int64_t T = x.size(1);
  torch::Tensor lam = smear_lambda.to(x.scalar_type());
  torch::Tensor w = gate_weight.to(x.scalar_type());
  if (T == 1) {
    if (!prev.defined()) return x;  // the first token has no predecessor
    torch::Tensor gate = lam * at::sigmoid(at::linear(x.narrow(-1, 0, kSmearChannels), w));
    return x + gate * prev;
  }
  torch::Tensor cur = x.narrow(1, 1, T - 1);
  torch::Tensor gate = lam * at::sigmoid(at::linear(cur.narrow(-1, 0, kSmearChannels), w));  // (B,T-1,1)
  return at::cat({x.narrow(1, 0, 1), cur + gate * x.narrow(1, 0, T - 1)}, 1);
}

}  // namespace nanochat
