// The chat stages end to end through the binary, offline: a tiny base model (tok-train +
// base-train), a few SFT steps on fixture task data shaped like the hub datasets (placed in
// $NANOCHAT_BASE_DIR/task_data/ as `download tasks` leaves them), then chat-eval over all
// five tasks, which must print ChatCORE and write the results JSON.
#include <gtest/gtest.h>

#include <fstream>
#include <random>

#include <nlohmann/json.hpp>

#include "nanochat/common/files.h"
#include "nanochat/tasks.h"
#include "test_util.h"

using json = nlohmann::json;

TEST(ChatPipeline, BaseThenSftThenChatEvalOnFixtures) {
  std::string dir = temp_dir(), base = dir + "/base";
  // 1. fixture task data into task_data/<repo>/<subset>/<split>/ with the manifest written last
  CommandResult fx = run_shell(std::string(NANOCHAT_PYTHON) + " " NANOCHAT_SOURCE_DIR
                               "/tests/fixtures/make_task_fixtures.py " + dir + "/src");
  ASSERT_EQ(fx.rc, 0) << fx.err;
  setenv("NANOCHAT_BASE_DIR", base.c_str(), 1);
  json files = json::parse(read_file(dir + "/src/files.json"));
  for (auto& [key, names] : files.items()) {
    size_t a = key.find('|'), b = key.rfind('|');
    std::string split_dir = nanochat::hub_split_dir({key.substr(0, a), key.substr(a + 1, b - a - 1), key.substr(b + 1)});
    nanochat::make_dirs(split_dir);
    json manifest = json::array();
    for (size_t i = 0; i < names.size(); i++) {
      char name[32];
      std::snprintf(name, sizeof name, "%05zu.parquet", i);
      std::ofstream(split_dir + "/" + name, std::ios::binary) << read_file(dir + "/src/" + names[i].get<std::string>());
      manifest.push_back(name);
    }
    std::ofstream(split_dir + "/manifest.json") << manifest.dump();
  }
  // 2. a tiny base model on a small text corpus
  std::string data = dir + "/text";
  nanochat::make_dirs(data);
  std::mt19937 rng(5);
  const char* words[] = {"the", "answer", "is", "water", "plants", "sun", "a", "question", "which", "of", "B", "C"};
  for (int f = 0; f < 2; f++) {
    std::ofstream out(data + "/part_" + std::to_string(f) + ".jsonl");
    for (int d = 0; d < 200; d++) {
      std::string doc;
      for (int w = 0; w < 40; w++) doc += std::string(words[rng() % 12]) + " ";
      out << json({{"text", doc}}).dump() << "\n";
    }
  }
  const std::string nc = std::string("NANOCHAT_BASE_DIR=") + base + " " NANOCHAT_BIN;
  CommandResult tok = run_shell(nc + " tok-train --data " + data + " --vocab-size 290");
  ASSERT_EQ(tok.rc, 0) << tok.err;
  CommandResult bt = run_shell(nc + " base-train --data " + data +
                               " --depth 2 --head-dim 64 --window-pattern L --max-seq-len 64 --device-batch-size 4"
                               " --total-batch-size 256 --num-iterations 5 --eval-every -1 --sample-every -1"
                               " --core-metric-every -1 --tokenizer-threads 1 --model-tag d2");
  ASSERT_EQ(bt.rc, 0) << bt.out << bt.err;
  // 3. SFT on the fixture mixture (SmolTalk + MMLU + GSM8K + identity)
  CommandResult sft = run_shell(nc + " sft --num-iterations 3 --device-batch-size 2 --max-seq-len 256"
                                " --total-batch-size 512 --eval-every 3 --eval-tokens 512 --chatcore-every -1");
  ASSERT_EQ(sft.rc, 0) << sft.out << sft.err;
  EXPECT_NE(sft.out.find("Validation bpb"), std::string::npos) << sft.out;
  EXPECT_TRUE(nanochat::path_exists(base + "/chatsft_checkpoints/d2/done_000003"));
  // 4. chat-eval over all five tasks
  CommandResult ev = run_shell(nc + " chat-eval -i sft -m 8 -b 3");
  ASSERT_EQ(ev.rc, 0) << ev.out << ev.err;
  EXPECT_NE(ev.out.find("ChatCORE:"), std::string::npos) << ev.out;
  json results = json::parse(read_file(base + "/chat_eval/sft_d2_000003.json"));
  ASSERT_EQ(results["tasks"].size(), 5u);
  for (const auto& t : results["tasks"]) {
    std::string name = t["name"];
    EXPECT_EQ(t["total"].get<int64_t>(), nanochat::task_for_eval(name)->size()) << name;
    EXPECT_GE(t["accuracy"].get<double>(), 0.0);
    EXPECT_LE(t["accuracy"].get<double>(), 1.0);
    double baseline = name == "GSM8K" || name == "HumanEval" ? 0.0 : 0.25;
    EXPECT_NEAR(t["centered"].get<double>(), (t["accuracy"].get<double>() - baseline) / (1 - baseline), 1e-12);
  }
  double mean = 0;
  for (const auto& t : results["tasks"]) mean += t["centered"].get<double>() / 5;
  EXPECT_NEAR(results["chatcore"].get<double>(), mean, 1e-12);
}
