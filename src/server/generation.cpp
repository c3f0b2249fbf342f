#include "server/generation.h"

#include <algorithm>
#include <random>

#include <ATen/core/grad_mode.h>

#include "nanochat/common/utf8_stream.h"

namespace nanochat {

GenerateOptions server_generate_options(const ChatRequest& req, int64_t prompt_len, int64_t row_len,
                                        const std::string& scope) {
  GenerateOptions o;
  o.num_samples = req.n;
  o.max_tokens = std::min<int64_t>(req.max_tokens, row_len - prompt_len);
  o.temperature = req.temperature;
  o.top_k = req.top_k;
  o.top_p = req.top_p;
  o.cache_scope = scope;
  o.seed = req.seed_given ? req.seed
                          : (uint64_t)std::random_device{}() % 2147483648ull;  // upstream: randint(0, 2**31-1)
  return o;
}

GenerationOutcome server_generate(Scheduler& scheduler, Scheduler::Ticket& ticket, const ChatRequest& req,
                                  int64_t prompt_len, const TextSink& sink, const std::function<bool()>& cancelled) {
  torch::NoGradGuard no_grad;  // thread-local: each connection thread sets its own
  const Tokenizer& tok = scheduler.engine().tokenizer();
  const int64_t n = req.n;
  GenerationOutcome out;
  out.prompt_tokens = prompt_len;
  out.choices.resize(n);
  std::vector<Utf8Stream> utf8(n);
  std::vector<StopMatcher> stops(n, StopMatcher(req.stop));
  std::vector<bool> done(n, false);  // finished, or stopped by a stop string

  auto emit = [&](int64_t r, const std::string& text) {
    if (text.empty() || out.client_gone) return;
    out.choices[r].text += text;
    if (!sink((int)r, text)) out.client_gone = true;
  };
  auto flush = [&](int64_t r) {  // the row ended: whatever the streams held back
    std::string tail = stops[r].push(utf8[r].finish());
    emit(r, tail + stops[r].finish());
  };

  GenerateResult res = scheduler.run(
      ticket,
      [&](const TokenColumn& col) {
        if (cancelled()) return false;
        for (int64_t r = 0; r < n; r++) {
          if (done[r] || col.tokens[r] < 0) continue;
          out.choices[r].completion_tokens++;
          const FinishReason f = col.finished[r];
          if (f != FinishReason::stop)  // the stop token itself is never shown
            emit(r, stops[r].push(utf8[r].push(tok.decode_single_token_bytes(col.tokens[r]))));
          if (stops[r].stopped()) {
            done[r] = true;
            out.choices[r].finish_reason = "stop";
          } else if (f != FinishReason::none) {
            done[r] = true;
            out.choices[r].finish_reason = finish_reason_name(f);
            flush(r);
          }
        }
        if (out.client_gone) return false;
        return !std::all_of(done.begin(), done.end(), [](bool d) { return d; });  // rows cut by stop strings end here
      },
      cancelled, &out.cached_tokens);
  for (int64_t r = 0; r < n; r++)
    if (!done[r]) {  // cancelled (client gone or shutdown), or the engine ended the row without a column
      out.choices[r].finish_reason = finish_reason_name(res.finish[r]);
      flush(r);  // no-op once the client is gone
    }
  return out;
}

}  // namespace nanochat
