// CUDA-only (compiled when the LibTorch found has CUDA). The sliding window of flash_window.h
// as an autograd function over ATen's FlashAttention-2 entry points, called the way
// PyTorch's own SDPA flash path calls them but with a window:
//   forward:  (out, lse, rng_state, rng_unused, debug) = at::_flash_attention_forward(
//               q, k, v, cum_seq_q = none, cum_seq_k = none, max_q = Tq, max_k = Tk,
//               dropout = 0, is_causal = true, return_debug_mask = false, scale,
//               window_size_left = window (-1 = unlimited), window_size_right = 0)
//   backward: (dq, dk, dv) = at::_flash_attention_backward(dout, q, k, v, out, lse,
//               cum_seq_q = undefined, cum_seq_k = undefined, Tq, Tk, 0, true,
//               rng_state, rng_unused, scale, window_size_left, window_size_right)
// The kernel's layout is FA3's (B,T,H,D) already (SDPA transposes into it), so nothing is
// copied. GQA is native to the kernel (H % Hkv == 0: each kv head serves H/Hkv query heads
// and backward sums their dk, dv), so k and v keep their Hkv heads: no expand.
// With is_causal the kernel forces window_size_right = 0; window_size_left >= Tk is the
// same as unlimited. rng_state and rng_unused only matter for dropout (0 here) but the
// backward takes them, so they are saved.
#include "flash_window.h"

#include <cmath>

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <torch/autograd.h>

#include "nanochat/kernels/self_check.h"  // the self-check's registry and verdicts
#include "nanochat/common/error.h"
#include "nanochat/kernels.h"

namespace nanochat {
namespace {

using torch::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// the kernel needs a unit stride on the head dim only; views of a fused projection have it
Tensor unit_last_stride(const Tensor& t) { return t.stride(-1) == 1 ? t : t.contiguous(); }

struct FlashWindow : public torch::autograd::Function<FlashWindow> {
  static Tensor forward(AutogradContext* ctx, const Tensor& q_in, const Tensor& k_in, const Tensor& v_in,
                        int64_t window) {
    const Tensor q = unit_last_stride(q_in), k = unit_last_stride(k_in), v = unit_last_stride(v_in);
    const int64_t left = window < 0 ? -1 : window;
    const double scale = 1.0 / std::sqrt((double)q.size(3));
    auto [out, lse, rng_state, rng_unused, debug_mask] = at::_flash_attention_forward(
        q, k, v, std::nullopt, std::nullopt, q.size(1), k.size(1), /*dropout_p=*/0.0,
        /*is_causal=*/true, /*return_debug_mask=*/false, scale, left,
        /*window_size_right=*/0);
    ctx->save_for_backward({q, k, v, out, lse, rng_state, rng_unused});
    ctx->saved_data["left"] = left;
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const Tensor &q = saved[0], &k = saved[1], &v = saved[2], &out = saved[3], &lse = saved[4];
    const Tensor &rng_state = saved[5], &rng_unused = saved[6];
    const int64_t left = ctx->saved_data["left"].toInt();
    const double scale = 1.0 / std::sqrt((double)q.size(3));
    auto [dq, dk, dv] = at::_flash_attention_backward(grads[0], q, k, v, out, lse, /*cum_seq_q=*/Tensor(),
                                                      /*cum_seq_k=*/Tensor(), q.size(1), k.size(1), /*dropout_p=*/0.0,
                                                      /*is_causal=*/true, rng_state, rng_unused, scale, left,
                                                      /*window_size_right=*/0);
    return {dq, dk, dv, Tensor()};
  }
};

}  // namespace

bool attention_flash_window_supported(const Tensor& q, const Tensor& k) {
  if (!q.defined() || !k.defined() || !q.is_cuda() || k.device() != q.device()) return false;
  if ((q.scalar_type() != at::kBFloat16 && q.scalar_type() != at::kHalf) || k.scalar_type() != q.scalar_type())
    return false;
  if (q.dim() != 4 || k.dim() != 4 || k.size(3) != q.size(3) || k.size(2) == 0 || q.size(2) % k.size(2) != 0)
    return false;
  const int64_t D = q.size(3);
  if (D % 8 != 0 || D > 256) return false;
  const cudaDeviceProp* p = at::cuda::getDeviceProperties(q.device().index());
  if (p->major < 8) return false;
  if (D > 192 && p->major == 8 && p->minor > 0) return false;  // sm86/sm89: backward needs sm80/sm90 smem
  return true;
}

namespace {

// the kernels' self-check of the real window (self_check.cpp runs it with the fused ops, the
// first time a GPU meets a dtype, and in doctor --kernels): against the kernels module's
// attention reference (the (B, H, T, T) scores masked), forward and backward, at a small shape
// (40 queries on 4 heads of 16, 2 kv heads, window 9) and at d24's (2048 queries on 12 heads of
// 128, the short window of 512). The model then uses the real window only where it passed.
std::vector<Tensor> flash_window_check(at::Device device, at::ScalarType dtype, bool fused) {
  struct Shape {
    int64_t T, H, Hkv, D, window;
  };
  std::vector<Shape> shapes = {{40, 4, 2, 16, 9}, {2048, 12, 12, 128, 512}};
  std::vector<Tensor> out;
  for (const Shape& s : shapes) {
    auto gen = kernels_check_generator(device, 29);
    Tensor q = at::randn({1, s.T, s.H, s.D}, gen, at::device(device)).to(device, dtype).requires_grad_();
    Tensor k = at::randn({1, s.T, s.Hkv, s.D}, gen, at::device(device)).to(device, dtype).requires_grad_();
    Tensor v = at::randn({1, s.T, s.Hkv, s.D}, gen, at::device(device)).to(device, dtype).requires_grad_();
    if (!attention_flash_window_supported(q, k)) return {};
    Tensor dout = at::randn({1, s.T, s.H, s.D}, gen, at::device(device)).to(device, dtype);
    Tensor o = fused ? attention_flash_window(q, k, v, s.window) : kernels_attention_reference(q, k, v, s.window);
    auto grads = torch::autograd::grad({o}, {q, k, v}, {dout});
    out.insert(out.end(), {o, grads[0], grads[1], grads[2]});
  }
  return out;
}
const bool flash_window_check_registered = kernels_register_check(
    {"flash_window", flash_window_check, nullptr, /*cuda_without_nvcc=*/false, /*part_of=*/"attention"});

}  // namespace

bool attention_flash_window_checked(const Tensor& q) {
  // NANOCHAT_KERNELS=0 turns our kernels off, not LibTorch's flash kernel
  return !kernels_enabled() || kernels_check_passed("flash_window", q.device(), q.scalar_type());
}

Tensor attention_flash_window(const Tensor& q, const Tensor& k, const Tensor& v, int64_t window) {
  if (!attention_flash_window_supported(q, k) || v.dim() != 4 || v.sizes() != k.sizes() ||
      v.scalar_type() != q.scalar_type() || v.device() != q.device() || q.size(0) != k.size(0))
    fail(
        "attention_flash_window: needs q (B,T,H,D) and k, v (B,T,Hkv,D) in bf16/fp16 on an sm80+ GPU, "
        "D <= 256 a multiple of 8, H a multiple of Hkv (check attention_flash_window_supported first)");
  return FlashWindow::apply(q, k, v, window);
}

Tensor attention_flash_rows(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, const Tensor& seqused_k,
                            int64_t max_k, int64_t window) {
  if (!attention_flash_window_supported(q, k_cache) || v_cache.sizes() != k_cache.sizes() ||
      k_cache.size(0) != q.size(0) || seqused_k.numel() != q.size(0) || seqused_k.scalar_type() != at::kInt)
    fail("attention_flash_rows: needs q (B,T,H,D), caches (B,Tmax,Hkv,D) the flash kernel takes, seqused_k int32 (B,)");
  const int64_t B = q.size(0), T = q.size(1), H = q.size(2), D = q.size(3);
  const int64_t Tmax = k_cache.size(1), Hkv = k_cache.size(2);
  auto i32 = at::TensorOptions().dtype(at::kInt).device(q.device());
  // packed sequences: row b's queries at b*T, its keys at b*Tmax (the cache as it lies)
  const Tensor cu_q = at::arange(0, (B + 1) * T, T, i32), cu_k = at::arange(0, (B + 1) * Tmax, Tmax, i32);
  const double scale = 1.0 / std::sqrt((double)D);
  auto [out, lse, rng_state, rng_unused, debug_mask] = at::_flash_attention_forward(
      q.reshape({B * T, H, D}), k_cache.reshape({B * Tmax, Hkv, D}), v_cache.reshape({B * Tmax, Hkv, D}), cu_q, cu_k, T,
      max_k, /*dropout_p=*/0.0, /*is_causal=*/true, /*return_debug_mask=*/false, scale, window < 0 ? -1 : window,
      /*window_size_right=*/0, seqused_k);
  return out.view({B, T, H, D});
}

}  // namespace nanochat
