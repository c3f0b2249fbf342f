// `nanochat launch --nproc-per-node N [--nnodes --node-rank --master-addr --master-port] -- <subcommand ...>`
#include <CLI/CLI.hpp>

#include "cli/commands.h"
#include "nanochat/common/error.h"
#include "nanochat/dist/launch.h"

namespace nanochat {

// the launcher's own command line with the ranks' --resume flags replaced by --resume latest:
// the checkpoint the ranks just saved is the tag's latest complete one
static std::string launch_resume_command() {
  std::string cmd = cli_resume_command(cli_argv(), 0);  // "... --resume-from-step 0"
  return cmd.substr(0, cmd.rfind(" --resume-from-step ")) + " --resume latest";
}

void cli_register_launch(CLI::App& app, int& exit_code) {
  auto* sub = app.add_subcommand(
      "launch", "Run a subcommand on several local ranks (like torchrun): launch --nproc-per-node 8 -- base-train ...");
  static LaunchOptions opts;
  static bool exec_program = false;
  static std::vector<std::string> command;
  sub->add_option("--nproc-per-node", opts.nproc_per_node, "ranks on this node (one per GPU)")
      ->check(CLI::Range(1, 1024));
  sub->add_option("--nnodes", opts.nnodes, "number of nodes")->check(CLI::Range(1, 65536));
  sub->add_option("--node-rank", opts.node_rank, "this node's index in [0, nnodes)")->check(CLI::NonNegativeNumber);
  sub->add_option("--master-addr", opts.master_addr, "address of the node with rank 0")->capture_default_str();
  sub->add_option("--master-port", opts.master_port,
                  "rendezvous port (default: a free port on one node, 29500 on several)")
      ->check(CLI::Range(1, 65535));
  sub->add_option("--grace-seconds", opts.grace_seconds,
                  "after Ctrl-C/SIGTERM/SIGHUP: seconds the ranks get to save and exit before SIGKILL "
                  "(a second Ctrl-C/SIGTERM kills at once)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 86400.0));
  sub->add_option("--kill-grace", opts.kill_grace_seconds,
                  "after a rank failed: seconds between SIGTERM and SIGKILL for the others")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 3600.0));
  sub->add_flag("--exec", exec_program, "run any program instead of a nanochat subcommand (like torchrun --no-python)");
  sub->add_option("command", command, "the subcommand and its flags, after --")->required();
  sub->prefix_command();  // everything from the first positional on belongs to the ranks
  sub->callback([&app, &exit_code] {
    if (exec_program) {
      opts.argv = command;
    } else {
      if (command[0] == "launch") fail("launch: cannot launch `launch` itself");
      CLI::App* target = nullptr;
      for (auto* s : app.get_subcommands([](CLI::App*) { return true; }))
        if (s->get_name() == command[0]) target = s;
      if (!target)
        fail("launch: '%s' is not a nanochat subcommand (see nanochat --help; use --exec to run a program)",
             command[0].c_str());
      opts.argv = {"/proc/self/exe"};
      opts.argv.insert(opts.argv.end(), command.begin(), command.end());
      // a subcommand that saves on SIGTERM and can resume: say how, once the ranks stopped
      if (target->get_option_no_throw("--resume")) opts.resume_command = launch_resume_command();
    }
    exit_code = launch_run(opts);
  });
}

}  // namespace nanochat
