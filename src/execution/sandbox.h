// defines: SandboxReport, SandboxPlan, sandbox_clone, sandbox_supervise, sandbox_landlock_abi,
//          sandbox_seccomp_filter
// The child side of execute_code (internal to the execution module). The parent prepares a
// SandboxPlan, then clones the supervisor, which forks the program. Both children may come
// from a multi-threaded parent through a raw clone, so everything after the clone is
// async-signal-safe: raw syscalls, no allocation, no locks, no glibc thread state.
//
// The supervisor is PID 1 of a new PID namespace when the kernel lets us make one (when it
// exits, the kernel kills every process left in the namespace), else a child subreaper
// (orphans of the program are re-parented to it, and it kills them). It waits for the
// program, kills what is left, reports the program's wait status and exits. In subreaper
// mode SIGTERM makes it do the same at once (the parent's deadline); a PID namespace's init
// leaves every signal at its default, which the kernel drops when it comes from inside the
// namespace (the program cannot stop it), and the parent kills it with SIGKILL.
//
// The jail, when the clone got its namespaces (a user namespace too when not root: uid 0
// inside is the caller's own uid outside, with no capability over anything outside):
//   supervisor: every inherited descriptor but its pipes closed; its own mount namespace made
//     private; the interpreter's directories re-exposed where a 0700 home hides them from
//     uid 65534 (a small tmpfs over the home, the directories bound back in); a size-capped
//     tmpfs as the working directory (gone with the namespace, whatever is in it); a fresh
//     /proc of its PID namespace (else an empty one); empty tmpfs over the host's /tmp,
//     /var/tmp and /run (where named sockets live; the working directory bound back in); a
//     /dev of its own holding only null, zero, full, random and urandom (no tty, no pts);
//     every mount read-only but the working directory;
//   both: a session of their own (setsid), so no controlling terminal; stdin, out and err
//     never the caller's terminal;
//   program: rlimits, root's uid 65534 (or, in a user namespace, every capability dropped
//     and no way back through exec), landlock, no_new_privs, a seccomp filter, exec.
#pragma once
#include <sys/types.h>

#include <cstdint>

struct sock_fprog;

namespace nanochat {

// messages on the status pipe: a tag byte and an int32 (PIPE_BUF-atomic)
enum SandboxReport : char {
  kReportIsolation = 'I',  // program, just before exec: the ExecutionIsolation bits
  kReportSetupErrno = 'S',  // program: a limit or isolation step failed (errno)
  kReportExecErrno = 'X',   // program: execve failed (errno)
  kReportForkErrno = 'F',   // supervisor: could not fork the program (errno)
  kReportWaitStatus = 'W',  // supervisor: the program's wait status
  kReportRefused = 'R',     // supervisor and program: SandboxRefused bits (layers the kernel refused)
};

struct SandboxPlan {
  const char* dir;  // the writable temp dir, also the working directory
  char* const* argv;
  char* const* envp;
  int out_w, err_w, status_w;
  uint32_t namespaces;  // kExecPidNamespace / kExecNetworkNamespace the clone got
  bool mount_namespace;  // the clone got CLONE_NEWNS: the jail's mounts (above)
  bool user_namespace;   // the clone got CLONE_NEWUSER: the supervisor writes these maps
  const char* uid_map;   // "0 <uid> 1"
  const char* gid_map;
  const char* tmpfs_options;  // the working directory's tmpfs: "size=...,nr_inodes=...,mode=..."
  // directories to bind back in under a tmpfs laid over `cover` (an ancestor uid 65534
  // cannot search); nullptr-terminated
  const char* const* expose;
  const char* const* expose_cover;
  // directories covered by an empty tmpfs (the host's named sockets live there); the working
  // directory, when below one, is bound back in; nullptr-terminated
  const char* const* hide;
  bool drop_uid;
  bool landlock;
  bool seccomp;
  const struct sock_fprog* seccomp_filter;  // sandbox_seccomp_filter(), from the parent; nullptr: none
  int64_t max_memory_bytes, max_file_bytes, max_processes, cpu_seconds;
};

// the jail's layers that could not be had, as bits on the status pipe (kReportRefused)
enum SandboxRefused : int32_t {
  kRefusedTmpfs = 1 << 0,
  kRefusedProc = 1 << 1,     // no fresh /proc: an empty tmpfs hides the host's
  kRefusedExpose = 1 << 2,
  kRefusedReadOnly = 1 << 3,
  kRefusedSeccomp = 1 << 4,
  kRefusedCaps = 1 << 5,
  kRefusedEmptyProc = 1 << 6,  // not even that: the host's /proc is visible
  kRefusedDev = 1 << 7,        // the host's /dev is visible
  kRefusedHide = 1 << 8,       // the host's /tmp, /var/tmp or /run is visible
};

// fork(2) semantics through the raw syscall, with extra CLONE_NEW* flags; -1 and errno on failure.
// cgroup_fd >= 0: the child starts in that cgroup v2 directory (clone3's CLONE_INTO_CGROUP), so
// nothing it forks escapes the group's budget
pid_t sandbox_clone(unsigned long ns_flags, int cgroup_fd = -1);

// the supervisor's body, run in the cloned child; never returns
[[noreturn]] void sandbox_supervise(const SandboxPlan& plan);

// the landlock ABI version this kernel offers, or -errno
int sandbox_landlock_abi();

// The syscall filter, as BPF for prctl(PR_SET_SECCOMP): built once by libseccomp, which
// allocates, so call it in the parent before the clone; nullptr when it cannot be built
const struct sock_fprog* sandbox_seccomp_filter();

}  // namespace nanochat
