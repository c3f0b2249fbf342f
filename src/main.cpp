// nanochat: parse the command line and dispatch to a subcommand in src/cli/.
// Exit codes: 0 ok, 1 run-time error (one "error: ..." line), 2 bad command line.
#include <CLI/CLI.hpp>
#include <c10/util/Exception.h>
#include <cstdio>

#include "cli/commands.h"
#include "nanochat/common/device.h"
#include "nanochat/common/log.h"

using namespace nanochat;

static std::string one_line(std::string s) {
  for (char& c : s)
    if (c == '\n' || c == '\r') c = ' ';
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return s;
}

int main(int argc, char** argv) {
  cli_set_argv(argc, argv);
  CLI::App app{"nanochat: from raw text to a model you can talk to, in one binary"};
  app.name("nanochat");
  app.set_version_flag("--version", [] {
    cpu_threads_setup(1);  // show the thread count a run would use
    return cli_version_text();
  });
  app.require_subcommand(1);
  app.fallthrough(false);
  // a repeated flag takes its last value, as argparse does (subcommands inherit this)
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  int exit_code = 0;
  // in pipeline order, as --help lists them
  cli_register_download(app, exit_code);
  cli_register_inspect(app, exit_code);
  cli_register_tok_train(app, exit_code);
  cli_register_tok_eval(app, exit_code);
  cli_register_tokenize(app, exit_code);
  cli_register_base_train(app, exit_code);
  cli_register_base_eval(app, exit_code);
  cli_register_scaling_fit(app, exit_code);
  cli_register_sft(app, exit_code);
  cli_register_rl(app, exit_code);
  cli_register_chat_eval(app, exit_code);
  cli_register_import(app, exit_code);
  cli_register_export(app, exit_code);
  cli_register_generate(app, exit_code);
  cli_register_chat_cli(app, exit_code);
  cli_register_chat_web(app, exit_code);
  cli_register_infer_bench(app, exit_code);
  cli_register_report(app, exit_code);
  cli_register_launch(app, exit_code);
  cli_register_doctor(app, exit_code);
  try {
    // CLI11 would report a missing subcommand first; name the real mistake instead
    if (argc > 1) {
      std::string first = argv[1];
      bool root_flag = first == "-h" || first == "--help" || first == "--version";
      if (first[0] == '-' && !root_flag) throw CLI::ParseError("unknown option '" + first + "'", 2);
      auto named = [&](CLI::App* sub) { return sub->get_name() == first; };
      if (first[0] != '-' && app.get_subcommands(named).empty())
        throw CLI::ParseError("unknown subcommand '" + first + "'", 2);
    }
    app.parse(argc, argv);  // runs the chosen subcommand's callback
  } catch (const CLI::Success& e) {
    return app.exit(e);  // --help, --version
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "error: %s. Run 'nanochat --help' for usage.\n", one_line(e.what()).c_str());
    return 2;
  } catch (const c10::Error& e) {
    // LibTorch errors carry a C++ backtrace; show it only when asked
    std::fprintf(stderr, "error: %s\n", log_debug_enabled() ? e.what() : one_line(e.what_without_backtrace()).c_str());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", one_line(e.what()).c_str());
    return 1;
  }
  return exit_code;
}
