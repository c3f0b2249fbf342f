// The chat stages end to end through the binary, offline: a tiny base model (tok-train +
// base-train), a few SFT steps on fixture task data shaped like the hub datasets (placed in
// $NANOCHAT_BASE_DIR/task_data/ as `download tasks` leaves them), then chat-eval over all
// five tasks, which must print ChatCORE and write the results JSON; SFT's last-step evaluation
// with --eval-every -1.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <map>
#include <sstream>
#include <random>

#include <nlohmann/json.hpp>

#include "nanochat/common/files.h"
#include "nanochat/tasks.h"
#include "test_util.h"

using json = nlohmann::json;

namespace {

// tok-train and 5 steps of base-train (d2, tag d2) on a small word-salad corpus in `data`;
// `nc` runs the binary with the base dir set
void make_tiny_base_model(const std::string& data, const std::string& nc) {
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
  CommandResult tok = run_shell(nc + " tok-train --data " + data + " --vocab-size 290");
  ASSERT_EQ(tok.rc, 0) << tok.err;
  CommandResult bt = run_shell(nc + " base-train --data " + data +
                               " --depth 2 --head-dim 64 --window-pattern L --max-seq-len 64 --device-batch-size 4"
                               " --total-batch-size 256 --num-iterations 5 --eval-every -1 --sample-every -1"
                               " --core-metric-every -1 --tokenizer-threads 1 --model-tag d2");
  ASSERT_EQ(bt.rc, 0) << bt.out << bt.err;
}

// training lines of an SFT metrics.jsonl: step -> (loss_raw, debiased loss)
std::map<int, std::pair<double, double>> read_losses(const std::string& path) {
  std::map<int, std::pair<double, double>> out;
  std::istringstream in(read_file(path));
  for (std::string line; std::getline(in, line);) {
    json j = json::parse(line);
    if (j.contains("loss")) out[j["step"].get<int>()] = {j["loss_raw"].get<double>(), j["loss"].get<double>()};
  }
  return out;
}

// runs `cmd` in the background and sends `signal` once metrics.jsonl logs step `at`
CommandResult run_and_signal(const std::string& cmd, const std::string& metrics, int at, const char* signal) {
  return run_shell("(" + cmd + ") & pid=$!; for i in $(seq 1 1200); do grep -q '\"step\":" + std::to_string(at) +
                   ",' " + metrics + " 2>/dev/null && break; sleep 0.05; done; kill -" + signal +
                   " $pid; wait $pid; echo rc=$?");
}

}  // namespace

TEST(ChatPipeline, BaseThenSftThenChatEvalOnFixtures) {
  std::string dir = temp_dir(), base = dir + "/base";
  // 1. fixture task data into task_data/<repo>/<subset>/<split>/ with the manifest written last
  CommandResult fx = run_shell(std::string(NANOCHAT_PYTHON) +
                               " " NANOCHAT_SOURCE_DIR "/tests/fixtures/make_task_fixtures.py " + dir + "/src");
  ASSERT_EQ(fx.rc, 0) << fx.err;
  setenv("NANOCHAT_BASE_DIR", base.c_str(), 1);
  json files = json::parse(read_file(dir + "/src/files.json"));
  for (auto& [key, names] : files.items()) {
    size_t a = key.find('|'), b = key.rfind('|');
    std::string split_dir = nanochat::hub_split_dir(
        {key.substr(0, a), key.substr(a + 1, b - a - 1), key.substr(b + 1)});
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
  // 2. a tiny base model on a small text corpus (a report card from the start)
  const std::string nc = std::string("NANOCHAT_BASE_DIR=") + base + " " NANOCHAT_BIN;
  ASSERT_EQ(run_shell(nc + " report reset").rc, 0);
  EXPECT_NE(read_file(base + "/report/header.md").find("Run started: "), std::string::npos);
  ASSERT_NO_FATAL_FAILURE(make_tiny_base_model(dir + "/text", nc));
  // 3. SFT on the fixture mixture (SmolTalk + MMLU + GSM8K + identity)
  CommandResult sft = run_shell(nc +
                                " sft --num-iterations 3 --device-batch-size 2 --max-seq-len 256"
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

  // 5. RL on the fixture GSM8K (4 train problems: 2 per step, 2 steps), then chat-eval -i rl
  CommandResult rl = run_shell(nc +
                               " rl --examples-per-step 2 --num-samples 4 --device-batch-size 2"
                               " --max-new-tokens 12 --eval-every 1 --eval-examples 2 --save-every -1");
  ASSERT_EQ(rl.rc, 0) << rl.out << rl.err;
  EXPECT_NE(rl.out.find("Step 1/2 | Average reward: "), std::string::npos) << rl.out;
  EXPECT_NE(rl.out.find("Pass@2: "), std::string::npos) << rl.out;
  EXPECT_TRUE(nanochat::path_exists(base + "/chatrl_checkpoints/d2/done_000001"));
  int train_lines = 0;
  std::istringstream metrics(read_file(base + "/chatrl_checkpoints/d2/metrics.jsonl"));
  for (std::string line; std::getline(metrics, line);) {
    json j = json::parse(line);
    if (!j.contains("reward")) continue;
    train_lines++;
    EXPECT_GE(j["reward"].get<double>(), 0.0);
    EXPECT_LE(j["reward"].get<double>(), 1.0);
    EXPECT_GT(j["sequence_length"].get<double>(), 0.0);
  }
  EXPECT_EQ(train_lines, 2);
  CommandResult ev_rl = run_shell(nc + " chat-eval -i rl -a GSM8K -m 8");
  ASSERT_EQ(ev_rl.rc, 0) << ev_rl.out << ev_rl.err;
  EXPECT_TRUE(nanochat::path_exists(base + "/chat_eval/rl_d2_000001.json"));
  // 6. the report card: every stage's section, and the summary table from chat-eval's numbers
  CommandResult rep = run_shell("cd " + dir + " && " + nc + " report generate");
  ASSERT_EQ(rep.rc, 0) << rep.out << rep.err;
  std::string report = read_file(dir + "/report.md");
  // the copy: the report dir's text with its chart links pointing into the report dir
  std::string expected = read_file(base + "/report/report.md");
  for (size_t at = 0; (at = expected.find("](chart-", at)) != std::string::npos; at += 2)
    expected.insert(at + 2, base + "/report/");
  EXPECT_NE(expected.find("](" + base + "/report/chart-base-"), std::string::npos) << "no base-train chart linked";
  EXPECT_EQ(report, expected);
  for (const char* section : {"## Tokenizer training", "## Base model training", "## Chat SFT",
                              "## Chat evaluation sft", "## Chat RL", "## Chat evaluation rl", "## Summary"})
    EXPECT_NE(report.find(section), std::string::npos) << section << "\n" << report;
  char row[64];
  std::snprintf(row, sizeof row, "| ChatCORE        | -        | %-8.4f |", results["chatcore"].get<double>());
  EXPECT_NE(report.find(row), std::string::npos) << row << "\n" << report;
  CommandResult bad = run_shell(nc + " rl --num-samples 3 --device-batch-size 2");
  EXPECT_NE(bad.rc, 0);
  EXPECT_NE(bad.err.find("--num-samples 3 must be a multiple of --device-batch-size 2"), std::string::npos) << bad.err;
  // 7. RL over 2 Gloo ranks under `launch`: strided problems, rewards and pass@k all-reduced
  CommandResult rl2 = run_shell(
      std::string("NANOCHAT_BASE_DIR=") + base +
      " OMP_NUM_THREADS=1 " NANOCHAT_BIN
      " launch --nproc-per-node 2 -- rl --force --examples-per-step 2 --num-samples 2"
      " --device-batch-size 2 --max-new-tokens 8 --eval-every 1 --eval-examples 3 --save-every -1");
  ASSERT_EQ(rl2.rc, 0) << rl2.out << rl2.err;
  const std::string rl2_log = rl2.out + rl2.err;
  EXPECT_NE(rl2_log.find("(2 ranks)"), std::string::npos) << rl2_log;
  EXPECT_NE(rl2_log.find("Step 1/2 | Average reward: "), std::string::npos) << rl2_log;
}

// SFT resumes exactly (offline, on the spelling mixture, 2 micro-steps per step): a run
// killed with SIGKILL and resumed with --resume latest from its last --save-every checkpoint,
// and a run stopped with SIGTERM and resumed with the command it prints, log the very same
// losses as an uninterrupted run
TEST(ChatPipeline, SftKilledOrStoppedRunResumesWithTheSameLosses) {
  std::string dir = temp_dir(), base = dir + "/base", out = base + "/chatsft_checkpoints";
  const std::string nc = std::string("NANOCHAT_BASE_DIR=") + base + " " NANOCHAT_BIN;
  ASSERT_NO_FATAL_FAILURE(make_tiny_base_model(dir + "/text", nc));
  const std::string sft = nc +
                          " sft --mixture spelling --num-iterations 24 --device-batch-size 2 --max-seq-len 64"
                          " --total-batch-size 256 --eval-every -1 --eval-tokens 256 --save-every 4";
  CommandResult full = run_shell(sft);
  ASSERT_EQ(full.rc, 0) << full.out << full.err;
  auto reference = read_losses(out + "/d2/metrics.jsonl");
  ASSERT_EQ(reference.size(), 24u);
  run_shell("mv " + out + "/d2 " + out + "/full");
  auto expect_same_losses = [&](const std::string& what) {
    auto after = read_losses(out + "/d2/metrics.jsonl");
    ASSERT_EQ(after.size(), 24u) << what;
    for (auto& [step, loss] : reference) EXPECT_EQ(after[step], loss) << "step " << step << ", " << what;
    EXPECT_TRUE(nanochat::path_exists(out + "/d2/done_000024")) << what;
  };

  std::mt19937 rng(std::random_device{}());
  int kill_at = 9 + (int)(rng() % 12);
  CommandResult killed = run_and_signal(sft, out + "/d2/metrics.jsonl", kill_at, "9");
  ASSERT_NE(killed.out.find("rc="), std::string::npos);
  CommandResult resumed = run_shell(sft + " --resume latest");
  ASSERT_EQ(resumed.rc, 0) << resumed.out << resumed.err;
  EXPECT_NE(resumed.out.find("resuming from"), std::string::npos) << resumed.out;
  expect_same_losses("killed after step " + std::to_string(kill_at));
  run_shell("mv " + out + "/d2 " + out + "/killed");

  int stop_at = 3 + (int)(rng() % 12);
  CommandResult stopped = run_and_signal(sft, out + "/d2/metrics.jsonl", stop_at, "TERM");
  ASSERT_NE(stopped.out.find("rc=0"), std::string::npos) << stopped.out << stopped.err;
  const std::string all = stopped.out + stopped.err;
  size_t at = all.find("Resume with:\n  ");
  ASSERT_NE(at, std::string::npos) << all;
  std::string command = all.substr(at + 15, all.find('\n', at + 15) - (at + 15));
  EXPECT_NE(command.find(" --resume-from-step "), std::string::npos) << command;
  CommandResult again = run_shell("NANOCHAT_BASE_DIR=" + base + " " + command);
  ASSERT_EQ(again.rc, 0) << command << "\n" << again.out << again.err;
  expect_same_losses("stopped after step " + std::to_string(stop_at));
}

// `sft --eval-every -1` still measures the val bpb once, at the last step (upstream always
// evaluates there): in metrics.jsonl, in the final meta and in the report; and it is the number a
// run with evals on records at that step
TEST(SftFinalEval, EvalEveryMinusOneStillMeasuresTheLastStep) {
  const std::string dir = temp_dir(), base = dir + "/base", data = dir + "/text";
  const std::string nc = "NANOCHAT_BASE_DIR=" + base + " OMP_NUM_THREADS=1 " NANOCHAT_BIN;
  nanochat::make_dirs(data);
  std::mt19937 rng(11);
  const char* words[] = {"the", "cat", "sat", "on", "a", "mat", "and", "spelled", "every", "word"};
  std::ofstream corpus(data + "/part_0.jsonl"), val(data + "/part_1.jsonl");
  for (int d = 0; d < 300; d++) {
    std::string doc;
    for (int w = 0; w < 40; w++) doc += std::string(words[rng() % 10]) + " ";
    (d < 250 ? corpus : val) << nlohmann::json({{"text", doc}}).dump() << "\n";
  }
  corpus.close();
  val.close();
  CommandResult tok = run_shell(nc + " tok-train --data " + data + " --vocab-size 290");
  ASSERT_EQ(tok.rc, 0) << tok.err;
  CommandResult bt = run_shell(nc + " base-train --data " + data +
                               " --depth 2 --head-dim 64 --window-pattern L --max-seq-len 64 --device-batch-size 4"
                               " --total-batch-size 256 --num-iterations 3 --eval-every -1 --sample-every -1"
                               " --core-metric-every -1 --tokenizer-threads 1 --model-tag d2");
  ASSERT_EQ(bt.rc, 0) << bt.out << bt.err;

  const std::string sft = nc +
                          " sft --mixture spelling --num-iterations 3 --device-batch-size 2 --max-seq-len 64"
                          " --total-batch-size 128 --eval-tokens 512 --chatcore-every -1 --save-every -1";
  const std::string out = base + "/chatsft_checkpoints";
  auto val_bpb_lines = [&](const std::string& metrics) {
    std::map<int64_t, double> bpb;
    std::istringstream in(read_file(metrics));
    for (std::string line; std::getline(in, line);) {
      nlohmann::json j = nlohmann::json::parse(line);
      if (j.contains("val_bpb")) bpb[j["step"].get<int64_t>()] = j["val_bpb"].get<double>();
    }
    return bpb;
  };

  CommandResult off = run_shell(sft + " --eval-every -1");
  ASSERT_EQ(off.rc, 0) << off.out << off.err;
  std::map<int64_t, double> at_end = val_bpb_lines(out + "/d2/metrics.jsonl");
  ASSERT_EQ(at_end.size(), 1u);  // the last step only
  ASSERT_EQ(at_end.begin()->first, 3);
  const double final_bpb = at_end.begin()->second;
  EXPECT_TRUE(std::isfinite(final_bpb) && final_bpb > 0.5 && final_bpb < 20) << final_bpb;
  nlohmann::json meta = nlohmann::json::parse(read_file(out + "/d2/meta_000003.json"));
  EXPECT_EQ(meta["val_bpb"].get<double>(), final_bpb);
  EXPECT_NE(read_file(base + "/report/chat-sft.md").find("- Minimum validation bpb: "), std::string::npos);

  run_shell("mv " + out + "/d2 " + out + "/off");
  CommandResult on = run_shell(sft + " --eval-every 2");
  ASSERT_EQ(on.rc, 0) << on.out << on.err;
  std::map<int64_t, double> evals = val_bpb_lines(out + "/d2/metrics.jsonl");
  EXPECT_EQ(evals.size(), 3u);        // steps 0, 2 and the last, 3
  EXPECT_EQ(evals.at(3), final_bpb);  // the same run to that point, the same evaluation
}
