// execute_code, the parent's side: a temp dir, clone the supervisor into whichever
// namespaces the kernel grants (sandbox.cpp runs python -I -c <guard prelude> <code> under
// it), collect capped output under a wall-clock deadline, kill the whole tree, delete the dir.
#include "nanochat/execution.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

#include "nanochat/common/env.h"
#include "nanochat/common/error.h"
#include "nanochat/common/files.h"
#include "nanochat/common/log.h"
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
_nanochat_code = sys.argv[1]
del sys.argv[1:]
_nanochat_reliability_guard()
del _nanochat_reliability_guard
exec(compile(_nanochat_code, "<llm>", "exec"), {"__name__": "__main__"})
)PY";
  return s;
}

namespace {

std::string find_python(const ExecutionOptions& opts) {
  std::string p = !opts.python.empty() ? opts.python : env_get("NANOCHAT_EXEC_PYTHON").value_or("python3");
  if (p.find('/') != std::string::npos) return p;
  std::string path = env_get("PATH").value_or("/usr/bin:/bin");
  size_t from = 0;
  while (from <= path.size()) {
    size_t to = path.find(':', from);
    if (to == std::string::npos) to = path.size();
    std::string cand = (to > from ? path.substr(from, to - from) : ".") + "/" + p;
    if (access(cand.c_str(), X_OK) == 0) return cand;
    from = to + 1;
  }
  fail("execute_code: %s not found on PATH (set NANOCHAT_EXEC_PYTHON to a Python 3 interpreter)", p.c_str());
}

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

// one run as the supervisor reports it
struct Run {
  ExecutionResult res;
  int exec_errno = 0;     // execve failed
  std::string failure;    // the program could not be started (set-up, fork, exec)
  std::string ns_refused;  // why the namespaces were not granted ("" when they were)
  int32_t refused = 0;     // SandboxRefused: the jail's layers the kernel would not give
  std::string budget_refused;  // why there is no per-run cgroup ("" when there is)
};

// The directories the interpreter needs (its prefix, and a venv's own) that uid 65534 cannot
// reach because an ancestor is not searchable by others (a pyenv or venv under a 0700
// /root): each with the topmost such ancestor, which the jail covers with a tmpfs.
void interpreter_exposures(const std::string& python, std::vector<std::string>& expose, std::vector<std::string>& cover) {
  auto up2 = [](std::string path) {  // <prefix>/bin/python -> <prefix>
    for (int i = 0; i < 2; i++) {
      const size_t slash = path.find_last_of('/');
      path = slash == std::string::npos || slash == 0 ? "/" : path.substr(0, slash);
    }
    return path;
  };
  std::vector<std::string> dirs;
  char real[PATH_MAX];
  if (realpath(python.c_str(), real)) dirs.push_back(up2(real));
  if (python[0] == '/') dirs.push_back(up2(python));
  for (const std::string& dir : dirs) {
    if (dir == "/" || std::find(expose.begin(), expose.end(), dir) != expose.end()) continue;
    for (size_t at = dir.find('/', 1); ; at = dir.find('/', at + 1)) {
      const std::string ancestor = dir.substr(0, at);
      struct stat st{};
      if (ancestor == dir) break;
      if (stat(ancestor.c_str(), &st) == 0 && !(st.st_mode & S_IXOTH)) {
        expose.push_back(dir);
        cover.push_back(ancestor);
        break;
      }
      if (at == std::string::npos) break;
    }
  }
}

// the host directories covered by an empty tmpfs in the jail (where named sockets live: a
// database's, X11's, D-Bus's, an agent's), but not one the interpreter lives below
std::vector<std::string> hidden_dirs(const std::string& python) {
  char real[PATH_MAX];
  const std::string interpreter = realpath(python.c_str(), real) ? real : python;
  std::vector<std::string> hide;
  for (const char* dir : {"/tmp", "/var/tmp", "/run", "/var/run"}) {
    struct stat st{};
    if (lstat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) continue;  // /var/run is mostly a link to /run
    const std::string below = std::string(dir) + "/";
    if (interpreter.rfind(below, 0) == 0 || python.rfind(below, 0) == 0) continue;
    hide.push_back(dir);
  }
  return hide;
}

bool errno_means_missing_interpreter(int e) {
  return e == ENOENT || e == EACCES || e == ENOEXEC || e == ENOTDIR || e == ELOOP || e == EISDIR || e == EPERM;
}

Run run_sandboxed(const std::string& code, const ExecutionOptions& opts, const std::string& python, bool drop_uid) {
  Run run;
  ExecutionResult& res = run.res;
  char tmpl[] = "/tmp/nanochat_exec_XXXXXX";
  if (!mkdtemp(tmpl)) {
    run.failure = strprintf("execute_code: cannot create a temporary directory in /tmp: %s", strerror(errno));
    return run;
  }
  const std::string dir = tmpl;
  if (drop_uid && chown(dir.c_str(), 65534, 65534) != 0) drop_uid = false;

  // everything the children use is built here: after the clone they may not allocate
  std::string a0 = python, a1 = "-I", a2 = "-c", a3 = execution_guard_prelude(), a4 = code;
  char* argv[] = {a0.data(), a1.data(), a2.data(), a3.data(), a4.data(), nullptr};
  std::string e0 = "PATH=/usr/bin:/bin";
  char* envp[] = {e0.data(), nullptr};

  int out[2], err[2], status[2];
  if (pipe2(out, O_CLOEXEC) || pipe2(err, O_CLOEXEC) || pipe2(status, O_CLOEXEC)) {
    run.failure = strprintf("execute_code: pipe: %s", strerror(errno));
    remove_tree(dir);
    return run;
  }
  const bool landlock = opts.landlock && sandbox_landlock_abi() >= 1;
  const bool root = geteuid() == 0;
  unsigned long want = CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWUTS;
  if (opts.pid_namespace) want |= CLONE_NEWPID;
  if (opts.isolate_network) want |= CLONE_NEWNET;
  if (!root) want |= CLONE_NEWUSER;  // unprivileged: through a user namespace
  const std::string uid_map = strprintf("0 %u 1", (unsigned)geteuid()), gid_map = strprintf("0 %u 1", (unsigned)getegid());
  const std::string tmpfs_options = strprintf("size=%lld,nr_inodes=%lld,mode=0700%s", (long long)opts.max_disk_bytes,
                                              (long long)std::max<int64_t>(1024, opts.max_disk_bytes / 4096),
                                              drop_uid ? ",uid=65534,gid=65534" : "");
  // as root dropping to 65534: the interpreter's directories where a 0700 home hides them
  std::vector<std::string> expose, cover;
  if (root && drop_uid) interpreter_exposures(python, expose, cover);
  std::vector<const char*> expose_c, cover_c;
  for (size_t i = 0; i < expose.size(); i++) expose_c.push_back(expose[i].c_str()), cover_c.push_back(cover[i].c_str());
  expose_c.push_back(nullptr);
  cover_c.push_back(nullptr);
  const std::vector<std::string> hide = hidden_dirs(python);
  std::vector<const char*> hide_c;
  for (const std::string& h : hide) hide_c.push_back(h.c_str());
  hide_c.push_back(nullptr);

  SandboxPlan plan{};
  plan.dir = dir.c_str();
  plan.argv = argv;
  plan.envp = envp;
  plan.out_w = out[1], plan.err_w = err[1], plan.status_w = status[1];
  plan.drop_uid = drop_uid;
  plan.landlock = landlock;
  plan.seccomp = opts.seccomp;
  plan.seccomp_filter = opts.seccomp ? sandbox_seccomp_filter() : nullptr;  // here: libseccomp allocates
  plan.uid_map = uid_map.c_str();
  plan.gid_map = gid_map.c_str();
  plan.tmpfs_options = tmpfs_options.c_str();
  plan.expose = expose_c.data();
  plan.expose_cover = cover_c.data();
  plan.hide = hide_c.data();
  plan.max_memory_bytes = opts.max_memory_bytes;
  plan.max_file_bytes = opts.max_file_bytes;
  plan.max_processes = opts.max_processes;
  plan.cpu_seconds = (int64_t)std::ceil(opts.timeout_seconds) + 1;
  // one budget for the whole tree: the supervisor starts inside the run's cgroup
  RunBudget budget;
  if (opts.max_run_memory_bytes > 0)
    run_budget_open(budget, opts.max_run_memory_bytes, opts.max_processes + 1, run.budget_refused);
  pid_t pid = -1;
  auto clone_supervisor = [&](unsigned long flags) {
    pid_t child = sandbox_clone(flags, budget.fd);
    if (child < 0 && budget.fd >= 0) {  // clone3 or CLONE_INTO_CGROUP refused (before Linux 5.7)?
      const int cgroup_errno = errno;
      child = sandbox_clone(flags, -1);
      if (child > 0) {  // it was the cgroup
        run.budget_refused = strprintf("clone3(CLONE_INTO_CGROUP): %s", strerror(cgroup_errno));
        run_budget_close(budget);
      }
    }
    if (child == 0) sandbox_supervise(plan);
    return child;
  };
  if (want) {
    plan.namespaces = (want & CLONE_NEWPID ? kExecPidNamespace : kExecSubreaper) |
                      (want & CLONE_NEWNET ? kExecNetworkNamespace : 0u);
    plan.mount_namespace = want & CLONE_NEWNS;
    plan.user_namespace = want & CLONE_NEWUSER;
    pid = clone_supervisor(want);
    if (pid < 0) run.ns_refused = strprintf("clone(CLONE_NEW*): %s", strerror(errno));
  }
  if (pid < 0) {  // no namespaces: a subreaper holds the tree
    plan.namespaces = kExecSubreaper;
    plan.mount_namespace = plan.user_namespace = false;
    pid = clone_supervisor(0);
  }
  const int clone_errno = errno;
  close(out[1]), close(err[1]), close(status[1]);
  if (pid < 0) {
    close(out[0]), close(err[0]), close(status[0]);
    run_budget_close(budget);
    remove_tree(dir);
    run.failure = strprintf("execute_code: cannot fork: %s", strerror(clone_errno));
    return run;
  }
  const bool pid_namespace = plan.namespaces & kExecPidNamespace;

  // the status pipe: 5-byte reports (sandbox.h), until the supervisor exits
  std::string reports;
  int wait_status = -1;
  auto take_reports = [&]() {
    for (; reports.size() >= 5; reports.erase(0, 5)) {
      int32_t v;
      std::memcpy(&v, reports.data() + 1, 4);
      switch (reports[0]) {
        case kReportIsolation: res.isolation = (uint32_t)v; break;
        case kReportWaitStatus: wait_status = v; break;
        case kReportExecErrno:
          run.exec_errno = v;
          run.failure = v == E2BIG ? "execute_code: the program is too long to pass to exec (E2BIG)"
                                   : strprintf("execute_code: cannot run %s: %s", python.c_str(), strerror(v));
          break;
        case kReportSetupErrno: run.failure = strprintf("execute_code: cannot set up the sandbox: %s", strerror(v)); break;
        case kReportForkErrno: run.failure = strprintf("execute_code: cannot fork: %s", strerror(v)); break;
        case kReportRefused: run.refused = v; break;
      }
    }
  };
  Sink sinks[3] = {{out[0], &res.stdout_text, &res.output_truncated, opts.max_output_bytes},
                   {err[0], &res.stderr_text, &res.output_truncated, opts.max_output_bytes},
                   {status[0], &reports, &res.output_truncated, 1 << 16}};
  const auto start = std::chrono::steady_clock::now();
  const auto deadline = start + std::chrono::duration<double>(opts.timeout_seconds);
  bool reaped = false;
  auto reaped_at = start;
  for (;;) {
    if (!reaped && waitpid(pid, nullptr, WNOHANG) == pid) reaped = true, reaped_at = std::chrono::steady_clock::now();
    const bool pipes_open = sinks[0].open || sinks[1].open || sinks[2].open;
    // the whole tree is gone once the supervisor is; a pipe still open a second later was
    // inherited by something outside it (cannot happen with a PID namespace)
    if (reaped && (!pipes_open || std::chrono::steady_clock::now() - reaped_at > std::chrono::seconds(1))) break;
    if (!reaped && std::chrono::steady_clock::now() >= deadline) {
      res.timeout = true;
      if (!pid_namespace) {  // the subreaper kills the tree itself on SIGTERM
        kill(pid, SIGTERM);
        for (int i = 0; i < 200 && waitpid(pid, nullptr, WNOHANG) != pid; i++) usleep(10000);
      }
      kill(pid, SIGKILL);  // a PID namespace's init takes the whole namespace with it
      waitpid(pid, nullptr, 0);
      break;
    }
    pollfd fds[3];
    int n = 0;
    for (auto& s : sinks)
      if (s.open) fds[n++] = {s.fd, POLLIN, 0};
    if (n == 0) {
      usleep(5000);
      continue;
    }
    if (poll(fds, n, 20) > 0)
      for (int i = 0; i < n; i++)
        if (fds[i].revents)
          for (auto& s : sinks)
            if (s.fd == fds[i].fd) s.read_some();
  }
  for (auto& s : sinks) {  // what is already in the pipes
    fcntl(s.fd, F_SETFL, O_NONBLOCK);
    while (s.open && !res.timeout) {
      const size_t before = s.text->size();
      s.read_some();
      if (s.text->size() == before) break;
    }
    close(s.fd);
  }
  take_reports();
  const bool budget_held = !budget.dir.empty();
  const bool out_of_memory = run_budget_close(budget);
  remove_tree(dir);
  if (budget_held) res.isolation |= kExecRunBudget;

  res.network_isolated = res.isolation & kExecNetworkNamespace;
  if (res.timeout) {
    res.success = false;
    res.error = "Execution timed out (process killed)";
    return run;
  }
  if (!run.failure.empty()) {
    res.success = false;
    res.error = run.failure;
    return run;
  }
  if (wait_status < 0) {
    res.error = "Execution failed (the sandbox's supervisor died)";
    return run;
  }
  res.exit_code = WIFEXITED(wait_status)   ? WEXITSTATUS(wait_status)
                  : WIFSIGNALED(wait_status) ? -WTERMSIG(wait_status)
                                             : -1;
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
  return run;
}

// As root, can uid 65534 run this interpreter (its directories under a 0700 home exposed by the
// jail)? Tried once per
// interpreter by running "pass" in the sandbox as 65534.
bool nobody_can_run(const std::string& python, const ExecutionOptions& opts) {
  static std::mutex mutex;
  static std::map<std::string, bool> known;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = known.find(python);
  if (it != known.end()) return it->second;
  ExecutionOptions probe = opts;
  probe.timeout_seconds = 10;
  Run r = run_sandboxed("pass", probe, python, true);
  return known[python] = r.res.success && (r.res.isolation & kExecUidDropped);
}

// one log line, the first time: which layers are in force, and why the others are not
void log_isolation_once(const Run& run, const ExecutionOptions& opts, bool root, bool uid_refused) {
  static std::atomic<bool> logged{false};
  if (run.res.isolation == 0 || logged.exchange(true)) return;
  const uint32_t bits = run.res.isolation;
  std::vector<std::string> missing;
  if (!(bits & kExecPidNamespace))
    missing.push_back("PID namespace (" + (opts.pid_namespace ? run.ns_refused : std::string("turned off")) +
                      "; a subreaper kills the tree instead)");
  if (!(bits & kExecNetworkNamespace))
    missing.push_back("network namespace (" + (opts.isolate_network ? run.ns_refused : std::string("turned off")) + ")");
  if (root && !(bits & kExecUidDropped))
    missing.push_back(uid_refused ? "uid drop (uid 65534 cannot run the interpreter)" : "uid drop (turned off)");
  if (!(bits & kExecProcessLimit)) missing.push_back("RLIMIT_NPROC (root ignores it)");
  if (!(bits & kExecRunBudget))
    missing.push_back(opts.max_run_memory_bytes > 0
                          ? "one memory budget for the run (" + run.budget_refused +
                                "), so the memory and process limits are per process"
                          : std::string("one memory budget for the run (turned off)"));
  const std::pair<int32_t, const char*> refusals[] = {
      {kRefusedTmpfs, "tmpfs as the temp dir"},
      {kRefusedProc, "own /proc (an empty one hides the host's)"},
      {kRefusedEmptyProc, "hiding the host's /proc"},
      {kRefusedExpose, "re-exposing the interpreter's directories"},
      {kRefusedReadOnly, "read-only mounts"},
      {kRefusedSeccomp, "seccomp filter"},
      {kRefusedCaps, "dropping capabilities"},
      {kRefusedDev, "a /dev of its own (the host's, with its terminals, is visible)"},
      {kRefusedHide, "hiding the host's /tmp, /var/tmp and /run"}};
  for (auto& [bit, name] : refusals)
    if (run.refused & bit) missing.push_back(std::string(name) + " (refused by the kernel)");
  if (!(bits & kExecCapsDropped)) missing.push_back("no capabilities (the program runs with root's)");
  if (!(bits & (kExecLandlock | kExecReadOnlyMounts))) {
    const int abi = sandbox_landlock_abi();
    missing.push_back(strprintf("write confinement (landlock: %s; read-only mount namespace: not granted)",
                                abi >= 1 ? "turned off" : strerror(-abi)));
  }
  std::string not_had;
  for (auto& m : missing) not_had += (not_had.empty() ? "" : "; ") + m;
  log_info("execution sandbox: %s%s%s", execution_isolation_describe(bits).c_str(),
           not_had.empty() ? "" : "; not in force: ", not_had.c_str());
}

}  // namespace

std::string execution_isolation_describe(uint32_t isolation) {
  static const std::pair<uint32_t, const char*> names[] = {
      {kExecPidNamespace, "PID namespace"},       {kExecSubreaper, "child subreaper"},
      {kExecNetworkNamespace, "network namespace"}, {kExecUidDropped, "uid 65534"},
      {kExecProcessLimit, "RLIMIT_NPROC"},        {kExecLandlock, "landlock (writes only in the temp dir)"},
      {kExecReadOnlyMounts, "read-only mounts but the temp dir"}, {kExecUserNamespace, "user namespace"},
      {kExecTmpfs, "size-capped tmpfs as the temp dir"},         {kExecFreshProc, "own /proc"},
      {kExecCapsDropped, "no capabilities"},                     {kExecSeccomp, "seccomp filter"},
      {kExecOwnSession, "own session (no controlling terminal)"}, {kExecPrivateDev, "own /dev (no terminals)"},
      {kExecHostDirsHidden, "host's /tmp and /run hidden"},       {kExecRunBudget, "one memory budget for the run (cgroup v2)"}};
  std::string s;
  for (auto& [bit, name] : names)
    if (isolation & bit) s += (s.empty() ? "" : ", ") + std::string(name);
  return s.empty() ? "none" : s;
}

std::string execution_run_budget_refused() { return run_budget_refused(); }

ExecutionResult execute_code(const std::string& code, const ExecutionOptions& opts) {
  const std::string python = find_python(opts);
  const bool root = geteuid() == 0;
  const bool drop = root && opts.drop_uid && nobody_can_run(python, opts);
  Run run = run_sandboxed(code, opts, python, drop);
  // a missing interpreter fails every sample alike: that is the caller's error, not the sample's
  if (run.exec_errno && errno_means_missing_interpreter(run.exec_errno))
    fail("execute_code: cannot run %s: %s (set NANOCHAT_EXEC_PYTHON to a Python 3 interpreter)", python.c_str(),
         strerror(run.exec_errno));
  log_isolation_once(run, opts, root, root && opts.drop_uid && !drop);
  return run.res;
}

}  // namespace nanochat
