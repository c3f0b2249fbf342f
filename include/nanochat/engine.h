// The engine module (upstream's nanochat/engine.py): batched generation with a KV cache. One batch-1
// prefill of the prompt is cloned into N sample rows; each row then samples on its own
// (temperature, top-k, and top-p as an addition), may be fed forced tokens (the calculator's
// output), and finishes on its own stop tokens or token budget. Rows that finished are
// dropped from the decode batch (their cache rows with them) once a quarter of the batch has
// finished, so they stop costing compute. Generation streams: a callback sees every token
// column and can stop the whole request (a client went away) by returning false.
// Randomness: one generator seeded like upstream, one multinomial draw per step over the
// rows still in the batch, so the same prompt, options and seed give the same tokens; once
// rows are dropped the draws differ from upstream's (which keeps sampling finished rows).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <ATen/core/Generator.h>
#include "nanochat/common/tensor.h"

#include "nanochat/attention.h"
#include "nanochat/tokenizer.h"

namespace nanochat {

class GPT;  // nanochat/gpt.h: only what builds an Engine from a model needs the module API

// What generation needs from a model. GPT provides it (engine_model_from_gpt); tests plug
// in a scripted double.
struct EngineModel {
  // ids (B,T) int64 -> logits (B,T,V) float; continues at cache.get_pos(), advances it by T
  std::function<torch::Tensor(const torch::Tensor& ids, KVCache& cache)> forward;
  // forward, but only the logits (B,V) of row b's position last[b]: a prompt's forward needs one
  // position's, and lm_head over every position costs a vocabulary-wide product and (T,V) of
  // memory per prompt token. Optional: engine_forward_last picks them from forward's without it.
  std::function<torch::Tensor(const torch::Tensor& ids, KVCache& cache, const std::vector<int64_t>& last)> forward_last;
  // an empty cache of `batch` rows and `max_len` positions
  std::function<KVCache(int64_t batch, int64_t max_len)> make_cache;
  // ids (B,T) -> what KVCache::prev_embedding holds after them (B,T,C): the smear's input.
  // Optional: without it the scheduler reuses a cached prefix only when it is whole.
  std::function<torch::Tensor(const torch::Tensor& ids)> embed;
  int64_t sequence_len = 0;   // default budget: prompt + max_tokens fills this
  int64_t max_positions = 0;  // hard limit on prompt + max_tokens (the rotary tables' length)
  torch::Device device = torch::kCPU;
};
EngineModel engine_model_from_gpt(GPT model);
// model.forward_last, or forward's logits at those positions: (B,V)
torch::Tensor engine_forward_last(const EngineModel& model, const torch::Tensor& ids, KVCache& cache,
                                  const std::vector<int64_t>& last);

// One request's rows in a sampling step: which rows of the logits are its, how it samples, and
// its generator (each request draws from its own stream, so a seeded request gets the same
// tokens alone or batched with others). temperature 0 is argmax; top_k <= 0 is off; top_p >= 1
// is off, else the smallest set of most likely tokens whose probability reaches top_p (after
// top-k and temperature).
struct SampleRequest {
  std::vector<int64_t> rows;
  double temperature = 1.0;
  int64_t top_k = 0;
  double top_p = 1.0;
  at::Generator* rng = nullptr;  // not used at temperature 0
};

// upstream's sample_next_token plus top-p, for every request's rows of logits (B,V) in one
// pass and one read-back: the token of each row (-1 for a row no request names). Each
// request's draw is upstream's, draw for draw: multinomial(probs, 1) is argmax(probs / q) with
// q ~ Exp(1) of probs' shape from its generator (ATen's own algorithm), here without its
// per-call checks that wait for the device.
std::vector<int64_t> engine_sample_rows(const torch::Tensor& logits, const std::vector<SampleRequest>& requests);

// a cache holding only `rows` (int64 indices, on the cache's device) of `cache`, same position
KVCache engine_cache_select_rows(const KVCache& cache, const torch::Tensor& rows);

struct GenerateOptions {
  int64_t num_samples = 1;
  int64_t max_tokens = -1;     // per row, forced tokens included; < 0: fill the model's sequence_len
  double temperature = 1.0;    // >= 0
  int64_t top_k = 0;           // <= 0: off
  double top_p = 1.0;          // in (0,1]; 1: off
  uint64_t seed = 42;          // torch.Generator(device).manual_seed(seed), as upstream
  bool use_calculator = true;  // the python tool state machine (upstream's RowState)
  bool logprobs = false;       // report log p(token) under the model (softmax of the raw logits)
  // stop tokens: <|assistant_end|> and <|bos|> (unless default_stops is off: raw completion,
  // benchmarks), plus these (every row) ...
  bool default_stops = true;
  std::vector<int32_t> stop_tokens;
  // ... plus these per row (empty, or one list per sample)
  std::vector<std::vector<int32_t>> row_stop_tokens;
  // per-row token budgets (empty, or one per sample; each capped by max_tokens when that is set)
  std::vector<int64_t> row_max_tokens;
  // the Scheduler's prefix cache: a request reuses only the KV that requests of the same
  // scope left (a user's own history, never another user's); Engine::generate keeps no cache
  std::string cache_scope;
};

enum class FinishReason : uint8_t { none, stop, length, cancelled };
const char* finish_reason_name(FinishReason r);  // "none", "stop", "length", "cancelled"

// one decode step, indexed by row (0..num_samples-1)
struct TokenColumn {
  int64_t step = 0;
  std::vector<int32_t> tokens;         // -1 for a row that had finished before this step
  std::vector<uint8_t> masks;          // 1 sampled, 0 forced (tool output) or no token
  std::vector<float> logprobs;         // with options.logprobs, else empty
  std::vector<FinishReason> finished;  // set in the step where a row finishes; `stop` means
                                       // this column's token is the row's stop token
};
// return false to stop every row now (they finish as `cancelled`)
using TokenCallback = std::function<bool(const TokenColumn&)>;

struct GenerateResult {
  int64_t prompt_len = 0;
  int64_t steps = 0;                         // token columns produced
  std::vector<std::vector<int32_t>> tokens;  // per row: prompt + generated, stop token excluded
  std::vector<std::vector<uint8_t>> masks;   // per row: 0 prompt and forced, 1 sampled
  std::vector<std::vector<float>> logprobs;  // per row, one per generated token kept (options.logprobs)
  std::vector<FinishReason> finish;
  std::vector<int32_t> stop_token;  // the token that stopped each row, or -1
};

// the generated part of row `row` as text (the prompt cut off, the stop token already absent)
std::string engine_completion_text(const Tokenizer& tok, const GenerateResult& r, size_t row);

class Engine {
 public:
  Engine(EngineModel model, Tokenizer tokenizer);
  Engine(GPT model, Tokenizer tokenizer);  // engine_model_from_gpt(model)

  // upstream's Engine.generate as a stream: calls on_column (if given) once per token column,
  // until every row finished or the callback returns false; returns what generate_batch does.
  // Error on a bad request (empty prompt, bad option, prompt + max_tokens past the model).
  // Holds no state between calls: one Engine may serve one request per thread at a time.
  GenerateResult generate(const std::vector<int32_t>& prompt, const GenerateOptions& options,
                          const TokenCallback& on_column = nullptr) const;
  // Engine.generate_batch: the same without a stream
  GenerateResult generate_batch(const std::vector<int32_t>& prompt, const GenerateOptions& options) const {
    return generate(prompt, options);
  }

  const Tokenizer& tokenizer() const { return tokenizer_; }
  const EngineModel& model() const { return model_; }

 private:
  EngineModel model_;
  Tokenizer tokenizer_;
};

// the 7 prompts a base model is sampled on, during base-train and by base-eval (upstream's)
const std::vector<std::string>& engine_sample_prompts();
// "<prompt><greedy completion of up to max_tokens tokens>", the prompt prefixed with
// <|bos|> (stops at <|bos|>/<|assistant_end|>), as upstream's base_train.py samples
std::string engine_sample_greedy(const Engine& engine, const std::string& prompt, int64_t max_tokens);

}  // namespace nanochat
