// The attention module (upstream flash_attention.py and engine.py's KVCache): the one place that knows devices and kernels.
// Everything uses the FA3 layout (B, T, H, D) at the interface, like nanochat's
// flash_attention.py, and FA3's window semantics: `window` is the left size, a query at
// position i sees the keys j with i - window <= j <= i; window < 0 means unlimited.
//
// Kernels (softmax scale 1/sqrt(D)):
//  - on the CPU (fp32, bf16, with kernels on and MKL in LibTorch): the kernels module's
//    attention (kernels_attention), causal or windowed, forward and backward; else SDPA:
//  - full causal window: SDPA with is_causal (flash backend on CUDA for bf16/fp16, the CPU
//    flash kernel on CPU);
//  - sliding window shorter than the sequence: on CUDA (bf16/fp16, sm80+) LibTorch's flash
//    kernel with a real window (flash_window.h); elsewhere "chunked windows". Queries are cut
//    into blocks of `window` rows; block b attends to key blocks b-1 and b (2*window keys)
//    with a small (window x 2*window) mask, built once per shape. Exact, O(T*window) work
//    (about twice a real window's) instead of the O(T^2) masked fallback.
//  - inference on CUDA (no gradient: eval, prefill, decode): LibTorch's flash kernel called
//    directly, causal aligned to the last key, with the window, never SDPA's choice. Eval's
//    batch lengths vary and decode's key length grows every token; SDPA would pick cuDNN
//    there, which builds a graph for every new shape. Training keeps SDPA (cuDNN) for its full
//    causal layers: its shape is fixed, so the graph is built once.
//  - KV cache on the CPU (fp32, bf16, kernels on, no gradient): a few new queries past position 0
//    (decode), also of rows at positions of their own, run the kernels module's decode attention
//    (kernels_decode_attention), which reads each row's own keys once, no mask, no padded keys.
//  - KV cache elsewhere: decode of 1 token keeps only the last window+1 keys (no mask); a
//    prefill at position 0 is the training path; a prefill after position 0 uses an explicit mask.
//  - KV cache whose rows sit at different positions (continuous batching): each row's new
//    keys go to its own position; on CUDA flash's variable-length entry reads each row's own
//    key count (seqused_k) straight from the cache; elsewhere SDPA runs under a (B,1,T,Tk) mask
//    of what each row's queries may see (its own length, its window).
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>
#include "nanochat/common/tensor.h"

namespace nanochat {

// The kernel one attention call takes, from what the call is and what the device takes: a pure
// function (attention.cpp dispatches on it; tests check its rules on any machine).
enum class AttentionPath {
  CpuKernels,      // the kernels module's CPU attention
  SdpaCausal,      // SDPA with is_causal (cuDNN on a recent GPU: fixed training shapes only)
  Flash,           // LibTorch's flash kernel, causal to the last key, with the window
  ChunkedWindows,  // blocks of `window` queries over SDPA with a small cached mask
  FlashRows,       // flash's variable-length entry: each row its own key count
  SdpaLastKeys,    // one decoded token over its last window+1 keys, no mask
  SdpaMasked,      // SDPA under an explicit mask
  CpuDecode,       // the kernels module's decode attention: a few queries over each row's own keys
};
// the most new queries a call past position 0 sends to the CPU decode kernel; more (a prefill
// after position 0) are a GEMM's work, SDPA's
constexpr int64_t kAttentionDecodeMaxQueries = 8;
struct AttentionCall {
  bool cpu_kernels = false;  // the kernels module's CPU attention takes q
  bool cpu_decode = false;   // the kernels module's decode attention takes q and the cache
  bool flash = false;        // the flash kernel takes q and k here and passed its self-check
  bool grad = false;         // a backward will follow (training)
  bool rows = false;         // rows at positions of their own (continuous batching)
  int64_t Tq = 0, Tk = 0;    // queries, and the keys they are the last Tq of
  int64_t window = -1;       // left window; < 0 or >= Tk - 1: all earlier keys
};
AttentionPath attention_path(const AttentionCall& call);
const char* attention_path_name(AttentionPath path);

// q (B,T,H,D), k and v (B,T,Hkv,D) with H % Hkv == 0 (GQA); causal; returns (B,T,H,D)
torch::Tensor attention_causal(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, int64_t window);
// the same through SDPA only (flash, real or chunked windows): what attention_causal runs on
// CUDA and with kernels off; the benchmark's baseline for the CPU kernel
torch::Tensor attention_causal_sdpa(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                    int64_t window);

// which kernel runs attention for q (B,T,H,D) and k (B,T,Hkv,D) like these with left window
// `window`: "nanochat CPU attention, window of 256", "SDPA flash, causal", "flash with a real
// window of 512" (CUDA), "chunked windows of 256 over SDPA math (cached mask)"; for the training log, once per layer kind
std::string attention_kernel_name(const torch::Tensor& q, const torch::Tensor& k, int64_t window);

// the boolean mask (true = attend) of a causal sliding window for Tq queries that are the
// last Tq of Tk positions: row r is position Tk-Tq+r; shape (Tq, Tk)
torch::Tensor attention_window_mask(int64_t Tq, int64_t Tk, int64_t window, torch::Device device = torch::kCPU);

// the boolean mask (true = attend) of rows at their own positions: row b's query t is at
// position pos[b] + t and sees the keys first..first+Tk-1 at or before it, within `window`;
// shape (B, 1, T, Tk)
torch::Tensor attention_rows_mask(const std::vector<int64_t>& pos, int64_t T, int64_t first, int64_t Tk, int64_t window,
                                  torch::Device device = torch::kCPU);

// upstream engine.py's KVCache: k_cache and v_cache (L, B, T_max, Hkv, D) in the compute dtype,
// cache_seqlens int32 (B,), and the smear's previous (normed, pre-smear) embedding.
// All rows are at the same position (nanochat's assumption), unless row positions are set
// (continuous batching: set_row_positions); the positions are also kept on the host so that
// decoding does not synchronise with the device.
struct KVCache {
  KVCache(int64_t batch_size, int64_t num_kv_heads, int64_t max_seq_len, int64_t head_dim, int64_t num_layers,
          torch::Device device, torch::ScalarType dtype);
  torch::Tensor k_cache, v_cache, cache_seqlens;
  torch::Tensor prev_embedding;  // (B,1,C); undefined until the first forward

  int64_t batch_size() const { return k_cache.size(1); }
  int64_t max_seq_len() const { return k_cache.size(2); }
  int64_t num_layers() const { return k_cache.size(0); }
  int64_t get_pos() const { return pos_; }
  void reset();
  std::pair<torch::Tensor, torch::Tensor> get_layer_cache(int64_t layer);  // views (B,T_max,Hkv,D)
  void advance(int64_t n);
  // copies other's first get_pos() positions (a batch-1 cache is broadcast to every row)
  // and its prev_embedding; this cache must be at position 0 and at least as long
  void prefill(const KVCache& other);

  // rows at positions of their own (continuous batching); get_pos() is then the largest,
  // and advance() moves every row. Empty: every row at get_pos().
  void set_row_positions(std::vector<int64_t> pos);
  const std::vector<int64_t>& row_positions() const { return row_pos_; }
  bool ragged() const { return !row_pos_.empty(); }
  // a cache over rows [first, first+n) at position `pos`: views of this one's storage (what
  // a forward writes lands here), prev_embedding copied (a forward replaces it)
  KVCache view_rows(int64_t first, int64_t n, int64_t pos) const;

 private:
  KVCache() = default;
  int64_t pos_ = 0;
  std::vector<int64_t> row_pos_;
};

// writes k, v (B,T,Hkv,D) into the layer's cache at `pos` and attends q (B,T,H,D) over the
// first pos+T cached positions (causal, window); the caller advances the cache
torch::Tensor attention_with_kvcache(const torch::Tensor& q, const torch::Tensor& k_cache, const torch::Tensor& v_cache,
                                     const torch::Tensor& k, const torch::Tensor& v, int64_t pos, int64_t window);
// the same for rows at their own positions: row b's k, v go to pos[b].., its queries see
// its own first pos[b]+t+1 positions (window); q (B,T,H,D)
torch::Tensor attention_with_kvcache_rows(const torch::Tensor& q, const torch::Tensor& k_cache,
                                          const torch::Tensor& v_cache, const torch::Tensor& k, const torch::Tensor& v,
                                          const std::vector<int64_t>& pos, int64_t window);

}  // namespace nanochat
