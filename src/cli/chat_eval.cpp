// `nanochat chat-eval`: score a chat checkpoint on the chat tasks, as upstream's
// scripts/chat_eval.py: each task through task_eval, then ChatCORE, the mean of the centred
// accuracies over ARC-Easy, ARC-Challenge, MMLU, GSM8K and HumanEval (when all five ran),
// written to $BASE/chat_eval/<source>_<tag>_<step>.json and the report.
#include <CLI/CLI.hpp>

#include <cmath>
#include <sstream>

#include "cli/commands.h"
#include "nanochat/checkpoint/checkpoint_gpt.h"
#include "nanochat/common.h"
#include "nanochat/compute.h"
#include "nanochat/execution.h"
#include "nanochat/report.h"
#include "nanochat/task_eval.h"
#include "nanochat/tokenizer.h"

namespace nanochat {

namespace {

struct ChatEvalFlags {
  std::string source, task_names, model_tag, device_type, dtype;
  int64_t step = -1;
  TaskEvalOptions opts;
};

int chat_eval(const ChatEvalFlags& a);

}  // namespace

void cli_register_chat_eval(CLI::App& app, int& exit_code) {
  auto* sub = app.add_subcommand("chat-eval", "Evaluate a chat model: ARC, MMLU, GSM8K, HumanEval, ChatCORE");
  static ChatEvalFlags a;
  cli_add_checkpoint_flags(sub, a.source, a.model_tag, a.step)->required();
  cli_add_inference_dtype_flag(sub, a.dtype);
  sub->add_option("-a,--task-name", a.task_names, "tasks separated by | (default: the five of ChatCORE)");
  sub->add_option("-t,--temperature", a.opts.temperature, "sampling temperature")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 2.0));
  sub->add_option("-m,--max-new-tokens", a.opts.max_new_tokens, "tokens per completion")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  sub->add_option("-n,--num-samples", a.opts.num_samples, "samples per problem (pass@n)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  sub->add_option("-k,--top-k", a.opts.top_k, "top-k sampling (0: off)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  sub->add_option("-b,--batch-size", a.opts.batch_size, "categorical problems per forward")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  sub->add_option("-x,--max-problems", a.opts.max_problems, "problems per task (-1: all)")->capture_default_str();
  sub->add_option("--device-type", a.device_type, "cuda or cpu (empty: autodetect)")
      ->check(CLI::IsMember({"", "cuda", "cpu"}));
  sub->callback([&exit_code] { exit_code = chat_eval(a); });
}

namespace {

const std::vector<std::string> kChatCoreTasks = {"ARC-Easy", "ARC-Challenge", "MMLU", "GSM8K", "HumanEval"};

int chat_eval(const ChatEvalFlags& a) {
  Compute c = compute_init(a.device_type);
  Tokenizer tok = tokenizer_load(base_dir_path("tokenizer"));
  const torch::ScalarType dtype = a.dtype.empty() ? c.dtype : gpt_inference_compute_dtype(a.dtype, c.device_type);
  LoadedGPT loaded = checkpoint_load_gpt(a.source, a.model_tag, a.step, c.device, dtype, tok.vocab_size());
  gpt_prepare_for_inference(loaded.model, a.dtype);
  GPT& model = loaded.model;
  std::vector<std::string> names;
  std::stringstream ss(a.task_names);
  for (std::string n; std::getline(ss, n, '|');)
    if (!n.empty()) names.push_back(n);
  if (names.empty()) names = kChatCoreTasks;

  // ---- each task ----
  model->eval();
  std::vector<TaskEvalResult> results;
  for (const std::string& name : names) {
    TaskPtr task = task_for_eval(name);
    const int64_t refused_before = execution_unavailable_runs();
    results.push_back(task_evaluate(model, tok, *task, a.opts, c.dist.get()));
    const TaskEvalResult& r = results.back();
    log_info("%s accuracy: %.2f%% (%lld/%lld)", r.name.c_str(), 100 * r.accuracy, (long long)r.passed,
             (long long)r.total);
    std::string why;  // programs the sandbox refused to run count as failed, said once here
    if (const int64_t refused = execution_unavailable_runs(&why) - refused_before; refused > 0)
      log_warn("%s: %lld problem(s) counted as failed, their programs not run: %s", r.name.c_str(), (long long)refused,
               why.c_str());
  }

  // ---- ChatCORE: the mean centred accuracy, when every task of it ran ----
  auto mean_centered = [&](size_t first, size_t count) {
    double sum = 0;
    for (size_t k = first; k < first + count; k++) {
      const TaskEvalResult* found = nullptr;
      for (const auto& r : results)
        if (r.name == kChatCoreTasks[k]) found = &r;
      if (!found) return (double)NAN;
      sum += found->centered;
    }
    return sum / (double)count;
  };
  const double chatcore = mean_centered(0, 5), chatcore_cat = mean_centered(0, 3);  // all five; the categorical three
  if (!std::isnan(chatcore)) log_info("ChatCORE: %.4f (categorical only: %.4f)", chatcore, chatcore_cat);

  // ---- results file and report ----
  if (c.master()) {
    nlohmann::ordered_json j;
    for (const auto& t : results)
      j["tasks"].push_back({{"name", t.name},
                            {"passed", t.passed},
                            {"total", t.total},
                            {"accuracy", t.accuracy},
                            {"baseline", t.baseline},
                            {"centered", t.centered}});
    j["chatcore"] = std::isnan(chatcore) ? nlohmann::ordered_json() : nlohmann::ordered_json(chatcore);
    j["chatcore_cat"] = std::isnan(chatcore_cat) ? nlohmann::ordered_json() : nlohmann::ordered_json(chatcore_cat);
    j["source"] = a.source;
    j["checkpoint"] = loaded.ref.dir;
    j["step"] = loaded.ref.step;
    std::string tag = loaded.ref.dir.substr(loaded.ref.dir.rfind('/') + 1);
    std::string path = base_dir_path("chat_eval") +
                       strprintf("/%s_%s_%06lld.json", a.source.c_str(), tag.c_str(), (long long)loaded.ref.step);
    atomic_write_file(path, j.dump(2) + "\n");
    log_info("results written to %s", path.c_str());
    ReportItem accuracies = ReportItem::object();
    for (const TaskEvalResult& t : results) accuracies[t.name] = t.accuracy;
    ReportItem core = ReportItem::object();
    if (!std::isnan(chatcore)) core["ChatCORE metric"] = chatcore;
    report_log("Chat evaluation " + a.source, {ReportItem{{"source", a.source},
                                                          {"checkpoint", loaded.ref.dir},
                                                          {"step", loaded.ref.step},
                                                          {"task_name", a.task_names},
                                                          {"num_samples", a.opts.num_samples},
                                                          {"temperature", a.opts.temperature},
                                                          {"max_new_tokens", a.opts.max_new_tokens},
                                                          {"max_problems", a.opts.max_problems}},
                                               accuracies, core});
  }
  return 0;
}

}  // namespace

}  // namespace nanochat
