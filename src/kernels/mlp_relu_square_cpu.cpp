// The CPU kernel of mlp_relu_square.cpp: relu(h)^2 and its backward in blocks through fp32.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty_like.h>
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>

#include "cpu_helpers.h"
#include "nanochat/common/error.h"

namespace nanochat {
namespace {

// out[i] = f(a[i], b[i]) over n elements of T, in blocks converted to acc_t: one conversion
// each way per element (at::vec's bf16 arithmetic converts around every single op)
template <typename T, typename F>
void map2_acc(const T* a, const T* b, T* out, int64_t n, F f) {
  using acc = acc_t<T>;
  using V = Vectorized<acc>;
  at::parallel_for(0, n, 32768, [&](int64_t begin, int64_t end) {
    constexpr int64_t block = 4096;
    std::vector<acc> sa, sb, so(block);
    for (int64_t i0 = begin; i0 < end; i0 += block) {
      const int64_t m = std::min(block, end - i0);
      const acc* va = row_as_acc(a + i0, m, sa);
      const acc* vb = b ? row_as_acc(b + i0, m, sb) : va;
      int64_t j = 0;
      for (; j + V::size() <= m; j += V::size()) f(V::loadu(va + j), V::loadu(vb + j)).store(so.data() + j);
      if (j < m) f(V::loadu(va + j, m - j), V::loadu(vb + j, m - j)).store(so.data() + j, m - j);
      store_row<T>(so.data(), out + i0, m);
    }
  });
}

}  // namespace

at::Tensor relu_square_forward_cpu(const at::Tensor& h) {
  at::Tensor y = at::empty_like(h);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, h.scalar_type(), "relu_square_forward", [&] {
    using V = Vectorized<acc_t<scalar_t>>;
    map2_acc<scalar_t>(h.data_ptr<scalar_t>(), nullptr, y.data_ptr<scalar_t>(), h.numel(), [](V x, V) {
      V r = at::vec::clamp_min(x, V(0));
      return r * r;
    });
  });
  return y;
}

void relu_square_backward_cpu(const at::Tensor& h, at::Tensor& dy) {
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, h.scalar_type(), "relu_square_backward", [&] {
    using V = Vectorized<acc_t<scalar_t>>;
    scalar_t* g = dy.data_ptr<scalar_t>();
    map2_acc<scalar_t>(h.data_ptr<scalar_t>(), g, g, h.numel(),
                       [](V x, V d) { return V(2) * at::vec::clamp_min(x, V(0)) * d; });
  });
}

}  // namespace nanochat
