// The greedy samples that show how a base model is doing, in base-train and base-eval.
#include "nanochat/engine.h"

namespace nanochat {

const std::vector<std::string>& engine_sample_prompts() {
  static const std::vector<std::string> prompts = {
      "The capital of France is",
      "The chemical symbol of gold is",
      "If yesterday was Friday, then tomorrow will be",
      "The opposite of hot is",
      "The planets of the solar system are:",
      "My favorite color is",
      "If 5*x + 3 = 13, then x is",
  };
  return prompts;
}

std::string engine_sample_greedy(const Engine& engine, const std::string& prompt, int64_t max_tokens) {
  const Tokenizer& tok = engine.tokenizer();
  std::vector<int32_t> ids = {tok.bos_id()};
  for (int32_t id : tok.encode(prompt)) ids.push_back(id);
  GenerateOptions go;
  go.max_tokens = max_tokens;
  go.temperature = 0.0;
  GenerateResult r = engine.generate_batch(ids, go);
  return tok.decode(std::vector<int32_t>(r.tokens[0].begin() + 1, r.tokens[0].end()));
}

}  // namespace nanochat
