// The supervisor and the program's set-up (see sandbox.h). Async-signal-safe only.
#include "sandbox.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/landlock.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "nanochat/execution.h"

// rights newer than Debian 12's kernel headers
#ifndef LANDLOCK_ACCESS_FS_REFER
#define LANDLOCK_ACCESS_FS_REFER (1ULL << 13)
#endif
#ifndef LANDLOCK_ACCESS_FS_TRUNCATE
#define LANDLOCK_ACCESS_FS_TRUNCATE (1ULL << 14)
#endif
#ifndef MOUNT_ATTR_RDONLY
#define MOUNT_ATTR_RDONLY 0x00000001
#endif

namespace nanochat {

namespace {

void report(int fd, char tag, int32_t value) {
  char msg[5];
  msg[0] = tag;
  std::memcpy(msg + 1, &value, 4);
  (void)!write(fd, msg, sizeof msg);
}

void set_limit(int resource, int64_t value) {
  struct rlimit r{(rlim_t)value, (rlim_t)value};
  setrlimit(resource, &r);
}

// Landlock: every right that changes the file system (write, truncate, create, delete,
// rename, link) is handled, and granted beneath `dir` only (plus writing to /dev/null).
// Reading and executing stay unrestricted. Needs no privilege, only no_new_privs.
bool restrict_writes_to(const char* dir) {
  const int abi = sandbox_landlock_abi();
  if (abi < 1) return false;
  uint64_t rights = LANDLOCK_ACCESS_FS_WRITE_FILE | LANDLOCK_ACCESS_FS_REMOVE_DIR | LANDLOCK_ACCESS_FS_REMOVE_FILE |
                    LANDLOCK_ACCESS_FS_MAKE_CHAR | LANDLOCK_ACCESS_FS_MAKE_DIR | LANDLOCK_ACCESS_FS_MAKE_REG |
                    LANDLOCK_ACCESS_FS_MAKE_SOCK | LANDLOCK_ACCESS_FS_MAKE_FIFO | LANDLOCK_ACCESS_FS_MAKE_BLOCK |
                    LANDLOCK_ACCESS_FS_MAKE_SYM;
  if (abi >= 2) rights |= LANDLOCK_ACCESS_FS_REFER;
  if (abi >= 3) rights |= LANDLOCK_ACCESS_FS_TRUNCATE;
  struct landlock_ruleset_attr attr {};
  attr.handled_access_fs = rights;
  const int ruleset = (int)syscall(SYS_landlock_create_ruleset, &attr, sizeof attr, 0);
  if (ruleset < 0) return false;
  bool ok = false;
  const int dir_fd = open(dir, O_PATH | O_CLOEXEC);
  if (dir_fd >= 0) {
    struct landlock_path_beneath_attr beneath {};
    beneath.allowed_access = rights;
    beneath.parent_fd = dir_fd;
    ok = syscall(SYS_landlock_add_rule, ruleset, LANDLOCK_RULE_PATH_BENEATH, &beneath, 0) == 0;
    close(dir_fd);
  }
  const int null_fd = open("/dev/null", O_PATH | O_CLOEXEC);
  if (null_fd >= 0) {
    struct landlock_path_beneath_attr beneath {};
    beneath.allowed_access = LANDLOCK_ACCESS_FS_WRITE_FILE | (abi >= 3 ? LANDLOCK_ACCESS_FS_TRUNCATE : 0);
    beneath.parent_fd = null_fd;
    (void)syscall(SYS_landlock_add_rule, ruleset, LANDLOCK_RULE_PATH_BENEATH, &beneath, 0);
    close(null_fd);
  }
  ok = ok && prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 && syscall(SYS_landlock_restrict_self, ruleset, 0) == 0;
  close(ruleset);
  return ok;
}

// In the new mount namespace: nothing propagates back to the host, every mount becomes
// read-only (mount_setattr, recursive), then `dir` (bound onto itself first, so that it is a
// mount of its own) is made writable again.
bool make_mounts_read_only_but(const char* dir) {
  struct {
    uint64_t attr_set, attr_clr, propagation, userns_fd;
  } attr{};
  if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) return false;
  if (mount(dir, dir, nullptr, MS_BIND, nullptr) != 0) return false;
  attr.attr_set = MOUNT_ATTR_RDONLY;
  if (syscall(SYS_mount_setattr, AT_FDCWD, "/", AT_RECURSIVE, &attr, sizeof attr) != 0) return false;
  attr.attr_set = 0;
  attr.attr_clr = MOUNT_ATTR_RDONLY;
  return syscall(SYS_mount_setattr, AT_FDCWD, dir, 0, &attr, sizeof attr) == 0;
}

// the program: limits, isolation, exec. Reports its isolation bits, or why it failed.
[[noreturn]] void run_program(const SandboxPlan& p) {
  setpgid(0, 0);
  prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);  // the supervisor gone: so is the program
  // handlers die with exec, but an ignored signal stays ignored: every one back to default
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  for (int sig = 1; sig < 32; sig++)
    if (sig != SIGKILL && sig != SIGSTOP) sigaction(sig, &dfl, nullptr);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  uint32_t bits = p.namespaces;
  auto setup_failed = [&]() {
    report(p.status_w, kReportSetupErrno, errno);
    _exit(127);
  };
  const int devnull = open("/dev/null", O_RDONLY);
  if (devnull < 0 || dup2(devnull, 0) < 0 || dup2(p.out_w, 1) < 0 || dup2(p.err_w, 2) < 0 || chdir(p.dir) != 0)
    setup_failed();
  // nothing else of the parent's leaks into the program (sockets, shards, locks)
  for (int fd = 3; fd < 4096; fd++)
    if (fd != p.status_w) close(fd);
  set_limit(RLIMIT_AS, p.max_memory_bytes);
  set_limit(RLIMIT_DATA, p.max_memory_bytes);
  set_limit(RLIMIT_STACK, p.max_memory_bytes);
  set_limit(RLIMIT_FSIZE, p.max_file_bytes);
  set_limit(RLIMIT_CORE, 0);
  set_limit(RLIMIT_CPU, p.cpu_seconds);  // a backstop to the wall clock
  set_limit(RLIMIT_NPROC, p.max_processes);
  // (then into `dir` again: the working directory was the one under the new bind mount)
  if (p.mount_namespace && make_mounts_read_only_but(p.dir)) {
    if (chdir(p.dir) != 0) setup_failed();
    bits |= kExecReadOnlyMounts;
  }
  if (p.drop_uid) {
    // raw syscalls: glibc's setuid() would try to signal threads this child does not have
    const uid_t nobody = 65534;
    if (syscall(SYS_setgroups, 0, nullptr) != 0 || syscall(SYS_setresgid, nobody, nobody, nobody) != 0 ||
        syscall(SYS_setresuid, nobody, nobody, nobody) != 0)
      setup_failed();
    bits |= kExecUidDropped;
  }
  if (getuid() != 0) bits |= kExecProcessLimit;  // root ignores RLIMIT_NPROC
  if (p.landlock && restrict_writes_to(p.dir)) bits |= kExecLandlock;
  prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);  // no set-uid binary gets root back
  report(p.status_w, kReportIsolation, (int32_t)bits);
  execve(p.argv[0], p.argv, p.envp);
  report(p.status_w, kReportExecErrno, errno);
  _exit(127);
}

// the parent pid of /proc/<pid>/stat, or -1 (the field after the command's closing paren)
pid_t parent_of(const char* pid_name) {
  char path[64] = "/proc/";
  size_t n = std::strlen(path);
  for (const char* c = pid_name; *c && n < sizeof path - 8; c++) path[n++] = *c;
  std::memcpy(path + n, "/stat", 6);
  const int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  char buf[512];
  const ssize_t got = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (got <= 0) return -1;
  buf[got] = 0;
  const char* paren = std::strrchr(buf, ')');
  if (!paren || std::strlen(paren) < 5) return -1;
  // ") S 1234 ..."
  pid_t ppid = 0;
  for (const char* c = paren + 4; *c >= '0' && *c <= '9'; c++) ppid = ppid * 10 + (*c - '0');
  return ppid;
}

// subreaper mode: SIGKILL every child (orphans of the program included), reap, repeat until
// none is left; a killed process's own children are re-parented to us for the next round
void kill_descendants_as_subreaper(pid_t program) {
  kill(-program, SIGKILL);
  const pid_t self = getpid();
  for (int round = 0; round < 100000; round++) {
    const int proc = open("/proc", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (proc >= 0) {
      alignas(8) char buf[8192];
      for (long n; (n = syscall(SYS_getdents64, proc, buf, sizeof buf)) > 0;) {
        for (long off = 0; off < n;) {
          auto* d = (struct dirent64*)(buf + off);
          off += d->d_reclen;
          if (d->d_name[0] < '1' || d->d_name[0] > '9') continue;
          if (parent_of(d->d_name) != self) continue;
          pid_t pid = 0;
          for (const char* c = d->d_name; *c; c++) pid = pid * 10 + (*c - '0');
          kill(pid, SIGKILL);
        }
      }
      close(proc);
    }
    int status;
    if (waitpid(-1, &status, 0) < 0 && errno == ECHILD) return;
  }
}

}  // namespace

pid_t sandbox_clone(unsigned long ns_flags) {
  // newsp 0: the child continues on a copy of this stack, like fork()
  return (pid_t)syscall(SYS_clone, ns_flags | SIGCHLD, 0, nullptr, nullptr, 0);
}

int sandbox_landlock_abi() {
  const long abi = syscall(SYS_landlock_create_ruleset, nullptr, 0, LANDLOCK_CREATE_RULESET_VERSION);
  return abi < 0 ? -errno : (int)abi;
}

void sandbox_supervise(const SandboxPlan& p) {
  const bool pid_namespace = p.namespaces & kExecPidNamespace;
  if (!pid_namespace) prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
  prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);  // the parent gone: no supervisor left behind
  sigset_t wake;
  sigemptyset(&wake);
  sigaddset(&wake, SIGTERM);
  sigaddset(&wake, SIGCHLD);
  sigprocmask(SIG_BLOCK, &wake, nullptr);  // taken with sigtimedwait below

  const pid_t program = sandbox_clone(0);
  if (program == 0) run_program(p);
  if (program < 0) {
    report(p.status_w, kReportForkErrno, errno);
    _exit(1);
  }
  close(p.out_w);  // the pipes close once the program's whole tree is gone
  close(p.err_w);

  int program_status = 0;
  bool program_done = false, stop = false;
  while (!program_done && !stop) {
    const struct timespec tick = {0, 50 * 1000 * 1000};
    if (sigtimedwait(&wake, nullptr, &tick) == SIGTERM) stop = true;
    int status;
    for (pid_t pid; (pid = waitpid(-1, &status, WNOHANG)) > 0;)
      if (pid == program) program_status = status, program_done = true;
  }
  if (pid_namespace) {
    kill(-1, SIGKILL);  // as init: every process of the namespace but this one
    int status;
    while (waitpid(-1, &status, 0) > 0 || errno == EINTR) {
    }
  } else {
    kill_descendants_as_subreaper(program);
  }
  if (program_done) report(p.status_w, kReportWaitStatus, program_status);
  _exit(0);
}

}  // namespace nanochat
