// defines: ExecutionOptions, ExecutionResult, execution_guard_prelude, execute_code
// Runs model-written Python (HumanEval programs) in a child process (as upstream's nanochat/execution.py): a fresh
// interpreter in an empty temporary working directory that is deleted afterwards, a
// scrubbed environment (PATH=/usr/bin:/bin), stdin from /dev/null, address-space / data /
// stack limits (setrlimit), a wall-clock timeout that kills the whole process group, no
// network where the kernel lets us make a new network namespace (as root, or through an
// unprivileged user namespace; otherwise the network stays reachable and the result says
// so), and upstream's reliability_guard prelude that disables destructive os / shutil /
// subprocess functions. It is a best-effort guard against accidents, NOT a security
// sandbox: ctypes, /proc tricks and the like are not blocked. Run untrusted code in a VM.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace nanochat {

struct ExecutionOptions {
  double timeout_seconds = 5.0;
  int64_t max_memory_bytes = 256LL * 1024 * 1024;  // RLIMIT_AS, RLIMIT_DATA, RLIMIT_STACK
  int64_t max_file_bytes = 16LL * 1024 * 1024;     // RLIMIT_FSIZE: no file may grow past this
  size_t max_output_bytes = 1 << 20;               // stdout and stderr each keep at most this
  // the interpreter: $NANOCHAT_EXEC_PYTHON, else python3 from PATH
  std::string python;
  bool isolate_network = true;  // try a new network namespace
};

struct ExecutionResult {
  bool success = false;  // exit status 0
  std::string stdout_text, stderr_text;
  std::string error;  // "" on success; else the last stderr line, "Execution failed", or the timeout message
  bool timeout = false;
  bool memory_exceeded = false;  // "MemoryError" in stderr
  bool network_isolated = false;  // the child ran in its own (empty) network namespace
  bool output_truncated = false;
  int exit_code = -1;  // -signal when killed by a signal
};

// the Python prelude run before the code (upstream's reliability_guard, without the
// rlimits, which the parent sets before exec)
const std::string& execution_guard_prelude();

// never throws for anything the code does; Error only when the interpreter cannot be started
ExecutionResult execute_code(const std::string& code, const ExecutionOptions& opts = ExecutionOptions());

}  // namespace nanochat
