// defines: ExecutionOptions, ExecutionResult, ExecutionIsolation, execution_guard_prelude,
//          execution_isolation_describe, execute_code
// Runs model-written Python (HumanEval programs) in a child process (as upstream's
// nanochat/execution.py): a fresh interpreter in an empty temporary working directory that is
// deleted afterwards, a scrubbed environment (PATH=/usr/bin:/bin), stdin
// from /dev/null, address-space / data / stack / file-size / process-count limits (setrlimit),
// and upstream's reliability_guard prelude that disables destructive os / shutil / subprocess
// functions. Below the prelude, what the kernel allows (each layer is tried, and the first
// call logs which are in force and which could not be had):
//   - the whole process tree dies at the deadline and when the program exits: the program
//     runs under a small init in a new PID namespace (a setsid'd or double-forked grandchild
//     dies with it), else under a child subreaper that kills every descendant;
//   - a new network namespace (no network);
//   - started as root: the program runs as uid/gid 65534 (nobody), which also makes
//     RLIMIT_NPROC bind (root ignores it); not when uid 65534 cannot run the interpreter;
//   - files outside the temp dir cannot be written, created, renamed or deleted: landlock,
//     else a read-only view of every mount in a new mount namespace.
// It is a guard against accidents and the easy escapes, NOT a VM: reading files, CPU time up
// to the deadline and kernel bugs are not contained. Run hostile code in a VM.
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
  size_t max_output_bytes = 1 << 20;               // stdout and stderr each keep at most this
  // the interpreter: $NANOCHAT_EXEC_PYTHON, else python3 from PATH
  std::string python;
  bool isolate_network = true;  // try a new network namespace
  // the layers below are on by default; tests turn them off to exercise the fallbacks
  bool pid_namespace = true;  // else a child subreaper kills the tree
  bool landlock = true;       // else a read-only mount namespace
  bool drop_uid = true;       // as root: run the program as 65534
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

// never throws for anything the code does, nor for a failure of one run (fork, exec's E2BIG):
// those come back as an unsuccessful result with `error` set. Error only when the
// interpreter cannot be started at all (missing, not executable).
ExecutionResult execute_code(const std::string& code, const ExecutionOptions& opts = ExecutionOptions());

}  // namespace nanochat
