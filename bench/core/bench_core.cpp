// CORE evaluation speed on the CPU: examples/s of a randomly initialised d<depth> model on a
// synthetic bundle (a multiple-choice task with 4 choices and few-shot prompts, and a
// language-modelling task), with one prompt per forward (batch 1), with about one
// example's prompts per forward (batch 4: what upstream's per-example loop forwards), and
// with many examples' prompts per forward (batched, longest first). Ratios are against
// batch 1 of the same run. The CORE numbers must agree (printed) whatever the batch.
// usage: bench_core [--depth 4] [--vocab 32768] [--examples 32] [--shots 2] [--batches 1,4,32] [--threads N]
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>

#include <CLI/CLI.hpp>
#include <torch/torch.h>

#include "../bench_util.h"
#include "nanochat/common/device.h"
#include "nanochat/common/files.h"
#include "nanochat/common/py_random.h"
#include "nanochat/core_eval.h"
#include "nanochat/tokenizer.h"

using namespace nanochat;

// words drawn with CPython's generator so every run writes the same bundle
static std::string words(PyRandom& r, int n) {
  static const char* kWords[] = {"the",   "a",     "river",  "stone", "quickly", "green", "under", "music", "seven",
                                 "light", "after", "window", "falls", "bright",  "city",  "over",  "paper", "sleep"};
  std::string s;
  for (int i = 0; i < n; i++) s += (i ? " " : "") + std::string(kWords[r.randbelow(18)]);
  return s;
}

static std::string make_bundle(int64_t examples, int64_t shots) {
  char tmpl[] = "/tmp/bench_core_XXXXXX";
  std::string dir = std::string(mkdtemp(tmpl)) + "/eval_bundle";
  make_dirs(dir + "/eval_data");
  std::ofstream(dir + "/core.yaml") << "icl_tasks:\n"
                                    << "- {label: mc, dataset_uri: mc.jsonl, num_fewshot: [" << shots
                                    << "], icl_task_type: multiple_choice}\n"
                                    << "- {label: lm, dataset_uri: lm.jsonl, num_fewshot: [" << shots
                                    << "], icl_task_type: language_modeling}\n";
  std::ofstream(dir + "/eval_meta_data.csv") << "Eval Task,Random baseline\nmc,25\nlm,0\n";
  PyRandom r(7);
  std::ofstream mc(dir + "/eval_data/mc.jsonl"), lm(dir + "/eval_data/lm.jsonl");
  for (int64_t i = 0; i < examples; i++) {
    mc << "{\"query\": \"" << words(r, 20 + (int)r.randbelow(30)) << "\", \"choices\": [";
    for (int c = 0; c < 4; c++) mc << (c ? ", " : "") << "\"" << words(r, 3 + (int)r.randbelow(8)) << "\"";
    mc << "], \"gold\": " << r.randbelow(4) << "}\n";
    lm << "{\"context\": \"" << words(r, 20 + (int)r.randbelow(40)) << "\", \"continuation\": \"" << words(r, 2)
       << "\"}\n";
  }
  return dir;
}

int main(int argc, char** argv) {
  CLI::App app("CORE evaluation examples/s: batched vs one prompt per forward");
  int64_t depth = 4, vocab = 32768, examples = 32, shots = 2;
  std::string batches = "1,4,32";
  int threads_flag = 0;
  app.add_option("--depth", depth);
  app.add_option("--vocab", vocab);
  app.add_option("--examples", examples, "examples per task");
  app.add_option("--shots", shots);
  app.add_option("--batches", batches, "prompts per forward");
  app.add_option("--threads", threads_flag, "intra-op threads (0: OMP_NUM_THREADS or every core)");
  CLI11_PARSE(app, argc, argv);
  int threads = cpu_threads_setup(1);
  if (threads_flag > 0) torch::set_num_threads(threads = threads_flag);

  std::vector<std::string> ranks;
  for (int i = 0; i < 256; i++) ranks.push_back(std::string(1, (char)i));
  Tokenizer tok(ranks, kPatternNanochat, {{"<|bos|>", 256}}, "<|bos|>");
  GPT model(gpt_config_from_depth(depth, vocab, 2048));
  gpt_init_weights(model, 42);
  std::string dir = make_bundle(examples, shots);
  std::printf("bench_core: d%lld (n_embd %lld, vocab %lld), %lld examples x 2 tasks, %lld-shot, %d threads\n",
              (long long)depth, (long long)model->config.n_embd, (long long)vocab, (long long)examples,
              (long long)shots, threads);
  std::printf("%-10s %12s %12s %10s %12s\n", "batch", "seconds", "examples/s", "vs batch1", "CORE");
  double base = 0;
  for (int64_t b : bench_parse_list(batches)) {
    CoreOptions o;
    o.bundle_dir = dir, o.batch_size = b, o.threads = threads;
    auto t0 = std::chrono::steady_clock::now();
    CoreResult r = core_evaluate(model, tok, o, nullptr);
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    double rate = 2.0 * (double)examples / s;
    if (base == 0) base = rate;
    std::printf("%-10lld %12.2f %12.1f %9.2fx %12.6f\n", (long long)b, s, rate, rate / base, r.core);
  }
  remove_tree(parent_dir(dir));
  return 0;
}
