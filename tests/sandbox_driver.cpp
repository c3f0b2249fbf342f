// sandbox_driver: one program through execute_code, as `chat-eval -a HumanEval` or chat-cli's
// tool runs it, from whatever terminal this was started in; built from the execution module's
// sources alone (no LibTorch). The terminal test runs it under a pseudo-terminal.
//   sandbox_driver <python> <code>
// The program's stdout goes to stdout, its stderr and one "isolation: ..." line to stderr; the
// exit status is the program's, 125 when it timed out or could not be run.
#include <cstdio>
#include <string>

#include "nanochat/common/error.h"
#include "nanochat/execution.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: sandbox_driver <python> <code>\n");
    return 2;
  }
  nanochat::ExecutionOptions opts;
  opts.python = argv[1];
  opts.timeout_seconds = 10;
  try {
    const nanochat::ExecutionResult r = nanochat::execute_code(argv[2], opts);
    std::fwrite(r.stdout_text.data(), 1, r.stdout_text.size(), stdout);
    std::fwrite(r.stderr_text.data(), 1, r.stderr_text.size(), stderr);
    std::fprintf(stderr, "isolation: %s\n", nanochat::execution_isolation_describe(r.isolation).c_str());
    if (r.timeout || (!r.success && r.exit_code < 0)) {
      std::fprintf(stderr, "sandbox_driver: %s\n", r.error.c_str());
      return 125;
    }
    return r.exit_code;
  } catch (const nanochat::Error& e) {
    std::fprintf(stderr, "sandbox_driver: %s\n", e.what());
    return 125;
  }
}
