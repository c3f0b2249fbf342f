// execution, one memory budget per run: a program that forks 31 children, each filling 100 or
// 200 MB and holding it, would take ~4.6 GB from the host under per-process limits alone; with
// the run's cgroup v2 leaf, the host's MemAvailable (sampled every 20 ms while it runs) drops by
// at most the run's budget plus 10%. Skipped, naming what is missing, where this process's
// cgroup cannot hand out a memory controller (no cgroup v2, or memory bound to cgroup v1).
// And the clone the supervisor starts with (clone3 with CLONE_INTO_CGROUP and the namespace
// flags) lands the child in the group it is given, from its first instruction.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "../src/execution/sandbox.h"  // sandbox_clone
#include "nanochat/execution.h"

using namespace nanochat;

namespace {

std::string read_text(const std::string& path) {
  std::ifstream f(path);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

// this process's cgroup v2 path ("/..." from /proc/self/cgroup) and the cgroup2 mount point,
// or "" when there is no cgroup v2 here
std::string own_cgroup_v2_dir() {
  std::string rel, mount_point;
  std::istringstream cg(read_text("/proc/self/cgroup"));
  for (std::string line; std::getline(cg, line);)
    if (line.rfind("0::", 0) == 0) rel = line.substr(3);
  std::istringstream mi(read_text("/proc/self/mountinfo"));
  for (std::string line; std::getline(mi, line);) {
    const size_t dash = line.find(" - ");
    if (dash == std::string::npos || line.compare(dash + 3, 8, "cgroup2 ") != 0) continue;
    std::istringstream f(line.substr(0, dash));
    std::string id, parent, dev, root;
    f >> id >> parent >> dev >> root >> mount_point;
    if (root != "/") return "";  // a bind of part of the tree: not worth the arithmetic here
    break;
  }
  if (rel.empty() || mount_point.empty()) return "";
  return mount_point + (rel == "/" ? "" : rel);
}

int64_t mem_available_bytes() {
  std::ifstream f("/proc/meminfo");
  for (std::string key; f >> key;) {
    int64_t kb = 0;
    f >> kb;
    if (key == "MemAvailable:") return kb * 1024;
    f.ignore(256, '\n');
  }
  return -1;
}

// each child says on a pipe when its block is filled; the program waits for all 31 (or 10 s:
// under the budget the OOM killer takes some mid-fill) while they hold their memory
const char* const kForkAndFill = R"PY(import posix, select, time
r, w = posix.pipe()
kids = 0
for i in range(31):
    try:
        pid = posix.fork()
    except OSError:
        break
    if pid == 0:
        try:
            block = b"\x01" * ((100 + 100 * (i % 2)) << 20)
            posix.write(w, b"y")
        except MemoryError:
            posix.write(w, b"n")
        time.sleep(60)
        posix._exit(0)
    kids += 1
said, end = b"", time.time() + 10
while len(said) < kids and select.select([r], [], [], max(0, end - time.time()))[0]:
    said += posix.read(r, 64)
print(kids, "forked,", said.count(b"y"), "filled", flush=True)
)PY";

}  // namespace

TEST(ExecutionBudget, ForkAndFillStaysWithinTheRunsBudget) {
  const std::string refused = execution_run_budget_refused();
  if (!refused.empty()) GTEST_SKIP() << "no per-run cgroup here: " << refused;
  ExecutionOptions o;
  o.python = NANOCHAT_PYTHON;
  o.timeout_seconds = 20;
  const int64_t budget = o.max_run_memory_bytes;
  const int64_t before = mem_available_bytes();
  ASSERT_GT(before, 0);
  std::atomic<bool> running{true};
  std::atomic<int64_t> lowest{before};
  std::thread sampler([&]() {
    while (running) {
      const int64_t now = mem_available_bytes();
      if (now > 0 && now < lowest) lowest = now;
      usleep(20 * 1000);
    }
  });
  const ExecutionResult r = execute_code(kForkAndFill, o);
  running = false;
  sampler.join();
  EXPECT_TRUE(r.isolation & kExecRunBudget) << execution_isolation_describe(r.isolation);
  const int64_t taken = before - lowest;
  EXPECT_LE(taken, budget + budget / 10) << "MemAvailable fell by " << (taken >> 20) << " MB (budget "
                                         << (budget >> 20) << " MB); " << r.stdout_text << r.stderr_text;
  // the fill did press against the budget: something was killed or refused memory
  EXPECT_TRUE(r.memory_exceeded) << r.stdout_text << r.stderr_text;
  EXPECT_EQ(r.stdout_text.find("31 filled"), std::string::npos) << r.stdout_text;
}

TEST(ExecutionBudget, CloneStartsTheSupervisorInTheGivenGroup) {
  const std::string own = own_cgroup_v2_dir();
  if (own.empty()) GTEST_SKIP() << "no cgroup v2 hierarchy here";
  const std::string leaf = own + "/nanochat_clone_test_" + std::to_string(getpid());
  if (mkdir(leaf.c_str(), 0755) != 0) GTEST_SKIP() << "cannot make a group under " << own << ": " << strerror(errno);
  const int fd = open(leaf.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0);
  const pid_t child = nanochat::sandbox_clone(CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS, fd);
  if (child == 0) {  // the group as the child sees it, then the namespaces it got
    const std::string cgroup = read_text("/proc/self/cgroup");
    const size_t at = cgroup.find("0::");
    std::string line = at == std::string::npos ? "none" : cgroup.substr(at, cgroup.find('\n', at) - at);
    line += " pid " + std::to_string(getpid());
    (void)!write(pipe_fds[1], line.data(), line.size());
    _exit(0);
  }
  close(pipe_fds[1]);
  close(fd);
  std::string seen;
  char buf[512];
  for (ssize_t n; (n = read(pipe_fds[0], buf, sizeof buf)) > 0;) seen.append(buf, (size_t)n);
  close(pipe_fds[0]);
  int status = -1;
  if (child > 0) waitpid(child, &status, 0);
  const std::string rel = leaf.substr(leaf.find("/nanochat_clone_test_"));
  rmdir(leaf.c_str());
  ASSERT_GT(child, 0) << "clone3: " << strerror(errno);
  EXPECT_EQ(status, 0);
  // "0::<own path>/nanochat_clone_test_<pid> pid 1": in the leaf, and init of a new PID namespace
  EXPECT_NE(seen.find(rel + " pid 1"), std::string::npos) << seen;
}
