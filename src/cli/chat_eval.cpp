// `nanochat chat-eval`: score a chat checkpoint on the chat tasks, ChatCORE (spec §9.5).
#include <CLI/CLI.hpp>

#include <cmath>
#include <sstream>

#include "cli/commands.h"
#include "nanochat/chat_eval.h"
#include "nanochat/checkpoint_gpt.h"
#include "nanochat/common.h"
#include "nanochat/compute.h"
#include "nanochat/report.h"
#include "nanochat/tokenizer.h"

namespace nanochat {

struct ChatEvalCli {
  std::string source, task_names, model_tag, device_type;
  int64_t step = -1;
  ChatEvalOptions opts;
};

static int chat_eval_main(const ChatEvalCli& a) {
  Compute c = compute_init(a.device_type);
  Tokenizer tok = tokenizer_load(base_dir_path("tokenizer"));
  LoadedGPT loaded = checkpoint_load_gpt(a.source, a.model_tag, a.step, c.device, c.dtype, tok.vocab_size());
  std::vector<std::string> names;
  std::stringstream ss(a.task_names);
  for (std::string n; std::getline(ss, n, '|');)
    if (!n.empty()) names.push_back(n);
  ChatEvalResult r = chat_eval_run(loaded.model, tok, names, a.opts, c.dist.get());
  if (!std::isnan(r.chatcore)) log_info("ChatCORE: %.4f (categorical only: %.4f)", r.chatcore, r.chatcore_cat);
  if (c.master()) {
    nlohmann::ordered_json j = chat_eval_json(r);
    j["source"] = a.source;
    j["checkpoint"] = loaded.ref.dir;
    j["step"] = loaded.ref.step;
    std::string tag = loaded.ref.dir.substr(loaded.ref.dir.rfind('/') + 1);
    std::string path = base_dir_path("chat_eval") + strprintf("/%s_%s_%06lld.json", a.source.c_str(), tag.c_str(),
                                                              (long long)loaded.ref.step);
    atomic_write_file(path, j.dump(2) + "\n");
    log_info("results written to %s", path.c_str());
    ReportItem accuracies = ReportItem::object();
    for (const ChatTaskResult& t : r.tasks) accuracies[t.name] = t.accuracy;
    ReportItem core = ReportItem::object();
    if (!std::isnan(r.chatcore)) core["ChatCORE metric"] = r.chatcore;
    report_log("Chat evaluation " + a.source,
               {ReportItem{{"source", a.source}, {"checkpoint", loaded.ref.dir}, {"step", loaded.ref.step},
                           {"task_name", a.task_names}, {"num_samples", a.opts.num_samples},
                           {"temperature", a.opts.temperature}, {"max_new_tokens", a.opts.max_new_tokens},
                           {"max_problems", a.opts.max_problems}},
                accuracies, core});
  }
  return 0;
}

void cli_register_chat_eval(CLI::App& app, int& exit_code) {
  auto* sub = app.add_subcommand("chat-eval", "Evaluate a chat model: ARC, MMLU, GSM8K, HumanEval, ChatCORE");
  static ChatEvalCli a;
  cli_add_checkpoint_flags(sub, a.source, a.model_tag, a.step)->required();
  sub->add_option("-a,--task-name", a.task_names, "tasks separated by | (default: the five of ChatCORE)");
  sub->add_option("-t,--temperature", a.opts.temperature, "sampling temperature")->capture_default_str()
      ->check(CLI::Range(0.0, 2.0));
  sub->add_option("-m,--max-new-tokens", a.opts.max_new_tokens, "tokens per completion")->capture_default_str()
      ->check(CLI::PositiveNumber);
  sub->add_option("-n,--num-samples", a.opts.num_samples, "samples per problem (pass@n)")->capture_default_str()
      ->check(CLI::PositiveNumber);
  sub->add_option("-k,--top-k", a.opts.top_k, "top-k sampling (0: off)")->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  sub->add_option("-b,--batch-size", a.opts.batch_size, "categorical problems per forward")->capture_default_str()
      ->check(CLI::PositiveNumber);
  sub->add_option("-x,--max-problems", a.opts.max_problems, "problems per task (-1: all)")->capture_default_str();
  sub->add_option("--device-type", a.device_type, "cuda or cpu (empty: autodetect)")
      ->check(CLI::IsMember({"", "cuda", "cpu"}));
  sub->callback([&exit_code] { exit_code = chat_eval_main(a); });
}

}  // namespace nanochat
