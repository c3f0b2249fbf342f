// The pair-panel linear (panel_linear.h): packing, the reference and the dispatch. The kernel is
// panel_linear_cpu.cpp.
#include "nanochat/kernels/panel_linear.h"

#include <ATen/ATen.h>

#include "nanochat/common/error.h"
#include "nanochat/kernels.h"
#include "op_dispatch.h"

namespace nanochat {

// panel_linear_cpu.cpp
template <typename W>
void kernels_panel_linear_cpu(const at::BFloat16* x, const W* panels, const at::BFloat16* scale, at::BFloat16* y,
                              int64_t rows, int64_t in, int64_t out, bool relu_square);
// rows_linear_cpu.cpp: AVX-512 with BF16 pairs
bool kernels_rows_linear_cpu_bf16_pairs();

namespace {

constexpr int64_t kBlock = 16;

void check_panels(const torch::Tensor& panels, const torch::Tensor& scale, int64_t in, int64_t out) {
  if (panels.dim() != 4 || panels.size(2) != kBlock || panels.size(3) != 2 || !panels.is_contiguous())
    fail("panel linear: expected contiguous (blocks, pairs, 16, 2) panels, got %lld-D", (long long)panels.dim());
  if (panels.size(0) != (out + kBlock - 1) / kBlock || 2 * panels.size(1) != in)
    fail("panel linear: panels of %lld x %lld pairs for %lld outputs of %lld inputs", (long long)panels.size(0),
         (long long)panels.size(1), (long long)out, (long long)in);
  const bool int8 = panels.scalar_type() == torch::kInt8;
  if (int8 != scale.defined() || (int8 && (scale.dim() != 1 || scale.size(0) != out)))
    fail("panel linear: int8 panels take one scale per output, other panels none");
}

}  // namespace

bool kernels_panel_linear_supported() {
  return kernels_enabled() && kernels_cpu_supported() && kernels_rows_linear_cpu_bf16_pairs();
}

torch::Tensor kernels_pack_pair_panels(const torch::Tensor& w) {
  if (w.dim() != 2 || w.size(1) % 2 != 0)
    fail("pair panels: expected a weight (out, in) with an even width, got %lld-D", (long long)w.dim());
  const int64_t out = w.size(0), in = w.size(1), blocks = (out + kBlock - 1) / kBlock;
  torch::Tensor padded = at::constant_pad_nd(w, {0, 0, 0, blocks * kBlock - out});  // zero outputs to a whole block
  return padded.view({blocks, kBlock, in / 2, 2}).permute({0, 2, 1, 3}).contiguous();
}

torch::Tensor kernels_unpack_pair_panels(const torch::Tensor& panels, int64_t out) {
  const int64_t blocks = panels.size(0), pairs = panels.size(1);
  return panels.permute({0, 2, 1, 3}).reshape({blocks * kBlock, 2 * pairs}).narrow(0, 0, out).contiguous();
}

torch::Tensor kernels_panel_linear_reference(const torch::Tensor& x, const torch::Tensor& panels,
                                             const torch::Tensor& scale, int64_t out, bool relu_square) {
  check_panels(panels, scale, x.size(-1), out);
  torch::Tensor w = kernels_unpack_pair_panels(panels, out).to(x.scalar_type());
  if (scale.defined()) w.mul_(scale.to(x.scalar_type()).unsqueeze(1));
  torch::Tensor y = at::linear(x, w);
  return relu_square ? at::relu(y).square() : y;
}

torch::Tensor kernels_panel_linear(const torch::Tensor& x, const torch::Tensor& panels, const torch::Tensor& scale,
                                   int64_t out, bool relu_square) {
  const int64_t in = x.size(-1), rows = x.numel() / std::max<int64_t>(1, in);
  check_panels(panels, scale, in, out);
  if (!x.device().is_cpu() || x.scalar_type() != torch::kBFloat16 || x.requires_grad() ||
      !kernels_panel_linear_supported())
    return kernels_panel_linear_reference(x, panels, scale, out, relu_square);
  torch::Tensor x2 = x.reshape({rows, in}).contiguous();
  std::vector<int64_t> shape(x.sizes().begin(), x.sizes().end());
  shape.back() = out;
  torch::Tensor y = torch::empty(shape, x.options());
  using bf16 = at::BFloat16;
  if (panels.scalar_type() == torch::kInt8) {
    torch::Tensor s = scale.to(torch::kBFloat16).contiguous();
    kernels_panel_linear_cpu(x2.data_ptr<bf16>(), panels.data_ptr<int8_t>(), s.data_ptr<bf16>(), y.data_ptr<bf16>(),
                             rows, in, out, relu_square);
  } else if (panels.scalar_type() == torch::kBFloat16) {
    kernels_panel_linear_cpu(x2.data_ptr<bf16>(), panels.data_ptr<bf16>(), (const bf16*)nullptr, y.data_ptr<bf16>(),
                             rows, in, out, relu_square);
  } else {
    fail("panel linear: bf16 or int8 panels expected, got %s", c10::toString(panels.scalar_type()));
  }
  return y;
}

}  // namespace nanochat
