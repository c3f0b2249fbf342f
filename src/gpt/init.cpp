// defines: gpt_init_weights, gpt_make_generator
// GPT.init_weights (upstream gpt.py), step by step in nanochat's order: the random draws come
// from one generator in a fixed sequence, so the same seed gives the same weights.
#include "nanochat/gpt.h"

#include <cmath>
#include <mutex>
#include <ATen/ATen.h>
#include <ATen/Context.h>

namespace nanochat {

at::Generator gpt_make_generator(torch::Device device, uint64_t seed) {
  // torch.Generator(device).manual_seed(seed): a copy of the device's default generator,
  // reseeded (set_current_seed resets the whole state)
  at::Generator base = at::globalContext().defaultGenerator(device);
  at::Generator gen;
  {
    std::lock_guard<std::mutex> lock(base.mutex());
    gen = base.clone();
  }
  gen.set_current_seed(seed);
  return gen;
}

void gpt_init_weights(GPT& model, uint64_t seed) {
  torch::NoGradGuard no_grad;
  GPTImpl& m = *model;
  const torch::Device device = m.wte->weight.device();
  // a re-init starts from fp32 embeddings again (step 10 casts them at the end)
  m.wte->weight.set_data(m.wte->weight.to(torch::kFloat32));
  for (auto& e : m.ve)
    if (e) e->weight.set_data(e->weight.to(torch::kFloat32));
  if (device.type() == torch::kMeta) return;  // shapes only
  at::Generator gen = gpt_make_generator(device, seed);

  const int64_t L = m.config.n_layer;
  const double s = std::pow(3.0, 0.5) * std::pow((double)m.config.n_embd, -0.5);
  m.wte->weight.normal_(0.0, 0.8, gen);        // 1
  m.lm_head->weight.normal_(0.0, 0.001, gen);  // 2
  for (auto& b : m.blocks) {                   // 3
    b->attn->c_q->weight.uniform_(-s, s, gen);
    b->attn->c_k->weight.uniform_(-s, s, gen);
    b->attn->c_v->weight.uniform_(-s, s, gen);
    b->attn->c_proj->weight.zero_();
    b->mlp->c_fc->weight.uniform_(-0.4 * s, 0.4 * s, gen);
    b->mlp->c_proj->weight.zero_();
  }
  const double denom = (double)std::max<int64_t>(L - 1, 1);
  for (int64_t i = 0; i < L && m.config.layer_scalars; i++) {  // 4, 5 (the optional parts where present)
    m.resid_lambdas[i].fill_(1.15 - 0.10 * (double)i / denom);
    m.x0_lambdas[i].fill_(0.20 - 0.15 * (double)i / denom);
  }
  if (m.config.smear) m.smear_lambda.fill_(0.0);  // 6
  if (m.config.layer_scalars) m.backout_lambda.fill_(0.2);
  if (m.config.smear) m.smear_gate->weight.uniform_(0.0, 0.02, gen);
  for (auto& e : m.ve)  // 7: ascending layer index = ModuleDict order
    if (e) e->weight.uniform_(-s, s, gen);
  for (auto& b : m.blocks)  // 8
    if (b->attn->ve_gate) b->attn->ve_gate->weight.uniform_(0.0, 0.02, gen);
  m.compute_rotary();  // 9
  if (m.compute_dtype != torch::kFloat16) {  // 10: fp16 keeps fp32 tables (GradScaler)
    m.wte->weight.set_data(m.wte->weight.to(m.compute_dtype));
    for (auto& e : m.ve)
      if (e) e->weight.set_data(e->weight.to(m.compute_dtype));
  }
}

}  // namespace nanochat
