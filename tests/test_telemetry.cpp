// Tests of the telemetry module: the metrics log's lines and its resume, TensorBoard event files
// (CRC-32C check values, TFRecord framing, the events read back by the tensorboard package's own
// readers), the peak-FLOPS table (upstream's get_peak_flops), the CPU's two probes and MFU's label.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "nanochat/telemetry.h"
#include "test_util.h"

using namespace nanochat;

TEST(MetricsLog, WritesLinesAndResumeDropsLaterSteps) {
  std::string path = make_temp_dir() + "/run/metrics.jsonl";
  {
    MetricsLog log(path, -1);
    for (int step = 0; step < 4; step++) log.log({{"step", step}, {"loss", 10.0 - step}});
  }
  { std::ofstream(path, std::ios::app) << "{\"step\": 4, \"lo"; }  // torn by a crash
  EXPECT_EQ(count_lines(read_file(path)), 5);                      // 4 whole lines and the torn one
  {
    MetricsLog resumed(path, 2);  // resume from the checkpoint of step 2
    resumed.log({{"step", 2}, {"loss", 8.5}});
  }
  std::istringstream in(read_file(path));
  std::vector<int> steps;
  std::vector<double> losses;
  for (std::string line; std::getline(in, line);) {
    auto j = nlohmann::json::parse(line);
    steps.push_back(j["step"]);
    losses.push_back(j["loss"]);
  }
  EXPECT_EQ(steps, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(losses, (std::vector<double>{10.0, 9.0, 8.5}));
  // a fresh run (no resume) starts the file over
  { MetricsLog fresh(path, -1); }
  EXPECT_EQ(read_file(path), "");
}

// each entry against the vendor's datasheet: NVIDIA prints the tensor-core rate with 2:4 sparsity
// beside (or instead of) the dense one, so the dense rate is the sparse figure / 2; upstream's table
// rounds to three or four significant figures, hence 0.1%
TEST(PeakFlops, TableMatchesTheDatasheets) {
  struct Published {
    const char* name;
    double figure;    // FLOP/s as printed, bf16 tensor core
    double sparsity;  // 2 where the printed figure is "with sparsity"
  };
  const Published published[] = {
      {"NVIDIA H100 80GB HBM3", 1979e12, 2},     // H100 datasheet, SXM column
      {"NVIDIA H100 PCIe", 1513e12, 2},          // H100 datasheet, PCIe column
      {"NVIDIA H100 NVL", 1671e12, 2},           // H100 datasheet, NVL column
      {"NVIDIA H200", 1979e12, 2},               // H200 datasheet, SXM column
      {"NVIDIA H200 NVL", 1671e12, 2},           // H200 datasheet, NVL column
      {"NVIDIA A100-SXM4-80GB", 312e12, 1},      // A100 datasheet, dense
      {"NVIDIA L40S", 362.05e12, 1},             // L40S datasheet, dense
      {"NVIDIA L4", 242e12, 2},                  // L4 datasheet
      {"NVIDIA GeForce RTX 4090", 330.4e12, 2},  // Ada whitepaper, bf16 with fp32 accumulate
  };
  for (const Published& p : published) {
    const double dense = p.figure / p.sparsity;
    EXPECT_NEAR(peak_flops(p.name), dense, 1e-3 * dense) << p.name;
  }
  // Intel's Max 1550: 512 bf16 FLOP per clock per Xe core at upstream's 1300 MHz, from the device's own count
  EXPECT_EQ(peak_flops("Intel(R) Data Center GPU Max 1550", 1024), 512.0 * 1024 * 1300e6);
  EXPECT_EQ(peak_flops("some cpu"), std::numeric_limits<double>::infinity());
  // memory bandwidth as the datasheets print it (TB/s)
  EXPECT_EQ(peak_bandwidth("NVIDIA H100 80GB HBM3"), 3.35e12);
  EXPECT_EQ(peak_bandwidth("NVIDIA H100 NVL"), 3.9e12);
  EXPECT_EQ(peak_bandwidth("NVIDIA H200"), 4.8e12);
}

// the probes against what this machine's cores can do at most: every logical CPU at 6.2 GHz (the
// fastest x86 boost clock shipped) retiring two fp32 FMAs of its widest vector per cycle (AVX-512:
// 2 x 16 x 2 = 64 FLOP; AVX2: 32; SSE: 16), and moving at most 192 bytes per cycle (two 64-byte
// loads and one store, L1's ports); and at least what one core at 1 GHz does with one FLOP and
// one byte per cycle, which any x86-64 core shared with other jobs still clears
TEST(MeasuredPeaks, CpuProbesAreWithinWhatTheCoresCanDo) {
  const double cpus = std::thread::hardware_concurrency(), clock_max = 6.2e9, clock_min = 1e9;
  __builtin_cpu_init();
  const double flop_per_cycle = __builtin_cpu_supports("avx512f")                                   ? 64
                                : (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) ? 32
                                                                                                    : 16;
  const double flops = peak_flops_measure_cpu(torch::kFloat, 0.1);
  EXPECT_GT(flops, clock_min * 1);
  EXPECT_LT(flops, cpus * clock_max * flop_per_cycle);
  const double bw = peak_bandwidth_measure_cpu(0.05);
  EXPECT_GT(bw, clock_min * 1);
  EXPECT_LT(bw, cpus * clock_max * 192);
  EXPECT_GT(peak_flops_measure_cpu(torch::kBFloat16, 0.1), 0.0);  // the run's dtype, whatever it is
}

TEST(PeakFlops, MfuLabelNamesTheDtypeOfThePeak) {
  EXPECT_EQ(mfu_label_for(c10::Device(c10::kCUDA, 0), torch::kBFloat16), "bf16_mfu");  // upstream's label
  EXPECT_EQ(mfu_label_for(c10::Device(c10::kCUDA, 0), torch::kFloat), "bf16_mfu");     // the table's peak is bf16
  EXPECT_EQ(mfu_label_for(c10::Device(c10::kCPU), torch::kFloat), "fp32_mfu");         // measured in the run's dtype
  EXPECT_EQ(mfu_label_for(c10::Device(c10::kCPU), torch::kBFloat16), "bf16_mfu");
  EXPECT_EQ(mfu_label_for(c10::Device(c10::kCPU), torch::kHalf), "fp16_mfu");
}

// ==== TensorBoard event files: CRC-32C, TFRecord framing, and MetricsLog's events
// read back by the tensorboard package's own readers ===========================================
TEST(TensorBoard, Crc32cKnownVectors) {
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);  // the CRC-32C check value
  EXPECT_EQ(crc32c("", 0), 0x00000000u);
  const std::string zeros(32, '\0'), ones(32, '\xff');  // RFC 3720 B.4
  EXPECT_EQ(crc32c(zeros.data(), zeros.size()), 0x8A9136AAu);
  EXPECT_EQ(crc32c(ones.data(), ones.size()), 0x62A8AB43u);
  // the mask: rotate right by 15, add 0xa282ead8 (mod 2^32)
  EXPECT_EQ(tfrecord_masked_crc(0xE3069283u), ((0xE3069283u >> 15) | (0xE3069283u << 17)) + 0xa282ead8u);
  EXPECT_EQ(tfrecord_masked_crc(0), 0xa282ead8u);
}

TEST(TensorBoard, RecordFrameIsLengthCrcDataCrc) {
  const std::string frame = tfrecord_frame("abc");
  ASSERT_EQ(frame.size(), 8u + 4 + 3 + 4);
  EXPECT_EQ(frame.substr(0, 8), std::string("\x03\0\0\0\0\0\0\0", 8));
  auto u32_at = [&](size_t at) {
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) v |= (uint32_t)(uint8_t)frame[at + i] << (8 * i);
    return v;
  };
  EXPECT_EQ(u32_at(8), tfrecord_masked_crc(crc32c(frame.data(), 8)));
  EXPECT_EQ(frame.substr(12, 3), "abc");
  EXPECT_EQ(u32_at(15), tfrecord_masked_crc(crc32c("abc", 3)));
}

TEST(TensorBoard, MetricsLogScalarsReadBackByTensorBoard) {
  if (run_shell(std::string(NANOCHAT_PYTHON) + " -c 'import tensorboard'").rc != 0)
    GTEST_SKIP() << "the tensorboard package is not installed (runs/requirements.txt)";
  const std::string dir = make_temp_dir() + "/run";
  auto train_line = [](int step, double loss) {
    return nlohmann::json{{"step", step},
                          {"loss", loss},
                          {"lrm", 1.0 - 0.1 * step},
                          {"tok_per_sec", 123456.7 + step},
                          {"mfu", 0.0123 * step},
                          {"epoch", 1},
                          {"data_wait", 1e-4 * step},
                          {"total_training_flops", 3.1e15 * (step + 1)},
                          {"note", "not a number"},
                          {"bad", NAN}};
  };
  int first_records = 0, second_records = 0;
  {
    MetricsLog log(dir + "/metrics.jsonl", -1);
    EXPECT_NE(log.tensorboard_path().find("/events.out.tfevents."), std::string::npos);
    for (int step = 0; step < 6; step++) {
      log.log(train_line(step, 10.0 / (step + 1)));
      first_records++;
      if (step % 3 == 0) {
        log.log({{"step", step}, {"val_bpb", 2.5 - 0.01 * step}, {"core/hellaswag zeroshot", 0.25 + step * 1e-3}});
        first_records++;
      }
    }
  }
  {
    MetricsLog resumed(dir + "/metrics.jsonl", 4);  // resumed from step 4: steps 4 and 5 again
    for (int step = 4; step < 7; step++) {
      resumed.log(train_line(step, 3.0 - 0.2 * step));
      second_records++;
    }
  }
  const CommandResult r = run_shell(std::string(NANOCHAT_PYTHON) + " " + NANOCHAT_SOURCE_DIR +
                                    "/tests/fixtures/tensorboard_scalars.py " + dir);
  ASSERT_EQ(r.rc, 0) << r.err;
  const nlohmann::json got = nlohmann::json::parse(r.out);

  // the raw records: every one read (the reader stops at a bad CRC), in order
  ASSERT_EQ(got["files"].size(), 2u) << r.out;
  const nlohmann::json first = got["files"].begin().value(), second = std::next(got["files"].begin()).value();
  ASSERT_EQ(first.size(), 1u + first_records);
  ASSERT_EQ(second.size(), 2u + second_records);
  EXPECT_EQ(first[0]["what"], "file_version");
  EXPECT_EQ(first[0]["file_version"], "brain.Event:2");
  EXPECT_EQ(second[1]["what"], "session_log");
  EXPECT_EQ(second[1]["status"], 1);  // START
  EXPECT_EQ(second[1]["step"], 4);
  EXPECT_GT(first[1]["wall_time"].get<double>(), 1.7e9);  // seconds since 1970, now-ish

  // what TensorBoard plots equals metrics.jsonl: every finite number but "step", as float32
  std::map<std::string, std::vector<std::pair<int64_t, double>>> expected;
  std::istringstream in(read_file(dir + "/metrics.jsonl"));
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json j = nlohmann::json::parse(line);
    for (const auto& [key, value] : j.items())
      if (key != "step" && value.is_number())
        expected[key].emplace_back(j["step"].get<int64_t>(), (double)value.get<float>());
  }
  std::map<std::string, std::vector<std::pair<int64_t, double>>> plotted;
  for (const auto& [tag, points] : got["scalars"].items())
    for (const auto& p : points) plotted[tag].emplace_back(p[0].get<int64_t>(), p[1].get<double>());
  EXPECT_EQ(plotted.size(), 9u);  // 7 training scalars, val_bpb, the CORE task
  EXPECT_EQ(plotted, expected);
  EXPECT_EQ(plotted["loss"].size(), 7u);  // steps 0..3 of the first run, 4..6 of the resumed one
  EXPECT_EQ(plotted.count("bad"), 0u);
  EXPECT_EQ(plotted.count("note"), 0u);

  // a fresh run in the same directory starts over, as metrics.jsonl does: one file, one event
  {
    MetricsLog fresh(dir + "/metrics.jsonl", -1);
    fresh.log({{"step", 0}, {"loss", 7.0}});
  }
  const CommandResult again = run_shell(std::string(NANOCHAT_PYTHON) + " " + NANOCHAT_SOURCE_DIR +
                                        "/tests/fixtures/tensorboard_scalars.py " + dir);
  ASSERT_EQ(again.rc, 0) << again.err;
  const nlohmann::json fresh = nlohmann::json::parse(again.out);
  EXPECT_EQ(fresh["files"].size(), 1u);
  EXPECT_EQ(fresh["scalars"], nlohmann::json::parse(R"({"loss": [[0, 7.0]]})"));
}
