// defines: CommandResult, run_shell, make_temp_dir, temp_dir, read_file, count_lines
// Helpers for tests that run the real binary and inspect files.
#pragma once
#include <cstdlib>
#include <fstream>
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
  CommandResult r{WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status),
                  read_file(dir + "/out"), read_file(dir + "/err")};
  std::system(("rm -rf " + dir).c_str());
  return r;
}

inline int count_lines(const std::string& s) {
  int n = 0;
  for (char c : s) n += c == '\n';
  if (!s.empty() && s.back() != '\n') n++;
  return n;
}
