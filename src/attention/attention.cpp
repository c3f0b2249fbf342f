// Device-generic attention on top of at::scaled_dot_product_attention (see attention.h for
// the choice of kernels). SDPA wants (B,H,T,D); the interface is FA3's (B,T,H,D).
#include "nanochat/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <mutex>
#include <tuple>
#include <ATen/ATen.h>

#include "flash_window.h"
#include "nanochat/common/error.h"
#include "nanochat/kernels.h"

namespace nanochat {
namespace {

using torch::Tensor;

// LibTorch's CPU flash attention in bf16 and fp16 packs its operands for AMX wherever the CPU has
// AMX, also when ATen runs below AVX-512 (ATEN_CPU_CAPABILITY=avx2 or default), and there throws
// "pack_vnni2 is only supported when avx512 is supported" (torch 2.11); there the math path runs
bool cpu_flash_attention_throws(const Tensor& q) {
  if (!q.is_cpu() || (q.scalar_type() != torch::kBFloat16 && q.scalar_type() != torch::kHalf)) return false;
#if defined(__x86_64__)
  static const bool throws = __builtin_cpu_supports("amx-bf16") && at::get_cpu_capability() != "AVX512";
  return throws;
#else
  return false;
#endif
}

// q (B,H,Tq,D), k and v (B,Hkv,Tk,D); mask broadcastable to (B,H,Tq,Tk), true = attend
Tensor sdpa(const Tensor& q, const Tensor& k, const Tensor& v, const std::optional<Tensor>& mask, bool is_causal) {
  bool gqa = q.size(1) != k.size(1);
  if (cpu_flash_attention_throws(q)) {
    std::optional<Tensor> additive;  // the math path takes a mask to add (the public call converts a bool one)
    if (mask) additive = at::where(*mask, at::zeros({}, q.options()), at::full({}, -INFINITY, q.options()));
    return std::get<0>(
        at::_scaled_dot_product_attention_math(q, k, v, additive, 0.0, is_causal, std::nullopt, std::nullopt, gqa));
  }
  return at::scaled_dot_product_attention(q, k, v, mask, 0.0, is_causal, std::nullopt, gqa);
}

// The chunked window's mask for B rows of nb blocks: query b*blk + r sees key (b-1)*blk + c
// when 0 <= query - key <= window and key >= 0. (B*nb, 1, blk, 2*blk). Every layer of a given
// window and every step shares it: built once per shape and device, then kept (a handful of
// shapes per process: training, eval and generation batch sizes).
Tensor chunked_window_mask(int64_t B, int64_t nb, int64_t blk, int64_t window, torch::Device device) {
  using Key = std::tuple<int64_t, int64_t, int64_t, int64_t, int, int>;
  static std::mutex mu;
  // never destroyed: CUDA masks freed by a static destructor could outlive the CUDA runtime
  static auto& cache = *new std::map<Key, Tensor>();
  const Key key{B, nb, blk, window, (int)device.type(), (int)device.index()};
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  auto opts = torch::TensorOptions().dtype(torch::kLong).device(device);
  Tensor b = at::arange(nb, opts).view({nb, 1, 1});
  Tensor qpos = b * blk + at::arange(blk, opts).view({1, blk, 1});
  Tensor kpos = (b - 1) * blk + at::arange(2 * blk, opts).view({1, 1, 2 * blk});
  Tensor diff = qpos - kpos;
  Tensor mask = (diff >= 0) & (diff <= window) & (kpos >= 0);  // (nb, blk, 2*blk)
  mask = mask.unsqueeze(1).unsqueeze(0).expand({B, nb, 1, blk, 2 * blk}).reshape({B * nb, 1, blk, 2 * blk});
  if (cache.size() >= 32) cache.clear();  // a bound, should shapes keep changing
  cache.emplace(key, mask);
  return mask;
}

// Chunked sliding window, inputs (B,H,T,D) with 0 <= window < T-1. With blocks of
// blk = max(window,1) queries, every key a query may see lies in its own block or the one
// before (i - window >= (b-1)*blk), so each block attends to 2*blk keys under a small mask.
Tensor chunked_window(const Tensor& q, const Tensor& k, const Tensor& v, int64_t window) {
  const int64_t B = q.size(0), H = q.size(1), T = q.size(2), D = q.size(3);
  const int64_t Hkv = k.size(1), Dv = v.size(3);
  const int64_t blk = std::max<int64_t>(window, 1);
  const int64_t nb = (T + blk - 1) / blk, pad = nb * blk - T;
  auto pad_t = [&](const Tensor& x) {  // zeros after the last position, then (B,h,nb,blk,d)
    Tensor y = pad ? at::constant_pad_nd(x, {0, 0, 0, pad}) : x;
    return y.reshape({x.size(0), x.size(1), nb, blk, x.size(3)});
  };
  auto with_prev = [&](const Tensor& xb) {  // (B,h,nb,2*blk,d): previous block, own block
    Tensor prev = at::constant_pad_nd(xb.narrow(2, 0, nb - 1), {0, 0, 0, 0, 1, 0});
    return at::cat({prev, xb}, 3);
  };
  Tensor qb = pad_t(q).permute({0, 2, 1, 3, 4}).reshape({B * nb, H, blk, D});
  Tensor kb = with_prev(pad_t(k)).permute({0, 2, 1, 3, 4}).reshape({B * nb, Hkv, 2 * blk, D});
  Tensor vb = with_prev(pad_t(v)).permute({0, 2, 1, 3, 4}).reshape({B * nb, Hkv, 2 * blk, Dv});
  Tensor y = sdpa(qb, kb, vb, chunked_window_mask(B, nb, blk, window, q.device()), false);  // (B*nb, H, blk, Dv)
  y = y.reshape({B, nb, H, blk, Dv}).permute({0, 2, 1, 3, 4}).reshape({B, H, nb * blk, Dv});
  return y.narrow(2, 0, T);
}

void check_shapes(const Tensor& q, const Tensor& k, const Tensor& v, const char* where) {
  if (q.dim() != 4 || k.dim() != 4 || v.dim() != 4 || k.size(1) != v.size(1) || k.size(2) != v.size(2) ||
      q.size(0) != k.size(0) || q.size(3) != k.size(3) || k.size(2) == 0 || q.size(2) % k.size(2) != 0)
    fail("%s: q, k, v must be (B,T,H,D) with H a multiple of the kv heads", where);
}

}  // namespace

Tensor attention_window_mask(int64_t Tq, int64_t Tk, int64_t window, torch::Device device) {
  auto opts = torch::TensorOptions().dtype(torch::kLong).device(device);
  Tensor row = (Tk - Tq) + at::arange(Tq, opts).view({Tq, 1});
  Tensor col = at::arange(Tk, opts).view({1, Tk});
  Tensor mask = col <= row;
  if (window >= 0) mask = mask & ((row - col) <= window);
  return mask;
}

AttentionPath attention_path(const AttentionCall& c) {
  const bool cpu_decode = c.cpu_decode && !c.grad && c.Tq <= kAttentionDecodeMaxQueries;
  if (c.rows) {
    if (c.flash) return AttentionPath::FlashRows;
    return cpu_decode ? AttentionPath::CpuDecode : AttentionPath::SdpaMasked;
  }
  const bool full = c.window < 0 || c.window >= c.Tk - 1;
  if (c.Tq == c.Tk) {  // causal from position 0: training, eval, a prefill
    if (c.cpu_kernels) return AttentionPath::CpuKernels;
    // flash for a real window, and for inference whatever the window: its lengths vary
    if (c.flash && (!full || !c.grad)) return AttentionPath::Flash;
    return full ? AttentionPath::SdpaCausal : AttentionPath::ChunkedWindows;
  }
  // a KV cache past position 0: Tq new queries over Tk keys
  if (c.flash) return AttentionPath::Flash;
  if (cpu_decode) return AttentionPath::CpuDecode;
  return c.Tq == 1 ? AttentionPath::SdpaLastKeys : AttentionPath::SdpaMasked;
}

const char* attention_path_name(AttentionPath p) {
  switch (p) {
    case AttentionPath::CpuKernels: return "nanochat CPU attention";
    case AttentionPath::SdpaCausal: return "SDPA causal";
    case AttentionPath::Flash: return "flash (direct)";
    case AttentionPath::ChunkedWindows: return "chunked windows over SDPA";
    case AttentionPath::FlashRows: return "flash, variable length";
    case AttentionPath::SdpaLastKeys: return "SDPA over the last keys";
    case AttentionPath::SdpaMasked: return "SDPA masked";
    case AttentionPath::CpuDecode: return "nanochat CPU decode attention";
  }
  return "?";
}

namespace {

bool wants_grad(const Tensor& q, const Tensor& k, const Tensor& v) {
  return at::GradMode::is_enabled() && (q.requires_grad() || k.requires_grad() || v.requires_grad());
}

bool flash_takes(const Tensor& q, const Tensor& k) {
  return attention_flash_window_supported(q, k) && attention_flash_window_checked(q);
}

AttentionCall causal_call(const Tensor& q, const Tensor& k, const Tensor& v, int64_t window, bool cpu_kernels) {
  AttentionCall c;
  c.cpu_kernels = cpu_kernels && kernels_attention_available(q);
  c.flash = flash_takes(q, k);
  c.grad = wants_grad(q, k, v);
  c.Tq = c.Tk = q.size(1);
  c.window = window;
  return c;
}

Tensor causal_by_path(const Tensor& q, const Tensor& k, const Tensor& v, int64_t window, AttentionPath path) {
  const int64_t T = q.size(1);
  const bool full = window < 0 || window >= T - 1;
  switch (path) {
    case AttentionPath::CpuKernels: return kernels_attention(q, k, v, full ? -1 : window);
    case AttentionPath::Flash: return attention_flash_window(q, k, v, full ? -1 : window);
    default: break;
  }
  Tensor qt = q.transpose(1, 2), kt = k.transpose(1, 2), vt = v.transpose(1, 2);
  Tensor y = full ? sdpa(qt, kt, vt, std::nullopt, true) : chunked_window(qt, kt, vt, window);
  return y.transpose(1, 2);
}

}  // namespace

Tensor attention_causal(const Tensor& q, const Tensor& k, const Tensor& v, int64_t window) {
  check_shapes(q, k, v, "attention_causal");
  if (q.size(1) != k.size(1))
    fail("attention_causal: q has %lld positions, k %lld", (long long)q.size(1), (long long)k.size(1));
  return causal_by_path(q, k, v, window, attention_path(causal_call(q, k, v, window, /*cpu_kernels=*/true)));
}

Tensor attention_causal_sdpa(const Tensor& q, const Tensor& k, const Tensor& v, int64_t window) {
  check_shapes(q, k, v, "attention_causal");
  if (q.size(1) != k.size(1))
    fail("attention_causal: q has %lld positions, k %lld", (long long)q.size(1), (long long)k.size(1));
  return causal_by_path(q, k, v, window, attention_path(causal_call(q, k, v, window, /*cpu_kernels=*/false)));
}

std::string attention_kernel_name(const Tensor& q, const Tensor& k, int64_t window) {
  static const char* names[] = {"math", "flash", "memory-efficient", "cuDNN", "overrideable"};
  auto sdpa_name = [&](const Tensor& qt, const Tensor& kt, const std::optional<Tensor>& mask, bool causal) {
    int64_t choice = at::_fused_sdp_choice(qt, kt, kt, mask, 0.0, causal, std::nullopt, qt.size(1) != kt.size(1));
    return std::string("SDPA ") + (choice >= 0 && choice < 5 ? names[choice] : "(no backend)");
  };
  const int64_t T = q.size(1);
  const bool full = window < 0 || window >= T - 1;
  const std::string what = full ? "causal" : "window of " + std::to_string(window);
  // as the training step calls it: with a gradient
  AttentionCall c = causal_call(q, k, k, window, /*cpu_kernels=*/true);
  c.grad = true;
  Tensor qt = q.transpose(1, 2), kt = k.transpose(1, 2);
  switch (attention_path(c)) {
    case AttentionPath::CpuKernels: return "nanochat CPU attention, " + what;
    case AttentionPath::Flash: return "flash with a real " + what;
    case AttentionPath::SdpaCausal: return sdpa_name(qt, kt, std::nullopt, true) + ", causal";
    default: break;
  }
  const int64_t blk = std::max<int64_t>(window, 1);
  Tensor qb = qt.narrow(2, 0, std::min(blk, T)), kb = kt.narrow(2, 0, std::min(2 * blk, T));
  Tensor mask = at::ones({1, 1, qb.size(2), kb.size(2)}, q.options().dtype(torch::kBool));
  return "chunked windows of " + std::to_string(blk) + " over " + sdpa_name(qb, kb, mask, false) + " (cached mask)";
}

Tensor attention_with_kvcache(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, const Tensor& k,
                              const Tensor& v, int64_t pos, int64_t window) {
  check_shapes(q, k, v, "attention_with_kvcache");
  const int64_t T = q.size(1), Tk = pos + T;
  if (Tk > k_cache.size(1))
    fail("KV cache overflow: position %lld + %lld tokens exceeds its %lld positions", (long long)pos, (long long)T,
         (long long)k_cache.size(1));
  k_cache.narrow(1, pos, T).copy_(k);
  v_cache.narrow(1, pos, T).copy_(v);
  if (pos == 0) return attention_causal(q, k, v, window);  // prefill: the training path
  AttentionCall call;
  call.flash = flash_takes(q, k_cache);
  call.cpu_decode = kernels_decode_attention_available(q, k_cache, v_cache);
  call.grad = wants_grad(q, k, v);
  call.Tq = T;
  call.Tk = Tk;
  call.window = window;
  const AttentionPath path = attention_path(call);
  if (path == AttentionPath::CpuDecode) return kernels_decode_attention(q, k_cache, v_cache, {Tk}, window);
  // only keys some query may see
  const int64_t start = window >= 0 ? std::max<int64_t>(0, pos - window) : 0;
  if (path == AttentionPath::Flash)  // causal to the last key: query r is at position pos + r
    return attention_flash_window(q, k_cache.narrow(1, start, Tk - start), v_cache.narrow(1, start, Tk - start),
                                  window);
  Tensor qt = q.transpose(1, 2);
  if (path == AttentionPath::SdpaLastKeys) {  // the last window+1 keys, no mask needed
    Tensor kt = k_cache.narrow(1, start, Tk - start).transpose(1, 2);
    Tensor vt = v_cache.narrow(1, start, Tk - start).transpose(1, 2);
    return sdpa(qt, kt, vt, std::nullopt, false).transpose(1, 2);
  }
  // a prefill after position 0: under an explicit mask
  Tensor kt = k_cache.narrow(1, start, Tk - start).transpose(1, 2);
  Tensor vt = v_cache.narrow(1, start, Tk - start).transpose(1, 2);
  Tensor mask = attention_window_mask(T, Tk - start, window, q.device());
  return sdpa(qt, kt, vt, mask, false).transpose(1, 2);
}

Tensor attention_rows_mask(const std::vector<int64_t>& pos, int64_t T, int64_t first, int64_t Tk, int64_t window,
                           torch::Device device) {
  const int64_t B = (int64_t)pos.size();
  auto opts = torch::TensorOptions().dtype(torch::kLong);
  Tensor qpos = (torch::tensor(pos, opts).view({B, 1, 1}) + at::arange(T, opts).view({1, T, 1})).to(device);
  Tensor kpos = (first + at::arange(Tk, opts.device(device))).view({1, 1, Tk});
  Tensor mask = kpos <= qpos;
  if (window >= 0) mask = mask & ((qpos - kpos) <= window);
  return mask.unsqueeze(1);  // (B,1,T,Tk)
}

namespace {

// row b's T new keys (or values) x (B,T,Hkv,D) into the layer's cache (B,T_max,Hkv,D) at
// positions pos[b]..: on the CPU one copy per row (ATen's index_put_ works out every element's
// offset on its own: at 16 rows of bf16 it was an eighth of a decode step), else one scatter
void write_rows(const Tensor& cache, const Tensor& x, const std::vector<int64_t>& pos,
                const c10::List<std::optional<Tensor>>& index) {
  const int64_t B = x.size(0), T = x.size(1), per_pos = x.size(2) * x.size(3);
  const bool rows_contiguous = cache.stride(3) == 1 && cache.stride(2) == x.size(3) && cache.stride(1) == per_pos;
  if (!cache.device().is_cpu() || cache.scalar_type() != x.scalar_type() || !rows_contiguous || x.requires_grad()) {
    cache.index_put_(index, x.reshape({B * T, x.size(2), x.size(3)}));
    return;
  }
  const Tensor src = x.contiguous();
  const int64_t bytes = (int64_t)x.element_size();
  char* dst = static_cast<char*>(cache.data_ptr());
  const char* from = static_cast<const char*>(src.data_ptr());
  for (int64_t b = 0; b < B; b++)
    std::memcpy(dst + (b * cache.stride(0) + pos[b] * cache.stride(1)) * bytes, from + b * T * per_pos * bytes,
                (size_t)(T * per_pos * bytes));
}

}  // namespace

Tensor attention_with_kvcache_rows(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, const Tensor& k,
                                   const Tensor& v, const std::vector<int64_t>& pos, int64_t window) {
  check_shapes(q, k, v, "attention_with_kvcache_rows");
  const int64_t B = q.size(0), T = q.size(1);
  if ((int64_t)pos.size() != B || k_cache.size(0) != B)
    fail("attention_with_kvcache_rows: %zu positions for %lld rows (cache of %lld)", pos.size(), (long long)B,
         (long long)k_cache.size(0));
  const int64_t lo_pos = *std::min_element(pos.begin(), pos.end());
  const int64_t hi = *std::max_element(pos.begin(), pos.end()) + T;
  if (lo_pos < 0 || hi > k_cache.size(1))
    fail("KV cache overflow: a row's position + %lld tokens exceeds its %lld positions", (long long)T,
         (long long)k_cache.size(1));
  // Every layer of one forward calls this with the same rows and positions: the scatter's
  // indices and the masks (one per window) are made once per forward, kept per thread.
  struct Memo {
    std::vector<int64_t> pos;
    int64_t T = -1;
    torch::Device dev = torch::kCPU;
    c10::List<std::optional<Tensor>> index;
    std::map<std::pair<int64_t, int64_t>, Tensor> masks;  // (first, window) -> mask
    Tensor seqused;                                       // int32 (B,): each row's key count
  };
  thread_local Memo memo;
  const auto dev = q.device();
  if (memo.pos != pos || memo.T != T || memo.dev != dev) {
    // each row's new keys at its own positions: one scatter (row b, position pos[b]+t)
    std::vector<int64_t> ri, ci;
    for (int64_t b = 0; b < B; b++)
      for (int64_t t = 0; t < T; t++) {
        ri.push_back(b);
        ci.push_back(pos[b] + t);
      }
    memo.index = c10::List<std::optional<Tensor>>();
    memo.index.push_back(torch::tensor(ri, torch::kLong).to(dev));
    memo.index.push_back(torch::tensor(ci, torch::kLong).to(dev));
    memo.masks.clear();
    memo.seqused = Tensor();
    memo.pos = pos;
    memo.T = T;
    memo.dev = dev;
  }
  const c10::List<std::optional<Tensor>>& index = memo.index;
  write_rows(k_cache, k, pos, index);
  write_rows(v_cache, v, pos, index);
  AttentionCall call;
  call.flash = flash_takes(q, k_cache);
  call.cpu_decode = kernels_decode_attention_available(q, k_cache, v_cache);
  call.grad = wants_grad(q, k, v);
  call.rows = true;
  call.Tq = T;
  call.Tk = hi;
  call.window = window;
  const AttentionPath path = attention_path(call);
  if (path == AttentionPath::CpuDecode) {
    std::vector<int64_t> counts(pos.begin(), pos.end());
    for (int64_t& n : counts) n += T;  // each row's keys: its position + its T new ones
    return kernels_decode_attention(q, k_cache, v_cache, counts, window);
  }
  if (path == AttentionPath::FlashRows) {
    if (!memo.seqused.defined()) {  // each row's key count: its position + T
      std::vector<int32_t> used;
      for (int64_t p : pos) used.push_back((int32_t)(p + T));
      memo.seqused = torch::tensor(used, torch::kInt).to(dev);
    }
    return attention_flash_rows(q, k_cache, v_cache, memo.seqused, hi, window);
  }
  // only keys some row may see: from the lowest row's window start to the longest row
  const int64_t first = window >= 0 ? std::max<int64_t>(0, lo_pos - window) : 0;
  Tensor kt = k_cache.narrow(1, first, hi - first).transpose(1, 2);
  Tensor vt = v_cache.narrow(1, first, hi - first).transpose(1, 2);
  Tensor& mask = memo.masks[{first, window}];
  if (!mask.defined()) mask = attention_rows_mask(pos, T, first, hi - first, window, dev);
  return sdpa(q.transpose(1, 2), kt, vt, mask, false).transpose(1, 2);
}

}  // namespace nanochat
