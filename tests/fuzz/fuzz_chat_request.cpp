// libFuzzer target for the chat server's request parsing (server_parse_chat_request, both
// endpoints), and for a request it accepts, the prompt it renders (server_prompt_tokens)
// with a byte-level tokenizer carrying nanochat's special tokens. A refused request must be
// a ServerError with a 4xx status; any other exception, a crash or a sanitizer report is a
// finding, and so is an accepted request whose prompt cannot be rendered (the server would
// answer it 500). No model and no LibTorch: this is the path a request takes before a worker.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "fuzz_util.h"
#include "nanochat/server.h"

using namespace nanochat;

static const Tokenizer& byte_tokenizer() {
  static const Tokenizer tok = [] {
    std::vector<std::string> ranks;
    for (int b = 0; b < 256; b++) ranks.push_back(std::string(1, (char)b));
    std::vector<std::pair<std::string, int32_t>> specials;
    for (size_t i = 0; i < kSpecialTokens.size(); i++) specials.emplace_back(kSpecialTokens[i], 256 + (int32_t)i);
    return Tokenizer(ranks, kPatternNanochat, specials, "<|bos|>");
  }();
  return tok;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  bool openai = data[0] & 1;  // the first byte picks the endpoint
  std::string body(reinterpret_cast<const char*>(data) + 1, size - 1);
  try {
    ChatRequest r = server_parse_chat_request(body, openai, ChatDefaults{});
    server_prompt_tokens(byte_tokenizer(), r.messages);
  } catch (const ServerError& e) {
    fuzz_note(e.what());
    if (e.status < 400 || e.status > 499) std::abort();
  }
  return 0;
}
