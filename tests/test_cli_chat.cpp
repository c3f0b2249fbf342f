// `nanochat chat-cli`: a single prompt (-p) and an interactive session on a pipe, through the
// binary with the tiny chat model of tests/server_fixture.h, against the naive greedy loop of
// upstream's GPT.generate on a prompt rendered by hand.
#include <chrono>
#include <cstdlib>
#include <memory>
#include <thread>
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

// --dtype on every subcommand that generates: generate in int8 is the in-process int8 model's
// greedy loop; the others start and answer with it; bad values and widths say so in one line
TEST(InferenceDtype, GenerateInInt8IsTheInProcessInt8Model) {
  const std::string base = world().base;
  CommandResult r = run_shell("NANOCHAT_BASE_DIR=" + base + " OMP_NUM_THREADS=1 " + NANOCHAT_BIN +
                              " generate -i sft -p 'hello world' --temperature 0 --max-tokens 12 --json --dtype int8 "
                              "--device-type cpu");
  ASSERT_EQ(r.rc, 0) << r.err;
  nlohmann::json j = nlohmann::json::parse(r.out);
  at::set_num_threads(1);  // the child's
  GPT m = checkpoint_load_gpt("sft", "d2", 0, torch::kCPU, torch::kBFloat16, world().tok->vocab_size()).model;
  gpt_prepare_for_inference(m, "int8");
  EXPECT_EQ(j["generated_ids"].get<std::vector<int64_t>>(),
            gpt_generate(m, j["prompt_ids"].get<std::vector<int64_t>>(), 12, 0.0));
}

TEST(InferenceDtype, EverySubcommandThatGeneratesTakesIt) {
  const std::string env = "NANOCHAT_BASE_DIR=" + world().base + " OMP_NUM_THREADS=1 " + NANOCHAT_BIN;
  CommandResult chat = run_shell(env + " chat-cli -p 'hello world' -t 0 --dtype bfloat16 --device-type cpu");
  EXPECT_EQ(chat.rc, 0) << chat.err;
  CommandResult bench = run_shell(env +
                                  " infer-bench -i sft --dtype int8 --prompt-tokens 8 --decode-tokens 4 "
                                  "--batch-sizes 1 --peak-bandwidth 1e10 --device-type cpu");
  ASSERT_EQ(bench.rc, 0) << bench.err;
  nlohmann::json card = nlohmann::json::parse(bench.out.substr(bench.out.rfind("\n{") + 1));
  EXPECT_EQ(card["compute_dtype"], "bfloat16");
  // chat-eval loads the model in int8 and only then meets the unknown task
  CommandResult eval = run_shell(env + " chat-eval -i sft -g d2 --dtype int8 -a NoSuchTask --device-type cpu");
  EXPECT_NE(eval.rc, 0);
  EXPECT_NE(eval.err.find("NoSuchTask"), std::string::npos) << eval.err;
  EXPECT_EQ(eval.err.find("dtype"), std::string::npos) << eval.err;
  ServerProcess server(NANOCHAT_BIN, world().base, {"--dtype", "int8", "-g", "d2"});
  ASSERT_GT(server.port(), 0) << server.log();
  for (int i = 0; i < 3000 && server.log().find("chat-web: loaded") == std::string::npos && !server.exited(); i++)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_NE(server.log().find("chat-web: loaded"), std::string::npos) << server.log();
}

TEST(InferenceDtype, BadValuesAndWidthsSayWhatInOneLine) {
  const std::string env = "NANOCHAT_BASE_DIR=" + world().base + " OMP_NUM_THREADS=1 " + NANOCHAT_BIN;
  CommandResult bad = run_shell(env + " generate -i sft -p hi --dtype int4 --device-type cpu");
  EXPECT_NE(bad.rc, 0);
  EXPECT_NE(bad.err.find("--dtype"), std::string::npos) << bad.err;
  // a 72-wide model: the int8 kernel takes widths in multiples of 16
  char tmpl[] = "/tmp/nanochat_server_XXXXXX";
  const std::string base = mkdtemp(tmpl);
  tokenizer_save(*world().tok, base + "/tokenizer");
  GPTConfig c = tiny_chat_config(world().tok->vocab_size());
  c.n_embd = 72;  // head dim 36
  GPT m(c);
  gpt_init_weights(m, 1);
  nlohmann::ordered_json meta = {{"step", 0}, {"model_config", gpt_config_to_json(c)}};
  setenv("NANOCHAT_BASE_DIR", base.c_str(), 1);
  checkpoint_save_model(checkpoint_dir("sft", "d2"), 0, gpt_named_parameters(m), meta);
  checkpoint_mark_complete(checkpoint_dir("sft", "d2"), 0, 0);
  setenv("NANOCHAT_BASE_DIR", world().base.c_str(), 1);
  CommandResult r = run_shell("NANOCHAT_BASE_DIR=" + base + " OMP_NUM_THREADS=1 " + NANOCHAT_BIN +
                              " generate -i sft -p hi --dtype int8 --device-type cpu");
  std::system(("rm -rf " + base).c_str());
  EXPECT_NE(r.rc, 0);
  const size_t at = r.err.find("72 input features");
  ASSERT_NE(at, std::string::npos) << r.err;
  const std::string line = r.err.substr(r.err.rfind('\n', at) + 1, r.err.find('\n', at) - r.err.rfind('\n', at) - 1);
  EXPECT_NE(line.find("transformer.h.0.attn.c_q.weight"), std::string::npos) << r.err;
  EXPECT_NE(line.find("--dtype bfloat16"), std::string::npos) << r.err;
}
