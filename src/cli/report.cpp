// `nanochat report [reset|generate]`: the report card of a run (upstream's report.py)
#include <CLI/CLI.hpp>

#include "cli/commands.h"
#include "nanochat/common/log.h"
#include "nanochat/report.h"

namespace nanochat {

void cli_register_report(CLI::App& app, int& exit_code) {
  auto* sub = app.add_subcommand("report", "The run's report card: reset at the start, generate at the end");
  static std::string action = "generate";
  sub->add_option("action", action, "reset: new header.md, sections removed; generate: report.md")
      ->check(CLI::IsMember({"reset", "generate"}))
      ->capture_default_str();
  sub->callback([&exit_code] {
    if (action == "reset") {
      report_reset();
    } else {
      log_info("report written to %s (and ./report.md)", report_generate().c_str());
    }
    exit_code = 0;
  });
}

}  // namespace nanochat
