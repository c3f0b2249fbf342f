// The leaderboard's "time to GPT-2" (dev/LEADERBOARD.md upstream): the pure computation on hand
// values, the metrics file it reads, the report summary's line, and base-train end to end on a
// tiny model whose CORE (on the fixture bundle) stays far below GPT-2, with the CPU's step-line
// MFU checked against the measured peak it logs.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <random>
#include <regex>

#include <nlohmann/json.hpp>

#include "nanochat/core_eval/leaderboard.h"
#include "nanochat/report.h"
#include "test_util.h"

using namespace nanochat;

TEST(TimeToGpt2, FirstEvaluationAboveTheBarWins) {
  // CORE at steps 1000..4000: 0.20, 0.2566 (the first above 0.256525), 0.25 (a dip), 0.27
  TimeToGpt2 t = leaderboard_time_to_gpt2(
      {{3000, 7200.0, 0.25}, {1000, 2400.0, 0.20}, {2000, 4800.5, 0.2566}, {4000, 9600.0, 0.27}});
  EXPECT_TRUE(t.evaluated);
  EXPECT_TRUE(t.reached);
  EXPECT_EQ(t.step, 2000);
  EXPECT_DOUBLE_EQ(t.seconds, 4800.5);
  EXPECT_DOUBLE_EQ(t.core, 0.2566);
  // 4800.5 s = 1.33 h
  EXPECT_EQ(leaderboard_line(t), "1.33h (4800.5s) at step 2000, CORE 0.2566 > 0.256525");
  nlohmann::json rec = leaderboard_metrics_record(t, 5000);
  EXPECT_EQ(rec["step"], 5000);
  EXPECT_DOUBLE_EQ(rec["time_to_gpt2"].get<double>(), 4800.5);
  EXPECT_EQ(rec["time_to_gpt2_step"], 2000);
  EXPECT_NEAR(rec["gpt2_core_gap"].get<double>(), 0.256525 - 0.2566, 1e-12);
}

TEST(TimeToGpt2, EqualIsNotBeatingAndTheLastPointSaysHowFarBelow) {
  // exactly GPT-2's score does not count; the run ended at 0.21 (step 3000), 0.046525 below
  TimeToGpt2 t = leaderboard_time_to_gpt2({{1000, 100.0, 0.256525}, {3000, 300.0, 0.21}, {2000, 200.0, 0.22}});
  EXPECT_TRUE(t.evaluated);
  EXPECT_FALSE(t.reached);
  EXPECT_EQ(t.step, 3000);
  EXPECT_NEAR(t.gap, 0.046525, 1e-12);
  EXPECT_EQ(leaderboard_line(t), "not reached, final CORE 0.2100 at step 3000 is 0.0465 below 0.256525");
  nlohmann::json rec = leaderboard_metrics_record(t, 3000);
  EXPECT_FALSE(rec.contains("time_to_gpt2"));
  EXPECT_NEAR(rec["gpt2_core_gap"].get<double>(), 0.046525, 1e-12);
  // a step evaluated twice (a resumed run): the later line counts
  EXPECT_TRUE(leaderboard_time_to_gpt2({{1000, 10.0, 0.1}, {1000, 12.0, 0.3}}).reached);
  EXPECT_FALSE(leaderboard_time_to_gpt2({}).evaluated);
  EXPECT_EQ(leaderboard_line(leaderboard_time_to_gpt2({})), "unknown (no CORE evaluation)");
}

TEST(TimeToGpt2, ReadsTheCoreLinesOfAMetricsFile) {
  const std::string path = temp_dir() + "/metrics.jsonl";
  std::ofstream(path) << R"({"step": 0, "loss": 5.0, "total_training_time": 0})"
                         "\n"
                      << R"({"step": 0, "core_metric": 0.01})"
                         "\n"  // before the time was recorded: left out
                      << R"({"step": 100, "core_metric": 0.3, "total_training_time": 42.5, "core/x": 1})"
                         "\n"
                      << "\n"
                      << R"({"step": 100, "val_bpb": 1.1, "total_training_time": 42.5})"
                         "\n";
  std::vector<CorePoint> pts = leaderboard_core_points(path);
  ASSERT_EQ(pts.size(), 1u);
  EXPECT_EQ(pts[0].step, 100);
  EXPECT_DOUBLE_EQ(pts[0].seconds, 42.5);
  EXPECT_DOUBLE_EQ(pts[0].core, 0.3);
}

TEST(TimeToGpt2, ReportSummaryCarriesTheLine) {
  std::vector<std::pair<std::string, std::string>> sections = {
      {"base-model-training.md",
       "## Base model training\ntimestamp: 2026-01-01 10:50:00\n\n"
       "- Time to GPT-2: 2.91h (10493.0s) at step 14889, CORE 0.2578 > 0.256525\n"}};
  const std::string s = report_format_summary("", sections);
  EXPECT_NE(s.find("\nTime to GPT-2: 2.91h (10493.0s) at step 14889, CORE 0.2578 > 0.256525\n"), std::string::npos)
      << s;
  EXPECT_EQ(report_format_summary("", {}).find("Time to GPT-2"), std::string::npos);
}

// base-train on CPU with CORE on the fixture bundle: a 20-step d2 cannot reach GPT-2, so the
// run records how far below it ended, in metrics.jsonl, the log and the report section; and
// its step lines' MFU is 100 * FLOPs/token * tok/s over the CPU peak it measured and logged
TEST(TimeToGpt2, BaseTrainRecordsItAndCpuMfuUsesTheMeasuredPeak) {
  const std::string base = temp_dir(), data = base + "/data";
  run_shell("mkdir -p " + data);
  std::mt19937 rng(7);
  const char* words[] = {"the", "cat", "sees", "a", "red", "ball", "and", "runs", "home", "today"};
  for (int f = 0; f < 2; f++) {
    std::ofstream out(data + "/part_" + std::to_string(f) + ".jsonl");
    for (int d = 0; d < 200; d++) {
      std::string doc;
      for (int w = 0; w < 40; w++) doc += std::string(w ? " " : "") + words[rng() % 10];
      out << nlohmann::json({{"text", doc + "."}}).dump() << "\n";
    }
  }
  const std::string env = "NANOCHAT_BASE_DIR=" + base + " OMP_NUM_THREADS=1 ";
  CommandResult r = run_shell(env + NANOCHAT_BIN " tok-train --data " + data + " --vocab-size 300");
  ASSERT_EQ(r.rc, 0) << r.err;
  r = run_shell(env + NANOCHAT_BIN " base-train --data " + data +
                " --depth 2 --aspect-ratio 64 --head-dim 64 --window-pattern L --max-seq-len 32 --device-batch-size 4"
                " --total-batch-size 128 --num-iterations 20 --eval-every -1 --sample-every -1 --tokenizer-threads 1"
                " --core-metric-every 10 --core-metric-max-per-task 4 --eval-bundle " NANOCHAT_FIXTURES
                "/core_bundle/eval_bundle --model-tag t");
  ASSERT_EQ(r.rc, 0) << r.out << r.err;

  // CORE at steps 10 and 20; the record at the end, the gap from the last CORE
  double last_core = NAN, gap = NAN;
  int core_lines = 0;
  double flops_per_token = 0;
  std::vector<std::pair<double, double>> tps_mfu;
  std::istringstream in(read_file(base + "/base_checkpoints/t/metrics.jsonl"));
  for (std::string line; std::getline(in, line);) {
    auto j = nlohmann::json::parse(line);
    if (j.contains("core_metric")) {
      core_lines++;
      last_core = j["core_metric"];
      EXPECT_TRUE(j.contains("total_training_time"));
    }
    if (j.contains("gpt2_core_gap")) {
      gap = j["gpt2_core_gap"];
      EXPECT_FALSE(j.contains("time_to_gpt2"));
    }
    if (j.contains("mfu")) {
      // total_training_flops after step s = FLOPs/token x 128 tokens x (s + 1)
      flops_per_token = j["total_training_flops"].get<double>() / (128.0 * (j["step"].get<double>() + 1));
      tps_mfu.emplace_back(j["tok_per_sec"].get<double>(), j["mfu"].get<double>());
    }
  }
  EXPECT_EQ(core_lines, 2);
  EXPECT_NEAR(gap, 0.256525 - last_core, 1e-12);
  EXPECT_NE(r.out.find("time to GPT-2: not reached, final CORE"), std::string::npos) << r.out;
  const std::string section = read_file(base + "/report/base-model-training.md");
  EXPECT_NE(section.find("- Time to GPT-2: not reached, final CORE"), std::string::npos) << section;

  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.out, m, std::regex("MFU vs measured CPU peak ([0-9.]+) GFLOP/s"))) << r.out;
  const double peak = std::stod(m[1]) * 1e9;
  EXPECT_GT(peak, 0);
  ASSERT_EQ(tps_mfu.size(), 20u);
  for (const auto& [tps, mfu] : tps_mfu) {
    EXPECT_GT(mfu, 0);
    // the logged peak is rounded to 0.1 GFLOP/s
    EXPECT_NEAR(mfu, 100.0 * flops_per_token * tps / peak, 100.0 * flops_per_token * tps / peak * (0.06e9 / peak));
  }
}
