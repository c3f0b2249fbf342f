// A sample row's step (upstream engine.py's RowState and the per-row part of its generate
// loop) and a request's set-up, shared by Engine::generate and the Scheduler.
#include "engine/row_state.h"

#include <algorithm>
#include <optional>
#include <ATen/ATen.h>

#include "nanochat/common/error.h"
#include "engine/calculator.h"

namespace nanochat {

int32_t engine_special_or_missing(const Tokenizer& tok, const std::string& name) {
  for (const auto& [n, id] : tok.specials())
    if (n == name) return id;
  return -1;
}

ToolTokens engine_tool_tokens(const Tokenizer& tok) {
  return {engine_special_or_missing(tok, "<|python_start|>"), engine_special_or_missing(tok, "<|python_end|>"),
          engine_special_or_missing(tok, "<|output_start|>"), engine_special_or_missing(tok, "<|output_end|>")};
}

namespace {

// the tool state machine on a kept token: python_start opens an expression, python_end
// evaluates it and queues <|output_start|> result <|output_end|> as forced tokens
void row_tool_step(RowState& row, int32_t tok, const Tokenizer& tokenizer, const ToolTokens& t) {
  if (t.python_start >= 0 && tok == t.python_start) {
    row.in_python = true;
    row.expr.clear();
  } else if (tok == t.python_end && row.in_python) {
    row.in_python = false;
    if (!row.expr.empty()) {
      std::optional<std::string> result = calculator_use(tokenizer.decode(row.expr));
      if (result && t.output_start >= 0 && t.output_end >= 0) {
        row.forced.push_back(t.output_start);
        for (int32_t id : tokenizer.encode(*result)) row.forced.push_back(id);
        row.forced.push_back(t.output_end);
      }
      row.expr.clear();
    }
  } else if (row.in_python) {
    row.expr.push_back(tok);
  }
}

}  // namespace

std::pair<int32_t, uint8_t> engine_row_step(RowState& row, int32_t sampled, const Tokenizer& tokenizer,
                                            const ToolTokens* tools) {
  int32_t tok = sampled;
  uint8_t m = 1;
  if (!row.forced.empty()) {
    tok = row.forced.front();
    row.forced.pop_front();
    m = 0;
  }
  row.generated++;
  if (std::find(row.stops.begin(), row.stops.end(), tok) != row.stops.end()) {
    row.finish = FinishReason::stop;
    row.stop_token = tok;
    return {tok, m};
  }
  row.tokens.push_back(tok);
  row.mask.push_back(m);
  if (tools) row_tool_step(row, tok, tokenizer, *tools);
  if (row.generated >= row.max_tokens) row.finish = FinishReason::length;
  return {tok, m};
}

TokenColumn engine_column_step(std::vector<RowState>& rows, const std::vector<int64_t>& which, const int64_t* sampled,
                               const torch::Tensor& logits, int64_t step, const GenerateOptions& opt,
                               const Tokenizer& tokenizer, const ToolTokens& tools, std::vector<int64_t>& took) {
  const int64_t B = (int64_t)which.size(), N = (int64_t)rows.size();
  TokenColumn col;
  col.step = step;
  col.tokens.assign(N, -1);
  col.masks.assign(N, 0);
  col.finished.assign(N, FinishReason::none);
  took.assign(B, 0);
  for (int64_t b = 0; b < B; b++) {
    const int64_t r = which[b];
    RowState& row = rows[r];
    if (row.finish != FinishReason::none) continue;  // still in the batch, its token ignored
    auto [tok, m] = engine_row_step(row, (int32_t)sampled[b], tokenizer, opt.use_calculator ? &tools : nullptr);
    took[b] = tok;
    col.tokens[r] = tok;
    col.masks[r] = m;
    col.finished[r] = row.finish;
  }
  if (opt.logprobs) {
    // log p(token) under the model: log-softmax of the raw logits at the token taken
    torch::Tensor idx = torch::tensor(took, torch::kLong).view({B, 1}).to(logits.device());
    torch::Tensor lp = at::log_softmax(logits, -1).gather(1, idx).view({-1}).to(at::kFloat).cpu().contiguous();
    const float* lp_ptr = lp.data_ptr<float>();
    col.logprobs.assign(N, 0.0f);
    for (int64_t b = 0; b < B; b++) {
      const int64_t r = which[b];
      if (col.tokens[r] < 0) continue;
      col.logprobs[r] = lp_ptr[b];
      if (rows[r].finish != FinishReason::stop) rows[r].logprobs.push_back(col.logprobs[r]);
    }
  }
  return col;
}

std::vector<RowState> engine_rows_init(const std::vector<int32_t>& prompt, const GenerateOptions& opt,
                                       const EngineModel& model, const Tokenizer& tok, int64_t max_len,
                                       int64_t& longest) {
  const int64_t N = opt.num_samples, T = (int64_t)prompt.size();
  if (T == 0) fail("generate: the prompt holds no tokens");
  if (N < 1) fail("generate: num_samples must be >= 1, got %lld", (long long)N);
  if (opt.temperature < 0) fail("generate: temperature must be >= 0, got %g", opt.temperature);
  if (!(opt.top_p > 0.0 && opt.top_p <= 1.0)) fail("generate: top_p must be in (0, 1], got %g", opt.top_p);
  if (!opt.row_stop_tokens.empty() && (int64_t)opt.row_stop_tokens.size() != N)
    fail("generate: row_stop_tokens has %zu lists for %lld samples", opt.row_stop_tokens.size(), (long long)N);
  if (!opt.row_max_tokens.empty() && (int64_t)opt.row_max_tokens.size() != N)
    fail("generate: row_max_tokens has %zu entries for %lld samples", opt.row_max_tokens.size(), (long long)N);
  int64_t max_tokens = opt.max_tokens;
  if (max_tokens < 0) {  // upstream: the decode cache is sequence_len long
    max_tokens = model.sequence_len - T;
    if (max_tokens <= 0)
      fail("generate: the prompt (%lld tokens) fills the model's context of %lld; shorten it or set max_tokens",
           (long long)T, (long long)model.sequence_len);
  }
  const int32_t bos = engine_special_or_missing(tok, "<|bos|>");
  const int32_t assistant_end = engine_special_or_missing(tok, "<|assistant_end|>");
  std::vector<RowState> rows(N);
  longest = 0;
  for (int64_t r = 0; r < N; r++) {
    RowState& row = rows[r];
    row.tokens = prompt;
    row.mask.assign(T, 0);
    row.max_tokens = max_tokens;
    if (!opt.row_max_tokens.empty()) {
      if (opt.row_max_tokens[r] < 0) fail("generate: row_max_tokens[%lld] is negative", (long long)r);
      row.max_tokens = opt.max_tokens >= 0 ? std::min(opt.row_max_tokens[r], opt.max_tokens) : opt.row_max_tokens[r];
    }
    longest = std::max(longest, row.max_tokens);
    for (int32_t s : {assistant_end, bos})
      if (s >= 0 && opt.default_stops) row.stops.push_back(s);
    row.stops.insert(row.stops.end(), opt.stop_tokens.begin(), opt.stop_tokens.end());
    if (!opt.row_stop_tokens.empty())
      row.stops.insert(row.stops.end(), opt.row_stop_tokens[r].begin(), opt.row_stop_tokens[r].end());
    if (row.max_tokens == 0) row.finish = FinishReason::length;
  }
  if (T + longest > max_len)
    fail("generate: prompt (%lld) + max_tokens (%lld) exceeds the model's %lld positions", (long long)T,
         (long long)longest, (long long)max_len);
  return rows;
}

GenerateResult engine_rows_result(std::vector<RowState>& rows, int64_t prompt_len, int64_t steps) {
  GenerateResult res;
  res.prompt_len = prompt_len;
  res.steps = steps;
  for (RowState& row : rows) {
    res.tokens.push_back(std::move(row.tokens));
    res.masks.push_back(std::move(row.mask));
    res.logprobs.push_back(std::move(row.logprobs));
    res.finish.push_back(row.finish);
    res.stop_token.push_back(row.stop_token);
  }
  return res;
}

}  // namespace nanochat
