// execution, one memory budget per run: a program that forks 31 children, each filling 100 or
// 200 MB and holding it, would take ~4.6 GB from the host under per-process limits alone; with
// the run's cgroup v2 leaf, the host's MemAvailable (sampled every 20 ms while it runs) drops by
// at most the run's budget plus 10%. Skipped, naming what is missing, where this process's
// cgroup cannot hand out a memory controller (no cgroup v2, or memory bound to cgroup v1).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>

#include "nanochat/execution.h"

using namespace nanochat;

namespace {

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
