// One register function per subcommand (one file each in src/cli/). Each adds its
// subcommand to the app with a callback that wires modules together and stores the exit code.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace CLI {
class App;
class Option;
}  // namespace CLI

namespace nanochat {

struct CorpusOptions;
class Dist;

void cli_register_doctor(CLI::App& app, int& exit_code);
void cli_register_launch(CLI::App& app, int& exit_code);
void cli_register_tokenize(CLI::App& app, int& exit_code);
void cli_register_tok_train(CLI::App& app, int& exit_code);
void cli_register_tok_eval(CLI::App& app, int& exit_code);
void cli_register_inspect(CLI::App& app, int& exit_code);
void cli_register_download(CLI::App& app, int& exit_code);
void cli_register_base_train(CLI::App& app, int& exit_code);
void cli_register_base_eval(CLI::App& app, int& exit_code);
void cli_register_scaling_fit(CLI::App& app, int& exit_code);
void cli_register_sft(CLI::App& app, int& exit_code);
void cli_register_rl(CLI::App& app, int& exit_code);
void cli_register_report(CLI::App& app, int& exit_code);
void cli_register_chat_eval(CLI::App& app, int& exit_code);
void cli_register_export(CLI::App& app, int& exit_code);
void cli_register_import(CLI::App& app, int& exit_code);
void cli_register_generate(CLI::App& app, int& exit_code);
void cli_register_chat_cli(CLI::App& app, int& exit_code);
void cli_register_chat_web(CLI::App& app, int& exit_code);
void cli_register_infer_bench(CLI::App& app, int& exit_code);

// --data, --text-column, --txt-split for subcommands that read a corpus (src/cli/data_flags.cpp)
void cli_add_data_flags(CLI::App* sub, CorpusOptions& opts);
// -i/--source, -g/--model-tag, -s/--step: which checkpoint to load; returns --source (checkpoint_flags.cpp)
CLI::Option* cli_add_checkpoint_flags(CLI::App* sub, std::string& source, std::string& tag, int64_t& step);
// --dtype float32|bfloat16|int8 of the subcommands that only run a model (gpt_prepare_for_inference)
void cli_add_inference_dtype_flag(CLI::App* sub, std::string& dtype);
// what happens to a training subcommand's output tag: its earlier steps (--force) and its older
// checkpoints after each save (--keep-last); can_resume: the subcommand has --resume too. Each
// training subcommand keeps its own in its flags and passes it to the three functions below.
struct OutputFlags {
  bool force = false;
  int64_t keep_last = 0;
  bool can_resume = false;
};
// --save-every, --resume-from-step, --resume latest of the training subcommands, and --force and
// --keep-last (checkpoint_flags.cpp)
void cli_add_resume_flags(CLI::App* sub, int64_t& save_every, int64_t& resume_from_step, bool& resume_latest,
                          OutputFlags& out);
// the command line `argv` with its --resume* flags replaced by --resume-from-step <step>:
// what a stopped run prints so it can be resumed (checkpoint_flags.cpp)
std::string cli_resume_command(const std::vector<std::string>& argv, int64_t step);
// --force, --keep-last (cli_add_resume_flags adds them too; rl, which cannot resume, alone)
void cli_add_output_flags(CLI::App* sub, OutputFlags& out);
// a training run's start, on every rank: a fresh run (not `resuming`) into a tag that has
// steps is an Error unless --force; then rank 0 repairs dir (checkpoint_recover_dir) and,
// with --force, deletes its steps, between two barriers
void cli_open_checkpoint_dir(const std::string& dir, bool resuming, const OutputFlags& out, Dist& dist);
// rank 0 after step `saved_step` is marked complete: --keep-last's pruning (a failure warns)
void cli_prune_checkpoints(const std::string& dir, int64_t saved_step, const OutputFlags& out);

// the process's command line (set first thing in main)
void cli_set_argv(int argc, char** argv);
const std::vector<std::string>& cli_argv();
// every flag of a parsed subcommand by upstream's argparse name (--matrix-lr: matrix_lr) with
// its value, in the order --help lists them, as upstream records vars(args) for the run's
// user_config: a flag added to the subcommand is recorded with no further edit (argv.cpp)
nlohmann::ordered_json cli_flags_json(const CLI::App* sub);

std::string cli_version_text();  // what `nanochat --version` prints

}  // namespace nanochat
