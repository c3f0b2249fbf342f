// The gpt module: nanochat's GPT (upstream nanochat/gpt.py) in LibTorch. Parameter names are nanochat's
// state-dict keys, so checkpoints map one to one. Master weights are fp32; every matmul
// runs in the activation (compute) dtype; wte and value_embeds are stored in the compute
// dtype (fp32 when it is fp16: upstream's GradScaler cannot unscale fp16 gradients).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>
#include <torch/nn/module.h>
#include <torch/nn/modules/container/any.h>
#include <torch/nn/modules/container/moduledict.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/pimpl.h>

#include "nanochat/attention.h"

namespace nanochat {

// ---- configuration (gpt.py GPTConfig) ----------------------------------------------------------
struct GPTConfig {
  int64_t sequence_len = 2048;
  int64_t vocab_size = 32768;
  int64_t n_layer = 12;
  int64_t n_head = 6;
  int64_t n_kv_head = 6;
  int64_t n_embd = 768;
  std::string window_pattern = "SSSL";
  // The optional parts. The defaults are the current architecture; an older one (upstream's
  // October-2025 checkpoints, transformers' `nanochat` type) has none of the three parts, rope
  // theta 10000, no q/k scale after the norm, and maybe another norm eps. Only values that differ
  // from these defaults are written to the meta JSON.
  bool value_embeds = true;   // value_embeds.* and each such layer's attn.ve_gate
  bool smear = true;          // smear_gate, smear_lambda
  bool layer_scalars = true;  // resid_lambdas, x0_lambdas, backout_lambda
  double rope_theta = 100000.0;
  double softcap = 15.0;
  double qk_scale = 1.2;  // q and k times this after their norm ("sharper attention")
  double norm_eps = 0.0;  // 0: torch's default (the epsilon of the accumulation type)
  int64_t head_dim() const { return n_embd / n_head; }
};

// base_train.build_model_meta: width = ceil(depth*aspect_ratio / head_dim) * head_dim
GPTConfig gpt_config_from_depth(int64_t depth, int64_t vocab_size, int64_t seq_len = 2048,
                                const std::string& window_pattern = "SSSL", int64_t aspect_ratio = 64,
                                int64_t head_dim = 128);
// the meta JSON's model_config object (as checkpoint_manager.py writes it); a missing window_pattern reads as "L" (old
// checkpoints); the config is validated (Error naming the field)
nlohmann::json gpt_config_to_json(const GPTConfig& config);
GPTConfig gpt_config_from_json(const nlohmann::json& j);
void gpt_config_validate(const GPTConfig& config);

int64_t gpt_padded_vocab(int64_t vocab_size);                    // ceil(vocab/64)*64
bool gpt_has_ve(int64_t layer, int64_t n_layer);                 // i % 2 == (L-1) % 2
std::vector<int64_t> gpt_window_sizes(const GPTConfig& config);  // left size per layer (gpt.py _compute_window_sizes)
constexpr int64_t kSmearChannels = 24;                           // smear_gate reads the first 24 channels
constexpr int64_t kVeGateChannels = 12;                          // ve_gate reads the first 12 channels
constexpr double kSoftcap = 15.0;                                // the current architecture's (GPTConfig.softcap)
constexpr double kRopeBase = 100000.0;                           // the current architecture's (GPTConfig.rope_theta)

// ---- the functional pieces (exposed for tests and the engine) ------------------------
// over the last dim, no weight; eps 0 is torch's default
torch::Tensor gpt_rms_norm(const torch::Tensor& x, double eps = 0.0);
// (cos, sin) of shape (1, seq_len, 1, head_dim/2) in `dtype` (gpt.py _precompute_rotary_embeddings)
std::pair<torch::Tensor, torch::Tensor> gpt_rotary_tables(int64_t seq_len, int64_t head_dim, torch::ScalarType dtype,
                                                          torch::Device device, double base = kRopeBase);
// cap * tanh(logits / cap)
torch::Tensor gpt_softcap(const torch::Tensor& logits, double cap = kSoftcap);
// scale * rms_norm(rotary(x)) (kernels_rotary_norm); a non-default eps runs the plain ops
torch::Tensor gpt_rotary_norm(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin, double scale,
                              double eps);
// (h, rms_norm(h)) with h = a*x + b*y (kernels_residual_norm); a non-default eps runs the plain ops
std::pair<torch::Tensor, torch::Tensor> gpt_residual_norm(const torch::Tensor& x, const torch::Tensor& y,
                                                          const torch::Tensor& a, const torch::Tensor& b, double eps);
// the smear (cheap bigram) on normed embeddings x (B,T,C): position t>0 adds
// lambda*sigmoid(gate(x_t[:24])) * x_{t-1}; with `prev` (B,1,C) defined and T == 1 (decode)
// the previous token's embedding comes from `prev`
torch::Tensor gpt_smear(const torch::Tensor& x, const torch::Tensor& gate_weight, const torch::Tensor& smear_lambda,
                        const torch::Tensor& prev = torch::Tensor());

// ---- modules (gpt.py) -----------------------------------------------------------------
// nanochat's gpt.Linear (no bias): F.linear(x, weight.to(x.dtype))
struct LinearImpl : torch::nn::Module {
  LinearImpl(int64_t in, int64_t out, const torch::TensorOptions& options);
  torch::Tensor forward(const torch::Tensor& x);
  bool int8() const { return scale.defined(); }
  int64_t in_features, out_features;
  torch::Tensor weight;  // (out, in), or its pair panels where `panels`
  bool fp8 = false;      // the matmul through kernels_fp8_linear (gpt_set_fp8)
  torch::Tensor scale;   // int8 inference (gpt_prepare_for_inference): weight is int8, w ~ weight * scale[row]
  // inference on a CPU with AVX512-BF16 (gpt_prepare_for_inference): the bf16 or int8 weight is
  // kept as its pair panels (kernels/panel_linear.h), (ceil(out/16), in/2, 16, 2)
  bool panels = false;
};
TORCH_MODULE(Linear);

struct EmbeddingImpl : torch::nn::Module {
  EmbeddingImpl(int64_t num, int64_t dim, const torch::TensorOptions& options);
  torch::Tensor forward(const torch::Tensor& idx);
  torch::Tensor weight;
};
TORCH_MODULE(Embedding);

struct CausalSelfAttentionImpl : torch::nn::Module {
  CausalSelfAttentionImpl(const GPTConfig& config, int64_t layer_idx, const torch::TensorOptions& options);
  // x: the normed block input (B,T,C); ve: (B,T,Hkv*hd) or undefined
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& ve, const torch::Tensor& cos,
                        const torch::Tensor& sin, int64_t window, KVCache* kv_cache);
  int64_t layer_idx, n_head, n_kv_head, head_dim;
  double qk_scale, norm_eps;
  Linear c_q{nullptr}, c_k{nullptr}, c_v{nullptr}, c_proj{nullptr}, ve_gate{nullptr};
};
TORCH_MODULE(CausalSelfAttention);

struct MLPImpl : torch::nn::Module {
  MLPImpl(const GPTConfig& config, const torch::TensorOptions& options);
  torch::Tensor forward(const torch::Tensor& x);  // c_proj(relu(c_fc(x))^2)
  Linear c_fc{nullptr}, c_proj{nullptr};
};
TORCH_MODULE(MLP);

struct BlockImpl : torch::nn::Module {
  BlockImpl(const GPTConfig& config, int64_t layer_idx, const torch::TensorOptions& options);
  // x: the residual stream (B,T,C) and x_normed its rms_norm (made with x by one fused op)
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& x_normed, const torch::Tensor& ve,
                        const torch::Tensor& cos, const torch::Tensor& sin, int64_t window, KVCache* kv_cache);
  CausalSelfAttention attn{nullptr};
  MLP mlp{nullptr};
  double norm_eps;
};
TORCH_MODULE(Block);

// Registration follows nanochat's GPT.__init__: transformer{wte, h}, lm_head,
// resid_lambdas, x0_lambdas, smear_gate, smear_lambda, backout_lambda, value_embeds.
// Like PyTorch's state_dict, LibTorch lists a module's own parameters before its
// children's, so named_parameters() is: resid_lambdas, x0_lambdas, smear_lambda,
// backout_lambda, transformer.wte.weight, transformer.h.{i}.*, lm_head.weight,
// smear_gate.weight, value_embeds.{i}.weight -- exactly nanochat's state_dict order.
struct GPTImpl : torch::nn::Module {
  // builds the modules with uninitialised storage on `device` (use gpt_init_weights, or
  // load weights); "meta" builds shapes only. The rotary cache is computed here.
  GPTImpl(const GPTConfig& config, torch::Device device = torch::kCPU,
          torch::ScalarType compute_dtype = torch::kFloat32);

  // logits (B,T,vocab_size), softcapped, in fp32 (fp64 when the compute dtype is fp64).
  // With a cache: positions continue at kv_cache->get_pos(), and the cache advances by T.
  torch::Tensor forward(const torch::Tensor& idx, KVCache* kv_cache = nullptr);
  // the final normed hidden states (B,T,C) in the compute dtype: forward without lm_head
  torch::Tensor hidden(const torch::Tensor& idx, KVCache* kv_cache = nullptr);
  // forward's logits from hidden states (..., C): lm_head, the vocab's columns, fp32, softcap
  torch::Tensor logits(const torch::Tensor& h);

  void compute_rotary();  // cos/sin (1, 10*sequence_len, 1, hd/2) in the compute dtype
  torch::Device device() const { return cos.device(); }
  KVCache make_kv_cache(int64_t batch_size, int64_t max_seq_len) const;

  GPTConfig config;
  torch::ScalarType compute_dtype;
  std::vector<int64_t> window_sizes;
  torch::nn::ModuleDict transformer{nullptr};  // wte, h
  Embedding wte{nullptr};
  torch::nn::ModuleList h{nullptr};
  std::vector<Block> blocks;                     // typed views of h
  Linear lm_head{nullptr}, smear_gate{nullptr};  // smear_gate: nullptr without the smear
  // undefined where the config leaves the part out
  torch::Tensor resid_lambdas, x0_lambdas, smear_lambda, backout_lambda;
  torch::nn::ModuleDict value_embeds{nullptr};  // nullptr without value embeddings
  std::vector<Embedding> ve;                    // per layer; nullptr where the layer has none
  torch::Tensor cos, sin;                       // buffers (not in named_parameters)
};
TORCH_MODULE(GPT);

// gpt.py GPT.init_weights in its exact order, from a generator of the model's device seeded with `seed`
// (the same numbers as nanochat's init right after torch.manual_seed(seed))
void gpt_init_weights(GPT& model, uint64_t seed = 42);

// FP8 training (upstream fp8.py): every Linear whose dimensions are multiples of 16 and at
// least 128 runs through kernels_fp8_linear (q, k, v, the projections, the MLP), ve_gate and
// smear_gate stay in the compute dtype. So does lm_head, unlike upstream: its matmul lives in
// the fused loss, which never materialises the logits that a tensorwise fp8 gradient scale
// would need whole. CUDA needs compute capability 8.9+ (Error below); the CPU runs it too.
void gpt_set_fp8(GPT& model, bool on);
bool gpt_fp8_eligible(int64_t in, int64_t out);
// upstream's disable_fp8 context: evaluation and sampling in the compute dtype
struct GptFp8Off {
  explicit GptFp8Off(GPT& model);
  ~GptFp8Off();
  GPT& model;
  std::vector<bool> was;
};

// ---- inference weights (the --dtype flag of the subcommands that only run the model) ----------
// "" (the device's compute dtype, compute_dtype_detect), "float32", "bfloat16", or "int8": int8
// weights with bf16 activations. The compute dtype to build the model in; fails naming --dtype.
torch::ScalarType gpt_inference_compute_dtype(const std::string& dtype, const std::string& device_type);
// For a model that only runs forward from now on (no gradients, no optimizer, no saving): every
// Linear's weight is stored in the compute dtype, so a bf16 decode reads half of fp32's bytes;
// with "int8" the blocks' Linears and lm_head are quantized per output channel
// (kernels_int8_quantize), the two small gates stay in the compute dtype. A width the int8
// kernel does not take fails in one line before anything changes. On a CPU that multiplies bf16
// pairs (AVX512-BF16) those Linears' weights are then repacked as pair panels (LinearImpl::panels).
void gpt_prepare_for_inference(GPT& model, const std::string& dtype);

enum class LossReduction { mean, none };
// cross-entropy of the softcapped logits, ignore_index -1; `none` gives a flat (B*T,) vector
torch::Tensor gpt_loss(GPT& model, const torch::Tensor& idx, const torch::Tensor& targets,
                       LossReduction reduction = LossReduction::mean);

// ---- checkpoint- and optimizer-facing ----------------------------------------------------
// nanochat's state_dict: names and the parameters themselves (autograd leaves), in order
std::vector<std::pair<std::string, torch::Tensor>> gpt_named_parameters(const GPT& model);
// copies a named tensor list into the model. Every key must be a parameter name, appear
// once, and match its shape and dtype; every parameter must be present. Checked in full
// before anything is written; an Error names the first offending key.
void gpt_load_named_tensors(GPT& model, const std::vector<std::pair<std::string, torch::Tensor>>& tensors);

// gpt.py GPT.generate, the naive loop: batch 1, no KV cache, the full forward each step. top_k <= 0 means
// none; temperature 0 is argmax. Returns the new tokens; `on_token` (optional) sees each.
std::vector<int64_t> gpt_generate(GPT& model, const std::vector<int64_t>& tokens, int64_t max_tokens,
                                  double temperature = 1.0, int64_t top_k = 0, uint64_t seed = 42,
                                  const std::function<void(int64_t)>& on_token = nullptr);
// a fresh generator of `device`'s kind seeded with `seed` (torch.Generator(device).manual_seed)
at::Generator gpt_make_generator(torch::Device device, uint64_t seed);

// ---- counting (gpt.py num_scaling_params, estimate_flops), from the configuration alone --------------------------------------
struct ScalingParams {
  int64_t wte, value_embeds, lm_head, transformer_matrices, scalars, total;
};
ScalingParams gpt_num_scaling_params(const GPTConfig& config);
int64_t gpt_num_matmul_params(const GPTConfig& config);  // every Linear incl. lm_head, smear_gate
int64_t gpt_estimate_flops(const GPTConfig& config);     // per token, forward + backward, T = sequence_len
int64_t gpt_estimate_decode_flops(const GPTConfig& config, int64_t ctx);
int64_t gpt_estimate_prefill_flops(const GPTConfig& config, int64_t n);
int64_t gpt_kv_bytes_per_token(const GPTConfig& config, torch::ScalarType dtype);
int64_t gpt_kv_read_bytes(const GPTConfig& config, int64_t ctx, torch::ScalarType dtype);
// the same breakdown from a real model's tensors (numel sums); equals the arithmetic one
ScalingParams gpt_count_params(const GPT& model);

}  // namespace nanochat
