// The supervisor and the program's set-up (see sandbox.h). Async-signal-safe only.
#include "sandbox.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <linux/landlock.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstring>

#include "nanochat/execution.h"

// rights newer than Debian 12's kernel headers
#ifndef LANDLOCK_ACCESS_FS_REFER
#define LANDLOCK_ACCESS_FS_REFER (1ULL << 13)
#endif
#ifndef LANDLOCK_ACCESS_FS_TRUNCATE
#define LANDLOCK_ACCESS_FS_TRUNCATE (1ULL << 14)
#endif
#ifndef LANDLOCK_ACCESS_FS_IOCTL_DEV
#define LANDLOCK_ACCESS_FS_IOCTL_DEV (1ULL << 15)
#endif
#ifndef CLONE_INTO_CGROUP
#define CLONE_INTO_CGROUP 0x200000000ULL
#endif
#ifndef MOUNT_ATTR_RDONLY
#define MOUNT_ATTR_RDONLY 0x00000001
#endif
#ifndef MOUNT_ATTR_NOSUID
#define MOUNT_ATTR_NOSUID 0x00000002
#endif
#ifndef OPEN_TREE_CLONE
#define OPEN_TREE_CLONE 1
#endif
#ifndef MOVE_MOUNT_F_EMPTY_PATH
#define MOVE_MOUNT_F_EMPTY_PATH 0x00000004
#endif
#ifndef AT_RECURSIVE
#define AT_RECURSIVE 0x8000
#endif
#ifndef SECBIT_NOROOT
#define SECBIT_NOROOT (1 << 0)
#define SECBIT_NOROOT_LOCKED (1 << 1)
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
// Reading and executing stay unrestricted. Needs no privilege, only no_new_privs. Where the
// kernel has them, also: no ioctl on a device opened from now on (ABI 5: a terminal reached
// some other way still takes no TIOCSTI), no TCP bind or connect (ABI 4: for when the network
// namespace was refused), no abstract UNIX socket or signal outside the program's own tree
// (ABI 6).
bool restrict_writes_to(const char* dir) {
  const int abi = sandbox_landlock_abi();
  if (abi < 1) return false;
  uint64_t rights = LANDLOCK_ACCESS_FS_WRITE_FILE | LANDLOCK_ACCESS_FS_REMOVE_DIR | LANDLOCK_ACCESS_FS_REMOVE_FILE |
                    LANDLOCK_ACCESS_FS_MAKE_CHAR | LANDLOCK_ACCESS_FS_MAKE_DIR | LANDLOCK_ACCESS_FS_MAKE_REG |
                    LANDLOCK_ACCESS_FS_MAKE_SOCK | LANDLOCK_ACCESS_FS_MAKE_FIFO | LANDLOCK_ACCESS_FS_MAKE_BLOCK |
                    LANDLOCK_ACCESS_FS_MAKE_SYM;
  if (abi >= 2) rights |= LANDLOCK_ACCESS_FS_REFER;
  if (abi >= 3) rights |= LANDLOCK_ACCESS_FS_TRUNCATE;
  if (abi >= 5) rights |= LANDLOCK_ACCESS_FS_IOCTL_DEV;
  struct {  // landlock_ruleset_attr as of ABI 6 (Debian 12's header stops at ABI 3)
    uint64_t handled_access_fs, handled_access_net, scoped;
  } attr{};
  attr.handled_access_fs = rights;
  attr.handled_access_net = abi >= 4 ? (1ULL << 0) | (1ULL << 1) : 0;  // BIND_TCP | CONNECT_TCP, no port granted
  attr.scoped = abi >= 6 ? (1ULL << 0) | (1ULL << 1) : 0;             // ABSTRACT_UNIX_SOCKET | SIGNAL
  const size_t attr_size = abi >= 6 ? 24 : abi >= 4 ? 16 : 8;           // the kernel rejects fields it lacks
  const int ruleset = (int)syscall(SYS_landlock_create_ruleset, &attr, attr_size, 0);
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

// mkdir -p of path[0, end), its components from offset `from` on (those below a fresh tmpfs);
// EEXIST is fine
void make_parents(const char* path, size_t from, size_t end) {
  char buf[4096];
  if (end >= sizeof buf) return;
  std::memcpy(buf, path, end);
  buf[end] = 0;
  for (size_t c = from; c <= end; c++) {
    if (buf[c] != '/' && buf[c] != 0) continue;
    const char keep = buf[c];
    buf[c] = 0;
    mkdir(buf, 0755);
    buf[c] = keep;
  }
}

bool write_file(const char* path, const char* text) {
  const int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const size_t n = std::strlen(text);
  const bool ok = write(fd, text, n) == (ssize_t)n;
  close(fd);
  return ok;
}

// every descriptor from 3 up but the `keep` ones (sorted, at most 8): close_range, else a loop
void close_all_but(const int* keep, int n) {
  int k[8];
  n = n > 8 ? 8 : n;
  for (int i = 0; i < n; i++) {
    int j = i;
    for (; j > 0 && k[j - 1] > keep[i]; j--) k[j] = k[j - 1];
    k[j] = keep[i];
  }
  unsigned from = 3;
  auto close_span = [](unsigned lo, unsigned hi) {
    if (lo > hi) return;
    if (syscall(SYS_close_range, lo, hi, 0) == 0) return;
    struct rlimit r {};
    getrlimit(RLIMIT_NOFILE, &r);
    const unsigned top = r.rlim_cur > (1u << 20) ? (1u << 20) : (unsigned)r.rlim_cur;
    for (unsigned fd = lo; fd <= hi && fd < top; fd++) close((int)fd);
  };
  for (int i = 0; i < n; i++) {
    if (k[i] < (int)from) continue;
    close_span(from, (unsigned)k[i] - 1);
    from = (unsigned)k[i] + 1;
  }
  close_span(from, ~0u);
}

// the interpreter's directories under a home uid 65534 cannot search: each cloned (with
// what is mounted below it) before a small tmpfs covers its ancestor, then the path is made
// again on that tmpfs and the clone moved onto it. Nothing else of the home is visible.
bool expose_dirs(const SandboxPlan& p) {
  int fds[8];
  int n = 0;
  for (; p.expose[n] && n < 8; n++) {
    fds[n] = (int)syscall(SYS_open_tree, AT_FDCWD, p.expose[n], OPEN_TREE_CLONE | O_CLOEXEC | AT_RECURSIVE);
    if (fds[n] < 0) return false;
  }
  for (int i = 0; i < n; i++) {
    bool covered = false;
    for (int j = 0; j < i; j++) covered = covered || std::strcmp(p.expose_cover[j], p.expose_cover[i]) == 0;
    if (!covered && mount("tmpfs", p.expose_cover[i], "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=65536") != 0) return false;
    char path[4096];
    const size_t len = std::strlen(p.expose[i]);
    if (len >= sizeof path) return false;
    std::memcpy(path, p.expose[i], len + 1);
    for (size_t c = std::strlen(p.expose_cover[i]) + 1; c <= len; c++) {
      if (path[c] != '/' && path[c] != 0) continue;
      const char keep = path[c];
      path[c] = 0;
      mkdir(path, 0755);  // EEXIST for a second directory under the same cover
      path[c] = keep;
    }
    if (syscall(SYS_move_mount, fds[i], "", AT_FDCWD, p.expose[i], MOVE_MOUNT_F_EMPTY_PATH) != 0) return false;
    close(fds[i]);
  }
  return true;
}

// an empty tmpfs over each of p.hide; the working directory, when below one, cloned first and
// moved back onto the same path
bool hide_dirs(const SandboxPlan& p) {
  for (int i = 0; p.hide[i]; i++) {
    const char* h = p.hide[i];
    const size_t hl = std::strlen(h);
    const bool holds_dir = std::strncmp(p.dir, h, hl) == 0 && p.dir[hl] == '/';
    const int wd = holds_dir ? (int)syscall(SYS_open_tree, AT_FDCWD, p.dir, OPEN_TREE_CLONE | O_CLOEXEC | AT_RECURSIVE) : -1;
    if (holds_dir && wd < 0) return false;
    if (mount("tmpfs", h, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=0755,size=65536") != 0) return false;
    if (holds_dir) {
      make_parents(p.dir, hl + 1, std::strlen(p.dir));
      const bool moved = syscall(SYS_move_mount, wd, "", AT_FDCWD, p.dir, MOVE_MOUNT_F_EMPTY_PATH) == 0;
      close(wd);
      if (!moved) {
        umount2(h, MNT_DETACH);  // the working directory back in sight
        return false;
      }
    }
  }
  return true;
}

// a /dev of the jail's own: a tmpfs holding the host's null, zero, full, random and urandom
// (bound in one by one: no mknod needed, and a user namespace may do it) and the /proc/self/fd
// links. No tty, no pts, no console, no shm: the caller's terminal is not there to open.
bool private_dev() {
  static const char* const kNodes[] = {"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom"};
  constexpr int n = sizeof kNodes / sizeof kNodes[0];
  int fds[n];  // a node the host lacks is left out; /dev/null is not optional
  for (int i = 0; i < n; i++) fds[i] = (int)syscall(SYS_open_tree, AT_FDCWD, kNodes[i], OPEN_TREE_CLONE | O_CLOEXEC);
  const bool mounted = fds[0] >= 0 && mount("tmpfs", "/dev", "tmpfs", MS_NOSUID | MS_NOEXEC, "mode=0755,size=65536") == 0;
  bool ok = mounted;
  for (int i = 0; i < n; i++) {
    if (fds[i] < 0) continue;
    if (ok) {
      const int f = open(kNodes[i], O_CREAT | O_WRONLY | O_CLOEXEC, 0666);
      ok = f >= 0 && close(f) == 0 && syscall(SYS_move_mount, fds[i], "", AT_FDCWD, kNodes[i], MOVE_MOUNT_F_EMPTY_PATH) == 0;
    }
    close(fds[i]);
  }
  if (mounted && !ok) umount2("/dev", MNT_DETACH);  // half a /dev would leave no /dev/null
  if (ok) {
    (void)!symlink("/proc/self/fd", "/dev/fd");
    (void)!symlink("/proc/self/fd/0", "/dev/stdin");
    (void)!symlink("/proc/self/fd/1", "/dev/stdout");
    (void)!symlink("/proc/self/fd/2", "/dev/stderr");
  }
  return ok;
}

// The supervisor's mounts, in its new mount namespace (see sandbox.h); nothing propagates
// back to the host. Returns the isolation bits had; `refused` gets the layers that were not.
uint32_t jail_mounts(const SandboxPlan& p, int32_t& refused) {
  uint32_t bits = 0;
  if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
    refused |= kRefusedTmpfs | kRefusedProc | kRefusedReadOnly | kRefusedEmptyProc;
    return 0;
  }
  if (p.expose && p.expose[0] && !expose_dirs(p)) refused |= kRefusedExpose;
  if (mount("tmpfs", p.dir, "tmpfs", MS_NOSUID | MS_NODEV, p.tmpfs_options) == 0) {
    bits |= kExecTmpfs;
  } else {
    refused |= kRefusedTmpfs;
    mount(p.dir, p.dir, nullptr, MS_BIND, nullptr);  // a mount of its own, to stay writable below
  }
  if (p.hide && p.hide[0]) {
    if (hide_dirs(p)) bits |= kExecHostDirsHidden;
    else refused |= kRefusedHide;
  }
  if (private_dev()) bits |= kExecPrivateDev;
  else refused |= kRefusedDev;
  if ((p.namespaces & kExecPidNamespace) && mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr) == 0) {
    bits |= kExecFreshProc;
  } else {
    refused |= kRefusedProc;  // (a user namespace may not mount proc where the host's is partly covered)
    if (mount("tmpfs", "/proc", "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=0555,size=4096") != 0) refused |= kRefusedEmptyProc;
  }
  struct {
    uint64_t attr_set, attr_clr, propagation, userns_fd;
  } attr{};
  attr.attr_set = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID;
  bool ro = syscall(SYS_mount_setattr, AT_FDCWD, "/", AT_RECURSIVE, &attr, sizeof attr) == 0;
  attr.attr_set = 0;
  attr.attr_clr = MOUNT_ATTR_RDONLY;
  ro = ro && syscall(SYS_mount_setattr, AT_FDCWD, p.dir, 0, &attr, sizeof attr) == 0;
  if (ro) bits |= kExecReadOnlyMounts;
  else refused |= kRefusedReadOnly;
  return bits;
}

// Every capability gone for good: the bounding set emptied (needs CAP_SETPCAP, so first),
// root's exec-time grant turned off and locked, then the sets cleared
bool drop_capabilities() {
  for (int cap = 0; cap <= 63; cap++)
    if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 && errno != EINVAL) return false;
  prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
  if (prctl(PR_SET_SECUREBITS, SECBIT_NOROOT | SECBIT_NOROOT_LOCKED, 0, 0, 0) != 0) return false;
  struct __user_cap_header_struct head {};
  struct __user_cap_data_struct data[2] {};
  head.version = _LINUX_CAPABILITY_VERSION_3;
  return syscall(SYS_capset, &head, data) == 0;
}

bool no_capabilities() {
  struct __user_cap_header_struct head {};
  struct __user_cap_data_struct data[2] {};
  head.version = _LINUX_CAPABILITY_VERSION_3;
  if (syscall(SYS_capget, &head, data) != 0) return false;
  return (data[0].effective | data[0].permitted | data[1].effective | data[1].permitted) == 0;
}

// the program: limits, isolation, exec. Reports its isolation bits, or why it failed.
[[noreturn]] void run_program(const SandboxPlan& p, uint32_t bits, int32_t refused) {
  // a session of its own: no controlling terminal, so no /dev/tty, no job control over the
  // caller's terminal; its process group (the same number) is what the kill takes down
  if (setsid() == getpid()) bits |= kExecOwnSession;
  else setpgid(0, 0);
  prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);  // the supervisor gone: so is the program
  // handlers die with exec, but an ignored signal stays ignored: every one back to default
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  for (int sig = 1; sig < 32; sig++)
    if (sig != SIGKILL && sig != SIGSTOP) sigaction(sig, &dfl, nullptr);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  auto setup_failed = [&]() {
    report(p.status_w, kReportSetupErrno, errno);
    _exit(127);
  };
  const int devnull = open("/dev/null", O_RDONLY);
  if (devnull < 0 || dup2(devnull, 0) < 0 || dup2(p.out_w, 1) < 0 || dup2(p.err_w, 2) < 0 || chdir(p.dir) != 0)
    setup_failed();
  // nothing else of the parent's leaks into the program (sockets, shards, locks)
  close_all_but(&p.status_w, 1);
  set_limit(RLIMIT_AS, p.max_memory_bytes);
  set_limit(RLIMIT_DATA, p.max_memory_bytes);
  set_limit(RLIMIT_STACK, p.max_memory_bytes);
  set_limit(RLIMIT_FSIZE, p.max_file_bytes);
  set_limit(RLIMIT_CORE, 0);
  set_limit(RLIMIT_CPU, p.cpu_seconds);  // a backstop to the wall clock
  set_limit(RLIMIT_NPROC, p.max_processes);
  if (p.user_namespace) {
    bits |= kExecUserNamespace | kExecProcessLimit;  // counted per user namespace, and no capability overrides it
    if (!drop_capabilities()) refused |= kRefusedCaps;
  } else if (p.drop_uid) {
    // raw syscalls: glibc's setuid() would try to signal threads this child does not have
    const uid_t nobody = 65534;
    for (int cap = 0; cap <= 63; cap++) prctl(PR_CAPBSET_DROP, cap, 0, 0, 0);
    if (syscall(SYS_setgroups, 0, nullptr) != 0 || syscall(SYS_setresgid, nobody, nobody, nobody) != 0 ||
        syscall(SYS_setresuid, nobody, nobody, nobody) != 0)
      setup_failed();
    bits |= kExecUidDropped;
  }
  if (getuid() != 0) bits |= kExecProcessLimit;  // root ignores RLIMIT_NPROC
  if (no_capabilities()) bits |= kExecCapsDropped;
  if (p.landlock && restrict_writes_to(p.dir)) bits |= kExecLandlock;
  prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);  // no set-uid binary gets root back
  if (p.seccomp) {
    if (p.seccomp_filter && prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, p.seccomp_filter, 0, 0) == 0)
      bits |= kExecSeccomp;
    else
      refused |= kRefusedSeccomp;
  }
  report(p.status_w, kReportRefused, refused);
  report(p.status_w, kReportIsolation, (int32_t)bits);
  execve(p.argv[0], p.argv, p.envp);
  report(p.status_w, kReportExecErrno, errno);
  _exit(127);
}

// the host's /proc, opened by a subreaper before its mount namespace covers /proc: it still
// finds the program's descendants through it
int g_proc_fd = -1;

// the parent pid of /proc/<pid>/stat, or -1 (the field after the command's closing paren)
pid_t parent_of(const char* pid_name) {
  char path[64];
  size_t n = 0;
  for (const char* c = pid_name; *c && n < sizeof path - 8; c++) path[n++] = *c;
  std::memcpy(path + n, "/stat", 6);
  const int fd = openat(g_proc_fd, path, O_RDONLY | O_CLOEXEC);
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
    const int proc = openat(g_proc_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
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

pid_t sandbox_clone(unsigned long ns_flags, int cgroup_fd) {
  if (cgroup_fd >= 0) {
    struct {  // clone_args, as of Linux 5.7
      uint64_t flags, pidfd, child_tid, parent_tid, exit_signal, stack, stack_size, tls, set_tid, set_tid_size, cgroup;
    } args{};
    args.flags = ns_flags | CLONE_INTO_CGROUP;
    args.exit_signal = SIGCHLD;
    args.cgroup = (uint64_t)cgroup_fd;
    // no stack: the child continues on a copy of this one, like fork()
    return (pid_t)syscall(SYS_clone3, &args, sizeof args);
  }
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
  // the caller's terminal (its stdin, out and err, its controlling terminal) is left behind:
  // a session of its own, and /dev/null in their place
  setsid();
  const int devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
  for (int fd = 0; fd < 3 && devnull >= 0; fd++)
    if (fd != devnull && fd != p.out_w && fd != p.err_w && fd != p.status_w) dup3(devnull, fd, 0);
  if (devnull > 2) close(devnull);
  const int keep[3] = {p.out_w, p.err_w, p.status_w};
  close_all_but(keep, 3);  // the server's sockets, files and model shards
  // the server's handlers came along with the clone: every signal back to its default; as a
  // PID namespace's init that makes signals from the program no-ops
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  for (int sig = 1; sig < 32; sig++)
    if (sig != SIGKILL && sig != SIGSTOP) sigaction(sig, &dfl, nullptr);
  sigset_t wake;
  sigemptyset(&wake);
  if (!pid_namespace) sigaddset(&wake, SIGTERM);
  sigaddset(&wake, SIGCHLD);
  sigprocmask(SIG_SETMASK, &wake, nullptr);  // taken with sigtimedwait below

  uint32_t bits = p.namespaces;
  int32_t refused = 0;
  // its own maps: /proc/self is the caller's only while dumpable (a process that changed its
  // uids is not, until told)
  if (p.user_namespace) prctl(PR_SET_DUMPABLE, 1, 0, 0, 0);
  if (p.user_namespace && (!write_file("/proc/self/setgroups", "deny") || !write_file("/proc/self/uid_map", p.uid_map) ||
                           !write_file("/proc/self/gid_map", p.gid_map))) {
    report(p.status_w, kReportSetupErrno, errno);
    _exit(1);
  }
  prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);  // (after the maps: /proc/self becomes root's) not for the program to read
  if (!pid_namespace) g_proc_fd = open("/proc", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (p.mount_namespace) bits |= jail_mounts(p, refused);

  const pid_t program = sandbox_clone(0);
  if (program == 0) run_program(p, bits, refused);
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
