// One chat request on one worker's scheduler: N sample rows turned into N text streams. Each row's
// tokens go through a Utf8Stream (never half a character) and a StopMatcher (OpenAI stop
// strings); its stop token (<|assistant_end|>, <|bos|>) is never shown. Special tokens of
// the tool (python blocks and their outputs) come out as their literal text, as upstream's
// decode gave them; the UI renders them as blocks.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "nanochat/engine.h"
#include "nanochat/engine/scheduler.h"
#include "nanochat/server.h"
#include "server/stop_matcher.h"

namespace nanochat {

struct ChoiceResult {
  std::string text;                    // everything emitted for the row
  std::string finish_reason = "stop";  // stop, length, cancelled
  int64_t completion_tokens = 0;       // tokens the row generated, its stop token included
};
struct GenerationOutcome {
  int64_t prompt_tokens = 0;
  int64_t cached_tokens = 0;  // prompt positions whose KV was reused (prefix cache)
  std::vector<ChoiceResult> choices;
  bool client_gone = false;  // a sink write failed; generation stopped there
};
// receives (row, text); returns false when the client is gone
using TextSink = std::function<bool(int row, const std::string& text)>;

// the request's options for the scheduler: its sampling, a seed (upstream's random one when
// none is given), max_tokens cut to the positions a KV row of `row_len` has left after the
// prompt (finish "length"; < 1 when the prompt leaves none), and `scope`, whose prefix cache
// it may reuse (server_cache_scope)
GenerateOptions server_generate_options(const ChatRequest& req, int64_t prompt_len, int64_t row_len,
                                        const std::string& scope);

// runs a submitted request (Scheduler::submit) in the worker's shared decode batch;
// `cancelled` is polled every step (server shutdown, client gone)
GenerationOutcome server_generate(Scheduler& scheduler, Scheduler::Ticket& ticket, const ChatRequest& req,
                                  int64_t prompt_len, const TextSink& sink, const std::function<bool()>& cancelled);

}  // namespace nanochat
