// int8 weight-only linear layers: per-output-channel symmetric quantization at load, and the
// matmul. A few rows (decode) run LibTorch's int8 matvec, which reads a quarter of fp32's bytes;
// more rows (prefill) dequantize the weight once and run the ordinary bf16/fp32 GEMM, because the
// int8 kernel's cost grows with every row while the GEMM's hardly does.
#include "nanochat/kernels/int8_linear.h"

#include <ATen/ATen.h>
#include <ATen/Version.h>

#include "nanochat/common/error.h"
#include "op_dispatch.h"

namespace nanochat {

// bf16_matvec_cpu.cpp: y (rows, out) = x (rows, in) @ w (out, in)^T, all contiguous bf16
void kernels_bf16_matvec_cpu(const at::BFloat16* x, const at::BFloat16* w, at::BFloat16* y, int64_t rows, int64_t in,
                             int64_t out, bool allow_avx512);
// y (rows, out) = scale * (x (rows, in) @ q (out, in)^T), int8 q; x, scale and y all fp32 or all bf16
template <typename T>
void kernels_int8_matvec_cpu(const T* x, const int8_t* q, const T* scale, T* y, int64_t rows, int64_t in, int64_t out,
                             bool allow_avx512);

namespace {

// up to 8 rows each weight row, read once, stays in L1 for every input row; beyond, the GEMM's
// fixed cost per call is shared by enough rows
constexpr int64_t kBf16MaxRowsForMatvec = 8;

// measured on AVX-512 (bench_cpu_dtypes): at 16 rows the int8 kernel still beats dequantize+GEMM
constexpr int64_t kInt8MaxRowsForMatvec = 16;

void check_int8_weight(const torch::Tensor& q, const torch::Tensor& scale, int64_t in_features) {
  if (q.scalar_type() != torch::kInt8 || q.dim() != 2)
    fail("int8 linear: the weight must be a 2-D int8 tensor, got %lld-D %s", (long long)q.dim(),
         c10::toString(q.scalar_type()));
  if (scale.dim() != 1 || scale.size(0) != q.size(0))
    fail("int8 linear: %lld scales for %lld output channels", (long long)scale.numel(), (long long)q.size(0));
  if (in_features != q.size(1))
    fail("int8 linear: input width %lld, weight width %lld", (long long)in_features, (long long)q.size(1));
}

}  // namespace

bool kernels_int8_linear_supported(int64_t in_features) {
  return in_features > 0 && in_features % kInt8LinearWidthMultiple == 0;
}

std::string kernels_int8_cpu_report() {
  const std::string level = at::get_cpu_capability();  // the kernels ATen dispatches to: DEFAULT, AVX2, AVX512
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  const bool vnni = __builtin_cpu_supports("avx512vnni"), bf16 = __builtin_cpu_supports("avx512bf16");
  std::string advice;
  if (level == "DEFAULT" || !avx2)
    advice = "no vectorized int8 kernel here: use --dtype float32 (int8 and bfloat16 run scalar code)";
  else if (level == "AVX512" && bf16) advice = "int8 and bfloat16 at full speed: --dtype int8 decodes fastest";
  else advice = "int8 vectorized, bf16 converted in software: --dtype int8 still reads the fewest bytes";
  return "ATen CPU level " + level + ", AVX2 " + (avx2 ? "yes" : "no") + ", AVX-512 VNNI " + (vnni ? "yes" : "no") +
         ", AVX-512 BF16 " + (bf16 ? "yes" : "no") + ": " + advice;
}

std::pair<torch::Tensor, torch::Tensor> kernels_int8_quantize(const torch::Tensor& w, torch::ScalarType scale_dtype,
                                                              const std::string& what) {
  if (w.dim() != 2) fail("int8 quantization: %s is %lld-D, expected a matrix", what.c_str(), (long long)w.dim());
  if (!kernels_int8_linear_supported(w.size(1)))
    fail(
        "int8 quantization: %s has %lld input features, the int8 kernel takes multiples of %lld "
        "(run it with --dtype bfloat16)",
        what.c_str(), (long long)w.size(1), (long long)kInt8LinearWidthMultiple);
  torch::Tensor w32 = w.to(torch::kFloat32);
  torch::Tensor amax = w32.abs().amax(1);
  // the scale is rounded to its dtype before the weights are divided by it, so q*scale is what
  // the matmul will see; the row's largest weight may then land a hair beyond 127 and is clamped,
  // which costs at most 127*|rounding| ~ scale/4 for bf16 scales: still within scale/2
  torch::Tensor scale = at::where(amax > 0, amax / 127.0, at::ones_like(amax)).to(scale_dtype);
  torch::Tensor q = at::round(w32 / scale.to(torch::kFloat32).unsqueeze(1)).clamp_(-127, 127).to(torch::kInt8);
  return {q, scale};
}

torch::Tensor kernels_int8_linear_reference(const torch::Tensor& x, const torch::Tensor& q,
                                            const torch::Tensor& scale) {
  check_int8_weight(q, scale, x.size(-1));
  torch::Tensor w = q.to(x.scalar_type()).mul_(scale.to(x.scalar_type()).unsqueeze(1));
  return at::linear(x, w);
}

torch::Tensor kernels_int8_linear(const torch::Tensor& x, const torch::Tensor& q, const torch::Tensor& scale,
                                  bool allow_avx512) {
  check_int8_weight(q, scale, x.size(-1));
  const int64_t rows = x.numel() / std::max<int64_t>(1, x.size(-1));
  if (!x.device().is_cpu() || rows > kInt8MaxRowsForMatvec || !kernels_int8_linear_supported(q.size(1)))
    return kernels_int8_linear_reference(x, q, scale);
  std::vector<int64_t> shape(x.sizes().begin(), x.sizes().end());
  shape.back() = q.size(0);
  const torch::ScalarType out_dtype = x.scalar_type();
  if (rows <= kBf16MaxRowsForMatvec && q.is_contiguous() && kernels_enabled() && kernels_cpu_supported() &&
      (out_dtype == torch::kFloat32 || out_dtype == torch::kBFloat16)) {
    // our matvec: the weight read once at the bandwidth a bf16 one gets, the rows in fp32
    torch::Tensor x2 = x.reshape({rows, x.size(-1)}).contiguous(), s = scale.to(out_dtype).contiguous();
    torch::Tensor y = torch::empty(shape, x.options());
    if (out_dtype == torch::kFloat32)
      kernels_int8_matvec_cpu(x2.data_ptr<float>(), q.data_ptr<int8_t>(), s.data_ptr<float>(), y.data_ptr<float>(),
                              rows, x.size(-1), q.size(0), allow_avx512);
    else
      kernels_int8_matvec_cpu(x2.data_ptr<at::BFloat16>(), q.data_ptr<int8_t>(), s.data_ptr<at::BFloat16>(),
                              y.data_ptr<at::BFloat16>(), rows, x.size(-1), q.size(0), allow_avx512);
    return y;
  }
  // the int8 kernel is fast with bf16 activations and an order of magnitude slower with fp32 ones
  const torch::ScalarType act = out_dtype == torch::kFloat16 ? torch::kFloat16 : torch::kBFloat16;
  torch::Tensor x2 = x.reshape({rows, x.size(-1)}).to(act).contiguous();
  torch::Tensor y = at::_weight_int8pack_mm(x2, q.contiguous(), scale.to(act));
  return y.view(shape).to(out_dtype);
}

torch::Tensor kernels_bf16_linear(const torch::Tensor& x, const torch::Tensor& w, bool allow_avx512) {
  const int64_t in = x.size(-1), rows = x.numel() / std::max<int64_t>(1, in);
  const bool matvec = x.device().is_cpu() && w.device().is_cpu() && x.scalar_type() == torch::kBFloat16 &&
                      w.scalar_type() == torch::kBFloat16 && w.dim() == 2 && w.size(1) == in && w.is_contiguous() &&
                      rows <= kBf16MaxRowsForMatvec && !x.requires_grad() && !w.requires_grad() && kernels_enabled() &&
                      kernels_cpu_supported();
  if (!matvec) return at::linear(x, w.to(x.scalar_type()));
  torch::Tensor x2 = x.reshape({rows, in}).contiguous();
  std::vector<int64_t> shape(x.sizes().begin(), x.sizes().end());
  shape.back() = w.size(0);
  torch::Tensor y = torch::empty(shape, x.options());
  kernels_bf16_matvec_cpu(x2.data_ptr<at::BFloat16>(), w.data_ptr<at::BFloat16>(), y.data_ptr<at::BFloat16>(), rows, in,
                          w.size(0), allow_avx512);
  return y;
}

}  // namespace nanochat
