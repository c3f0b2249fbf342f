// What Engine::generate and the Scheduler share (internal to the engine module): a sample
// row's state (upstream's RowState plus what the result needs), its one-token step (forced
// or sampled token, stop tokens, budget, the calculator tool), a request's token column over
// its rows, and the checks and set-up of a request's rows.
#pragma once
#include <cstdint>
#include <deque>
#include <string>
#include <utility>
#include <vector>

#include "nanochat/engine.h"

namespace nanochat {

struct RowState {
  std::vector<int32_t> tokens;
  std::vector<uint8_t> mask;
  std::vector<float> logprobs;
  std::deque<int32_t> forced;
  bool in_python = false;
  std::vector<int32_t> expr;
  std::vector<int32_t> stops;
  int64_t generated = 0, max_tokens = 0;
  FinishReason finish = FinishReason::none;
  int32_t stop_token = -1;
};

// the calculator's special tokens, -1 where the tokenizer lacks them
struct ToolTokens {
  int32_t python_start, python_end, output_start, output_end;
};
ToolTokens engine_tool_tokens(const Tokenizer& tok);
int32_t engine_special_or_missing(const Tokenizer& tok, const std::string& name);

// one token column of an unfinished row: its forced token if it has one, else `sampled`; a
// stop token finishes the row (and is not kept), any other is kept, goes through the tool
// (tools: null without the calculator), and may exhaust the row's budget. Returns the token
// the row took and its mask (1 sampled, 0 forced).
std::pair<int32_t, uint8_t> engine_row_step(RowState& row, int32_t sampled, const Tokenizer& tokenizer,
                                            const ToolTokens* tools);

// One token column of a request: entry i of `which` is the row whose logits are row i of
// `logits` (len(which), V) and whose drawn token is sampled[i]. Each unfinished row takes its
// step (engine_row_step); one already finished takes none (-1 in the column, 0 in `took`).
// With opt.logprobs the column and the rows get log p(token) under `logits`. Returns the
// column indexed by row; `took` gets the token each entry of `which` took (the next feed).
TokenColumn engine_column_step(std::vector<RowState>& rows, const std::vector<int64_t>& which, const int64_t* sampled,
                               const torch::Tensor& logits, int64_t step, const GenerateOptions& opt,
                               const Tokenizer& tokenizer, const ToolTokens& tools, std::vector<int64_t>& took);

// Engine::generate's checks (empty prompt, bad option, prompt + max_tokens past `max_len`
// positions) and its rows: prompt, budget, stop tokens. `longest` gets the largest budget.
std::vector<RowState> engine_rows_init(const std::vector<int32_t>& prompt, const GenerateOptions& opt,
                                       const EngineModel& model, const Tokenizer& tok, int64_t max_len,
                                       int64_t& longest);

// the request's rows as a GenerateResult (moves them out)
GenerateResult engine_rows_result(std::vector<RowState>& rows, int64_t prompt_len, int64_t steps);

}  // namespace nanochat
