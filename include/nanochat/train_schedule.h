// How big a pretraining run is and how its hyperparameters move (upstream's base_train.py): the
// "muP-style" transfer from the d12 reference (batch size and weight decay from the token
// horizon), the number of iterations, gradient accumulation, and the per-step schedules.
// Pure arithmetic on numbers the model reports; nothing here touches tensors.
#pragma once
#include <cstdint>

namespace nanochat {

constexpr int64_t kBatchRef = 1 << 19;  // B_REF = 524,288 tokens, the d12 reference batch

struct TrainScaling {
  int64_t target_tokens = 0;     // int(ratio * scaling_params)
  double tokens_ref = 0;         // D_REF: ratio * scaling_params of d12 with the same args
  int64_t total_batch_size = 0;  // the flag, or 2^round(log2(B_REF * (D/D_REF)^0.383))
  double batch_lr_scale = 1;     // sqrt(B / B_REF), multiplies every learning rate
  double weight_decay = 0;       // wd * sqrt(B / B_REF) * D_REF / D  (the T_epoch rule)
};
// scaling_params: transformer matrices + lm_head of this model (num_scaling_params);
// scaling_params_d12: the same for depth 12 built with the same flags; total_batch_size
// -1 means auto
TrainScaling train_scaling(int64_t scaling_params, int64_t scaling_params_d12, double target_param_data_ratio,
                           int64_t total_batch_size, double weight_decay);

// precedence: --num-iterations > 0, then --target-flops > 0, then the data ratio; Error
// when none is set
int64_t train_num_iterations(int64_t num_iterations, double target_flops, double flops_per_token,
                             const TrainScaling& scaling, double target_param_data_ratio);

// micro-steps per optimizer step; Error naming the flags when the batch does not divide
int64_t train_grad_accum(int64_t total_batch_size, int64_t device_batch_size, int64_t max_seq_len, int world_size);

// Python's round(): to the nearest integer, halves to even (round(6.5) == 6)
int64_t python_round(double x);

// learning-rate multiplier: linear warmup over warmup_steps, flat, then a linear warmdown
// over round(warmdown_ratio*N) steps to final_lr_frac
double lr_multiplier(int64_t it, int64_t num_iterations, int64_t warmup_steps = 40, double warmdown_ratio = 0.65,
                     double final_lr_frac = 0.05);
// Muon momentum: 0.85 -> 0.97 over 400 steps, 0.97 -> 0.90 across the warmdown
double muon_momentum(int64_t it, int64_t num_iterations, double warmdown_ratio = 0.65);
// Muon weight decay: cosine from weight_decay to 0 over the run
double muon_weight_decay(int64_t it, int64_t num_iterations, double weight_decay);

// SFT (upstream's chat_sft.py), by progress through the data in [0, 1]: warmup to 1 over warmup_ratio,
// flat, then linear to final_lr_frac over the last warmdown_ratio
double sft_lr_multiplier(double progress, double warmup_ratio = 0.0, double warmdown_ratio = 0.5,
                         double final_lr_frac = 0.0);
// SFT Muon momentum: 0.85 -> 0.95 over the first 300 steps
double sft_muon_momentum(int64_t it);

}  // namespace nanochat
