// The command line as typed, for subcommands that record it (checkpoint meta) or print
// the command that resumes a run; and the flags as parsed, for the run's recorded config.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdlib>

#include "cli/commands.h"

namespace nanochat {

static std::vector<std::string> g_argv;

void cli_set_argv(int argc, char** argv) { g_argv.assign(argv, argv + argc); }
const std::vector<std::string>& cli_argv() { return g_argv; }

nlohmann::ordered_json cli_flags_json(const CLI::App* sub) {
  nlohmann::ordered_json j;
  for (const CLI::Option* opt : sub->get_options()) {
    if (opt == sub->get_help_ptr() || opt->get_lnames().empty()) continue;
    std::string key = opt->get_lnames()[0];
    std::replace(key.begin(), key.end(), '-', '_');
    if (opt->get_expected_min() == 0) {  // a flag: on when given
      j[key] = opt->count() > 0 && opt->as<bool>();
      continue;
    }
    // the value given last (repeated flags take the last), else the default --help shows;
    // typed by the variable the option writes (CLI11's INT, FLOAT, BOOLEAN, TEXT)
    const std::string value = opt->count() ? opt->results().back() : opt->get_default_str();
    const std::string type = opt->get_type_name().substr(0, opt->get_type_name().find(':'));
    if (type == "TEXT") j[key] = value;
    else if (value.empty()) j[key] = nullptr;  // a number with no default and not given
    else if (type == "INT" || type == "UINT") j[key] = (int64_t)std::strtoll(value.c_str(), nullptr, 10);
    else if (type == "FLOAT") j[key] = std::strtod(value.c_str(), nullptr);
    else if (type == "BOOLEAN") j[key] = CLI::detail::to_flag_value(value) > 0;
    else j[key] = value;
  }
  return j;
}

}  // namespace nanochat
