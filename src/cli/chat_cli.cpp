// `nanochat chat-cli` (upstream's scripts/chat_cli.py): talk to a chat model in the terminal. The conversation
// is kept as tokens (<|bos|>, then user/assistant turns); each reply streams as it is
// generated, never splitting a UTF-8 character and never showing the stop token.
// `-p TEXT` answers once and prints only the reply (for scripts); otherwise it reads turns
// from stdin: `clear` starts over, `quit`/`exit` (or end of input) leaves.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <iostream>

#include "cli/commands.h"
#include "nanochat/checkpoint/checkpoint_gpt.h"
#include "nanochat/common/base_dir.h"
#include "nanochat/common/device.h"
#include "nanochat/common/error.h"
#include "nanochat/common/utf8_stream.h"
#include "nanochat/engine.h"
#include "nanochat/tokenizer.h"

namespace nanochat {

struct ChatCliFlags {
  std::string source = "sft", tag, prompt, device_type, dtype;
  int64_t step = -1, top_k = 50, max_tokens = 256;
  double temperature = 0.6;
  uint64_t seed = 42;
};

static std::string strip(const std::string& s) {
  const char* ws = " \t\r\n\v\f";
  size_t a = s.find_first_not_of(ws);
  if (a == std::string::npos) return "";
  return s.substr(a, s.find_last_not_of(ws) - a + 1);
}

static int chat_cli_run(const ChatCliFlags& f) {
  const std::string device_type = device_autodetect(f.device_type);
  cpu_threads_setup(1);
  const torch::Device device = device_for_rank(device_type, 0);
  Tokenizer tok = tokenizer_load(base_dir_path("tokenizer"));
  LoadedGPT m = checkpoint_load_gpt(f.source, f.tag, f.step, device, gpt_inference_compute_dtype(f.dtype, device_type),
                                    tok.vocab_size());
  gpt_prepare_for_inference(m.model, f.dtype);
  Engine engine(m.model, tok);
  const int32_t bos = tok.bos_id(), user_start = tok.special_id("<|user_start|>"),
                user_end = tok.special_id("<|user_end|>"), assistant_start = tok.special_id("<|assistant_start|>"),
                assistant_end = tok.special_id("<|assistant_end|>");
  const bool single = !f.prompt.empty();
  if (!single) {
    std::printf(
        "\nNanoChat Interactive Mode\n%s\nType 'quit' or 'exit' to end the conversation\n"
        "Type 'clear' to start a new conversation\n%s\n",
        std::string(50, '-').c_str(), std::string(50, '-').c_str());
  }

  std::vector<int32_t> conversation = {bos};
  while (true) {
    std::string line;
    if (single) {
      line = f.prompt;
    } else {
      std::printf("\nUser: ");
      std::fflush(stdout);
      if (!std::getline(std::cin, line)) {
        std::printf("\nGoodbye!\n");
        break;
      }
    }
    line = strip(line);
    if (!single && (line == "quit" || line == "exit")) {
      std::printf("Goodbye!\n");
      break;
    }
    if (!single && line == "clear") {
      conversation = {bos};
      std::printf("Conversation cleared.\n");
      continue;
    }
    if (line.empty()) {
      if (single) fail("-p: the prompt is empty");
      continue;
    }
    const size_t turn_start = conversation.size();
    conversation.push_back(user_start);
    for (int32_t id : tok.encode(line)) conversation.push_back(id);
    conversation.push_back(user_end);
    conversation.push_back(assistant_start);
    const int64_t room = engine.model().max_positions - (int64_t)conversation.size();
    if (room < 1) {
      conversation.resize(turn_start);
      if (single)
        fail("-p: the prompt (%zu tokens) does not fit the model's %lld positions", conversation.size(),
             (long long)engine.model().max_positions);
      std::printf("The conversation fills the model's context; type 'clear' to start over.\n");
      continue;
    }

    GenerateOptions o;
    o.max_tokens = std::min(f.max_tokens, room);
    o.temperature = f.temperature;
    o.top_k = f.top_k;
    o.seed = f.seed;
    if (!single) std::printf("\nAssistant: ");
    std::fflush(stdout);
    Utf8Stream stream;
    GenerateResult r = engine.generate(conversation, o, [&](const TokenColumn& col) {
      if (col.tokens[0] >= 0 && col.finished[0] != FinishReason::stop) {  // the stop token is not shown
        std::string text = stream.push(tok.decode_single_token_bytes(col.tokens[0]));
        std::fwrite(text.data(), 1, text.size(), stdout);  // a NUL byte is text too
        std::fflush(stdout);
      }
      return true;
    });
    std::string tail = stream.finish() + "\n";
    std::fwrite(tail.data(), 1, tail.size(), stdout);
    // the reply and its <|assistant_end|> join the conversation (as upstream)
    conversation = r.tokens[0];
    conversation.push_back(assistant_end);
    if (single) break;
  }
  return 0;
}

void cli_register_chat_cli(CLI::App& app, int& exit_code) {
  auto* sub = app.add_subcommand("chat-cli", "Chat with a model in the terminal (-p for one answer)");
  static ChatCliFlags f;
  cli_add_checkpoint_flags(sub, f.source, f.tag, f.step);
  cli_add_inference_dtype_flag(sub, f.dtype);
  sub->add_option("-p,--prompt", f.prompt, "answer this one message and exit (prints only the reply)");
  sub->add_option("-t,--temperature", f.temperature, "sampling temperature (0: greedy)")->check(CLI::Range(0.0, 2.0));
  sub->add_option("-k,--top-k", f.top_k, "sample among the k most likely tokens (0: all)")
      ->check(CLI::NonNegativeNumber);
  sub->add_option("-m,--max-tokens", f.max_tokens, "tokens per reply")->check(CLI::PositiveNumber);
  sub->add_option("--seed", f.seed, "sampling seed (each reply starts from it, as upstream)");
  sub->add_option("--device-type", f.device_type, "cuda or cpu (default: cuda when available)")
      ->check(CLI::IsMember({"", "cuda", "cpu"}));
  sub->callback([&exit_code] { exit_code = chat_cli_run(f); });
}

}  // namespace nanochat
