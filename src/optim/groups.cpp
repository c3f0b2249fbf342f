// GPT.setup_optimizer (upstream gpt.py) from parameter names only, so optim needs no gpt header.
#include <algorithm>
#include <cmath>
#include <torch/torch.h>

#include "nanochat/common/error.h"
#include "nanochat/optim.h"

namespace nanochat {

static bool starts_with(const std::string& s, const std::string& prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}

static OptimGroup adamw_group(const char* name, double lr, double beta1, double beta2, double wd) {
  OptimGroup g;
  g.kind = OptimKind::adamw;
  g.name = name;
  g.lr = g.initial_lr = lr;
  g.betas = {beta1, beta2};
  g.eps = 1e-10;
  g.weight_decay = wd;
  return g;
}

std::vector<OptimGroup> optim_param_groups_gpt(const NamedTensors& named_parameters, int64_t n_embd,
                                               double unembedding_lr, double embedding_lr, double matrix_lr,
                                               double weight_decay, double scalar_lr) {
  // AdamW lrs of the embeddings and lm_head scale as 1/sqrt(d_model), tuned at 768
  const double dls = std::pow((double)n_embd / 768.0, -0.5);
  std::vector<OptimGroup> groups = {
      adamw_group("lm_head", unembedding_lr * dls, 0.8, 0.96, 0.01),
      adamw_group("wte", embedding_lr * dls, 0.8, 0.995, 0.001),
      adamw_group("value_embeds", embedding_lr * dls * 0.5, 0.8, 0.995, 0.01),
      adamw_group("resid_lambdas", scalar_lr * 0.01, 0.8, 0.95, 0.05),
      adamw_group("x0_lambdas", scalar_lr, 0.96, 0.95, 0.0),
      adamw_group("smear", 0.2, 0.8, 0.95, 0.0),  // fixed lr, not scaled by d_model or batch
  };
  std::vector<torch::Tensor> matrices;
  std::vector<torch::Tensor> smear(3);  // upstream's order: gate weight, smear_lambda, backout_lambda
  for (const auto& [name, p] : named_parameters) {
    if (name == "lm_head.weight") groups[0].params.push_back(p);
    else if (name == "transformer.wte.weight") groups[1].params.push_back(p);
    else if (starts_with(name, "value_embeds.")) groups[2].params.push_back(p);
    else if (name == "resid_lambdas") groups[3].params.push_back(p);
    else if (name == "x0_lambdas") groups[4].params.push_back(p);
    else if (name == "smear_gate.weight") smear[0] = p;
    else if (name == "smear_lambda") smear[1] = p;
    else if (name == "backout_lambda") smear[2] = p;
    else if (starts_with(name, "transformer.h.")) matrices.push_back(p);
    else fail("parameter %s has no optimizer group; is this a nanochat GPT?", name.c_str());
  }
  for (const auto& p : smear)
    if (p.defined()) groups[5].params.push_back(p);

  // one Muon group per distinct shape, shapes in sorted (lexicographic) order
  std::vector<std::vector<int64_t>> shapes;
  for (const auto& p : matrices) {
    if (p.dim() != 2)
      fail("transformer.h param of shape %s is not a matrix; Muon needs 2-D params", c10::str(p.sizes()).c_str());
    shapes.push_back(p.sizes().vec());
  }
  std::sort(shapes.begin(), shapes.end());
  shapes.erase(std::unique(shapes.begin(), shapes.end()), shapes.end());
  for (const auto& shape : shapes) {
    OptimGroup g;
    g.kind = OptimKind::muon;
    g.name = "muon " + std::to_string(shape[0]) + "x" + std::to_string(shape[1]);
    g.lr = g.initial_lr = matrix_lr;
    g.momentum = 0.95;
    g.ns_steps = 5;
    g.beta2 = 0.9;
    g.weight_decay = weight_decay;
    for (const auto& p : matrices)
      if (p.sizes().vec() == shape) g.params.push_back(p);
    groups.push_back(std::move(g));
  }
  return groups;
}

std::vector<OptimGroup> optim_param_groups_gpt(const torch::OrderedDict<std::string, torch::Tensor>& named_parameters,
                                               int64_t n_embd, double unembedding_lr, double embedding_lr,
                                               double matrix_lr, double weight_decay, double scalar_lr) {
  NamedTensors named;
  for (const auto& item : named_parameters) named.emplace_back(item.key(), item.value());
  return optim_param_groups_gpt(named, n_embd, unembedding_lr, embedding_lr, matrix_lr, weight_decay, scalar_lr);
}

}  // namespace nanochat
