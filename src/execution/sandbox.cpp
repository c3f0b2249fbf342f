// The child's set-up before bwrap (see sandbox.h). Async-signal-safe only.
#include "sandbox.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <initializer_list>

#ifndef CLONE_INTO_CGROUP
#define CLONE_INTO_CGROUP 0x200000000ULL
#endif

namespace nanochat {

namespace {

[[noreturn]] void step_failed(int status_w, SandboxStep step) {
  char msg[5];
  const int32_t e = errno;
  msg[0] = step;
  std::memcpy(msg + 1, &e, 4);
  (void)!write(status_w, msg, sizeof msg);
  _exit(127);
}

bool set_limit(int resource, int64_t value) {
  struct rlimit r {
    (rlim_t) value, (rlim_t)value
  };
  return setrlimit(resource, &r) == 0;
}

// the descriptors the sandbox gets, at fixed numbers: 0 /dev/null, 1 out, 2 err, 3 started,
// 4 seccomp (bwrap reads and closes it), 5 status (close-on-exec), 6 bwrap's --info-fd; every
// other one closed
bool arrange_descriptors(const SandboxChild& c) {
  const int from[6] = {c.out_w, c.err_w, c.started_w, c.seccomp_r, c.status_w, c.info_w};
  int high[6];
  for (int i = 0; i < 6; i++) {  // first out of the way of the low numbers
    high[i] = from[i] < 0 ? -1 : fcntl(from[i], F_DUPFD_CLOEXEC, 10);
    if (from[i] >= 0 && high[i] < 0) return false;
  }
  const int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (devnull < 0 || dup3(devnull, 0, 0) < 0) return false;
  for (int i = 0; i < 6; i++) {
    if (high[i] < 0) close(i + 1);
    else if (dup3(high[i], i + 1, i == 4 ? O_CLOEXEC : 0) < 0) return false;
  }
  return syscall(SYS_close_range, 7u, ~0u, 0) == 0 || errno == ENOSYS;
}

bool write_file(const char* path, const char* text) {
  const int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const ssize_t n = (ssize_t)strlen(text);
  const bool ok = write(fd, text, (size_t)n) == n;
  close(fd);
  return ok;
}

// not root: a user namespace of the run's own, the caller's uid and gid mapped to themselves, so
// the mount below is allowed (tmpfs mounts in a user namespace) and the run's processes count
// against RLIMIT_NPROC apart from the caller's; made before the rlimits are lowered, so the
// caller's uid, one level up, is held to the caller's own limit. The capabilities it gives are
// gone at bwrap's exec (the uid is not 0 in it).
void enter_user_namespace(const SandboxChild& c) {
  if (syscall(SYS_unshare, CLONE_NEWUSER) != 0) step_failed(5, kStepUserNamespace);
  // a caller that changed its uid without an exec is not dumpable, and then /proc/self's files
  // are root's: dumpable for the three writes only (bwrap's exec settles it again)
  const int dumpable = prctl(PR_GET_DUMPABLE, 0, 0, 0, 0);
  if (dumpable == 0) prctl(PR_SET_DUMPABLE, 1, 0, 0, 0);
  if (!write_file("/proc/self/setgroups", "deny") || !write_file("/proc/self/uid_map", c.uid_map) ||
      !write_file("/proc/self/gid_map", c.gid_map))
    step_failed(5, kStepUserNamespace);
  if (dumpable == 0) prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
}

// the run's tmpfs in a mount namespace of this child's own (bwrap's, made from it, inherits
// it); sized and with an inode cap, which bwrap's own --tmpfs cannot set
void mount_run_tmpfs(const SandboxChild& c) {
  if (syscall(SYS_unshare, CLONE_NEWNS) != 0 || mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0)
    step_failed(5, kStepMountNamespace);
  if (mount("tmpfs", c.tmpfs_dir, "tmpfs", MS_NOSUID | MS_NODEV, c.tmpfs_options) != 0) step_failed(5, kStepTmpfs);
  const int dir = open(c.tmpfs_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0) step_failed(5, kStepTmpfs);
  for (const char* sub : {"tmp", "shm"})
    if (mkdirat(dir, sub, 0700) != 0 || (c.uid != (uid_t)-1 && fchownat(dir, sub, c.uid, c.uid, 0) != 0))
      step_failed(5, kStepTmpfs);
  close(dir);
}

}  // namespace

pid_t sandbox_clone(int cgroup_fd) {
  if (cgroup_fd >= 0) {
    struct {  // clone_args, as of Linux 5.7
      uint64_t flags, pidfd, child_tid, parent_tid, exit_signal, stack, stack_size, tls, set_tid, set_tid_size, cgroup;
    } args{};
    args.flags = CLONE_INTO_CGROUP;
    args.exit_signal = SIGCHLD;
    args.cgroup = (uint64_t)cgroup_fd;
    return (pid_t)syscall(SYS_clone3, &args, sizeof args);  // no stack: a copy of this one, like fork()
  }
  return (pid_t)syscall(SYS_clone, SIGCHLD, 0, nullptr, nullptr, 0);
}

void sandbox_child_exec(const SandboxChild& c) {
  // a session of its own: the caller's terminal is not its controlling terminal
  setsid();
  // the server's handlers came along: every signal back to its default, none blocked
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  for (int sig = 1; sig < 32; sig++)
    if (sig != SIGKILL && sig != SIGSTOP) sigaction(sig, &dfl, nullptr);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  if (!arrange_descriptors(c)) step_failed(c.status_w, kStepDescriptors);
  if (c.workdir && chdir(c.workdir) != 0) step_failed(5, kStepDescriptors);
  if (c.uid_map) enter_user_namespace(c);
  if (c.tmpfs_dir) mount_run_tmpfs(c);
  if (c.uid != (uid_t)-1) {
    // raw syscalls: glibc's setuid() would try to signal threads this child does not have
    if (syscall(SYS_setgroups, 0, nullptr) != 0 || syscall(SYS_setresgid, c.uid, c.uid, c.uid) != 0 ||
        syscall(SYS_setresuid, c.uid, c.uid, c.uid) != 0 || getuid() != c.uid || geteuid() != c.uid)
      step_failed(5, kStepUid);
  }
  // no set-uid binary (a set-uid bwrap included) gets privileges back
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) step_failed(5, kStepUid);
  if (!set_limit(RLIMIT_AS, c.max_memory_bytes) || !set_limit(RLIMIT_DATA, c.max_memory_bytes) ||
      !set_limit(RLIMIT_STACK, c.max_memory_bytes) || !set_limit(RLIMIT_FSIZE, c.max_file_bytes) ||
      !set_limit(RLIMIT_CORE, 0) || !set_limit(RLIMIT_CPU, c.cpu_seconds) || !set_limit(RLIMIT_NPROC, c.nproc) ||
      !set_limit(RLIMIT_NOFILE, c.max_open_files) || !set_limit(RLIMIT_MSGQUEUE, 0) || !set_limit(RLIMIT_MEMLOCK, 0))
    step_failed(5, kStepLimits);
  prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);  // after the uid change, which clears it
  if (getppid() == 1) _exit(127);             // the parent already gone
  execve(c.argv[0], c.argv, c.envp);
  step_failed(5, kStepExec);
}

void sandbox_kill_uid(uid_t uid) {
  if (geteuid() != 0 || uid == 0 || uid == (uid_t)-1) return;
  const pid_t helper = (pid_t)syscall(SYS_clone, SIGCHLD, 0, nullptr, nullptr, 0);
  if (helper == 0) {
    // with the uid's real and effective ids, kill(-1) reaches exactly its processes
    if (syscall(SYS_setresgid, uid, uid, uid) == 0 && syscall(SYS_setresuid, uid, uid, uid) == 0) kill(-1, SIGKILL);
    _exit(0);
  }
  if (helper > 0)
    while (waitpid(helper, nullptr, 0) < 0 && errno == EINTR) {
    }
}

}  // namespace nanochat
