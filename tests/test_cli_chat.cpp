// `nanochat chat-cli`: a single prompt (-p) and an interactive session on a pipe, through the
// binary with the tiny chat model of tests/server_fixture.h, against the naive greedy loop of
// upstream's GPT.generate on a prompt rendered by hand.
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "nanochat/checkpoint/checkpoint_gpt.h"
#include "server_fixture.h"
#include "test_util.h"

using namespace nanochat;

namespace {

struct World {
  std::string base;
  std::unique_ptr<Tokenizer> tok;
  GPT model{nullptr};
  ~World() {
    if (base.rfind("/tmp/nanochat_server_", 0) == 0) std::system(("rm -rf " + base).c_str());
  }
};
World& world() {
  static World w;
  if (w.base.empty()) {
    w.base = tiny_chat_base_dir();
    w.tok = std::make_unique<Tokenizer>(tokenizer_load(w.base + "/tokenizer"));
    w.model = checkpoint_load_gpt("sft", "d2", 0, torch::kCPU, torch::kFloat32, w.tok->vocab_size()).model;
  }
  return w;
}

int32_t sid(const char* name) { return world().tok->special_id(name); }
using Reference = GreedyReference;
Reference greedy_from_ids(const std::vector<int64_t>& prompt, int64_t max_tokens) {
  return tiny_chat_greedy_reference(world().model, *world().tok, prompt, max_tokens);
}
Reference greedy_reference(const std::vector<std::string>& turns, int64_t max_tokens) {
  return greedy_from_ids(tiny_chat_prompt_by_hand(*world().tok, turns), max_tokens);
}

}  // namespace

TEST(ChatCli, SingleShotPrintsTheGreedyReply) {
  const std::string base = world().base;
  Reference ref = greedy_reference({"hello world"}, 256);
  CommandResult r = run_shell("NANOCHAT_BASE_DIR=" + base + " OMP_NUM_THREADS=1 " + NANOCHAT_BIN +
                              " chat-cli -p 'hello world' -t 0 --device-type cpu");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, ref.text + "\n");
  EXPECT_EQ(r.out.find("<|assistant_end|>"), std::string::npos);
}

TEST(ChatCli, InteractiveOnAPipe) {
  const std::string base = world().base;
  Reference hi = greedy_reference({"hi"}, 256);
  Reference hello = greedy_reference({"hello world"}, 256);
  // turn 2 continues from the tokens of turn 1 (not its re-encoded text) and <|assistant_end|>
  std::vector<int64_t> ids = tiny_chat_prompt_by_hand(*world().tok, {"hello world"});
  ids.insert(ids.end(), hello.kept.begin(), hello.kept.end());
  ids.push_back(sid("<|assistant_end|>"));
  ids.push_back(sid("<|user_start|>"));
  for (int32_t t : world().tok->encode("hi")) ids.push_back(t);
  ids.push_back(sid("<|user_end|>"));
  ids.push_back(sid("<|assistant_start|>"));
  Reference second = greedy_from_ids(ids, 256);
  CommandResult r = run_shell(
      "printf 'hello world\\nhi\\nclear\\n\\n  hi  \\nquit\\nnever read\\n' | NANOCHAT_BASE_DIR=" + base +
      " OMP_NUM_THREADS=1 " + NANOCHAT_BIN + " chat-cli -t 0 --device-type cpu");
  ASSERT_EQ(r.rc, 0) << r.err;
  std::string want = "\nNanoChat Interactive Mode\n" + std::string(50, '-') +
                     "\nType 'quit' or 'exit' to end the conversation\nType 'clear' to start a new conversation\n" +
                     std::string(50, '-') + "\n" + "\nUser: \nAssistant: " + hello.text + "\n" +  // turn 1
                     "\nUser: \nAssistant: " + second.text + "\n" +                               // turn 2 sees turn 1
                     "\nUser: Conversation cleared.\n" + "\nUser: " +  // the empty line is skipped
                     "\nUser: \nAssistant: " + hi.text + "\n" +        // after clear: as if first
                     "\nUser: Goodbye!\n";
  EXPECT_EQ(r.out, want);
}
