// The child side of execute_code (internal to the execution module). The parent builds a
// SandboxChild (bwrap's whole command line, the descriptors, the limits), then forks; the child
// may come from a multi-threaded parent, so everything after the fork is async-signal-safe: raw
// syscalls, no allocation, no locks.
//
// The child, before it execs bwrap (or, with the unsandboxed opt-in, the interpreter):
//   a session of its own; stdin /dev/null, stdout/stderr the output pipes, fd 3 the "started"
//   pipe (the prelude writes one byte once the interpreter runs inside the sandbox), fd 4 the
//   seccomp BPF for bwrap's --seccomp, fd 6 bwrap's --info-fd (the sandbox's pid 1, which the
//   parent kills at the deadline); nothing else of the parent's;
//   as root: a private mount namespace holding the run's tmpfs (size and inode caps; bwrap binds
//   it as /tmp and /dev/shm), then the run's own uid and gid, no supplementary groups;
//   not root: a user namespace of the run's own (the caller's uid mapped to itself) with the same
//   mount namespace and tmpfs; the kernel counts RLIMIT_NPROC per user namespace and uid, so the
//   caller's threads and processes, outside it, are not counted against the run;
//   no_new_privs; the rlimits (NPROC counts the run alone); death with the parent.
// Any step that fails is reported on the status pipe (a SandboxStep and errno) and nothing runs.
#pragma once
#include <sys/types.h>

#include <cstdint>

struct sock_fprog;

namespace nanochat {

// where the child stopped, on the status pipe: the tag byte, then errno as int32
enum SandboxStep : char {
  kStepDescriptors = 'D',
  kStepUserNamespace = 'N',
  kStepMountNamespace = 'M',
  kStepTmpfs = 'T',
  kStepUid = 'U',
  kStepLimits = 'L',
  kStepExec = 'X',
};

struct SandboxChild {
  char* const* argv;  // bwrap's command line (or the interpreter's, unsandboxed)
  char* const* envp;
  int out_w, err_w, started_w, seccomp_r, status_w, info_w;  // seccomp_r, info_w -1: none
  const char* workdir;  // chdir here first (the unsandboxed temp dir); nullptr: stay
  // root: the run's own uid/gid; (uid_t)-1: keep the caller's
  uid_t uid;
  // a private mount namespace with a tmpfs mounted here (options below), its "tmp" and "shm"
  // directories made for uid (or the caller); nullptr: none
  const char* tmpfs_dir;
  const char* tmpfs_options;
  // not root: "<uid> <uid> 1\n" and "<gid> <gid> 1\n", the maps of the user namespace made
  // first (the caller mapped to itself); nullptr: none
  const char* uid_map;
  const char* gid_map;
  int64_t max_memory_bytes, max_file_bytes, nproc, max_open_files, cpu_seconds;
};

// fork(2) semantics through the raw syscall; -1 and errno on failure. cgroup_fd >= 0: the child
// starts in that cgroup v2 directory (clone3's CLONE_INTO_CGROUP), so nothing it forks escapes
// the group's budget
pid_t sandbox_clone(int cgroup_fd = -1);

// the child's body (above); never returns
[[noreturn]] void sandbox_child_exec(const SandboxChild& c);

// SIGKILL to every process of `uid` (root only: a forked helper takes that uid and kill(-1)s);
// the run's uid is its own, so this is exactly the run's processes, wherever they went
void sandbox_kill_uid(uid_t uid);

// The syscall filter, as BPF: built once by libseccomp, which allocates, so call it in the
// parent; nullptr when it cannot be built
const struct sock_fprog* sandbox_seccomp_filter();

}  // namespace nanochat
