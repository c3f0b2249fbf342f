// Causal attention with a left window as an autograd function over the CPU kernel of
// attention_cpu.cpp, which saves o and one fp32 log-sum-exp per row and recomputes the
// scores in backward. On CUDA the attention module keeps LibTorch's flash kernels (with a
// real window where flash_window.h has one), so there is no CUDA twin here.
#include "nanochat/kernels.h"

#include <cmath>

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include "op_dispatch.h"
#include "nanochat/common/error.h"

namespace nanochat {

// the CPU kernel (attention_cpu.cpp): q (B,T,H,D), k and v (B,T,Hkv,D), contiguous, fp32 or
// bf16, softmax scale 1/sqrt(D). Forward returns o (B,T,H,D) and the log-sum-exp of each row's
// scaled scores (B,H,T) fp32; backward returns dq, dk, dv. Supported when the LibTorch loaded
// has MKL's fp32-output GEMMs (cpu_gemm.h).
bool attention_cpu_supported(const torch::Tensor& q);
std::pair<torch::Tensor, torch::Tensor> attention_forward_cpu(const torch::Tensor& q, const torch::Tensor& k,
                                                              const torch::Tensor& v, int64_t window);
std::vector<torch::Tensor> attention_backward_cpu(const torch::Tensor& dout, const torch::Tensor& q,
                                                  const torch::Tensor& k, const torch::Tensor& v,
                                                  const torch::Tensor& o, const torch::Tensor& lse, int64_t window);

namespace {

using torch::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct CausalAttention : public torch::autograd::Function<CausalAttention> {
  static Tensor forward(AutogradContext* ctx, const Tensor& q, const Tensor& k, const Tensor& v, int64_t window) {
    auto [o, lse] = attention_forward_cpu(q, k, v, window);
    ctx->save_for_backward({q, k, v, o, lse});
    ctx->saved_data["window"] = window;
    return o;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto s = ctx->get_saved_variables();
    auto d = attention_backward_cpu(grads[0].contiguous(), s[0], s[1], s[2], s[3], s[4],
                                    ctx->saved_data["window"].toInt());
    return {d[0], d[1], d[2], Tensor()};
  }
};

void check_shapes(const Tensor& q, const Tensor& k, const Tensor& v) {
  if (q.dim() != 4 || !k.sizes().equals(v.sizes()) || k.dim() != 4 || k.size(0) != q.size(0) ||
      k.size(1) != q.size(1) || k.size(3) != q.size(3) || k.size(2) == 0 || q.size(2) % k.size(2) != 0)
    fail("kernels_attention: q (B,T,H,D), k and v (B,T,Hkv,D) with H a multiple of Hkv expected");
}

}  // namespace

bool kernels_attention_available(const Tensor& q) {
  return q.is_cpu() && kernels_use_fused("attention", q) && attention_cpu_supported(q);
}

Tensor kernels_attention(const Tensor& q, const Tensor& k, const Tensor& v, int64_t window) {
  check_shapes(q, k, v);
  if (!kernels_attention_available(q)) return kernels_attention_reference(q, k, v, window);
  return kernels_fault("attention", CausalAttention::apply(q.contiguous(), k.contiguous(), v.contiguous(), window));
}

Tensor kernels_attention_reference(const Tensor& q, const Tensor& k, const Tensor& v, int64_t window) {
  check_shapes(q, k, v);
  const int64_t T = q.size(1), rep = q.size(2) / k.size(2);
  Tensor qt = q.transpose(1, 2), kt = k.transpose(1, 2), vt = v.transpose(1, 2);  // (B, H, T, D)
  if (rep > 1) kt = kt.repeat_interleave(rep, 1), vt = vt.repeat_interleave(rep, 1);
  const auto acc = q.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  Tensor scores = at::matmul(qt, kt.transpose(-2, -1)).to(acc) / std::sqrt((double)q.size(3));
  Tensor row = at::arange(T, q.options().dtype(at::kLong)).view({T, 1}), col = row.view({1, T});
  Tensor allowed = col <= row;
  if (window >= 0) allowed = allowed & (row - col <= window);
  Tensor p = at::softmax(scores.masked_fill(allowed.logical_not(), -INFINITY), -1);
  return at::matmul(p.to(q.scalar_type()), vt).transpose(1, 2);
}

namespace {

// the self-check: (1, 40, 4, 16) queries on 2 kv heads, causal and with a window of 9, on the
// CPU in fp32 and bf16 (there is no CUDA kernel: the attention module runs flash there)
std::vector<Tensor> attention_check(at::Device device, at::ScalarType dtype, bool fused) {
  auto gen = kernels_check_generator(device, 17);
  Tensor q = at::randn({1, 40, 4, 16}, gen, at::device(device)).to(device, dtype).requires_grad_();
  Tensor k = at::randn({1, 40, 2, 16}, gen, at::device(device)).to(device, dtype).requires_grad_();
  Tensor v = at::randn({1, 40, 2, 16}, gen, at::device(device)).to(device, dtype).requires_grad_();
  if (!q.is_cpu() || !attention_cpu_supported(q)) return {};
  Tensor dout = at::randn({1, 40, 4, 16}, gen, at::device(device)).to(device, dtype);
  std::vector<Tensor> out;
  for (int64_t window : {-1, 9}) {
    Tensor o = fused ? kernels_attention(q, k, v, window) : kernels_attention_reference(q, k, v, window);
    auto grads = torch::autograd::grad({o}, {q, k, v}, {dout});
    out.insert(out.end(), {o, grads[0], grads[1], grads[2]});
  }
  return out;
}
const bool attention_check_registered = kernels_register_check({"attention", attention_check});

}  // namespace

}  // namespace nanochat
