// Runs model-written Python (HumanEval programs) as upstream's nanochat/execution.py does, but
// inside bubblewrap (bwrap: every namespace, no capability, a uid of its own, its own /proc and
// session, only the interpreter's files) with the project's seccomp filter, rlimits and one
// bounded budget on top. It fails closed: a run whose isolation cannot be set up does not start
// and answers "sandbox unavailable: ...". Threat model, layers, bound: docs/security.md.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace nanochat {

struct ExecutionOptions {
  double timeout_seconds = 5.0;
  int64_t max_memory_bytes = 256LL * 1024 * 1024;  // RLIMIT_AS, RLIMIT_DATA, RLIMIT_STACK of each process
  int64_t max_file_bytes = 16LL * 1024 * 1024;     // RLIMIT_FSIZE: no file may grow past this
  int64_t max_processes = 8;    // the program's processes and threads (RLIMIT_NPROC, counted on the run alone)
  int64_t max_open_files = 16;  // RLIMIT_NOFILE: bounds socket buffers, in-flight descriptors
  int64_t max_disk_bytes = 64LL * 1024 * 1024;  // /tmp and /dev/shm together (one tmpfs, pages and inodes capped)
  // where a cgroup v2 leaf can be had: the whole run's memory (no swap) and processes
  int64_t max_run_memory_bytes = 512LL * 1024 * 1024;
  size_t max_output_bytes = 1 << 20;  // stdout and stderr each keep at most this
  // the interpreter: $NANOCHAT_EXEC_PYTHON, else the first python3 on PATH that is a binary the
  // run's uid can read (a pyenv shim, a script, is skipped)
  std::string python;
  // no sandbox at all, only the rlimits and a temp dir (upstream's way); also
  // $NANOCHAT_EXEC_UNSANDBOXED=1. Warns on every run. docs/security.md says what it gives up.
  bool unsandboxed = false;
};

// the layers that were in force for one run (ExecutionResult::isolation)
enum ExecutionIsolation : uint32_t {
  kExecPidNamespace = 1u << 0,      // and its own /proc (kExecFreshProc)
  kExecNetworkNamespace = 1u << 2,  // no network
  kExecUidDropped = 1u << 3,        // a uid and gid of the run's own, that no host process used
  kExecProcessLimit = 1u << 4,      // RLIMIT_NPROC, counted on this run alone (its uid or user namespace)
  kExecReadOnlyMounts = 1u << 6,    // every mount read-only but /tmp and /dev/shm
  kExecUserNamespace = 1u << 7,     // user, IPC, UTS and cgroup namespaces too
  kExecTmpfs = 1u << 8,             // /tmp and /dev/shm a private tmpfs, its size and inodes capped
  kExecFreshProc = 1u << 9,
  kExecCapsDropped = 1u << 10,     // --cap-drop ALL
  kExecSeccomp = 1u << 11,         // the syscall filter
  kExecOwnSession = 1u << 12,      // no controlling terminal
  kExecPrivateDev = 1u << 13,      // a /dev of its own (null, zero, full, random, urandom, its own pts)
  kExecHostDirsHidden = 1u << 14,  // nothing of the host but the interpreter's read-only files
  kExecRunBudget = 1u << 15,       // one cgroup v2 memory + process budget for the whole run
  kExecUnsandboxed = 1u << 16,     // the opt-in: none of the above but the rlimits
};

struct ExecutionResult {
  bool success = false;  // exit status 0
  std::string stdout_text, stderr_text;
  // "" on success; else the last stderr line, "Execution failed", the timeout message, or
  // why this one program could not be started (too long for exec, no process left, ...)
  std::string error;
  bool timeout = false;
  bool memory_exceeded = false;   // "MemoryError" in stderr
  bool network_isolated = false;  // the child ran in its own (empty) network namespace
  bool output_truncated = false;
  bool sandbox_unavailable = false;  // the run did not start: `error` is "sandbox unavailable: ..."
  uint32_t isolation = 0;            // ExecutionIsolation bits
  int exit_code = -1;                // -signal when killed by a signal
};

// the Python prelude run before the code (upstream's reliability_guard, without the
// rlimits, which the parent sets before exec)
const std::string& execution_guard_prelude();

// "pid namespace, network namespace, ..." for the bits set in `isolation`
std::string execution_isolation_describe(uint32_t isolation);

// "" when each run gets one memory and process budget here (a cgroup v2 leaf), else why not
std::string execution_run_budget_refused();

// the inode cap of the run's tmpfs (/tmp and /dev/shm together): max_disk_bytes / 4096, at least 1024
int64_t execution_tmpfs_inodes(const ExecutionOptions& opts);

// the kernel memory an inode of the run's tmpfs may cost (inode, dentry and their attachments),
// which its size does not count; rounded up from about 1.2 KiB measured
constexpr int64_t kExecutionInodeBytes = 2048;

// The bound on the host memory one sandboxed run can hold without a cgroup (docs/security.md),
// with S = 2 * max(net.core.wmem_max, net.core.rmem_max) + 64 KiB, the most one descriptor's
// socket can queue (a UNIX pair's send buffer or a UDP socket's receive buffer at their cap, and
// one packet past it; no TCP connection can be made):
// (max_processes + 2) * (max_memory_bytes + max_open_files * S + 1 MiB) for its processes, their
// sockets and kernel state, + max_open_files * S for descriptors in flight, + fs.pipe-user-pages-soft
// pages of pipes, + max_disk_bytes of tmpfs pages + execution_tmpfs_inodes * kExecutionInodeBytes
int64_t execution_memory_bound(const ExecutionOptions& opts);

// runs refused so far in this process for want of a sandbox, and the last reason (for a summary)
int64_t execution_unavailable_runs(std::string* last_reason = nullptr);

// never throws for anything the code does, nor for a failure of one run (fork, exec's E2BIG, a
// sandbox that cannot be set up): those come back as an unsuccessful result with `error` set.
// Error only when the interpreter cannot be found at all.
ExecutionResult execute_code(const std::string& code, const ExecutionOptions& opts = ExecutionOptions());

// execute_code of `code` followed by a line that prints a random marker of this run's own:
// `success` only when the program exited 0 AND printed the marker, so a program that leaves
// before its end with a clean status (sys.exit(0), os._exit(0)) has not succeeded (`error` says
// so). The marker's line is taken out of stdout_text. HumanEval's pass is this: the tests ran.
ExecutionResult execute_code_to_the_end(const std::string& code, const ExecutionOptions& opts = ExecutionOptions());

}  // namespace nanochat
