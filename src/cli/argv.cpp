// The command line as typed, for subcommands that record it (checkpoint meta) or print
// the command that resumes a run.
#include "cli/commands.h"

namespace nanochat {

static std::vector<std::string> g_argv;

void cli_set_argv(int argc, char** argv) { g_argv.assign(argv, argv + argc); }
const std::vector<std::string>& cli_argv() { return g_argv; }

}  // namespace nanochat
