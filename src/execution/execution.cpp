// execute_code: fork, limit, isolate, exec python -I -c <guard prelude> <code>, collect
// capped output under a wall-clock deadline, kill the process group, delete the temp dir.
#include "nanochat/execution.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <vector>

#include "nanochat/common/env.h"
#include "nanochat/common/error.h"
#include "nanochat/common/files.h"

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

void set_limit(int resource, rlim_t value) {
  struct rlimit r{value, value};
  setrlimit(resource, &r);
}

// the child after fork: only async-signal-safe calls until exec
[[noreturn]] void child_exec(const ExecutionOptions& opts, const char* dir, int out_w, int err_w, int status_w,
                             char* const argv[], char* const envp[]) {
  setpgid(0, 0);
  char isolated = '0';
  if (opts.isolate_network) {
    if (unshare(CLONE_NEWNET) == 0 || unshare(CLONE_NEWUSER | CLONE_NEWNET) == 0) isolated = '1';
  }
  int devnull = open("/dev/null", O_RDONLY);
  if (devnull < 0 || dup2(devnull, 0) < 0 || dup2(out_w, 1) < 0 || dup2(err_w, 2) < 0 || chdir(dir) != 0) {
    (void)!write(status_w, "E", 1);
    _exit(127);
  }
  // nothing else of the parent's leaks into the child (sockets, shards, locks)
  for (int fd = 3; fd < 4096; fd++)
    if (fd != status_w) close(fd);
  set_limit(RLIMIT_AS, (rlim_t)opts.max_memory_bytes);
  set_limit(RLIMIT_DATA, (rlim_t)opts.max_memory_bytes);
  set_limit(RLIMIT_STACK, (rlim_t)opts.max_memory_bytes);
  set_limit(RLIMIT_FSIZE, (rlim_t)opts.max_file_bytes);
  set_limit(RLIMIT_CORE, 0);
  set_limit(RLIMIT_CPU, (rlim_t)std::ceil(opts.timeout_seconds) + 1);  // a backstop to the wall clock
  (void)!write(status_w, &isolated, 1);
  execve(argv[0], argv, envp);
  (void)!write(status_w, "E", 1);
  _exit(127);
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

}  // namespace

ExecutionResult execute_code(const std::string& code, const ExecutionOptions& opts) {
  ExecutionResult res;
  std::string python = find_python(opts);
  char tmpl[] = "/tmp/nanochat_exec_XXXXXX";
  if (!mkdtemp(tmpl)) fail("execute_code: cannot create a temporary directory in /tmp: %s", strerror(errno));
  std::string dir = tmpl;

  std::string a0 = python, a1 = "-I", a2 = "-c", a3 = execution_guard_prelude(), a4 = code;
  char* argv[] = {a0.data(), a1.data(), a2.data(), a3.data(), a4.data(), nullptr};
  std::string e0 = "PATH=/usr/bin:/bin";
  char* envp[] = {e0.data(), nullptr};

  int out[2], err[2], status[2];
  if (pipe2(out, O_CLOEXEC) || pipe2(err, O_CLOEXEC) || pipe2(status, O_CLOEXEC)) {
    remove_tree(dir);
    fail("execute_code: pipe: %s", strerror(errno));
  }
  pid_t pid = fork();
  if (pid < 0) {
    remove_tree(dir);
    fail("execute_code: fork: %s", strerror(errno));
  }
  if (pid == 0) child_exec(opts, dir.c_str(), out[1], err[1], status[1], argv, envp);
  close(out[1]), close(err[1]), close(status[1]);
  setpgid(pid, pid);  // also here, so the group exists before any kill below

  // the child's report: the isolation byte, then 'E' only when exec failed
  char st[2] = {0, 0};
  ssize_t got = 0;
  for (ssize_t n; got < 2 && (n = read(status[0], st + got, 2 - got)) != 0;)
    if (n > 0) got += n;
    else if (errno != EINTR) break;
  close(status[0]);
  if (st[0] == 'E' || st[1] == 'E') {
    waitpid(pid, nullptr, 0);
    close(out[0]), close(err[0]);
    remove_tree(dir);
    fail("execute_code: cannot run %s", python.c_str());
  }
  res.network_isolated = st[0] == '1';

  Sink sinks[2] = {{out[0], &res.stdout_text, &res.output_truncated, opts.max_output_bytes},
                   {err[0], &res.stderr_text, &res.output_truncated, opts.max_output_bytes}};
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(opts.timeout_seconds);
  int wstatus = 0;
  bool exited = false;
  while (sinks[0].open || sinks[1].open || !exited) {
    if (!exited && waitpid(pid, &wstatus, WNOHANG) == pid) {
      exited = true;
      kill(-pid, SIGKILL);  // stragglers of the group would hold the pipes open
    }
    if (!exited && std::chrono::steady_clock::now() >= deadline) {
      res.timeout = true;
      kill(-pid, SIGKILL);
      kill(pid, SIGKILL);
      waitpid(pid, &wstatus, 0);
      exited = true;
    }
    pollfd fds[2];
    int n = 0;
    for (auto& s : sinks)
      if (s.open) fds[n++] = {s.fd, POLLIN, 0};
    if (n == 0) {
      if (!exited) usleep(5000);
      continue;
    }
    if (poll(fds, n, 20) > 0)
      for (int i = 0; i < n; i++)
        if (fds[i].revents)
          for (auto& s : sinks)
            if (s.fd == fds[i].fd) s.read_some();
    if (res.timeout) break;  // the group is dead; what is left in the pipes is not waited for
  }
  close(out[0]), close(err[0]);
  remove_tree(dir);

  res.exit_code = WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : WIFSIGNALED(wstatus) ? -WTERMSIG(wstatus) : -1;
  res.memory_exceeded = res.stderr_text.find("MemoryError") != std::string::npos;
  if (res.timeout) {
    res.success = false;
    res.error = "Execution timed out (process killed)";
    return res;
  }
  res.success = res.exit_code == 0;
  if (!res.success) {
    // the last non-empty line of stderr, as upstream reports the exception
    std::string s = res.stderr_text;
    while (!s.empty() && (s.back() == '\n' || s.back() == ' ' || s.back() == '\r' || s.back() == '\t')) s.pop_back();
    size_t nl = s.rfind('\n');
    res.error = s.empty() ? "Execution failed" : s.substr(nl == std::string::npos ? 0 : nl + 1);
  }
  return res;
}

}  // namespace nanochat
