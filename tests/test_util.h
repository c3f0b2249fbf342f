// Helpers for tests that run the real binary and inspect files.
#pragma once
#include <fcntl.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <thread>
#include <utility>
#include <sstream>
#include <string>
#include <vector>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

struct CommandResult {
  int rc;
  std::string out, err;
};

inline std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

#ifdef NANOCHAT_KERNEL_OPS
// the fused ops, one per tests/test_kernels_<op>.cpp: the one list the tests go through
// (tests/CMakeLists.txt passes it)
inline std::vector<std::string> kernel_ops() {
  std::vector<std::string> ops;
  std::stringstream in(NANOCHAT_KERNEL_OPS);
  for (std::string op; std::getline(in, op, ',');) ops.push_back(op);
  return ops;
}
#endif

inline std::string make_temp_dir() {
  std::string tmpl = "/tmp/nanochat_test_XXXXXX";
  char* dir = mkdtemp(tmpl.data());
  return dir ? std::string(dir) : std::string();
}

// a temp dir removed when the test binary ends (after every test has run)
inline std::string temp_dir() {
  static std::vector<std::string> dirs;
  struct RemoveTempDirs : ::testing::Environment {
    void TearDown() override {
      for (const auto& d : dirs) std::system(("rm -rf '" + d + "'").c_str());
    }
  };
  if (dirs.empty()) ::testing::AddGlobalTestEnvironment(new RemoveTempDirs);
  dirs.push_back(make_temp_dir());
  return dirs.back();
}

// runs `cmd` under /bin/sh with stdout and stderr captured separately
inline CommandResult run_shell(const std::string& cmd) {
  std::string dir = make_temp_dir();
  std::string full = "(" + cmd + ") >" + dir + "/out 2>" + dir + "/err </dev/null";
  int status = std::system(full.c_str());
  CommandResult r{WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), read_file(dir + "/out"),
                  read_file(dir + "/err")};
  std::system(("rm -rf " + dir).c_str());
  return r;
}

inline int count_lines(const std::string& s) {
  int n = 0;
  for (char c : s) n += c == '\n';
  if (!s.empty() && s.back() != '\n') n++;
  return n;
}

// argv[0] (looked up in PATH) with argv in the background, environment `env` added, stdout
// and stderr to the files `out` and `err`; the child's pid
inline pid_t spawn_to_files(const std::vector<std::string>& argv, const std::string& out, const std::string& err,
                            const std::vector<std::pair<std::string, std::string>>& env = {}) {
  pid_t pid = fork();
  if (pid == 0) {
    for (auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
    dup2(open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644), 1);
    dup2(open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644), 2);
    std::vector<char*> args;
    for (auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execvp(args[0], args.data());
    _exit(127);
  }
  return pid;
}

// waits for `pid` up to `seconds`: its exit code (128 + signal), or -1 on timeout (the
// process then still runs)
inline int wait_exit(pid_t pid, double seconds) {
  auto start = std::chrono::steady_clock::now();
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) != pid) {
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() > seconds) return -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// A pretraining corpus for the real binary's multi-rank runs, in base dir `base`: three parquet
// shards (pyarrow, run by `python`) of 256 documents of 40 words drawn with `seed` from `words`,
// in row groups of 8 so that every rank gets documents, under base/data; then a tokenizer of
// `vocab` trained on them by `bin tok-train`. Returns the data dir, or "" with the failing
// step's stderr in `err`.
inline std::string make_parquet_corpus(const std::string& python, const std::string& bin, const std::string& base,
                                       int seed, const std::string& words, int vocab, std::string& err) {
  const std::string data = base + "/data";
  std::ofstream(base + "/make.py")
      << "import pyarrow as pa, pyarrow.parquet as pq, random, os, sys\n"
      << "random.seed(" << seed << ")\nos.makedirs(sys.argv[1], exist_ok=True)\n"
      << "words = '" << words << "'.split()\n"
      << "for f in range(3):\n"
         "    docs = [' '.join(random.choice(words) for _ in range(40)) for _ in range(256)]\n"
         "    pq.write_table(pa.table({'text': docs}), f'{sys.argv[1]}/shard_{f:05d}.parquet',"
         " row_group_size=8)\n";
  for (const std::string& cmd :
       {python + " " + base + "/make.py " + data, "NANOCHAT_BASE_DIR=" + base + " " + bin + " tok-train --data " +
                                                      data + " --vocab-size " + std::to_string(vocab)}) {
    CommandResult r = run_shell(cmd);
    if (r.rc != 0) {
      err = cmd + " exited " + std::to_string(r.rc) + ": " + r.err;
      return "";
    }
  }
  return data;
}

// base-train on such a corpus at toy shapes (d2, 64 wide, context 32, 256 tokens a step), no
// evals or samples: `iterations` steps, saved under model tag `tag`
inline std::vector<std::string> tiny_base_train_args(const std::string& data, const std::string& tag,
                                                     const std::string& iterations) {
  return {"base-train", "--data",
          data,         "--depth",
          "2",          "--aspect-ratio",
          "64",         "--head-dim",
          "64",         "--window-pattern",
          "L",          "--core-metric-every",
          "-1",         "--sample-every",
          "-1",         "--tokenizer-threads",
          "1",          "--max-seq-len",
          "32",         "--device-batch-size",
          "4",          "--total-batch-size",
          "256",        "--eval-every",
          "-1",         "--num-iterations",
          iterations,   "--model-tag",
          tag};
}
