// Decode attention: a few new queries of each row over that row's keys in a KV cache, the
// step of generation. The public op, its plain-ATen reference, the dispatch between them and the
// self-check's inputs; the CPU kernel is decode_attention_cpu.cpp. Inference only: there is no
// autograd function, and a call that wants a gradient runs the reference (ATen's autograd). On
// CUDA the attention module runs flash's own KV-cache entries, so there is no CUDA twin here.
#include "nanochat/kernels.h"

#include <algorithm>
#include <cmath>

#include <ATen/ATen.h>
#include <ATen/Version.h>

#include "op_dispatch.h"
#include "nanochat/common/error.h"

namespace nanochat {

// decode_attention_cpu.cpp: isa 0 plain C++, 1 AVX2+FMA, 2 AVX-512F; shapes checked here
at::Tensor decode_attention_cpu(const at::Tensor& q, const at::Tensor& k_cache, const at::Tensor& v_cache,
                                const std::vector<int64_t>& key_counts, int64_t window, int isa);

namespace {

using torch::Tensor;

// the inner loops follow the kernels ATen itself dispatches to (ATEN_CPU_CAPABILITY picks them
// too), so the tests reach every build of them on one machine
int decode_isa() {
  static const int isa = [] {
    const std::string level = at::get_cpu_capability();
    if (level == "AVX512" && __builtin_cpu_supports("avx512f")) return 2;
    if (level == "AVX512" || level == "AVX2") return 1;
    return 0;
  }();
  return isa;
}

void check_decode_call(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                       const std::vector<int64_t>& key_counts) {
  if (q.dim() != 4 || k_cache.dim() != 4 || !k_cache.sizes().equals(v_cache.sizes()) || k_cache.size(0) != q.size(0) ||
      k_cache.size(3) != q.size(3) || k_cache.size(2) == 0 || q.size(2) % k_cache.size(2) != 0)
    fail("kernels_decode_attention: q (B,Tq,H,D), caches (B,Tmax,Hkv,D) with H a multiple of Hkv expected");
  if (key_counts.size() != 1 && (int64_t)key_counts.size() != q.size(0))
    fail("kernels_decode_attention: %zu key counts for %lld rows", key_counts.size(), (long long)q.size(0));
  for (int64_t n : key_counts)
    if (n < q.size(1) || n > k_cache.size(1))
      fail("kernels_decode_attention: a row of %lld keys for %lld queries in a cache of %lld positions", (long long)n,
           (long long)q.size(1), (long long)k_cache.size(1));
}

bool wants_grad(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache) {
  return at::GradMode::is_enabled() && (q.requires_grad() || k_cache.requires_grad() || v_cache.requires_grad());
}

// the kernel reads a position's (Hkv, D) values as one contiguous block
bool heads_contiguous(const Tensor& c) { return c.stride(3) == 1 && c.stride(2) == c.size(3); }

}  // namespace

bool kernels_decode_attention_available(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache) {
  const auto t = q.scalar_type();
  return q.is_cpu() && (t == at::kFloat || t == at::kBFloat16) && k_cache.scalar_type() == t &&
         v_cache.scalar_type() == t && k_cache.is_cpu() && v_cache.is_cpu() && !wants_grad(q, k_cache, v_cache) &&
         kernels_use_fused("decode_attention", q);
}

std::string kernels_decode_attention_isa() {
  static const char* names[] = {"plain C++", "AVX2", "AVX-512"};
  return names[decode_isa()];
}

Tensor kernels_decode_attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                                const std::vector<int64_t>& key_counts, int64_t window) {
  check_decode_call(q, k_cache, v_cache, key_counts);
  if (!kernels_decode_attention_available(q, k_cache, v_cache))
    return kernels_decode_attention_reference(q, k_cache, v_cache, key_counts, window);
  Tensor kc = heads_contiguous(k_cache) ? k_cache : k_cache.contiguous();
  Tensor vc = heads_contiguous(v_cache) ? v_cache : v_cache.contiguous();
  return kernels_fault("decode_attention",
                       decode_attention_cpu(q.contiguous(), kc, vc, key_counts, window, decode_isa()));
}

Tensor kernels_decode_attention_reference(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                                          const std::vector<int64_t>& key_counts, int64_t window) {
  check_decode_call(q, k_cache, v_cache, key_counts);
  const int64_t B = q.size(0), Tq = q.size(1), rep = q.size(2) / k_cache.size(2);
  const int64_t n = *std::max_element(key_counts.begin(), key_counts.end());
  const auto acc = q.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  Tensor qt = q.to(acc).transpose(1, 2);                        // (B, H, Tq, D)
  Tensor kt = k_cache.narrow(1, 0, n).to(acc).transpose(1, 2);  // (B, Hkv, n, D)
  Tensor vt = v_cache.narrow(1, 0, n).to(acc).transpose(1, 2);
  if (rep > 1) kt = kt.repeat_interleave(rep, 1), vt = vt.repeat_interleave(rep, 1);
  Tensor scores = at::matmul(qt, kt.transpose(-2, -1)) / std::sqrt((double)q.size(3));
  // query t of row b is at position counts[b] - Tq + t and sees the keys at or before it
  auto opts = q.options().dtype(at::kLong);
  Tensor counts = torch::tensor(key_counts, at::kLong).to(q.device()).expand({B}).view({B, 1, 1, 1});
  Tensor qpos = counts - Tq + at::arange(Tq, opts).view({1, 1, Tq, 1});
  Tensor kpos = at::arange(n, opts).view({1, 1, 1, n});
  Tensor allowed = kpos <= qpos;
  if (window >= 0) allowed = allowed & (qpos - kpos <= window);
  Tensor p = at::softmax(scores.masked_fill(allowed.logical_not(), -INFINITY), -1);
  return at::matmul(p, vt).transpose(1, 2).to(q.scalar_type());
}

namespace {

// the self-check: 2 rows of 24 cached positions on 2 kv heads shared by 4 query heads, rows of
// 19 and 3 keys (2 new queries each), then 1 new query over 24 and 1 key; no window and 5
std::vector<Tensor> decode_attention_check(at::Device device, at::ScalarType dtype, bool fused) {
  if (!device.is_cpu() || (dtype != at::kFloat && dtype != at::kBFloat16)) return {};
  auto gen = kernels_check_generator(device, 23);
  Tensor q = at::randn({2, 2, 4, 16}, gen).to(dtype);
  Tensor k = at::randn({2, 24, 2, 16}, gen).to(dtype), v = at::randn({2, 24, 2, 16}, gen).to(dtype);
  std::vector<Tensor> out;
  for (int64_t window : {-1, 5}) {
    auto run = [&](const Tensor& qs, const std::vector<int64_t>& counts) {
      return fused ? kernels_decode_attention(qs, k, v, counts, window)
                   : kernels_decode_attention_reference(qs, k, v, counts, window);
    };
    out.push_back(run(q, {19, 3}));
    out.push_back(run(q.narrow(1, 1, 1), {24, 1}));
  }
  return out;
}
const bool decode_attention_check_registered = kernels_register_check({"decode_attention", decode_attention_check});

}  // namespace

}  // namespace nanochat
