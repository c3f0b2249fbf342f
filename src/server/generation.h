// defines: ChoiceResult, GenerationOutcome, TextSink, server_generate
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

// runs in the worker's shared decode batch; max_tokens is cut to the positions a KV row has
// left after the prompt (finish "length"); `cancelled` is polled every step (server shutdown)
// `scope`: whose prefix cache it may reuse (server_cache_scope)
GenerationOutcome server_generate(Scheduler& scheduler, const ChatRequest& req, const std::vector<int32_t>& prompt,
                                  const std::string& scope, const TextSink& sink, const std::function<bool()>& cancelled);

}  // namespace nanochat
