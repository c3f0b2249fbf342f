// defines: ExecutionOptions, ExecutionResult, ExecutionIsolation, execution_guard_prelude,
//          execution_isolation_describe, execute_code
// Runs model-written Python (HumanEval programs) in a child process (as upstream's
// nanochat/execution.py): a fresh interpreter in an empty temporary working directory that is
// deleted afterwards, a scrubbed environment (PATH=/usr/bin:/bin), stdin
// from /dev/null, address-space / data / stack / file-size / process-count limits (setrlimit),
// and upstream's reliability_guard prelude that disables destructive os / shutil / subprocess
// functions. Below the prelude, a jail of what the kernel allows (each layer is tried, and the
// first call logs which are in force and which the kernel refused; the rest still hold):
//   - namespaces: PID (the program's tree dies with it; else a child subreaper kills every
//     descendant), network (no network), mount, IPC, UTS, and when not started as root a
//     user namespace (uid 0 inside is the caller's own uid outside, with no power over it);
//   - started as root: the program runs as uid/gid 65534, and a 0700 home that hides the
//     interpreter (a pyenv or venv under /root) is covered by a tmpfs holding only the
//     interpreter's directories;
//   - every mount read-only; the working directory a size-capped tmpfs (max_disk_bytes) that
//     vanishes with the namespace, however deep its tree; /proc shows only the sandbox's own
//     processes (not the server's environment or command line);
//   - a session of its own (setsid): no controlling terminal; stdin /dev/null, stdout/stderr
//     pipes; a /dev holding only null, zero, full, random, urandom (no tty, no pts); empty
//     /tmp, /var/tmp, /run over the host's (where its named sockets live);
//   - every capability dropped for good, no_new_privs, a seccomp filter (mount, mknod, ptrace,
//     sethostname, memfd_create, namespaces, io_uring, kernel modules, clocks, ... fail; every
//     terminal ioctl but the read-only ones, TIOCSTI included; socket() of any family but
//     IPv4/IPv6, so no AF_UNIX connect to a host socket, no netlink, vsock or packet);
//   - where this process's cgroup can make one, a cgroup v2 leaf per run: one memory and
//     process budget for the whole tree (else the rlimits are per process);
//   - no descriptor of the parent's but stdout/stderr pipes (close_range); RLIMIT_NPROC binds
//     (a non-root uid, or a user namespace's own count);
//   - landlock on top where the kernel has it (writes only beneath the temp dir);
//   - the supervisor cannot be signalled by the program (init of its namespace, or root).
// It is a jail against the escapes a program can try from user space, NOT a VM: CPU time up
// to the deadline, reading world-readable files and kernel bugs are not contained.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace nanochat {

struct ExecutionOptions {
  double timeout_seconds = 5.0;
  int64_t max_memory_bytes = 256LL * 1024 * 1024;  // RLIMIT_AS, RLIMIT_DATA, RLIMIT_STACK
  int64_t max_file_bytes = 16LL * 1024 * 1024;     // RLIMIT_FSIZE: no file may grow past this
  int64_t max_processes = 32;                      // RLIMIT_NPROC of the program's uid
  int64_t max_disk_bytes = 64LL * 1024 * 1024;     // the working directory's tmpfs (all files together)
  // the whole run's memory (every process, the tmpfs's pages included; no swap) and, with
  // max_processes + 1 for the supervisor, its processes: a cgroup v2 leaf, where this process's
  // cgroup may make one (else the limits above are per process, and the first run says so)
  int64_t max_run_memory_bytes = 512LL * 1024 * 1024;
  size_t max_output_bytes = 1 << 20;               // stdout and stderr each keep at most this
  // the interpreter: $NANOCHAT_EXEC_PYTHON, else python3 from PATH
  std::string python;
  bool isolate_network = true;  // try a new network namespace
  // the layers below are on by default; tests turn them off to exercise the fallbacks
  bool pid_namespace = true;  // else a child subreaper kills the tree
  bool landlock = true;       // on top of the read-only mounts (and in their place where refused)
  bool drop_uid = true;       // as root: run the program as 65534
  bool seccomp = true;        // the syscall filter
};

// the layers that were in force for one run (ExecutionResult::isolation)
enum ExecutionIsolation : uint32_t {
  kExecPidNamespace = 1u << 0,
  kExecSubreaper = 1u << 1,
  kExecNetworkNamespace = 1u << 2,
  kExecUidDropped = 1u << 3,
  kExecProcessLimit = 1u << 4,  // RLIMIT_NPROC set for a non-root uid (root ignores it)
  kExecLandlock = 1u << 5,
  kExecReadOnlyMounts = 1u << 6,
  kExecUserNamespace = 1u << 7,  // not root: uid 0 inside is the caller's uid outside
  kExecTmpfs = 1u << 8,          // the working directory is a size-capped tmpfs
  kExecFreshProc = 1u << 9,      // /proc shows the PID namespace only
  kExecCapsDropped = 1u << 10,   // no capabilities, none regained through exec
  kExecSeccomp = 1u << 11,       // the syscall filter (mount, mknod, ptrace, memfd_create, ...)
  kExecOwnSession = 1u << 12,    // setsid: no controlling terminal, no job control over the caller's
  kExecPrivateDev = 1u << 13,    // /dev holds null, zero, full, random, urandom only (no tty, no pts)
  kExecHostDirsHidden = 1u << 14,  // empty tmpfs over the host's /tmp, /var/tmp, /run (named sockets)
  kExecRunBudget = 1u << 15,     // one cgroup v2 memory + process budget for the whole run
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
  uint32_t isolation = 0;  // ExecutionIsolation bits
  int exit_code = -1;      // -signal when killed by a signal
};

// the Python prelude run before the code (upstream's reliability_guard, without the
// rlimits, which the parent sets before exec)
const std::string& execution_guard_prelude();

// "pid namespace, network namespace, ..." for the bits set in `isolation`
std::string execution_isolation_describe(uint32_t isolation);

// "" when each run gets one memory and process budget here (a cgroup v2 leaf), else why not
std::string execution_run_budget_refused();

// never throws for anything the code does, nor for a failure of one run (fork, exec's E2BIG):
// those come back as an unsuccessful result with `error` set. Error only when the
// interpreter cannot be started at all (missing, not executable).
ExecutionResult execute_code(const std::string& code, const ExecutionOptions& opts = ExecutionOptions());

}  // namespace nanochat
