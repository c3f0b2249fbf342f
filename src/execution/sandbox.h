// defines: SandboxReport, SandboxPlan, sandbox_clone, sandbox_supervise, sandbox_landlock_abi
// The child side of execute_code (internal to the execution module). The parent prepares a
// SandboxPlan, then clones the supervisor, which forks the program. Both children may come
// from a multi-threaded parent through a raw clone, so everything after the clone is
// async-signal-safe: raw syscalls, no allocation, no locks, no glibc thread state.
//
// The supervisor is PID 1 of a new PID namespace when the kernel lets us make one (when it
// exits, the kernel kills every process left in the namespace), else a child subreaper
// (orphans of the program are re-parented to it, and it kills them). It waits for the
// program, kills what is left, reports the program's wait status and exits; SIGTERM makes
// it do the same at once (the parent's deadline in subreaper mode; a PID namespace's init is
// killed with SIGKILL).
#pragma once
#include <sys/types.h>

#include <cstdint>

namespace nanochat {

// messages on the status pipe: a tag byte and an int32 (PIPE_BUF-atomic)
enum SandboxReport : char {
  kReportIsolation = 'I',  // program, just before exec: the ExecutionIsolation bits
  kReportSetupErrno = 'S',  // program: a limit or isolation step failed (errno)
  kReportExecErrno = 'X',   // program: execve failed (errno)
  kReportForkErrno = 'F',   // supervisor: could not fork the program (errno)
  kReportWaitStatus = 'W',  // supervisor: the program's wait status
};

struct SandboxPlan {
  const char* dir;  // the writable temp dir, also the working directory
  char* const* argv;
  char* const* envp;
  int out_w, err_w, status_w;
  uint32_t namespaces;  // kExecPidNamespace / kExecNetworkNamespace the clone got
  bool mount_namespace;  // the clone got CLONE_NEWNS: make every mount read-only but `dir`
  bool drop_uid;
  bool landlock;
  int64_t max_memory_bytes, max_file_bytes, max_processes, cpu_seconds;
};

// fork(2) semantics through the raw syscall, with extra CLONE_NEW* flags; -1 and errno on failure
pid_t sandbox_clone(unsigned long ns_flags);

// the supervisor's body, run in the cloned child; never returns
[[noreturn]] void sandbox_supervise(const SandboxPlan& plan);

// the landlock ABI version this kernel offers, or -errno
int sandbox_landlock_abi();

}  // namespace nanochat
