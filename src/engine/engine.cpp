// Engine.generate as upstream's engine.py: batch-1 prefill, cloned into N rows, then one
// decode step per token column, where each row (its RowState) takes its forced or sampled
// token, stops on its stop tokens, and runs the calculator tool on its own.
#include "nanochat/engine.h"

#include <algorithm>
#include <numeric>
#include <utility>
#include <ATen/ATen.h>

#include "engine/row_state.h"
#include "nanochat/common/error.h"
#include "nanochat/gpt.h"

namespace nanochat {

namespace {

// x (B,T,...) at row b's position last[b]: (B,...)
torch::Tensor at_positions(const torch::Tensor& x, const std::vector<int64_t>& last) {
  const auto rows = torch::arange(x.size(0), torch::TensorOptions(torch::kLong).device(x.device()));
  return x.index({rows, torch::tensor(last, torch::kLong).to(x.device())});
}

}  // namespace

EngineModel engine_model_from_gpt(GPT model) {
  EngineModel m;
  m.forward = [model](const torch::Tensor& ids, KVCache& cache) mutable { return model->forward(ids, &cache); };
  m.forward_last = [model](const torch::Tensor& ids, KVCache& cache, const std::vector<int64_t>& last) mutable {
    return model->logits(at_positions(model->hidden(ids, &cache), last));
  };
  m.make_cache = [model](int64_t batch, int64_t max_len) { return model->make_kv_cache(batch, max_len); };
  m.embed = [model](const torch::Tensor& ids) mutable {
    return gpt_rms_norm(model->wte(ids).to(model->compute_dtype));
  };
  m.sequence_len = model->config.sequence_len;
  m.max_positions = model->cos.size(1);
  m.device = model->device();
  return m;
}

torch::Tensor engine_forward_last(const EngineModel& model, const torch::Tensor& ids, KVCache& cache,
                                  const std::vector<int64_t>& last) {
  if ((int64_t)last.size() != ids.size(0))
    fail("engine_forward_last: %zu positions for %lld rows", last.size(), (long long)ids.size(0));
  if (model.forward_last) return model.forward_last(ids, cache, last);
  return at_positions(model.forward(ids, cache), last);
}

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::none: return "none";
    case FinishReason::stop: return "stop";
    case FinishReason::length: return "length";
    case FinishReason::cancelled: return "cancelled";
  }
  return "?";
}

Engine::Engine(GPT model, Tokenizer tokenizer) : Engine(engine_model_from_gpt(model), std::move(tokenizer)) {}

Engine::Engine(EngineModel model, Tokenizer tokenizer) : model_(std::move(model)), tokenizer_(std::move(tokenizer)) {
  if (!model_.forward || !model_.make_cache) fail("Engine: the model has no forward or make_cache");
}

namespace {

torch::Tensor ids_tensor(const std::vector<int64_t>& ids, int64_t rows, torch::Device device) {
  return torch::tensor(ids, torch::kLong).view({rows, -1}).to(device);
}

}  // namespace

GenerateResult Engine::generate(const std::vector<int32_t>& prompt, const GenerateOptions& opt,
                                const TokenCallback& on_column) const {
  const int64_t N = opt.num_samples, T = (int64_t)prompt.size();
  int64_t longest = 0;
  std::vector<RowState> rows = engine_rows_init(prompt, opt, model_, tokenizer_, model_.max_positions, longest);
  int64_t steps = 0;
  auto finish_rows = [&]() { return engine_rows_result(rows, T, steps); };
  if (longest == 0) return finish_rows();

  torch::NoGradGuard no_grad;
  const torch::Device device = model_.device;
  at::Generator rng = gpt_make_generator(device, opt.seed);
  const ToolTokens tools = engine_tool_tokens(tokenizer_);

  // prefill: batch 1; with several samples the prompt's cache is copied into every row
  std::vector<int64_t> prompt64(prompt.begin(), prompt.end());
  torch::Tensor ids = ids_tensor(prompt64, 1, device);
  KVCache cache = model_.make_cache(1, N == 1 ? T + longest : T);
  torch::Tensor logits = engine_forward_last(model_, ids, cache, {T - 1});  // (1,V)
  if (N > 1) {
    KVCache decode = model_.make_cache(N, T + longest);
    decode.prefill(cache);
    cache = std::move(decode);
    logits = logits.expand({N, logits.size(-1)});  // each row samples its first token on its own
  }

  std::vector<int64_t> batch_rows(N);  // decode batch index -> row
  std::iota(batch_rows.begin(), batch_rows.end(), 0);
  int64_t active = 0;
  for (const RowState& row : rows) active += row.finish == FinishReason::none;

  for (int64_t step = 0; active > 0; step++) {
    const int64_t B = (int64_t)batch_rows.size();
    SampleRequest all{std::vector<int64_t>(B), opt.temperature, opt.top_k, opt.top_p, &rng};
    std::iota(all.rows.begin(), all.rows.end(), 0);
    const std::vector<int64_t> sampled = engine_sample_rows(logits, {all});
    const int64_t* sampled_ptr = sampled.data();

    std::vector<int64_t> feed;  // the tokens the rows actually take (forced or sampled)
    TokenColumn col = engine_column_step(rows, batch_rows, sampled_ptr, logits, step, opt, tokenizer_, tools, feed);
    for (int64_t r : batch_rows) active -= col.finished[r] != FinishReason::none;
    steps = step + 1;
    if (on_column && !on_column(col)) {
      for (RowState& row : rows)
        if (row.finish == FinishReason::none) row.finish = FinishReason::cancelled;
      break;
    }
    if (active == 0) break;

    // drop finished rows from the decode batch once they are a quarter of it (the copy of the
    // cache costs about one decode step's reads, so not for every single row)
    int64_t done_in_batch = 0;
    for (int64_t r : batch_rows) done_in_batch += rows[r].finish != FinishReason::none;
    if (done_in_batch > 0 && done_in_batch * 4 >= B) {
      std::vector<int64_t> keep, keep_rows, keep_feed;
      for (int64_t b = 0; b < B; b++) {
        if (rows[batch_rows[b]].finish != FinishReason::none) continue;
        keep.push_back(b);
        keep_rows.push_back(batch_rows[b]);
        keep_feed.push_back(feed[b]);
      }
      cache = engine_cache_select_rows(cache, torch::tensor(keep, torch::kLong).to(device));
      batch_rows = std::move(keep_rows);
      feed = std::move(keep_feed);
    }
    logits = model_.forward(ids_tensor(feed, (int64_t)feed.size(), device), cache).select(1, 0);  // (B,V)
  }
  return finish_rows();
}

std::string engine_completion_text(const Tokenizer& tok, const GenerateResult& r, size_t row) {
  const std::vector<int32_t>& ids = r.tokens.at(row);
  return tok.decode(
      std::vector<int32_t>(ids.begin() + std::min<int64_t>(r.prompt_len, (int64_t)ids.size()), ids.end()));
}

}  // namespace nanochat
