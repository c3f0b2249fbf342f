// defines: kernels_attention_available, kernels_attention, kernels_attention_reference
// Causal attention with a left window as an autograd function over the CPU kernel of
// attention_cpu.cpp, which saves o and one fp32 log-sum-exp per row and recomputes the
// scores in backward. On CUDA the attention module keeps LibTorch's flash kernels (with a
// real window where flash_window.h has one), so there is no CUDA twin here.
#include "nanochat/kernels.h"

#include <cmath>

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include "device_kernels.h"
#include "kernels_internal.h"
#include "nanochat/common/error.h"

namespace nanochat {
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
  return kernels_enabled() && q.is_cpu() && kernels_cpu_supported() && attention_cpu_supported(q);
}

Tensor kernels_attention(const Tensor& q, const Tensor& k, const Tensor& v, int64_t window) {
  check_shapes(q, k, v);
  if (!kernels_attention_available(q)) return kernels_attention_reference(q, k, v, window);
  return CausalAttention::apply(q.contiguous(), k.contiguous(), v.contiguous(), window);
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

}  // namespace nanochat
