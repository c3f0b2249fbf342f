// Tiny tokenizers and models for the tests that need one in process.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "nanochat/gpt.h"
#include "nanochat/tokenizer.h"

// token id = byte value (0..255), then <|bos|> alone at 256, or with `chat_specials` all nine
// of nanochat's specials at 256..264 in kSpecialTokens order
inline nanochat::Tokenizer byte_tokenizer(bool chat_specials = true) {
  std::vector<std::string> ranks;
  for (int b = 0; b < 256; b++) ranks.push_back(std::string(1, (char)b));
  std::vector<std::pair<std::string, int32_t>> specials = {{"<|bos|>", 256}};
  if (chat_specials) {
    specials.clear();
    for (size_t i = 0; i < nanochat::kSpecialTokens.size(); i++)
      specials.emplace_back(nanochat::kSpecialTokens[i], 256 + (int32_t)i);
  }
  return nanochat::Tokenizer(ranks, nanochat::kPatternNanochat, specials, "<|bos|>");
}

// 2 layers of width 64, 2 query heads sharing 1 KV head, a short then a long window, T = 64
inline nanochat::GPTConfig tiny_gpt_config(int64_t vocab_size) {
  nanochat::GPTConfig c;
  c.sequence_len = 64;
  c.vocab_size = vocab_size;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_kv_head = 1;
  c.n_embd = 64;
  c.window_pattern = "SL";
  return c;
}

// the model's init, then every parameter moved by seeded N(0, scale^2) noise and the smear and
// backout gates opened, so no block is the identity and every path of the forward matters
inline nanochat::GPT perturbed_gpt(const nanochat::GPTConfig& c, uint64_t seed, double scale,
                                   torch::ScalarType dtype = torch::kFloat32) {
  nanochat::GPT m(c, torch::kCPU, dtype);
  nanochat::gpt_init_weights(m, 42);
  if (dtype == torch::kFloat64) m->to(torch::kFloat64);
  torch::NoGradGuard no_grad;
  auto gen = nanochat::gpt_make_generator(torch::kCPU, seed);
  for (auto& [name, p] : nanochat::gpt_named_parameters(m))
    p.add_(at::randn(p.sizes(), gen, torch::kFloat32).to(p.scalar_type()) * scale);
  m->smear_lambda.fill_(0.5);
  m->backout_lambda.fill_(0.3);
  return m;
}
