// One rank's training memory, counted tensor by tensor from what the model, its fused kernels
// and the optimizer keep, in the dtypes they are stored in; and the device batch that fits a
// budget. The derivation of each part is in docs/pretraining.md ("The training-memory estimate").
#include "nanochat/gpt/memory.h"

#include "nanochat/common/device.h"

#include <algorithm>
#include <map>
#include <utility>

#include <c10/core/ScalarType.h>

namespace nanochat {

namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// AdamW's two moments of one param of `numel` elements and dim-0 size `rows`
int64_t adamw_state_bytes(int64_t numel, int64_t rows, int64_t elt, int world) {
  if (world > 1 && numel >= 1024) return 2 * (numel / rows) * (rows / world) * elt;
  return 2 * numel * elt;
}

}  // namespace

TrainMemory gpt_train_memory(const GPTConfig& c, int64_t device_batch_size, torch::ScalarType dtype, int world_size,
                             bool fp8) {
  const int64_t W = std::max(1, world_size);
  const int64_t e = (int64_t)c10::elementSize(dtype);
  const int64_t emb_e = dtype == torch::kFloat16 ? 4 : e;  // wte and value embeddings as stored
  const int64_t C = c.n_embd, H = c.n_head, Hkv = c.n_kv_head, kv = c.n_kv_head * c.head_dim();
  const int64_t L = c.n_layer, Vp = gpt_padded_vocab(c.vocab_size);
  const int64_t N = device_batch_size * c.sequence_len;
  int64_t n_ve = 0;
  for (int64_t i = 0; i < L; i++) n_ve += c.value_embeds && gpt_has_ve(i, L);
  const ScalingParams p = gpt_num_scaling_params(c);

  TrainMemory m;
  m.weights = 4 * (p.transformer_matrices + p.lm_head + p.scalars) + emb_e * (p.wte + p.value_embeds);
  m.grads = m.weights;

  // the Muon groups: one per distinct shape of the block matrices
  std::map<std::pair<int64_t, int64_t>, int64_t> groups;  // (rows, cols) -> K
  for (int64_t i = 0; i < L; i++) {
    groups[{H * c.head_dim(), C}]++;  // c_q
    groups[{kv, C}] += 2;             // c_k, c_v
    groups[{C, C}]++;                 // attn.c_proj
    groups[{4 * C, C}]++;             // c_fc
    groups[{C, 4 * C}]++;             // mlp.c_proj
    if (c.value_embeds && gpt_has_ve(i, L)) groups[{Hkv, kVeGateChannels}]++;
  }
  int64_t largest_group = 0;
  for (const auto& [shape, K] : groups) {
    const auto [rows, cols] = shape;
    m.optimizer += ceil_div(K, W) * (rows * cols + std::max(rows, cols)) * 4;
    largest_group = std::max(largest_group, K * rows * cols * 4);
  }
  m.optimizer += adamw_state_bytes(Vp * C, Vp, 4, (int)W);              // lm_head
  m.optimizer += adamw_state_bytes(Vp * C, Vp, emb_e, (int)W);          // wte
  m.optimizer += n_ve * adamw_state_bytes(Vp * kv, Vp, emb_e, (int)W);  // value embeddings
  m.optimizer += 2 * adamw_state_bytes(L, L, 4, (int)W) + adamw_state_bytes(kSmearChannels, 1, 4, (int)W) +
                 2 * adamw_state_bytes(1, 1, 4, (int)W);  // resid/x0 lambdas, smear gate, smear/backout lambdas

  const int64_t q = H * c.head_dim();  // q's (and the attention output's) width
  const int64_t layer_matrices = q * C + 2 * kv * C + C * C + 8 * C * C;
  const bool f8 = fp8 && gpt_fp8_eligible(C, q) && gpt_fp8_eligible(C, kv) && gpt_fp8_eligible(q, C) &&
                  gpt_fp8_eligible(C, 4 * C) && gpt_fp8_eligible(4 * C, C);
  const int64_t ve_gates = p.transformer_matrices - L * layer_matrices;
  if (f8) m.weight_copies = L * layer_matrices + ve_gates * e;  // fp8 weights; ve_gate cast
  else m.weight_copies = dtype == torch::kFloat32 ? 0 : p.transformer_matrices * e;

  // mixed, its norm, h, its norm; k, v; q, attention output; the MLP's pre-activation
  // (fp8: no norms, see above, and no MLP activation: backward recomputes c_fc's output from its
  // fp8 input; instead the fp8 inputs of the six matmuls)
  const int64_t layer_vectors = f8 ? 2 * C + 2 * kv + 2 * q : 4 * C + 2 * kv + 2 * q + 4 * C;
  int64_t per_token = 0;
  per_token += L * layer_vectors * e + (L - 1) * C * e;  // + the block inputs of layers 1..L-1
  if (f8) per_token += L * (7 * C + q) + n_ve * C * e;   // fp8 inputs (c_fc's twice); the norm ve_gate reads
  per_token += L * 4 * (2 + 2 * H + Hkv);                // rstd x2, q rstd, lse; k rstd
  per_token += n_ve * (kv + 2 * Hkv) * e;
  per_token += 4 * C * e + 4 + 3 * e;  // embedding, norm, x0, final residual; rstd; smear
  m.activations = N * per_token;

  m.loss_saved = N * C * e + Vp * C * 4;
  const int64_t chunk_rows = std::min(N, std::max<int64_t>(16, (int64_t(1) << 30) / (Vp * e)));
  m.loss_transient = (dtype == torch::kFloat32 ? 0 : Vp * C * e) + chunk_rows * Vp * e + N * 4 * 4;
  m.backward = N * 8 * C * e + layer_matrices * (e + 4);

  if (W > 1) m.optimizer_step = 2 * 4 * p.transformer_matrices + 4 * (p.lm_head) + emb_e * (p.wte + p.value_embeds);
  else m.optimizer_step = 3 * largest_group;

  const int64_t state = m.weights + m.grads + m.optimizer;
  const int64_t fwd_bwd = m.weight_copies + m.activations + m.loss_saved + std::max(m.loss_transient, m.backward);
  m.total = state + std::max(fwd_bwd, m.optimizer_step);
  return m;
}

int64_t gpt_train_memory_fit(const GPTConfig& c, torch::ScalarType dtype, int world_size, int64_t budget_bytes,
                             int64_t max_batch, bool fp8) {
  auto fits = [&](int64_t b) { return gpt_train_memory(c, b, dtype, world_size, fp8).total <= budget_bytes; };
  int64_t b = 1;
  while (b * 2 <= max_batch && fits(b * 2)) b *= 2;
  return fits(b) ? b : 0;
}

int64_t gpt_device_memory_budget(torch::Device device) {
  if (!device.is_cuda()) return -1;
  // free once the cache (e.g. the init's fp32 temporaries) is released, plus what is allocated now
  const int64_t free_b = device_free_memory_bytes(device);
  if (free_b < 0) return -1;
  return free_b + device_allocated_memory_bytes(device);
}

}  // namespace nanochat
