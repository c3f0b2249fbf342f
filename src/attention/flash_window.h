// Causal sliding-window attention through LibTorch's own FlashAttention-2 kernel, with a
// real window: at::_flash_attention_forward/_backward take window_size_left/right, which
// at::scaled_dot_product_attention does not expose. The kernel skips the key blocks outside
// the window, so the work is O(T * window) with no mask in memory. CUDA builds only (the
// _nocuda twin answers "not supported"); attention.cpp picks it when supported.
#pragma once
#include <cstdint>
#include "nanochat/common/tensor.h"

namespace nanochat {

// true when attention_flash_window takes q and k: both 4-D CUDA tensors of bfloat16 or
// float16 on the same GPU of compute capability >= 8.0, head dim <= 256 and a multiple of 8
// (<= 192 on sm86/sm89, whose backward lacks the shared memory for larger), H % Hkv == 0
bool attention_flash_window_supported(const torch::Tensor& q, const torch::Tensor& k);

// q (B,T,H,D), k and v (B,T,Hkv,D) in FA3's layout (GQA when Hkv < H); causal, a query at
// position i sees the keys i-window..i (window < 0: all keys up to i); softmax scale
// 1/sqrt(D). Returns (B,T,H,D); differentiable in q, k and v.
torch::Tensor attention_flash_window(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                     int64_t window);

// inference only (no autograd): rows at positions of their own over a KV cache through flash's
// variable-length entry. q (B,T,H,D); k_cache, v_cache (B,Tmax,Hkv,D); seqused_k int32 (B,) on
// q's device: row b's keys are its first seqused_k[b] cache positions and its T queries the last
// T of them; max_k >= every seqused_k. Causal with the left window (< 0: unlimited).
torch::Tensor attention_flash_rows(const torch::Tensor& q, const torch::Tensor& k_cache, const torch::Tensor& v_cache,
                                   const torch::Tensor& seqused_k, int64_t max_k, int64_t window);

// whether the real window passed the kernels' self-check on q's device in q's dtype (running the
// check the first time; true with NANOCHAT_KERNELS=0, which turns off only nanochat's kernels)
bool attention_flash_window_checked(const torch::Tensor& q);

}  // namespace nanochat
