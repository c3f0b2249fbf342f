// execute_code, the parent's side: find bwrap and the interpreter, pick the run's own uid, build
// bwrap's command line (bwrap_plan.cpp), fork the child (sandbox.cpp) that execs it, collect
// capped output under a wall-clock deadline, kill whatever is left, clean up. Fails closed: any
// part of the isolation missing gives "sandbox unavailable: ..." and the program does not run.
#include "nanochat/execution.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <random>
#include <vector>

#include "nanochat/common/env.h"
#include "nanochat/common/error.h"
#include "nanochat/common/files.h"
#include "nanochat/common/log.h"
#include <linux/filter.h>

#include "bwrap_plan.h"
#include "run_budget.h"
#include "sandbox.h"

namespace nanochat {

const std::string& execution_guard_prelude() {
  static const std::string s = R"PY(import sys
def _nanochat_reliability_guard():
    import builtins, faulthandler, os, shutil, subprocess
    faulthandler.disable()
    builtins.exit = None
    builtins.quit = None
    builtins.help = None
    os.environ["OMP_NUM_THREADS"] = "1"
    for name in ("kill", "system", "putenv", "remove", "removedirs", "rmdir", "fchdir", "setuid", "fork",
                 "forkpty", "killpg", "rename", "renames", "truncate", "replace", "unlink", "fchmod", "fchown",
                 "chmod", "chown", "chroot", "lchflags", "lchmod", "lchown", "getcwd", "chdir"):
        setattr(os, name, None)
    shutil.rmtree = None
    shutil.move = None
    shutil.chown = None
    subprocess.Popen = None
    for name in ("ipdb", "joblib", "resource", "psutil", "tkinter"):
        sys.modules[name] = None
import os as _nanochat_os
_nanochat_os.write(3, b"1")  # started: the sandbox is up (the parent tells its own failures by this)
_nanochat_os.close(3)
del _nanochat_os
_nanochat_code = sys.argv[1]
del sys.argv[1:]
_nanochat_reliability_guard()
del _nanochat_reliability_guard
exec(compile(_nanochat_code, "<llm>", "exec"), {"__name__": "__main__"})
)PY";
  return s;
}

namespace {

struct Sink {  // one output pipe, kept up to a cap and drained past it
  int fd;
  std::string* text;
  bool* truncated;
  size_t cap;
  bool open = true;
  void read_some() {
    char buf[65536];
    ssize_t n = read(fd, buf, sizeof buf);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) return;
    if (n <= 0) {
      open = false;
      return;
    }
    size_t keep = text->size() < cap ? std::min(cap - text->size(), (size_t)n) : 0;
    text->append(buf, keep);
    if (keep < (size_t)n) *truncated = true;
  }
};

std::atomic<int64_t> g_unavailable_runs{0};
std::mutex g_unavailable_mutex;
std::string g_unavailable_reason;

ExecutionResult unavailable(const std::string& why) {
  ExecutionResult res;
  res.sandbox_unavailable = true;
  res.error = "sandbox unavailable: " + why;
  g_unavailable_runs++;
  std::lock_guard<std::mutex> lock(g_unavailable_mutex);
  g_unavailable_reason = res.error;
  return res;
}

// one run's pieces: what the parent made for it, released in the destructor
struct RunSetup {
  uid_t uid = (uid_t)-1;  // root: the run's own
  std::string tmp_dir;    // root: the tmpfs's mount point; unsandboxed: the working directory
  bool unsandboxed = false;
  bool uid_cleared = false;  // its processes already killed after the run
  // out, err, started, status, info pipes (read, write); the seccomp pipe's read end
  int fds[11] = {-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1};
  RunBudget budget;
  ~RunSetup() {
    for (int fd : fds)
      if (fd >= 0) close(fd);
    if (uid != (uid_t)-1) {
      if (!uid_cleared) sandbox_kill_uid(uid);  // nothing of the run's left, wherever it went
      bwrap_release_uid(uid);
    }
    if (!tmp_dir.empty()) unsandboxed ? remove_tree(tmp_dir) : (void)rmdir(tmp_dir.c_str());
  }
};

// what the child reported, read from the pipes until it is gone or the deadline passed
struct Outcome {
  bool started = false, timeout = false;
  int wait_status = -1;
  char step = 0;  // SandboxStep where the child stopped
  int step_errno = 0;
};

// the deadline: the sandbox's pid 1 first (its PID namespace goes with it, and bwrap, its
// parent, reaps it and exits), then bwrap itself; unsandboxed, the program's process group
void kill_run(pid_t pid, const RunSetup& s, const std::string& info) {
  if (s.unsandboxed) {
    kill(-pid, SIGKILL);
  } else {
    const size_t at = info.find("\"child-pid\":");  // {"child-pid": 1234}
    const long init = at == std::string::npos ? 0 : std::strtol(info.c_str() + at + 12, nullptr, 10);
    if (init > 1) kill((pid_t)init, SIGKILL);
    for (int i = 0; init > 1 && i < 100 && waitpid(pid, nullptr, WNOHANG) == 0; i++) usleep(5000);
    kill(pid, SIGKILL);  // (gone already, or stuck: its --die-with-parent takes the sandbox along)
  }
  waitpid(pid, nullptr, 0);
}

Outcome collect(pid_t pid, RunSetup& s, ExecutionResult& res, const ExecutionOptions& opts) {
  Outcome o;
  std::string started, status, info;
  bool ignored = false;
  Sink sinks[5] = {{s.fds[0], &res.stdout_text, &res.output_truncated, opts.max_output_bytes},
                   {s.fds[2], &res.stderr_text, &res.output_truncated, opts.max_output_bytes},
                   {s.fds[4], &started, &ignored, 16},
                   {s.fds[6], &status, &ignored, 64},
                   {s.fds[8], &info, &ignored, 4096}};
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(opts.timeout_seconds);
  bool reaped = false;
  auto reaped_at = deadline;
  for (;;) {
    int st = 0;
    if (!reaped && waitpid(pid, &st, WNOHANG) == pid)
      reaped = true, o.wait_status = st, reaped_at = std::chrono::steady_clock::now();
    const bool pipes_open = sinks[0].open || sinks[1].open || sinks[2].open || sinks[3].open || sinks[4].open;
    // a pipe still open a second after bwrap is gone: something it left (killed below)
    if (reaped && (!pipes_open || std::chrono::steady_clock::now() - reaped_at > std::chrono::seconds(1))) break;
    if (!reaped && std::chrono::steady_clock::now() >= deadline) {
      o.timeout = true;
      kill_run(pid, s, info);
      break;
    }
    pollfd fds[5];
    int n = 0;
    for (auto& k : sinks)
      if (k.open) fds[n++] = {k.fd, POLLIN, 0};
    if (n == 0) {
      usleep(5000);
      continue;
    }
    if (poll(fds, n, 20) > 0)
      for (int i = 0; i < n; i++)
        if (fds[i].revents)
          for (auto& k : sinks)
            if (k.fd == fds[i].fd) k.read_some();
  }
  for (auto& k : sinks) {  // what is already in the pipes
    fcntl(k.fd, F_SETFL, O_NONBLOCK);
    while (k.open) {
      const size_t before = k.text->size();
      k.read_some();
      if (k.text->size() == before) break;
    }
  }
  o.started = !started.empty();
  if (status.size() >= 5) {
    o.step = status[0];
    std::memcpy(&o.step_errno, status.data() + 1, 4);
  }
  return o;
}

// the fix for a user namespace that could not be made, by the errno seen
const char* userns_fix(int e) {
  switch (e) {
    case ENOSPC: return " (user.max_user_namespaces is reached, or 0: sysctl -w user.max_user_namespaces=15000)";
    case EPERM:
    case EACCES:
      return " (unprivileged user namespaces are refused: on Debian before 11 sysctl -w "
             "kernel.unprivileged_userns_clone=1, on Ubuntu 24.04 kernel.apparmor_restrict_unprivileged_userns=0 or "
             "an AppArmor profile with `userns,` for nanochat; in a container, its seccomp profile or AppArmor)";
    case EAGAIN: return " (the caller's uid is at its process limit, ulimit -u)";
    case EUSERS: return " (user namespaces are nested 32 deep here)";
  }
  return "";
}

// why the child stopped before the interpreter ran, as the one line's tail
std::string step_failure(const Outcome& o, const std::string& bwrap) {
  const char* e = strerror(o.step_errno);
  switch (o.step) {
    case kStepDescriptors: return strprintf("cannot arrange the run's descriptors: %s", e);
    case kStepUserNamespace:
      return strprintf("cannot make the run's user namespace: %s%s", e, userns_fix(o.step_errno));
    case kStepMountNamespace: return strprintf("cannot make a private mount namespace for the run's tmpfs: %s", e);
    case kStepTmpfs:
      // not root, EPERM here is a user namespace without capabilities (Ubuntu 24.04's AppArmor)
      return strprintf("cannot mount the run's size-capped tmpfs: %s%s", e,
                       geteuid() != 0 ? userns_fix(o.step_errno) : "");
    case kStepUid: return strprintf("cannot switch to the run's own uid: %s", e);
    case kStepLimits: return strprintf("cannot set the run's rlimits: %s", e);
    case kStepExec: return strprintf("cannot run %s: %s (install the package bubblewrap)", bwrap.c_str(), e);
  }
  return "";
}

// bwrap ran but never started the interpreter: its own complaint, with the fix for the cause it
// names (bwrap says the errno's text: EAGAIN is a process limit, not a namespace setting)
std::string bwrap_failure(const std::string& stderr_text) {
  std::string s = stderr_text;
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  const size_t nl = s.rfind('\n');
  std::string line = s.substr(nl == std::string::npos ? 0 : nl + 1);
  if (line.empty()) line = "bwrap exited before the interpreter started";
  auto says = [&](int e) { return line.find(strerror(e)) != std::string::npos; };
  if (says(EAGAIN))
    line += " (a process limit was reached: the run's own, max_processes + 2, or the caller's uid at ulimit -u)";
  else if (says(ENOSPC) || says(EPERM) || says(EACCES) || says(EUSERS))
    line += userns_fix(says(ENOSPC) ? ENOSPC : says(EUSERS) ? EUSERS : EPERM);
  else if (line.find("No permissions to creat") != std::string::npos || line.find("uid map") != std::string::npos)
    line += userns_fix(EPERM);
  return line;
}

bool open_pipes(RunSetup& s, const std::string& seccomp_bpf) {
  int p[2];
  for (int i = 0; i < 5; i++) {
    if (pipe2(p, O_CLOEXEC) != 0) return false;
    s.fds[2 * i] = p[0], s.fds[2 * i + 1] = p[1];
  }
  if (seccomp_bpf.empty()) return true;
  if (pipe2(p, O_CLOEXEC) != 0) return false;
  s.fds[10] = p[0];
  const bool ok = write(p[1], seccomp_bpf.data(), seccomp_bpf.size()) == (ssize_t)seccomp_bpf.size();
  close(p[1]);  // bwrap reads to the end
  return ok;
}

// the seccomp filter as bytes for bwrap's --seccomp; "" when libseccomp cannot build it
const std::string& seccomp_bpf() {
  static const std::string bytes = [] {
    const sock_fprog* f = sandbox_seccomp_filter();
    return f ? std::string((const char*)f->filter, f->len * sizeof(sock_filter)) : std::string();
  }();
  return bytes;
}

// the unsandboxed opt-in's warning, on every run
void warn_unsandboxed() {
  log_warn(
      "execute_code: running model-written code WITHOUT a sandbox (NANOCHAT_EXEC_UNSANDBOXED=1): only rlimits "
      "and a temp dir; it can read your files and environment and reach the network (docs/security.md)");
}

}  // namespace

std::string execution_isolation_describe(uint32_t isolation) {
  static const std::pair<uint32_t, const char*> names[] = {
      {kExecUserNamespace, "user, IPC, UTS and cgroup namespaces"},
      {kExecPidNamespace, "PID namespace"},
      {kExecNetworkNamespace, "network namespace"},
      {kExecUidDropped, "a uid of its own"},
      {kExecProcessLimit, "RLIMIT_NPROC"},
      {kExecCapsDropped, "no capabilities"},
      {kExecFreshProc, "own /proc"},
      {kExecReadOnlyMounts, "read-only mounts but /tmp"},
      {kExecTmpfs, "size-capped tmpfs /tmp and /dev/shm"},
      {kExecPrivateDev, "own /dev"},
      {kExecHostDirsHidden, "only the interpreter's files"},
      {kExecOwnSession, "own session (no controlling terminal)"},
      {kExecSeccomp, "seccomp filter"},
      {kExecRunBudget, "one memory budget for the run (cgroup v2)"},
      {kExecUnsandboxed, "UNSANDBOXED (rlimits only)"}};
  std::string s;
  for (auto& [bit, name] : names)
    if (isolation & bit) s += (s.empty() ? "" : ", ") + std::string(name);
  return s.empty() ? "none" : s;
}

std::string execution_run_budget_refused() { return run_budget_refused(); }

int64_t execution_tmpfs_inodes(const ExecutionOptions& opts) {
  return std::max<int64_t>(1024, opts.max_disk_bytes / 4096);
}

int64_t execution_memory_bound(const ExecutionOptions& opts) {
  auto sysctl = [](const char* path, int64_t fallback) {
    std::ifstream f(path);
    int64_t v = 0;
    return f >> v ? v : fallback;
  };
  const int64_t buffer = 2 * std::max(sysctl("/proc/sys/net/core/wmem_max", 212992),
                                      sysctl("/proc/sys/net/core/rmem_max", 212992)) +
                         (64 << 10);
  const int64_t socket_bytes = opts.max_open_files * buffer;
  const int64_t pipe_bytes = sysctl("/proc/sys/fs/pipe-user-pages-soft", 16384) * 4096;
  const int64_t processes = opts.max_processes + 2;
  return processes * (opts.max_memory_bytes + socket_bytes + (1 << 20)) + socket_bytes + pipe_bytes +
         opts.max_disk_bytes + execution_tmpfs_inodes(opts) * kExecutionInodeBytes;
}

int64_t execution_unavailable_runs(std::string* last_reason) {
  if (last_reason) {
    std::lock_guard<std::mutex> lock(g_unavailable_mutex);
    *last_reason = g_unavailable_reason;
  }
  return g_unavailable_runs.load();
}

namespace {

constexpr uint32_t kJail = kExecUserNamespace | kExecPidNamespace | kExecNetworkNamespace | kExecProcessLimit |
                           kExecCapsDropped | kExecFreshProc | kExecReadOnlyMounts | kExecTmpfs | kExecPrivateDev |
                           kExecHostDirsHidden | kExecOwnSession | kExecSeccomp;

// the result of a run that got as far as the child (see collect)
ExecutionResult finish(ExecutionResult res, const Outcome& o, bool out_of_memory, const std::string& bwrap,
                       bool unsandboxed) {
  if (o.step == kStepExec && o.step_errno == E2BIG) {
    res.error = "execute_code: the program is too long to pass to exec (E2BIG)";
    return res;
  }
  if (o.step && unsandboxed) {
    res.error = "execute_code: " + step_failure(o, bwrap);
    return res;
  }
  if (o.step) return unavailable(step_failure(o, bwrap));
  if (o.timeout) {
    res.timeout = true;
    res.error = "Execution timed out (process killed)";
    return res;
  }
  if (!o.started) {
    if (unsandboxed) {
      res.error = "execute_code: the interpreter did not start";
      return res;
    }
    ExecutionResult refused = unavailable(bwrap_failure(res.stderr_text));
    refused.stderr_text = res.stderr_text;
    return refused;
  }
  if (o.wait_status < 0) {
    res.error = "Execution failed (the sandbox died)";
    return res;
  }
  res.exit_code = WIFEXITED(o.wait_status)     ? WEXITSTATUS(o.wait_status)
                  : WIFSIGNALED(o.wait_status) ? -WTERMSIG(o.wait_status)
                                               : -1;
  // bwrap passes a program killed by signal n on as exit status 128 + n
  if (!unsandboxed && res.exit_code > 128 && res.exit_code < 128 + 65) res.exit_code = -(res.exit_code - 128);
  res.memory_exceeded = out_of_memory || res.stderr_text.find("MemoryError") != std::string::npos;
  res.success = res.exit_code == 0;
  if (!res.success) {
    // the last non-empty line of stderr, as upstream reports the exception
    std::string s = res.stderr_text;
    while (!s.empty() && (s.back() == '\n' || s.back() == ' ' || s.back() == '\r' || s.back() == '\t')) s.pop_back();
    size_t nl = s.rfind('\n');
    res.error = s.empty() ? "Execution failed" : s.substr(nl == std::string::npos ? 0 : nl + 1);
    if (out_of_memory && res.error.find("MemoryError") == std::string::npos)
      res.error = "MemoryError: the run went past its memory budget (a process was killed)";
  }
  return res;
}

// starts the child (in the run's cgroup where there is one) and waits for the run
ExecutionResult run_child(RunSetup& s, SandboxChild& c, const ExecutionOptions& opts, const std::string& bwrap) {
  ExecutionResult res;
  std::string budget_refused;
  if (!s.unsandboxed && opts.max_run_memory_bytes > 0)
    run_budget_open(s.budget, opts.max_run_memory_bytes, c.nproc, budget_refused);
  pid_t pid = sandbox_clone(s.budget.fd);
  if (pid < 0 && s.budget.fd >= 0) {  // clone3 or CLONE_INTO_CGROUP refused (before Linux 5.7)
    run_budget_close(s.budget);
    pid = sandbox_clone(-1);
  }
  if (pid == 0) sandbox_child_exec(c);
  const int fork_errno = errno;
  for (int i : {1, 3, 5, 7, 9, 10}) close(s.fds[i]), s.fds[i] = -1;
  if (pid < 0) {
    run_budget_close(s.budget);
    res.error = strprintf("execute_code: cannot fork: %s", strerror(fork_errno));
    return res;
  }
  const Outcome o = collect(pid, s, res, opts);
  if (s.uid != (uid_t)-1) sandbox_kill_uid(s.uid), s.uid_cleared = true;  // before the budget goes
  const bool budget_held = !s.budget.dir.empty();
  const bool out_of_memory = run_budget_close(s.budget);
  res = finish(res, o, out_of_memory, bwrap, s.unsandboxed);
  if (o.started) {
    res.isolation = s.unsandboxed
                        ? kExecUnsandboxed
                        : kJail | (s.uid != (uid_t)-1 ? kExecUidDropped : 0u) | (budget_held ? kExecRunBudget : 0u);
    res.network_isolated = res.isolation & kExecNetworkNamespace;
    static std::atomic<bool> logged{false};
    if (!logged.exchange(true))
      log_info("execution sandbox: %s%s%s", execution_isolation_describe(res.isolation).c_str(),
               budget_held || s.unsandboxed ? "" : "; no cgroup budget: ", budget_held ? "" : budget_refused.c_str());
  }
  return res;
}

}  // namespace

ExecutionResult execute_code(const std::string& code, const ExecutionOptions& opts) {
  std::string why_not;
  const std::string python = bwrap_find_python(opts, why_not);  // throws when there is none at all
  RunSetup s;
  s.unsandboxed = opts.unsandboxed || env_get("NANOCHAT_EXEC_UNSANDBOXED").value_or("") == "1";
  const bool root = geteuid() == 0;
  std::string bwrap;
  if (s.unsandboxed) {
    warn_unsandboxed();
  } else {
    bwrap = bwrap_find("bwrap");
    if (bwrap.empty()) return unavailable("bwrap not found on PATH (install the package bubblewrap)");
    if (!why_not.empty()) return unavailable(why_not);
    if (seccomp_bpf().empty()) return unavailable("libseccomp cannot build the syscall filter (install libseccomp2)");
    if (root && (s.uid = bwrap_pick_uid()) == (uid_t)-1)
      return unavailable("no free uid for the run in the reserved range");
  }
  {  // the working directory, or the run's tmpfs's mount point
    char tmpl[] = "/tmp/nanochat_exec_XXXXXX";
    if (!mkdtemp(tmpl)) {
      if (s.unsandboxed) fail("execute_code: cannot create a temporary directory in /tmp: %s", strerror(errno));
      return unavailable(strprintf("cannot create a mount point in /tmp: %s", strerror(errno)));
    }
    s.tmp_dir = tmpl;
  }
  const std::vector<std::string> program = {python, "-I", "-c", execution_guard_prelude(), code};
  const std::vector<std::string> args = s.unsandboxed ? program : bwrap_command(bwrap, python, s.tmp_dir, program);
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::string path = "PATH=/usr/bin:/bin";
  char* envp[] = {path.data(), nullptr};
  // one tmpfs for /tmp and /dev/shm: its pages and its inodes (an empty file costs about 1 KiB
  // of kernel memory, which the size does not count) are both capped
  std::string tmpfs_options = strprintf("size=%lld,nr_inodes=%lld,mode=0700", (long long)opts.max_disk_bytes,
                                        (long long)execution_tmpfs_inodes(opts));
  if (root) tmpfs_options += strprintf(",uid=%u,gid=%u", (unsigned)s.uid, (unsigned)s.uid);
  const std::string uid_map = strprintf("%u %u 1\n", (unsigned)geteuid(), (unsigned)geteuid());
  const std::string gid_map = strprintf("%u %u 1\n", (unsigned)getegid(), (unsigned)getegid());
  if (!open_pipes(s, s.unsandboxed ? std::string() : seccomp_bpf())) {
    ExecutionResult res;
    res.error = strprintf("execute_code: pipe: %s", strerror(errno));
    return res;
  }
  SandboxChild c{};
  c.argv = argv.data();
  c.envp = envp;
  c.out_w = s.fds[1], c.err_w = s.fds[3], c.started_w = s.fds[5], c.status_w = s.fds[7], c.seccomp_r = s.fds[10];
  c.info_w = s.unsandboxed ? -1 : s.fds[9];
  c.workdir = s.unsandboxed ? s.tmp_dir.c_str() : nullptr;
  c.uid = s.uid;
  c.tmpfs_dir = s.unsandboxed ? nullptr : s.tmp_dir.c_str();
  c.tmpfs_options = tmpfs_options.c_str();
  c.uid_map = !s.unsandboxed && !root ? uid_map.c_str() : nullptr;
  c.gid_map = gid_map.c_str();
  c.max_memory_bytes = opts.max_memory_bytes;
  c.max_file_bytes = opts.max_file_bytes;
  // bwrap's two processes (outside, and init inside) count against the run too. The run's count
  // is its own: as root its uid's, else its user namespace's (Linux 5.14 and later count
  // RLIMIT_NPROC per user namespace); on an older kernel not as root, the caller's uid's tasks
  // (threads included) count as well, so they are added
  struct rlimit nproc {};
  getrlimit(RLIMIT_NPROC, &nproc);  // unsandboxed: left as it is
  c.nproc = s.unsandboxed
                ? (int64_t)nproc.rlim_cur
                : opts.max_processes + 2 + (root || bwrap_nproc_per_user_namespace() ? 0 : bwrap_tasks_of(getuid()));
  c.max_open_files = opts.max_open_files;
  c.cpu_seconds = (int64_t)std::ceil(opts.timeout_seconds) + 1;
  return run_child(s, c, opts, bwrap);
}

ExecutionResult execute_code_to_the_end(const std::string& code, const ExecutionOptions& opts) {
  std::random_device random;
  const std::string marker = strprintf("nanochat-ran-to-the-end-%08x%08x%08x%08x", random(), random(), random(),
                                       random());
  // a line of its own even after output without a newline
  ExecutionResult res = execute_code(code + "\n\nprint(\"\\n" + marker + "\", flush=True)\n", opts);
  const std::string line = "\n" + marker + "\n";
  const size_t at = res.stdout_text.rfind(line);
  if (at != std::string::npos) res.stdout_text.erase(at, line.size());
  if (res.success && at == std::string::npos) {
    res.success = false;
    res.error = "the program exited before its end (exit status 0, but what follows the code never ran)";
  }
  return res;
}

}  // namespace nanochat
