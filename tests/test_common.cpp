// common: atomic writer, environment parsing, thread pool, progress, base dir, dtype policy
#include <gtest/gtest.h>
#include <csignal>
#include <numeric>
#include <random>
#include <fstream>
#include <sstream>
#include <sys/wait.h>
#include <unistd.h>

#include <ATen/Parallel.h>
#include <torch/cuda.h>

#include "nanochat/common.h"
#include "nanochat/common/stop_signal.h"
#include "nanochat/common/utf8.h"
#include "nanochat/common/utf8_stream.h"
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
  EXPECT_THROW(pool.parallel_for(10,
                                 [](int64_t b, int64_t) {
                                   if (b == 0) throw Error("x");
                                 }),
               Error);
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
  EXPECT_EQ(compute_dtype_detect("cpu"), torch::kFloat);  // upstream's COMPUTE_DTYPE: no CUDA -> fp32
  setenv("NANOCHAT_DTYPE", "bfloat16", 1);
  EXPECT_EQ(compute_dtype_detect("cpu"), torch::kBFloat16);
  setenv("NANOCHAT_DTYPE", "float16", 1);
  EXPECT_EQ(compute_dtype_detect("cpu"), torch::kHalf);
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

// ---- UTF-8 streaming ----------------------------------------------------------------------

TEST(Utf8, ReplacementOfIllFormedSequences) {
  EXPECT_EQ(utf8_decode_replace("a\x80"
                                "b"),
            "a\xEF\xBF\xBD"
            "b");
  EXPECT_EQ(utf8_decode_replace("\xE4\xBD"), "\xEF\xBF\xBD");              // truncated 3-byte: one U+FFFD
  EXPECT_EQ(utf8_decode_replace("\xC0\xAF"), "\xEF\xBF\xBD\xEF\xBF\xBD");  // overlong: two
  EXPECT_EQ(utf8_decode_replace("\xF0\x9F\x8C\x8D"), "\xF0\x9F\x8C\x8D");  // valid emoji
}

TEST(Utf8Stream, HoldsBackIncompleteCharacters) {
  Utf8Stream s;
  EXPECT_EQ(s.push("a\xe2\x82"), "a");
  EXPECT_EQ(s.push("\xac"), "\xe2\x82\xac");
  EXPECT_EQ(s.push("\xf0"), "");
  EXPECT_EQ(s.push("\x9f\x98"), "");
  EXPECT_EQ(s.push("\x80!"), "\xf0\x9f\x98\x80!");
  EXPECT_EQ(s.push("\xe0\x80"), "\xef\xbf\xbd\xef\xbf\xbd");  // E0 80 is ill-formed already: no waiting
  EXPECT_EQ(s.push("\xc3"), "");
  EXPECT_EQ(s.finish(), "\xef\xbf\xbd");            // an unfinished character at the end
  EXPECT_EQ(utf8_incomplete_tail("\xed\xa0"), 0u);  // a surrogate can never complete
  EXPECT_EQ(utf8_incomplete_tail("\xf4\x8f\xbf"), 3u);
  EXPECT_EQ(utf8_incomplete_tail("\xf4\x90"), 0u);  // above U+10FFFF
}

TEST(Utf8Stream, ChunksAreValidAndConcatenateToTheFullDecode) {
  // tokens of real text cut at random byte boundaries, plus random garbage bytes
  const std::string text = "na\xc3\xafve caf\xc3\xa9 \xe2\x82\xac\xf0\x9f\x98\x80 \xe4\xb8\xad\xe6\x96\x87 ok";
  std::mt19937 rng(7);
  for (int trial = 0; trial < 300; trial++) {
    std::string bytes;
    for (int i = 0; i < 40; i++) {
      if (rng() % 5 == 0) bytes += (char)(rng() % 256);
      else bytes += text.substr(rng() % text.size(), 1 + rng() % 4);
    }
    Utf8Stream s;
    std::string out;
    for (size_t pos = 0; pos < bytes.size();) {
      size_t n = 1 + rng() % 3;
      std::string chunk = s.push(std::string_view(bytes).substr(pos, n));
      ASSERT_TRUE(utf8_is_valid(chunk));
      out += chunk;
      pos += n;
    }
    out += s.finish();
    ASSERT_EQ(out, utf8_decode_replace(bytes)) << "trial " << trial;
  }
}
