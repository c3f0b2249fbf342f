// int8 weight-only linear layers: per-output-channel symmetric quantization at load, and the
// matmul. A few rows (decode) run our matvec or few-rows kernel (rows_linear_cpu.cpp), which read
// a quarter of fp32's bytes; more rows (prefill) dequantize the weight once and run the ordinary
// bf16/fp32 GEMM, because the int8 kernels' cost grows with every row while the GEMM's hardly does.
// The inference linear of fp32 and bf16 weights lives here too.
#include "nanochat/kernels/int8_linear.h"
#include "nanochat/kernels/panel_linear.h"

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
// rows_linear_cpu.cpp: y = x @ w^T (* scale per output when given), tiles of 4 rows by 4 outputs
bool kernels_rows_linear_cpu_supported();
bool kernels_rows_linear_cpu_bf16_pairs();  // and bf16 rows with bf16 weights multiply pairs (AVX512-BF16)
template <typename T, typename W>
void kernels_rows_linear_cpu(const T* x, const W* w, const T* scale, T* y, int64_t rows, int64_t in, int64_t out);

namespace {

// up to 8 rows each weight row, read once, stays in L1 for every input row; beyond, the GEMM's
// fixed cost per call is shared by enough rows
constexpr int64_t kBf16MaxRowsForMatvec = 8;

// measured on AVX-512 (bench_cpu_dtypes): at 16 rows the int8 kernel still beats dequantize+GEMM
constexpr int64_t kInt8MaxRowsForMatvec = 16;
// bf16 rows on AVX512-BF16 (the tiles multiply bf16 pairs): up to 64 rows, a prompt's chunk, where
// dequantizing the whole weight for the GEMM costs more than the GEMM (bench_serving --linears,
// 768 wide, mlp.c_fc at 32 rows 1.0 against 1.5 ms, at 64 2.0 against 2.2; at 128 the GEMM wins)
constexpr int64_t kInt8PairsMaxRowsForTiles = 64;

// From 2 rows (a decode step of several chats) the tiles of rows_linear_cpu.cpp, on AVX-512: up
// to 16 rows for fp32 (MKL's sgemm packs its operands every call: 0.6x to 0.95x its time at the
// serving bench's shapes) and int8 (0.65x to 0.8x LibTorch's int8 kernel); up to 8 for bf16, where
// from 9 rows oneDNN's bf16 GEMM multiplies bf16 pairs at twice the tiles' fp32 rate. Where the
// tiles multiply bf16 pairs too, up to 32 bf16 rows, a short prompt's forward: oneDNN sets itself
// up on every call (a 17-token prompt of the serving bench's model took 2.4 ms instead of 3.7).
constexpr int64_t kMinRowsForTiles = 2;
constexpr int64_t kF32MaxRowsForTiles = 16;
constexpr int64_t kBf16MaxRowsForTiles = 8;
constexpr int64_t kBf16PairsMaxRowsForTiles = 32;

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
  // AMX: rows decoded together (a server's batch, a prompt) multiply on its tiles
  const std::string amx = kernels_panel_linear_supported() && kernels_panel_linear_amx() ? "yes" : "no";
  return "ATen CPU level " + level + ", AVX2 " + (avx2 ? "yes" : "no") + ", AVX-512 VNNI " + (vnni ? "yes" : "no") +
         ", AVX-512 BF16 " + (bf16 ? "yes" : "no") + ", AMX " + amx + ": " + advice;
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
  const torch::ScalarType out_dtype = x.scalar_type();
  const bool ours = x.device().is_cpu() && q.is_contiguous() && kernels_enabled() && kernels_cpu_supported() &&
                    (out_dtype == torch::kFloat32 || out_dtype == torch::kBFloat16);
  const bool tiles = ours && allow_avx512 && kernels_rows_linear_cpu_supported();
  const bool pairs = tiles && out_dtype == torch::kBFloat16 && kernels_rows_linear_cpu_bf16_pairs();
  if (!x.device().is_cpu() || rows > (pairs ? kInt8PairsMaxRowsForTiles : kInt8MaxRowsForMatvec) ||
      !kernels_int8_linear_supported(q.size(1)))
    return kernels_int8_linear_reference(x, q, scale);
  if (tiles && rows >= kMinRowsForTiles) return kernels_rows_linear(x, q, scale);
  std::vector<int64_t> shape(x.sizes().begin(), x.sizes().end());
  shape.back() = q.size(0);
  if (ours && rows <= kBf16MaxRowsForMatvec) {
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

bool kernels_rows_linear_supported() {
  return kernels_enabled() && kernels_cpu_supported() && kernels_rows_linear_cpu_supported();
}

torch::Tensor kernels_rows_linear(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& scale) {
  const int64_t in = x.size(-1), rows = x.numel() / std::max<int64_t>(1, in);
  const torch::ScalarType dt = x.scalar_type(), wt = w.scalar_type();
  if (!kernels_rows_linear_supported()) fail("rows linear: this CPU has no AVX-512 (or the kernels are off)");
  if (!x.device().is_cpu() || !w.device().is_cpu() || (dt != torch::kFloat32 && dt != torch::kBFloat16))
    fail("rows linear: expected fp32 or bf16 activations on the CPU, got %s", c10::toString(dt));
  if (w.dim() != 2 || w.size(1) != in || !w.is_contiguous())
    fail("rows linear: a contiguous (out, %lld) weight expected", (long long)in);
  if (wt == torch::kInt8) check_int8_weight(w, scale, in);
  else if (wt != dt) fail("rows linear: a %s weight with %s activations", c10::toString(wt), c10::toString(dt));
  torch::Tensor x2 = x.reshape({rows, in}).contiguous();
  std::vector<int64_t> shape(x.sizes().begin(), x.sizes().end());
  shape.back() = w.size(0);
  torch::Tensor y = torch::empty(shape, x.options());
  const int64_t out = w.size(0);
  torch::Tensor s = wt == torch::kInt8 ? scale.to(dt).contiguous() : torch::Tensor();
  if (dt == torch::kFloat32) {
    const float* sp = s.defined() ? s.data_ptr<float>() : nullptr;
    if (wt == torch::kInt8)
      kernels_rows_linear_cpu(x2.data_ptr<float>(), w.data_ptr<int8_t>(), sp, y.data_ptr<float>(), rows, in, out);
    else kernels_rows_linear_cpu(x2.data_ptr<float>(), w.data_ptr<float>(), sp, y.data_ptr<float>(), rows, in, out);
  } else {
    using bf16 = at::BFloat16;
    const bf16* sp = s.defined() ? s.data_ptr<bf16>() : nullptr;
    if (wt == torch::kInt8)
      kernels_rows_linear_cpu(x2.data_ptr<bf16>(), w.data_ptr<int8_t>(), sp, y.data_ptr<bf16>(), rows, in, out);
    else kernels_rows_linear_cpu(x2.data_ptr<bf16>(), w.data_ptr<bf16>(), sp, y.data_ptr<bf16>(), rows, in, out);
  }
  return y;
}

torch::Tensor kernels_bf16_linear(const torch::Tensor& x, const torch::Tensor& w, bool allow_avx512) {
  const int64_t in = x.size(-1), rows = x.numel() / std::max<int64_t>(1, in);
  const torch::ScalarType dt = x.scalar_type();
  const bool ours = x.device().is_cpu() && w.device().is_cpu() && w.scalar_type() == dt && w.dim() == 2 &&
                    w.size(1) == in && w.is_contiguous() && !x.requires_grad() && !w.requires_grad() &&
                    kernels_enabled() && kernels_cpu_supported();
  const int64_t max_tiled = dt == torch::kFloat32                  ? kF32MaxRowsForTiles
                            : kernels_rows_linear_cpu_bf16_pairs() ? kBf16PairsMaxRowsForTiles
                                                                   : kBf16MaxRowsForTiles;
  if (ours && (dt == torch::kFloat32 || dt == torch::kBFloat16) && rows >= kMinRowsForTiles && rows <= max_tiled &&
      allow_avx512 && kernels_rows_linear_cpu_supported())
    return kernels_rows_linear(x, w);
  if (!ours || dt != torch::kBFloat16 || rows > kBf16MaxRowsForMatvec) return at::linear(x, w.to(dt));
  torch::Tensor x2 = x.reshape({rows, in}).contiguous();
  std::vector<int64_t> shape(x.sizes().begin(), x.sizes().end());
  shape.back() = w.size(0);
  torch::Tensor y = torch::empty(shape, x.options());
  kernels_bf16_matvec_cpu(x2.data_ptr<at::BFloat16>(), w.data_ptr<at::BFloat16>(), y.data_ptr<at::BFloat16>(), rows, in,
                          w.size(0), allow_avx512);
  return y;
}

}  // namespace nanochat
