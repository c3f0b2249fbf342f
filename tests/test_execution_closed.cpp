// execution fails closed: a program run while 40 host processes sleep as uid 65534
// (RLIMIT_NPROC's old trigger) is still isolated: not uid 0, no capability, no /etc/shadow, not
// the caller's environment; a run forking to its limit cannot weaken a run beside it; /proc/1
// is the sandbox's own; bwrap absent from PATH, bwrap unable to make its namespaces, an
// interpreter the run's uid cannot reach each give the one-line refusal and a failed HumanEval
// problem (never an unsandboxed run), with the fix for the cause bwrap names (a process limit is
// not a namespace setting); the unsandboxed opt-in says so on every run. A caller with 16
// threads, not root, still gets its programs run (RLIMIT_NPROC counts the run apart from it).
// A HumanEval pass is the tests having run to their end: a completion that exits 0 before them
// is graded failed.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "nanochat/common/files.h"
#include "nanochat/execution.h"
#include "nanochat/tasks.h"
#include "test_execution.h"

using namespace nanochat;
using namespace execution_test;

namespace {

ExecutionOptions opts() {
  ExecutionOptions o;
  o.python = system_python();
  return o;
}

std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

// what a program can reach: its uid, its effective capabilities, /etc/shadow, the caller's
// environment (@HOSTPID@) and /proc/1's command line
const char* const kWhoAmI = R"PY(import posix
print("uid", posix.getuid())
print("capeff", [l.split()[1] for l in open("/proc/self/status") if l.startswith("CapEff:")][0])
for name, path in (("shadow", "/etc/shadow"), ("environ", "/proc/@HOSTPID@/environ")):
    try:
        open(path, "rb").read(1)
        print(name, "READ")
    except OSError as e:
        print(name, "refused", type(e).__name__)
print("proc1", open("/proc/1/cmdline", "rb").read().split(b"\0")[0].decode())
)PY";

// "" when the answer of kWhoAmI shows an isolated run, else what is wrong
std::string not_isolated(const ExecutionResult& r) {
  std::string bad;
  if (!r.success) return "the run failed: " + r.error;
  const std::string& o = r.stdout_text;
  if (o.find("uid 0\n") != std::string::npos || o.find("uid ") == std::string::npos) bad += "uid 0; ";
  if (o.find("capeff 0000000000000000\n") == std::string::npos) bad += "capabilities: " + o + "; ";
  if (o.find("shadow refused") == std::string::npos) bad += "/etc/shadow read; ";
  if (o.find("environ refused") == std::string::npos) bad += "the caller's environment read; ";
  if (o.find("proc1 /usr/bin/bwrap") == std::string::npos && o.find("proc1 bwrap") == std::string::npos)
    bad += "/proc/1 is not the sandbox's: " + o + "; ";
  return bad;
}

std::string who_am_i() { return replace_all(kWhoAmI, "@HOSTPID@", std::to_string(getpid())); }

// an environment variable set for one scope
struct ScopedEnv {
  std::string name, old;
  bool had;
  ScopedEnv(const char* n, const std::string& value) : name(n), had(getenv(n) != nullptr) {
    if (had) old = getenv(n);
    setenv(n, value.c_str(), 1);
  }
  ~ScopedEnv() { had ? (void)setenv(name.c_str(), old.c_str(), 1) : (void)unsetenv(name.c_str()); }
};

// HumanEval's program for one problem, as tasks/humaneval.cpp assembles it: a correct solution
const char* const kSolvedProblem =
    "def add(a, b):\n    return a + b\n\ndef check(f):\n    assert f(2, 3) == 5\n\ncheck(add)\n";

}  // namespace

TEST(ExecutionClosed, ManyHostProcessesAsNobodyChangeNothing) {
  if (geteuid() != 0) GTEST_SKIP() << "not root: cannot start processes as uid 65534";
  std::vector<pid_t> sleepers;
  for (int i = 0; i < 40; i++) {
    const pid_t pid = fork();
    if (pid == 0) {
      if (setgid(65534) == 0 && setuid(65534) == 0) pause();
      _exit(1);
    }
    if (pid > 0) sleepers.push_back(pid);
  }
  usleep(200 * 1000);
  for (int i = 0; i < 3; i++) {  // and again: nothing of the first run is kept for the next
    const ExecutionResult r = execute_code(who_am_i(), opts());
    EXPECT_EQ(not_isolated(r), "") << r.stdout_text << r.stderr_text;
    EXPECT_TRUE(r.isolation & kExecUidDropped);
  }
  for (pid_t pid : sleepers) kill(pid, SIGKILL), waitpid(pid, nullptr, 0);
  EXPECT_EQ(sleepers.size(), 40u);
}

TEST(ExecutionClosed, AForkBombBesideCannotWeakenARun) {
  std::atomic<bool> bombing{true};
  ExecutionOptions bomb = opts();
  bomb.timeout_seconds = 8;
  std::thread bomber([&]() {
    execute_code(
        "import posix, time\nwhile True:\n    try:\n        posix.fork()\n    except OSError:\n"
        "        time.sleep(0.001)\n",
        bomb);
    bombing = false;
  });
  usleep(1500 * 1000);  // the bomb at its limit
  int runs = 0;
  while (bombing && runs < 5) {
    const ExecutionResult r = execute_code(who_am_i(), opts());
    EXPECT_EQ(not_isolated(r), "") << r.stdout_text << r.stderr_text;
    runs++;
  }
  bomber.join();
  EXPECT_GE(runs, 1);
}

TEST(ExecutionClosed, ProcOneIsTheSandboxes) {
  const ExecutionResult r = execute_code(
      "print(open('/proc/1/cmdline', 'rb').read().split(b'\\0')[0].decode())\n"
      "print(open('/proc/1/mountinfo').read())",
      opts());
  ASSERT_TRUE(r.success) << r.error;
  EXPECT_NE(r.stdout_text, read_text("/proc/1/cmdline"));
  EXPECT_EQ(r.stdout_text.rfind("/usr/bin/bwrap\n", 0), 0u) << r.stdout_text;
  // the sandbox's mounts: its /tmp is a tmpfs, / is bwrap's; the host's root mount is not there
  EXPECT_EQ(r.stdout_text.find(read_text("/proc/1/mountinfo").substr(0, 40)), std::string::npos) << r.stdout_text;
}

TEST(ExecutionClosed, NoBwrapOnPathRefusesInOneLine) {
  const int64_t before = execution_unavailable_runs();
  ExecutionResult r;
  {
    ScopedEnv path("PATH", "/nonexistent");
    r = execute_code(kSolvedProblem, opts());
  }
  EXPECT_FALSE(r.success);
  EXPECT_TRUE(r.sandbox_unavailable);
  EXPECT_EQ(r.error, "sandbox unavailable: bwrap not found on PATH (install the package bubblewrap)");
  EXPECT_EQ(r.stdout_text, "");
  EXPECT_EQ(r.isolation, 0u);
  std::string reason;
  EXPECT_EQ(execution_unavailable_runs(&reason), before + 1);
  EXPECT_EQ(reason, r.error);
  // the same problem passes where the sandbox is there: the refusal was the sandbox's
  EXPECT_TRUE(execute_code(kSolvedProblem, opts()).success);
}

// a fake bwrap that fails with `complaint` on stderr, as the real one does; the refusal it gets
static ExecutionResult run_with_failing_bwrap(const std::string& complaint) {
  const std::string dir = "/tmp/nanochat_fake_bwrap_" + std::to_string(getpid());
  make_dirs(dir);
  chmod(dir.c_str(), 0755);
  std::ofstream(dir + "/bwrap") << "#!/bin/sh\necho '" << complaint << "' >&2\nexit 1\n";
  chmod((dir + "/bwrap").c_str(), 0755);
  ExecutionResult r;
  {
    ScopedEnv path("PATH", dir + ":/usr/bin:/bin");
    r = execute_code("print('ran')", opts());
  }
  remove_tree(dir);
  return r;
}

TEST(ExecutionClosed, BwrapWithoutNamespacesRefusesWithTheFix) {
  // what bwrap 0.8 says for EPERM (Debian's kernel.unprivileged_userns_clone=0), ENOSPC
  // (user.max_user_namespaces reached or 0) and EAGAIN (a process limit): each refusal names
  // the fix for its own cause and no other's
  struct Case {
    const char* complaint;
    const char* fix;
    const char* not_the_fix;
  } cases[] = {
      {"bwrap: No permissions to creating new namespace, likely because the kernel does not allow non-privileged "
       "user namespaces.",
       "kernel.unprivileged_userns_clone=1", "max_user_namespaces"},
      {"bwrap: Creating new namespace failed: No space left on device", "sysctl -w user.max_user_namespaces=15000",
       "unprivileged_userns_clone"},
      {"bwrap: Creating new namespace failed: Resource temporarily unavailable", "process limit",
       "max_user_namespaces"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.complaint);
    const ExecutionResult r = run_with_failing_bwrap(c.complaint);
    EXPECT_TRUE(r.sandbox_unavailable);
    EXPECT_EQ(r.error.rfind("sandbox unavailable: " + std::string(c.complaint), 0), 0u) << r.error;
    EXPECT_NE(r.error.find(c.fix), std::string::npos) << r.error;
    EXPECT_EQ(r.error.find(c.not_the_fix), std::string::npos) << r.error;
    EXPECT_EQ(r.error.find('\n'), std::string::npos);
    EXPECT_EQ(r.stdout_text.find("ran"), std::string::npos);
  }
}

// chat-eval with OMP_NUM_THREADS=16: the caller's threads count against its uid's RLIMIT_NPROC,
// and used to count against the run's (every run refused at 8 threads or more). Not root: the
// threads and the runs in a child turned into uid 65534 (as root), or in this process.
TEST(ExecutionClosed, ACallerWithSixteenThreadsGetsProgramsRun) {
  auto body = []() {
    std::atomic<bool> done{false};
    std::vector<std::thread> threads;
    for (int i = 0; i < 16; i++)
      threads.emplace_back([&done]() {
        while (!done) usleep(10 * 1000);
      });
    std::string failed;
    for (int i = 0; i < 3; i++) {
      const ExecutionResult r = execute_code(kSolvedProblem, opts());
      if (!r.success) failed += "run " + std::to_string(i) + ": " + r.error + "; ";
    }
    // the run's own limit still holds: a fork loop gets max_processes - 1 children
    const ExecutionResult forks = execute_code(
        "import posix, time\nkids = 0\nfor i in range(40):\n    try:\n        pid = posix.fork()\n"
        "    except OSError:\n        break\n    if pid == 0:\n        time.sleep(3)\n        posix._exit(0)\n"
        "    kids += 1\nprint('kids', kids)\n",
        opts());
    if (forks.stdout_text != "kids 7\n") failed += "the fork loop: " + forks.stdout_text + forks.error + "; ";
    done = true;
    for (auto& t : threads) t.join();
    return failed;
  };
  EXPECT_EQ(geteuid() == 0 ? as_nobody(body) : body(), "");
}

// a HumanEval problem as the dataset gives it, and completions graded as chat-eval grades them
TEST(ExecutionClosed, AHumanEvalPassIsTheTestsRunningToTheirEnd) {
  const nlohmann::json problem = {
      {"messages", {{{"role", "user"}, {"content", "import math\n\ndef add(a, b):\n"}}}},
      {"test", "def check(candidate):\n    assert candidate(2, 3) == 5\n    assert candidate(-1, 1) == 0\n"},
      {"entry_point", "add"}};
  EXPECT_EQ(humaneval_grade(problem, "```python\ndef add(a, b):\n    return a + b\n```"), 1);
  EXPECT_EQ(humaneval_grade(problem, "def add(a, b):\n    return a - b"), 0);
  // leaving before the tests with a clean exit status: the status alone would pass it
  const std::string early_exit = "import sys\nsys.exit(0)\ndef add(a, b):\n    return 0";
  EXPECT_TRUE(execute_code(humaneval_program(problem, early_exit), opts()).success);
  EXPECT_EQ(humaneval_grade(problem, early_exit), 0);
  EXPECT_EQ(humaneval_grade(problem, "import os\nos._exit(0)"), 0);
  EXPECT_EQ(humaneval_grade(problem, "def add(a, b):\n    raise SystemExit(0)"), 0);  // inside check()
  // the marker's line is not part of what the program printed
  const ExecutionResult r = execute_code_to_the_end("print('hi', end='')", opts());
  EXPECT_TRUE(r.success) << r.error;
  EXPECT_EQ(r.stdout_text, "hi");
  const ExecutionResult early = execute_code_to_the_end("import sys\nprint('hi')\nsys.exit(0)", opts());
  EXPECT_FALSE(early.success);
  EXPECT_EQ(early.exit_code, 0);
  EXPECT_EQ(early.stdout_text, "hi\n");
  EXPECT_NE(early.error.find("exited before its end"), std::string::npos) << early.error;
}

TEST(ExecutionClosed, InterpreterBehindAClosedDirectoryRefuses) {
  if (geteuid() != 0) GTEST_SKIP() << "not root: the run's uid is this user's";
  // a copy of the interpreter in a 0700 directory (as a pyenv or venv under /root)
  const std::string dir = "/tmp/nanochat_closed_home_" + std::to_string(getpid());
  make_dirs(dir + "/bin");
  chmod(dir.c_str(), 0700);
  std::ofstream(dir + "/bin/python3", std::ios::binary) << read_text(system_python());
  chmod((dir + "/bin/python3").c_str(), 0755);
  ExecutionOptions o = opts();
  o.python = dir + "/bin/python3";
  const ExecutionResult r = execute_code("print('ran')", o);
  remove_tree(dir);
  EXPECT_TRUE(r.sandbox_unavailable);
  EXPECT_EQ(r.error.rfind("sandbox unavailable: the run's own uid cannot reach " + dir, 0), 0u) << r.error;
  EXPECT_EQ(r.stdout_text, "");
}

TEST(ExecutionClosed, UnsandboxedOnlyByOptInAndSaysSo) {
  ExecutionOptions o = opts();
  o.unsandboxed = true;
  testing::internal::CaptureStderr();
  const ExecutionResult a = execute_code("import posix\nprint(posix.getuid())", o);
  const ExecutionResult b = execute_code("print(1)", o);
  const std::string said = testing::internal::GetCapturedStderr();
  EXPECT_TRUE(a.success) << a.error;
  EXPECT_EQ(a.stdout_text, std::to_string(getuid()) + "\n");  // the caller's own uid: no sandbox
  EXPECT_EQ(a.isolation, (uint32_t)kExecUnsandboxed);
  size_t warnings = 0;
  for (size_t at = said.find("WITHOUT a sandbox"); at != std::string::npos; at = said.find("WITHOUT a sandbox", at + 1))
    warnings++;
  EXPECT_EQ(warnings, 2u) << said;  // once per run
}

TEST(ExecutionClosed, APyenvShimIsSkippedOrRefused) {
  // a shim first on PATH (a shell script, as pyenv's): the default skips it for the next python3
  const std::string dir = "/tmp/nanochat_shim_" + std::to_string(getpid());
  make_dirs(dir);
  chmod(dir.c_str(), 0755);
  std::ofstream(dir + "/python3") << "#!/bin/sh\nexec /usr/bin/python3 \"$@\"\n";
  chmod((dir + "/python3").c_str(), 0755);
  ExecutionResult by_default, named;
  {
    ScopedEnv path("PATH", dir + ":/usr/bin:/bin");
    ScopedEnv python("NANOCHAT_EXEC_PYTHON", "");
    unsetenv("NANOCHAT_EXEC_PYTHON");
    by_default = execute_code("import sys\nprint(sys.executable)", ExecutionOptions());
    ExecutionOptions o;
    o.python = dir + "/python3";
    named = execute_code("print('ran')", o);
  }
  remove_tree(dir);
  EXPECT_TRUE(by_default.success) << by_default.error;
  EXPECT_EQ(by_default.stdout_text, "/usr/bin/python3\n");
  EXPECT_TRUE(named.sandbox_unavailable);
  EXPECT_NE(named.error.find("is a script"), std::string::npos) << named.error;
}
