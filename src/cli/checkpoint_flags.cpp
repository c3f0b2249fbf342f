// The checkpoint flags every subcommand spells the same way: which checkpoint to load
// (upstream's -i/-g/-s of chat_cli, chat_web and chat_eval) and, for the training
// subcommands (base-train, sft), when to save and where to resume.
#include <CLI/CLI.hpp>

#include "cli/commands.h"

namespace nanochat {

CLI::Option* cli_add_checkpoint_flags(CLI::App* sub, std::string& source, std::string& tag, int64_t& step) {
  CLI::Option* from = sub->add_option("-i,--source", source, "checkpoint kind: base, sft or rl")
                          ->check(CLI::IsMember({"base", "sft", "rl"}))
                          ->capture_default_str();
  sub->add_option("-g,--model-tag", tag, "checkpoint folder (default: the largest d<N>)");
  sub->add_option("-s,--step", step, "checkpoint step (default: the last complete one)")->check(CLI::NonNegativeNumber);
  return from;
}

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
