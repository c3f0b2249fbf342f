// What the CPU kernels share beyond the row helpers of cpu_helpers.h: the thread count they
// really run on, and the fp32 <-> bf16 row conversion exposed for the tests. Compiled, as
// every *_cpu.cpp, for AVX2+FMA+F16C (CMakeLists.txt).
#include <atomic>

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty_like.h>
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>

#include "cpu_helpers.h"
#include "op_dispatch.h"
#include "nanochat/common/error.h"

namespace nanochat {

// fp32 <-> bf16 in parallel blocks through the row conversions every kernel here uses: their
// bits checked against ATen's .to() by the tests (the model itself casts with ATen's copy
// kernel, which streams faster)
torch::Tensor cast_float_bfloat16_cpu(const torch::Tensor& x) {
  const bool down = x.scalar_type() == at::kFloat;
  if (!(down || x.scalar_type() == at::kBFloat16) || !x.is_contiguous())
    fail("cast_float_bfloat16_cpu: a contiguous float32 or bfloat16 tensor expected, got %s",
         c10::toString(x.scalar_type()));
  torch::Tensor y = at::empty_like(x, x.options().dtype(down ? at::kBFloat16 : at::kFloat));
  at::parallel_for(0, x.numel(), 65536, [&](int64_t begin, int64_t end) {
    if (down) from_float(x.data_ptr<float>() + begin, y.data_ptr<at::BFloat16>() + begin, end - begin);
    else to_float(x.data_ptr<at::BFloat16>() + begin, y.data_ptr<float>() + begin, end - begin);
  });
  return y;
}

int cpu_kernel_threads() {
  std::atomic<int> chunks{0};
  const int n = std::max(1, at::get_num_threads());
  at::parallel_for(0, n, 1, [&](int64_t, int64_t) { chunks++; });  // one chunk per thread that ran
  return chunks.load();
}

}  // namespace nanochat
