// The checkpoint flags every subcommand spells the same way: which checkpoint to load
// (upstream's -i/-g/-s of chat_cli, chat_web and chat_eval) and, for the training
// subcommands (base-train, sft), when to save and where to resume.
#include <CLI/CLI.hpp>
#include <cctype>
#include <cstring>

#include "cli/commands.h"
#include "nanochat/common/error.h"

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

// `a` as one shell word: as is when it is plain, else in single quotes
static std::string shell_quote(const std::string& a) {
  bool plain = !a.empty();
  for (char ch : a) plain = plain && (std::isalnum((unsigned char)ch) || (ch && std::strchr("_./=:,+-@%", ch)));
  if (plain) return a;
  std::string q = "'";
  for (char ch : a) q += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
  return q + "'";
}

std::string cli_resume_command(const std::vector<std::string>& argv, int64_t step) {
  std::string cmd;
  for (size_t i = 0; i < argv.size(); i++) {
    const std::string& a = argv[i];
    if (a.rfind("--resume", 0) == 0) {
      if (a.find('=') == std::string::npos && i + 1 < argv.size()) i++;  // and its value
      continue;
    }
    cmd += (cmd.empty() ? "" : " ") + shell_quote(a);
  }
  return strprintf("%s --resume-from-step %lld", cmd.c_str(), (long long)step);
}

}  // namespace nanochat
