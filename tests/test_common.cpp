// common: atomic writer, environment parsing, thread pool, progress, base dir, dtype policy
#include <gtest/gtest.h>
#include <csignal>
#include <numeric>
#include <fstream>
#include <sstream>
#include <sys/wait.h>
#include <unistd.h>

#include "nanochat/common.h"
#include "nanochat/common/metrics_log.h"
#include "nanochat/common/stop_signal.h"
#include "test_util.h"

using namespace nanochat;

TEST(AtomicFile, CommitReplacesTheOldContent) {
  std::string dir = make_temp_dir(), path = dir + "/sub/file.txt";
  atomic_write_file(path, "old");
  atomic_write_file(path, "new content");
  EXPECT_EQ(read_file(path), "new content");
  EXPECT_EQ(run_shell("ls -A " + dir + "/sub").out, "file.txt\n");  // no temp file left
  remove_tree(dir);
}

TEST(AtomicFile, ExceptionBeforeCommitKeepsTheOldFileAndRemovesTheTemp) {
  std::string dir = make_temp_dir(), path = dir + "/f";
  atomic_write_file(path, "old");
  std::string temp;
  try {
    AtomicFile f(path);
    temp = f.temp_path();
    f.write("partial");
    throw std::runtime_error("interrupted");
  } catch (const std::runtime_error&) {
  }
  EXPECT_EQ(read_file(path), "old");
  EXPECT_FALSE(path_exists(temp));
  remove_tree(dir);
}

TEST(AtomicFile, KilledWriterLeavesTheOldFileIntact) {
  std::string dir = make_temp_dir(), path = dir + "/f";
  atomic_write_file(path, "old");
  pid_t pid = fork();
  if (pid == 0) {  // child: write 8 MB, then die by SIGKILL before commit
    AtomicFile f(path);
    std::string chunk(1 << 20, 'x');
    for (int i = 0; i < 8; i++) f.write(chunk);
    raise(SIGKILL);
    _exit(0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFSIGNALED(status));
  EXPECT_EQ(read_file(path), "old");
  // the orphaned temp file is visible, sized as written, and separate from the target
  EXPECT_TRUE(path_exists(path + ".tmp." + std::to_string(pid)));
  remove_tree(dir);
}

TEST(AtomicFile, UnwritableDirectoryIsAnError) {
  EXPECT_THROW(AtomicFile("/proc/nanochat_cannot_write_here/f"), Error);
}

TEST(Files, ParentDir) {
  EXPECT_EQ(parent_dir("a/b/c"), "a/b");
  EXPECT_EQ(parent_dir("/a/b/"), "/a");
  EXPECT_EQ(parent_dir("/a"), "/");
  EXPECT_EQ(parent_dir("c"), ".");
  EXPECT_EQ(parent_dir("a//b"), "a");
}

TEST(Files, MakeDirsAndRemoveTree) {
  std::string dir = make_temp_dir();
  make_dirs(dir + "/x/y/z");
  EXPECT_TRUE(is_directory(dir + "/x/y/z"));
  atomic_write_file(dir + "/x/y/file", "data");
  EXPECT_THROW(make_dirs(dir + "/x/y/file/sub"), Error);  // a file is in the way
  remove_tree(dir);
  EXPECT_FALSE(path_exists(dir));
  remove_tree(dir);  // already gone: fine
}

TEST(Env, ParseIntAcceptsIntegersInRange) {
  EXPECT_EQ(parse_int("42", "x", 0, 100), 42);
  EXPECT_EQ(parse_int("-3", "x", -5, 5), -3);
}

TEST(Env, ParseIntRejectsJunkAndOutOfRangeWithTheName) {
  for (const char* bad : {"", "abc", "12x", " 1", "1.5", "99999999999999999999"}) {
    try {
      parse_int(bad, "RANK", 0, 100);
      FAIL() << "accepted '" << bad << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("RANK"), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(parse_int("101", "x", 0, 100), Error);
  EXPECT_THROW(parse_int("-1", "x", 0, 100), Error);
}

TEST(Env, Flags) {
  setenv("NANOCHAT_TEST_FLAG", "yes", 1);
  EXPECT_TRUE(env_flag("NANOCHAT_TEST_FLAG"));
  setenv("NANOCHAT_TEST_FLAG", "0", 1);
  EXPECT_FALSE(env_flag("NANOCHAT_TEST_FLAG"));
  setenv("NANOCHAT_TEST_FLAG", "maybe", 1);
  EXPECT_THROW(env_flag("NANOCHAT_TEST_FLAG"), Error);
  unsetenv("NANOCHAT_TEST_FLAG");
  EXPECT_FALSE(env_flag("NANOCHAT_TEST_FLAG"));
}

TEST(Env, EnvIntNamesTheVariable) {
  setenv("NANOCHAT_TEST_INT", "7", 1);
  EXPECT_EQ(env_int("NANOCHAT_TEST_INT", 0, 10).value(), 7);
  setenv("NANOCHAT_TEST_INT", "seven", 1);
  try {
    env_int("NANOCHAT_TEST_INT", 0, 10);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "environment variable NANOCHAT_TEST_INT='seven' is not an integer");
  }
  unsetenv("NANOCHAT_TEST_INT");
  EXPECT_FALSE(env_int("NANOCHAT_TEST_INT", 0, 10).has_value());
}

TEST(BaseDir, FromEnvironmentCreatedOnDemand) {
  std::string dir = make_temp_dir() + "/a/b";
  setenv("NANOCHAT_BASE_DIR", dir.c_str(), 1);
  EXPECT_EQ(base_dir(), dir);
  EXPECT_TRUE(is_directory(dir));
  EXPECT_GT(free_disk_bytes(dir), 0);
  setenv("NANOCHAT_BASE_DIR", "/proc/nanochat_nope", 1);
  EXPECT_THROW(base_dir(), Error);
  unsetenv("NANOCHAT_BASE_DIR");
  setenv("HOME", "/tmp/nanochat_home_test", 1);
  EXPECT_EQ(base_dir(), "/tmp/nanochat_home_test/.cache/nanochat");
  remove_tree("/tmp/nanochat_home_test");
}

TEST(ThreadPool, ParallelForCoversEveryIndexOnce) {
  ThreadPool pool(3);
  for (int64_t n : {0, 1, 2, 3, 10, 1001}) {
    std::vector<std::atomic<int>> hits(n);
    pool.parallel_for(n, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; i++) hits[i]++;
    });
    for (int64_t i = 0; i < n; i++) EXPECT_EQ(hits[i].load(), 1) << "n=" << n << " i=" << i;
  }
}

TEST(ThreadPool, SubmitReturnsValuesAndExceptions) {
  ThreadPool pool(2);
  std::vector<std::future<int64_t>> parts;
  for (int64_t k = 0; k < 100; k++) parts.push_back(pool.submit([k] { return k * k; }));
  int64_t sum = 0;
  for (auto& p : parts) sum += p.get();
  EXPECT_EQ(sum, 99 * 100 * 199 / 6);  // sum of squares 0..99
  auto bad = pool.submit([]() -> int { throw Error("boom"); });
  EXPECT_THROW(bad.get(), Error);
  EXPECT_THROW(pool.parallel_for(10, [](int64_t b, int64_t) { if (b == 0) throw Error("x"); }), Error);
}

TEST(Progress, FormatDuration) {
  EXPECT_EQ(format_duration(12.34), "12.3s");
  EXPECT_EQ(format_duration(187), "3m07s");
  EXPECT_EQ(format_duration(3720), "1h02m");
}

TEST(Progress, FormatCount) {
  EXPECT_EQ(format_count(950), "950");
  EXPECT_EQ(format_count(12.5), "12.5");
  EXPECT_EQ(format_count(250000), "250.0k");
  EXPECT_EQ(format_count(3.2e6), "3.20M");
  EXPECT_EQ(format_count(2e9), "2.00G");
}

TEST(Progress, LineShowsCountPercentRateAndEta) {
  Progress p("tokenizing", 1000, "docs", 1e9);
  p.set(250);
  std::string line = p.line();
  EXPECT_NE(line.find("tokenizing  250/1000 docs   25.0%"), std::string::npos) << line;
  EXPECT_NE(line.find("docs/s"), std::string::npos) << line;
  EXPECT_NE(line.find("ETA"), std::string::npos) << line;
}

TEST(Device, DtypePolicy) {
  unsetenv("NANOCHAT_DTYPE");
  EXPECT_EQ(compute_dtype_detect("cpu"), torch::kFloat32);  // upstream's COMPUTE_DTYPE: no CUDA -> fp32
  setenv("NANOCHAT_DTYPE", "bfloat16", 1);
  EXPECT_EQ(compute_dtype_detect("cpu"), torch::kBFloat16);
  setenv("NANOCHAT_DTYPE", "float16", 1);
  EXPECT_EQ(compute_dtype_detect("cpu"), torch::kFloat16);
  setenv("NANOCHAT_DTYPE", "fp8", 1);
  EXPECT_THROW(compute_dtype_detect("cpu"), Error);
  unsetenv("NANOCHAT_DTYPE");
}

TEST(Device, AutodetectAndOverride) {
  EXPECT_EQ(device_autodetect("cpu"), "cpu");
  EXPECT_THROW(device_autodetect("tpu"), Error);
  if (!torch::cuda::is_available()) {
    EXPECT_EQ(device_autodetect(""), "cpu");
    EXPECT_THROW(device_autodetect("cuda"), Error);
  }
}

TEST(Device, ThreadsFromCoresAndOmpNumThreads) {
  setenv("OMP_NUM_THREADS", "1", 1);
  EXPECT_EQ(cpu_threads_setup(1), 1);
  EXPECT_EQ(at::get_num_threads(), 1);
  unsetenv("OMP_NUM_THREADS");
  int cores = default_thread_count();
  EXPECT_EQ(cpu_threads_setup(1), cores);
  EXPECT_EQ(cpu_threads_setup(cores * 2), 1);  // more ranks than cores: one each
}

TEST(MetricsLog, WritesLinesAndResumeDropsLaterSteps) {
  std::string path = make_temp_dir() + "/run/metrics.jsonl";
  {
    MetricsLog log(path, -1);
    for (int step = 0; step < 4; step++) log.log({{"step", step}, {"loss", 10.0 - step}});
  }
  { std::ofstream(path, std::ios::app) << "{\"step\": 4, \"lo"; }  // torn by a crash
  EXPECT_EQ(count_lines(read_file(path)), 5);  // 4 whole lines and the torn one
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

TEST(StopSignal, FirstSignalSetsFlagSecondKills) {
  stop_signal_install();
  EXPECT_EQ(stop_signal_received(), 0);
  std::raise(SIGTERM);
  EXPECT_EQ(stop_signal_received(), SIGTERM);
  // the handler restored the default action: a forked child dies of the second one
  pid_t pid = fork();
  if (pid == 0) {
    std::raise(SIGTERM);
    _exit(0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM);
  std::signal(SIGINT, SIG_DFL);
}

// ==== TensorBoard event files (issue 19): CRC-32C, TFRecord framing, and MetricsLog's events
// read back by the tensorboard package's own readers ===========================================
#include <cmath>

#include "nanochat/common/tensorboard_writer.h"

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
    return nlohmann::json{{"step", step},           {"loss", loss},          {"lrm", 1.0 - 0.1 * step},
                          {"tok_per_sec", 123456.7 + step}, {"mfu", 0.0123 * step}, {"epoch", 1},
                          {"data_wait", 1e-4 * step}, {"total_training_flops", 3.1e15 * (step + 1)},
                          {"note", "not a number"},   {"bad", NAN}};
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
      if (key != "step" && value.is_number()) expected[key].emplace_back(j["step"].get<int64_t>(), (double)value.get<float>());
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
