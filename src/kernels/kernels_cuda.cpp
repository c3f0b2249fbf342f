// defines: softcap_ce_forward_cuda, softcap_ce_backward_cuda, relu_square_forward_cuda,
//          relu_square_backward_cuda, rotary_norm_cuda_takes, rotary_norm_forward_cuda,
//          rotary_norm_backward_cuda, residual_norm_forward_cuda, residual_norm_backward_cuda,
//          adamw_step_cuda, muon_nesterov_cuda, muon_scale_rows_cuda, muon_sumsq_cuda,
//          muon_update_cuda
// CUDA-only (compiled when the LibTorch found has CUDA): the torch side of the kernels in
// kernels.cu. Checks what the raw-pointer launchers cannot (device, dtype, contiguity, sizes),
// allocates the outputs on the input's device and launches on its current stream.
#include "device_kernels.h"

#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "kernels_cuda_launch.h"
#include "nanochat/common/error.h"

namespace nanochat {
namespace {

using torch::Tensor;

// the launchers' dtype tag; float64 has no CUDA kernel (it exists for CPU gradient checks)
kernels_dtype cuda_dtype(const Tensor& t, const char* where) {
  switch (t.scalar_type()) {
    case at::kFloat: return kernels_dtype_f32;
    case at::kBFloat16: return kernels_dtype_bf16;
    case at::kHalf: return kernels_dtype_f16;
    default:
      fail("%s: the CUDA kernel takes float32, bfloat16 or float16, not %s (float64 runs on the CPU only)", where,
           c10::toString(t.scalar_type()));
  }
}

// t is a contiguous CUDA tensor of `dtype` on `device`
void check_cuda(const Tensor& t, const char* name, at::ScalarType dtype, at::Device device, const char* where) {
  if (!t.defined()) fail("%s: %s is undefined", where, name);
  if (!t.is_cuda()) fail("%s: %s is on %s, expected a CUDA device", where, name, t.device().str().c_str());
  if (t.device() != device)
    fail("%s: %s is on %s, expected %s", where, name, t.device().str().c_str(), device.str().c_str());
  if (t.scalar_type() != dtype)
    fail("%s: %s is %s, expected %s", where, name, c10::toString(t.scalar_type()), c10::toString(dtype));
  if (!t.is_contiguous()) fail("%s: %s must be contiguous", where, name);
}

void check_launch(cudaError_t err, const char* where) {
  if (err != cudaSuccess) fail("%s: CUDA kernel launch failed: %s", where, cudaGetErrorString(err));
}

// one block per row: a grid of at most 2^31 - 1 blocks
void check_grid_rows(int64_t n, const char* where) {
  if (n > INT32_MAX) fail("%s: %lld rows is more than one launch takes; use smaller chunks", where, (long long)n);
}

cudaStream_t stream_of(const Tensor& t) { return c10::cuda::getCurrentCUDAStream(t.device().index()).stream(); }

// (n,) float32 output: written in place when the caller passes one (e.g. a slice of the
// whole batch's losses), else allocated
void fp32_rows_out(Tensor& out, int64_t n, at::Device device, const char* name, const char* where) {
  if (!out.defined()) {
    out = at::empty({n}, at::TensorOptions().dtype(at::kFloat).device(device));
    return;
  }
  check_cuda(out, name, at::kFloat, device, where);
  if (out.numel() != n) fail("%s: %s has %lld elements, expected %lld", where, name, (long long)out.numel(), (long long)n);
}

// what both softcap CE kernels take: logits (n, ld) contiguous in a compute dtype, one int64
// target per row, 0 < vocab <= ld, a positive cap, n rows for one launch; returns (n, ld)
std::pair<int64_t, int64_t> check_logits_rows(const Tensor& logits, const Tensor& targets, int64_t vocab, double cap,
                                              const char* where) {
  const at::Device dev = logits.device();
  check_cuda(logits, "logits", logits.scalar_type(), dev, where);
  if (logits.dim() != 2) fail("%s: logits must be (n, ld), got %lld dims", where, (long long)logits.dim());
  const int64_t n = logits.size(0), ld = logits.size(1);
  check_cuda(targets, "targets", at::kLong, dev, where);
  if (targets.numel() != n) fail("%s: %lld targets for %lld rows", where, (long long)targets.numel(), (long long)n);
  if (vocab <= 0 || vocab > ld) fail("%s: vocab %lld outside (0, %lld]", where, (long long)vocab, (long long)ld);
  if (!(cap > 0)) fail("%s: the softcap must be > 0, got %g", where, cap);
  check_grid_rows(n, where);
  return {n, ld};
}

}  // namespace

void softcap_ce_forward_cuda(const Tensor& logits, const Tensor& targets, int64_t vocab, double cap, Tensor& loss,
                             Tensor& lse) {
  const char* where = "softcap_ce_forward_cuda";
  const kernels_dtype dt = cuda_dtype(logits, where);
  const at::Device dev = logits.device();
  const auto [n, ld] = check_logits_rows(logits, targets, vocab, cap, where);
  fp32_rows_out(loss, n, dev, "loss", where);
  fp32_rows_out(lse, n, dev, "lse", where);
  const c10::cuda::CUDAGuard guard(dev);
  check_launch(kernels_launch_softcap_ce_forward(logits.data_ptr(), targets.data_ptr<int64_t>(), n, ld, vocab,
                                                 (float)cap, loss.data_ptr<float>(), lse.data_ptr<float>(), dt,
                                                 stream_of(logits)),
               where);
}

void softcap_ce_backward_cuda(Tensor& logits, const Tensor& targets, const Tensor& lse, const Tensor& grad_loss,
                              int64_t vocab, double cap) {
  const char* where = "softcap_ce_backward_cuda";
  const kernels_dtype dt = cuda_dtype(logits, where);
  const at::Device dev = logits.device();
  const auto [n, ld] = check_logits_rows(logits, targets, vocab, cap, where);
  check_cuda(lse, "lse", at::kFloat, dev, where);
  if (lse.numel() != n) fail("%s: lse has %lld entries for %lld rows", where, (long long)lse.numel(), (long long)n);
  // grad_loss may be a broadcast scalar (stride 0, as from loss.sum()) or any 1-D stride
  if (!grad_loss.defined() || grad_loss.device() != dev || grad_loss.scalar_type() != at::kFloat ||
      grad_loss.dim() != 1 || grad_loss.size(0) != n)
    fail("%s: grad_loss must be a float32 (%lld,) tensor on %s", where, (long long)n, dev.str().c_str());
  const c10::cuda::CUDAGuard guard(dev);
  check_launch(kernels_launch_softcap_ce_backward(logits.data_ptr(), targets.data_ptr<int64_t>(), lse.data_ptr<float>(),
                                                  grad_loss.data_ptr<float>(), grad_loss.stride(0), n, ld, vocab,
                                                  (float)cap, dt, stream_of(logits)),
               where);
}

Tensor relu_square_forward_cuda(const Tensor& h) {
  const char* where = "relu_square_forward_cuda";
  const kernels_dtype dt = cuda_dtype(h, where);
  check_cuda(h, "h", h.scalar_type(), h.device(), where);
  Tensor y = at::empty_like(h, at::MemoryFormat::Contiguous);
  const c10::cuda::CUDAGuard guard(h.device());
  check_launch(kernels_launch_relu_square_forward(h.data_ptr(), y.data_ptr(), h.numel(), dt, stream_of(h)), where);
  return y;
}

void relu_square_backward_cuda(const Tensor& h, Tensor& dy) {
  const char* where = "relu_square_backward_cuda";
  const kernels_dtype dt = cuda_dtype(h, where);
  check_cuda(h, "h", h.scalar_type(), h.device(), where);
  check_cuda(dy, "dy", h.scalar_type(), h.device(), where);
  if (!dy.sizes().equals(h.sizes())) fail("%s: dy and h differ in shape", where);
  const c10::cuda::CUDAGuard guard(h.device());
  check_launch(kernels_launch_relu_square_backward(h.data_ptr(), dy.data_ptr(), h.numel(), dt, stream_of(h)), where);
}

namespace {

// x, dy, y: R rows of D (the last dim); cos, sin: T*D/2 values; R a multiple of T*H
void check_rotary(const Tensor& x, const Tensor& cos, const Tensor& sin, int64_t T, int64_t H, const char* where) {
  check_cuda(cos, "cos", x.scalar_type(), x.device(), where);
  check_cuda(sin, "sin", x.scalar_type(), x.device(), where);
  if (x.dim() < 1) fail("%s: x must have at least one dimension", where);
  const int64_t D = x.size(-1);
  if (D % 2 != 0 || D <= 0 || D > kernels_rotary_norm_max_dim)
    fail("%s: head dim %lld must be even and at most %lld on CUDA", where, (long long)D,
         (long long)kernels_rotary_norm_max_dim);
  if (T <= 0 || H <= 0 || x.numel() % (T * H * D) != 0)
    fail("%s: %lld values are not whole (T=%lld, H=%lld, D=%lld) blocks", where, (long long)x.numel(), (long long)T,
         (long long)H, (long long)D);
  if (cos.numel() != T * (D / 2) || sin.numel() != T * (D / 2))
    fail("%s: cos and sin must hold (T=%lld, D/2=%lld) values", where, (long long)T, (long long)(D / 2));
}

}  // namespace

bool rotary_norm_cuda_takes(int64_t head_dim) { return head_dim <= kernels_rotary_norm_max_dim; }

std::pair<Tensor, Tensor> rotary_norm_forward_cuda(const Tensor& x, const Tensor& cos, const Tensor& sin, int64_t T,
                                                   int64_t H, double scale, double eps) {
  const char* where = "rotary_norm_forward_cuda";
  const kernels_dtype dt = cuda_dtype(x, where);
  check_cuda(x, "x", x.scalar_type(), x.device(), where);
  check_rotary(x, cos, sin, T, H, where);
  const int64_t D = x.size(-1), R = x.numel() / D;
  Tensor y = at::empty_like(x, at::MemoryFormat::Contiguous);
  Tensor rstd = at::empty({R}, x.options().dtype(at::kFloat));
  const c10::cuda::CUDAGuard guard(x.device());
  check_launch(kernels_launch_rotary_norm_forward(x.data_ptr(), cos.data_ptr(), sin.data_ptr(), y.data_ptr(),
                                                  rstd.data_ptr<float>(), R, D, T, H, (float)scale, (float)eps, dt,
                                                  stream_of(x)),
               where);
  return {y, rstd};
}

Tensor rotary_norm_backward_cuda(const Tensor& dy, const Tensor& y, const Tensor& rstd, const Tensor& cos,
                                 const Tensor& sin, int64_t T, int64_t H, double scale) {
  const char* where = "rotary_norm_backward_cuda";
  const kernels_dtype dt = cuda_dtype(y, where);
  check_cuda(y, "y", y.scalar_type(), y.device(), where);
  check_cuda(dy, "dy", y.scalar_type(), y.device(), where);
  if (dy.numel() != y.numel() || dy.size(-1) != y.size(-1)) fail("%s: dy and y differ in shape", where);
  check_rotary(y, cos, sin, T, H, where);
  const int64_t D = y.size(-1), R = y.numel() / D;
  check_cuda(rstd, "rstd", at::kFloat, y.device(), where);
  if (rstd.numel() != R) fail("%s: rstd has %lld values for %lld rows", where, (long long)rstd.numel(), (long long)R);
  Tensor dx = at::empty_like(dy, at::MemoryFormat::Contiguous);
  const c10::cuda::CUDAGuard guard(y.device());
  check_launch(kernels_launch_rotary_norm_backward(dy.data_ptr(), y.data_ptr(), rstd.data_ptr<float>(), cos.data_ptr(),
                                                   sin.data_ptr(), dx.data_ptr(), R, D, T, H, (float)scale, dt,
                                                   stream_of(y)),
               where);
  return dx;
}

namespace {

// a lambda's device pointer: null (for 1) when undefined, else a 0-dim fp32 tensor on `device`
const float* lambda_ptr(const Tensor& s, at::Device device, const char* name, const char* where) {
  if (!s.defined()) return nullptr;
  check_cuda(s, name, at::kFloat, device, where);
  if (s.numel() != 1) fail("%s: %s must hold one value", where, name);
  return s.data_ptr<float>();
}

// (R, D) rows of the compute dtype on the device of `like`
void check_rows_like(const Tensor& t, const Tensor& like, const char* name, const char* where) {
  check_cuda(t, name, like.scalar_type(), like.device(), where);
  if (!t.sizes().equals(like.sizes())) fail("%s: %s differs in shape from the rows", where, name);
}

}  // namespace

ResidualNormOut residual_norm_forward_cuda(const Tensor& x, const Tensor& y, const Tensor& a, const Tensor& b,
                                           double eps) {
  const char* where = "residual_norm_forward_cuda";
  const kernels_dtype dt = cuda_dtype(x, where);
  check_cuda(x, "x", x.scalar_type(), x.device(), where);
  check_rows_like(y, x, "y", where);
  if (x.dim() != 2) fail("%s: x must be (rows, dim)", where);
  const int64_t R = x.size(0), D = x.size(1);
  check_grid_rows(R, where);
  ResidualNormOut out{at::empty_like(x), at::empty_like(x), at::empty({R}, x.options().dtype(at::kFloat))};
  const c10::cuda::CUDAGuard guard(x.device());
  check_launch(kernels_launch_residual_norm_forward(x.data_ptr(), y.data_ptr(), lambda_ptr(a, x.device(), "a", where),
                                                    lambda_ptr(b, x.device(), "b", where), out.h.data_ptr(),
                                                    out.n.data_ptr(), out.rstd.data_ptr<float>(), R, D, (float)eps, dt,
                                                    stream_of(x)),
               where);
  return out;
}

ResidualNormGrads residual_norm_backward_cuda(const Tensor& dh, const Tensor& dn, const Tensor& h, const Tensor& rstd,
                                              const Tensor& x, const Tensor& y, const Tensor& a, const Tensor& b) {
  const char* where = "residual_norm_backward_cuda";
  const kernels_dtype dt = cuda_dtype(h, where);
  check_cuda(h, "h", h.scalar_type(), h.device(), where);
  check_rows_like(dh, h, "dh", where);
  check_rows_like(dn, h, "dn", where);
  if (a.defined()) check_rows_like(x, h, "x", where);
  if (b.defined()) check_rows_like(y, h, "y", where);
  const int64_t R = h.size(0), D = h.size(1);
  check_cuda(rstd, "rstd", at::kFloat, h.device(), where);
  if (rstd.numel() != R) fail("%s: rstd has %lld values for %lld rows", where, (long long)rstd.numel(), (long long)R);
  check_grid_rows(R, where);
  ResidualNormGrads g;
  g.dx = at::empty_like(h);
  g.dy = a.defined() || b.defined() ? at::empty_like(h) : g.dx;
  if (a.defined()) g.ga_rows = at::empty({R}, h.options().dtype(at::kFloat));
  if (b.defined()) g.gb_rows = at::empty({R}, h.options().dtype(at::kFloat));
  const c10::cuda::CUDAGuard guard(h.device());
  check_launch(kernels_launch_residual_norm_backward(
                   dh.data_ptr(), dn.data_ptr(), h.data_ptr(), rstd.data_ptr<float>(),
                   a.defined() ? x.data_ptr() : nullptr, b.defined() ? y.data_ptr() : nullptr,
                   lambda_ptr(a, h.device(), "a", where), lambda_ptr(b, h.device(), "b", where), g.dx.data_ptr(),
                   a.defined() || b.defined() ? g.dy.data_ptr() : nullptr,
                   a.defined() ? g.ga_rows.data_ptr<float>() : nullptr,
                   b.defined() ? g.gb_rows.data_ptr<float>() : nullptr, R, D, dt, stream_of(h)),
               where);
  return g;
}

void adamw_step_cuda(Tensor& p, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq, float lr, float beta1,
                     float beta2, float eps, float weight_decay, float bias1, float bias2) {
  const char* where = "adamw_step_cuda";
  const kernels_dtype dt = cuda_dtype(p, where);
  for (auto [t, name] : {std::pair<const Tensor*, const char*>{&p, "p"}, {&grad, "grad"}, {&exp_avg, "exp_avg"},
                         {&exp_avg_sq, "exp_avg_sq"}}) {
    check_cuda(*t, name, p.scalar_type(), p.device(), where);
    if (t->numel() != p.numel()) fail("%s: %s has %lld elements, p %lld", where, name, (long long)t->numel(), (long long)p.numel());
  }
  const c10::cuda::CUDAGuard guard(p.device());
  check_launch(kernels_launch_adamw_step(p.data_ptr(), grad.data_ptr(), exp_avg.data_ptr(), exp_avg_sq.data_ptr(),
                                         p.numel(), lr, beta1, beta2, eps, weight_decay, bias1, bias2, dt, stream_of(p)),
               where);
}

void muon_nesterov_cuda(const Tensor& grad, Tensor& buf, Tensor& X, Tensor& row_sumsq, double mu) {
  const char* where = "muon_nesterov_cuda";
  const int64_t rows = X.size(-2), cols = X.size(-1);
  const kernels_dtype dt = cuda_dtype(X, where);
  check_cuda(grad, "grad", at::kFloat, X.device(), where);
  check_cuda(buf, "buf", at::kFloat, X.device(), where);
  check_cuda(X, "X", X.scalar_type(), X.device(), where);
  check_cuda(row_sumsq, "row_sumsq", at::kFloat, X.device(), where);
  if (grad.numel() != rows * cols || buf.numel() != rows * cols || row_sumsq.numel() != rows)
    fail("%s: grad, buf (%lld x %lld) and row_sumsq (%lld) do not match", where, (long long)rows, (long long)cols,
         (long long)rows);
  check_grid_rows(rows, where);
  const c10::cuda::CUDAGuard guard(X.device());
  check_launch(kernels_launch_muon_nesterov(grad.data_ptr<float>(), buf.data_ptr<float>(), X.data_ptr(),
                                            row_sumsq.data_ptr<float>(), rows, cols, (float)mu, dt, stream_of(X)),
               where);
}

void muon_scale_rows_cuda(Tensor& X, const Tensor& scale) {
  const char* where = "muon_scale_rows_cuda";
  const int64_t rows = X.size(-2), cols = X.size(-1);
  const kernels_dtype dt = cuda_dtype(X, where);
  check_cuda(X, "X", X.scalar_type(), X.device(), where);
  check_cuda(scale, "scale", at::kFloat, X.device(), where);
  if (scale.numel() != rows) fail("%s: %lld row scales for %lld rows", where, (long long)scale.numel(), (long long)rows);
  const c10::cuda::CUDAGuard guard(X.device());
  check_launch(kernels_launch_muon_scale_rows(X.data_ptr(), scale.data_ptr<float>(), rows, cols, dt, stream_of(X)),
               where);
}

void muon_sumsq_cuda(const Tensor& X, bool by_row, Tensor& out) {
  const char* where = "muon_sumsq_cuda";
  const int64_t rows = X.size(-2), cols = X.size(-1);
  const kernels_dtype dt = cuda_dtype(X, where);
  check_cuda(X, "X", X.scalar_type(), X.device(), where);
  check_cuda(out, "out", at::kFloat, X.device(), where);
  if (out.numel() != (by_row ? rows : cols)) fail("%s: out has %lld sums", where, (long long)out.numel());
  check_grid_rows(rows, where);
  const c10::cuda::CUDAGuard guard(X.device());
  check_launch(kernels_launch_muon_sumsq(X.data_ptr(), out.data_ptr<float>(), rows, cols, by_row, dt, stream_of(X)),
               where);
}

void muon_update_cuda(const Tensor& X, Tensor& p, const Tensor& line_scale, bool by_row, double lr, double lr_wd) {
  const char* where = "muon_update_cuda";
  const int64_t rows = X.size(-2), cols = X.size(-1);
  const kernels_dtype dt = cuda_dtype(X, where);
  check_cuda(X, "X", X.scalar_type(), X.device(), where);
  check_cuda(p, "p", at::kFloat, X.device(), where);
  check_cuda(line_scale, "line_scale", at::kFloat, X.device(), where);
  if (p.numel() != rows * cols || line_scale.numel() != (by_row ? rows : cols))
    fail("%s: p (%lld) or line_scale (%lld) does not match X", where, (long long)p.numel(),
         (long long)line_scale.numel());
  const c10::cuda::CUDAGuard guard(X.device());
  check_launch(kernels_launch_muon_update(X.data_ptr(), p.data_ptr<float>(), line_scale.data_ptr<float>(), rows, cols,
                                          by_row, (float)lr, (float)lr_wd, dt, stream_of(X)),
               where);
}

}  // namespace nanochat
