// defines: kernels_cast
// The fp32 master weights' cast to bf16 in the forward (and of their gradients back to fp32 in
// the backward) as one autograd op over the CPU kernels' conversions.
#include "nanochat/kernels.h"

#include <torch/autograd.h>

#include "device_kernels.h"
#include "kernels_internal.h"

namespace nanochat {
namespace {

using torch::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct CastFloatBfloat16 : public torch::autograd::Function<CastFloatBfloat16> {
  static Tensor forward(AutogradContext*, const Tensor& x) { return cast_float_bfloat16_cpu(x); }
  static variable_list backward(AutogradContext*, variable_list grads) {
    return {cast_float_bfloat16_cpu(grads[0].contiguous())};
  }
};

}  // namespace

Tensor kernels_cast(const Tensor& x, at::ScalarType dtype) {
  const auto from = x.scalar_type();
  const bool pair = (from == at::kFloat && dtype == at::kBFloat16) || (from == at::kBFloat16 && dtype == at::kFloat);
  if (!pair || !x.is_cpu() || !x.is_contiguous() || !kernels_use_fused(x)) return x.to(dtype);
  return CastFloatBfloat16::apply(x);
}

}  // namespace nanochat
