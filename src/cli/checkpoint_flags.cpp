// The checkpoint flags every subcommand spells the same way: which checkpoint to load
// (upstream's -i/-g/-s of chat_cli, chat_web and chat_eval) and, for the training
// subcommands (base-train, sft, rl), when to save, where to resume, and what happens to the
// output tag's earlier steps (--force, --keep-last).
#include <CLI/CLI.hpp>
#include <cctype>
#include <cstring>

#include "cli/commands.h"
#include "cli/training_checkpoint.h"
#include "nanochat/checkpoint.h"
#include "nanochat/common/error.h"
#include "nanochat/common/log.h"
#include "nanochat/common/progress.h"
#include "nanochat/dist.h"

namespace nanochat {

void cli_add_output_flags(CLI::App* sub, OutputFlags& out) {
  sub->add_flag("--force", out.force,
                "start fresh even though the checkpoint tag already has steps: deletes them first");
  sub->add_option("--keep-last", out.keep_last, "after each save keep only the N newest complete checkpoints (0: all)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
}

static std::string steps_text(const std::vector<int64_t>& steps) {
  std::string s;
  for (size_t i = 0; i < steps.size() && i < 5; i++) s += (i ? ", " : "") + std::to_string(steps[i]);
  if (steps.size() > 5) s += strprintf(", ... %lld (%zu in all)", (long long)steps.back(), steps.size());
  return s;
}

void cli_open_checkpoint_dir(const std::string& dir, bool resuming, const OutputFlags& out, Dist& dist) {
  // every rank checks, so every rank stops; then rank 0 alone repairs and deletes
  std::vector<int64_t> earlier = checkpoint_saved_steps(dir);
  if (!resuming && !earlier.empty() && !out.force)
    fail(
        "%s already has checkpoint step(s) %s from an earlier run: %sstart over with --force (deletes them), "
        "or pick another --model-tag",
        dir.c_str(), steps_text(earlier).c_str(), out.can_resume ? "continue it with --resume latest, " : "");
  dist.barrier();  // every rank has looked before rank 0 changes anything
  if (dist.rank() == 0) {
    if (int n = checkpoint_recover_dir(dir)) log_info("%s: %d file(s) of interrupted saves cleaned up", dir.c_str(), n);
    if (!resuming && out.force) {
      std::vector<int64_t> removed = checkpoint_remove_steps(dir);
      if (!removed.empty())
        log_warn("--force: removed step(s) %s of an earlier run from %s", steps_text(removed).c_str(), dir.c_str());
    }
  }
  dist.barrier();
}

void cli_prune_checkpoints(const std::string& dir, int64_t saved_step, const OutputFlags& out) {
  if (out.keep_last <= 0) return;
  try {  // the save itself succeeded: a prune that fails is worth a warning, not the run
    std::vector<int64_t> removed = checkpoint_prune(dir, saved_step, out.keep_last);
    if (!removed.empty())
      log_info("--keep-last %lld: removed step(s) %s", (long long)out.keep_last, steps_text(removed).c_str());
  } catch (const Error& e) {
    log_warn("--keep-last: %s", e.what());
  }
}

void cli_save_training_checkpoint(const std::string& dir, int64_t step, const NamedTensors& model,
                                  const nlohmann::ordered_json& meta, const NamedTensors& optim,
                                  const nlohmann::ordered_json& optim_state, const OutputFlags& out, Dist& dist) {
  Timer t;
  checkpoint_save_training(dir, step, model, meta, optim, optim_state, dist);
  if (dist.rank() == 0) cli_prune_checkpoints(dir, step, out);
  log_info("saved checkpoint %s step %06lld (%.1fs)", dir.c_str(), (long long)step, t.seconds());
}

CLI::Option* cli_add_checkpoint_flags(CLI::App* sub, std::string& source, std::string& tag, int64_t& step) {
  CLI::Option* from = sub->add_option("-i,--source", source, "checkpoint kind: base, sft or rl")
                          ->check(CLI::IsMember({"base", "sft", "rl"}))
                          ->capture_default_str();
  sub->add_option("-g,--model-tag", tag, "checkpoint folder (default: the largest d<N>)");
  sub->add_option("-s,--step", step, "checkpoint step (default: the last complete one)")->check(CLI::NonNegativeNumber);
  return from;
}

void cli_add_inference_dtype_flag(CLI::App* sub, std::string& dtype) {
  sub->add_option(
         "--dtype", dtype,
         "weights and compute: float32, bfloat16 (half the bytes), or int8 (int8 weights with bf16 "
         "activations, a quarter; the fastest decode where `nanochat doctor` reports AVX-512, elsewhere measure: "
         "docs/inference.md). Default: the device's compute dtype")
      ->check(CLI::IsMember({"float32", "bfloat16", "int8"}));
}

void cli_add_resume_flags(CLI::App* sub, int64_t& save_every, int64_t& resume_from_step, bool& resume_latest,
                          OutputFlags& out) {
  sub->add_option("--save-every", save_every, "checkpoint every N steps (-1: only at the end)")->capture_default_str();
  CLI::Option* from = sub->add_option("--resume-from-step", resume_from_step,
                                      "resume from this checkpoint step of the tag (-1: start fresh)")
                          ->capture_default_str();
  CLI::Option* latest = sub->add_option_function<std::string>(
                               "--resume", [&resume_latest](const std::string&) { resume_latest = true; },
                               "'latest': resume from the last complete checkpoint of the tag")
                            ->check(CLI::IsMember({"latest"}))
                            ->excludes(from);
  cli_add_output_flags(sub, out);
  out.can_resume = true;
  sub->get_option("--force")->excludes(from)->excludes(latest);
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
    if (a == "--force" || a.rfind("--force=", 0) == 0) continue;  // a resume keeps the steps
    cmd += (cmd.empty() ? "" : " ") + shell_quote(a);
  }
  return strprintf("%s --resume-from-step %lld", cmd.c_str(), (long long)step);
}

}  // namespace nanochat
