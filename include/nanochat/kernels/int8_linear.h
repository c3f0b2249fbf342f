// int8 weight-only linear layers for inference: each output channel's weights are stored as
// int8 with one symmetric scale (w ~ q * scale, |q| <= 127); activations stay bf16/fp32.
#pragma once
#include <string>
#include <utility>

#include <torch/types.h>

namespace nanochat {

// LibTorch's int8 matvec (at::_weight_int8pack_mm) reads memory it should not when the input
// width is not a multiple of 16: such a weight is not quantized
constexpr int64_t kInt8LinearWidthMultiple = 16;
bool kernels_int8_linear_supported(int64_t in_features);

// (q, scale): q int8 (out, in), scale (out,) in `scale_dtype`, per row amax/127 (1 for a zero
// row). Every |w - q*scale| <= scale/2 (the scale rounded to its dtype included: see the .cpp).
// Fails in one line, naming `what`, when the width is not supported.
std::pair<torch::Tensor, torch::Tensor> kernels_int8_quantize(const torch::Tensor& w, torch::ScalarType scale_dtype,
                                                              const std::string& what);
// what this CPU offers the int8 and bf16 paths, one line for `doctor`: ATen's vector level and
// the AVX-512 VNNI / BF16 / AVX2 flags, with the --dtype to pick
std::string kernels_int8_cpu_report();
// x (..., in) times (q*scale)^T: (..., out) in x's dtype (1 row: our matvec; 2 to 16 on AVX-512,
// 2 to 64 bf16 rows on AVX512-BF16: kernels_rows_linear; allow_avx512 false: the matvec's AVX2
// path up to 8 rows, LibTorch's int8 one up to 16; more rows: the GEMM of the dequantized weight)
torch::Tensor kernels_int8_linear(const torch::Tensor& x, const torch::Tensor& q, const torch::Tensor& scale,
                                  bool allow_avx512 = true);
// the same through a dequantized weight (the batched path, and the tests' second opinion)
torch::Tensor kernels_int8_linear_reference(const torch::Tensor& x, const torch::Tensor& q, const torch::Tensor& scale);

// x (..., in) times w (out, in)^T for inference. A few rows on the CPU (decode) with a weight of
// their dtype: 2 to 16 fp32 rows or 2 to 8 bf16 rows (32 with AVX512-BF16) run
// kernels_rows_linear on AVX-512, one bf16 row (or up to 8 without AVX-512) a matvec that reads w
// once with fp32 sums, rounded to bf16 at the end; anything else is at::linear in x's dtype, and
// so is anything that needs gradients.
// allow_avx512 false: the matvec's AVX2 path even where AVX512-BF16 exists (the tests check both).
torch::Tensor kernels_bf16_linear(const torch::Tensor& x, const torch::Tensor& w, bool allow_avx512 = true);

// x (..., in) times w (out, in)^T, times scale (out,) for an int8 w: our kernel for a few rows
// (tiles of 4 rows by 4 outputs, fp32 sums), whatever the row count; w of x's dtype (fp32, bf16)
// or int8. Fails in one line where it cannot run (no AVX-512, kernels off: supported() says).
bool kernels_rows_linear_supported();
torch::Tensor kernels_rows_linear(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& scale = {});

}  // namespace nanochat
