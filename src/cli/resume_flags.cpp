// --save-every, --resume-from-step and --resume latest: the same checkpoint/resume flags for
// every training subcommand (base-train, sft)
#include <CLI/CLI.hpp>

#include "cli/commands.h"

namespace nanochat {

void cli_add_resume_flags(CLI::App* sub, int64_t& save_every, int64_t& resume_from_step, bool& resume_latest) {
  sub->add_option("--save-every", save_every, "checkpoint every N steps (-1: only at the end)")->capture_default_str();
  CLI::Option* from = sub->add_option("--resume-from-step", resume_from_step,
                                      "resume from this checkpoint step of the tag (-1: start fresh)")
                          ->capture_default_str();
  sub->add_option_function<std::string>(
         "--resume", [&resume_latest](const std::string&) { resume_latest = true; },
         "'latest': resume from the last complete checkpoint of the tag")
      ->check(CLI::IsMember({"latest"}))
      ->excludes(from);
}

}  // namespace nanochat
