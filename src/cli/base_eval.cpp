// `nanochat base-eval`: evaluate a base checkpoint, as upstream's scripts/base_eval.py:
// bits per byte on the train and val splits, greedy samples of the training prompts plus
// unconditioned samples, and the CORE metric (the 22 DCLM tasks, core_eval), written to
// $BASE/base_eval/base_model_<step>.csv. The model is loaded as is (not compiled, eval mode).
#include <CLI/CLI.hpp>
#include <sstream>

#include <torch/torch.h>

#include "cli/commands.h"
#include "nanochat/checkpoint/checkpoint_gpt.h"
#include "nanochat/common.h"
#include "nanochat/core_eval.h"
#include "nanochat/dataloader.h"
#include "nanochat/dataset.h"
#include "nanochat/compute.h"
#include "nanochat/engine.h"
#include "nanochat/gpt.h"
#include "nanochat/loss_eval.h"
#include "nanochat/report.h"
#include "nanochat/tokenizer.h"

namespace nanochat {

namespace {

struct BaseEvalFlags {
  std::string eval = "core,bpb,sample";  // comma-separated modes
  std::string source = "base";
  std::string model_tag;      // "": the largest d<N>
  int64_t step = -1;          // -1: the last complete step
  int64_t max_per_task = -1;  // CORE examples per task (-1: all)
  int64_t device_batch_size = 32;
  int64_t split_tokens = 40 * 524288;  // bpb tokens per split, over all ranks
  std::string device_type;
  std::string dtype;  // --dtype: "" the device's compute dtype
  CorpusOptions data;
  int tokenizer_threads = 0;
  std::string eval_bundle;  // "": $NANOCHAT_BASE_DIR/eval_bundle
};

int base_eval(const BaseEvalFlags& o);

bool has_mode(const std::string& modes, const std::string& mode) {
  std::stringstream ss(modes);
  for (std::string m; std::getline(ss, m, ',');)
    if (m == mode) return true;
  return false;
}

void check_modes(const std::string& modes) {
  std::stringstream ss(modes);
  for (std::string m; std::getline(ss, m, ',');)
    if (m != "core" && m != "bpb" && m != "sample")
      fail("--eval: unknown mode '%s' (expected a comma-separated list of core, bpb, sample)", m.c_str());
}

}  // namespace

void cli_register_base_eval(CLI::App& app, int& exit_code) {
  auto* sub = app.add_subcommand("base-eval", "Evaluate a base checkpoint: bits per byte, samples, CORE");
  static BaseEvalFlags o;
  sub->add_option("--eval", o.eval, "comma-separated: core, bpb, sample")->capture_default_str();
  cli_add_checkpoint_flags(sub, o.source, o.model_tag, o.step);
  cli_add_inference_dtype_flag(sub, o.dtype);
  sub->add_option("--max-per-task", o.max_per_task, "CORE examples per task (-1: all)")->capture_default_str();
  sub->add_option("--device-batch-size", o.device_batch_size, "rows per forward")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  sub->add_option("--split-tokens", o.split_tokens, "tokens per split for bpb (over all ranks)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  sub->add_option("--device-type", o.device_type, "cuda or cpu (empty: autodetect)")
      ->check(CLI::IsMember({"", "cuda", "cpu"}));
  sub->add_option("--tokenizer-threads", o.tokenizer_threads, "loader threads (0: all but one core)")
      ->check(CLI::NonNegativeNumber);
  sub->add_option("--eval-bundle", o.eval_bundle,
                  "CORE bundle folder (default: $NANOCHAT_BASE_DIR/eval_bundle, "
                  "from `nanochat download eval-bundle`)");
  cli_add_data_flags(sub, o.data);
  sub->callback([&exit_code] { exit_code = base_eval(o); });
}

namespace {

int base_eval(const BaseEvalFlags& o) {
  check_modes(o.eval);
  // a missing bundle is an error before any model is loaded
  const std::string bundle = has_mode(o.eval, "core") ? core_eval_bundle_dir(o.eval_bundle) : "";
  Compute c = compute_init(o.device_type);
  const int world = c.env.world_size;
  Tokenizer tok = tokenizer_load(base_dir_path("tokenizer"));
  const torch::ScalarType dtype = o.dtype.empty() ? c.dtype : gpt_inference_compute_dtype(o.dtype, c.device_type);
  LoadedGPT loaded = checkpoint_load_gpt(o.source, o.model_tag, o.step, c.device, dtype, tok.vocab_size());
  gpt_prepare_for_inference(loaded.model, o.dtype);
  GPT& model = loaded.model;
  log_info("evaluating %s step %lld (%s)", loaded.ref.dir.c_str(), (long long)loaded.ref.step, c.device.str().c_str());
  torch::NoGradGuard no_grad;
  // for the report card: {model, CORE metric, train bpb, val bpb}, centred results, samples
  ReportItem summary = {{"model", strprintf("%s step %lld", loaded.ref.dir.c_str(), (long long)loaded.ref.step)}};
  ReportItem centered = ReportItem::object();
  std::string samples;

  if (has_mode(o.eval, "sample") && c.master()) {
    Engine engine(model, tok);
    log_info("greedy completions:");
    for (const std::string& prompt : engine_sample_prompts()) {
      const std::string text = engine_sample_greedy(engine, prompt, 16);
      samples += text + "\n";
      log_info("%s", text.c_str());
    }
    // upstream: 8 rows from <|bos|>, 128 tokens at temperature 1.0, one generator seeded 42
    log_info("unconditioned samples (temperature 1.0):");
    GenerateOptions go;
    go.num_samples = 8;
    go.max_tokens = 128;
    go.temperature = 1.0;
    go.seed = 42;
    GenerateResult r = engine.generate_batch({tok.bos_id()}, go);
    samples += "\nunconditioned:\n";
    for (size_t row = 0; row < r.tokens.size(); row++) {
      const std::string text = engine_completion_text(tok, r, row);
      samples += text + "\n";
      log_info("%s", text.c_str());
    }
  }

  if (has_mode(o.eval, "bpb")) {
    const int64_t seq_len = loaded.config.sequence_len;
    const int64_t tokens_per_step = o.device_batch_size * seq_len * world;
    const int64_t steps = o.split_tokens / tokens_per_step;
    if (steps < 1)
      fail(
          "--split-tokens %lld is less than one step of %lld tokens (--device-batch-size x sequence length %lld x %d ranks)",
          (long long)o.split_tokens, (long long)tokens_per_step, (long long)seq_len, world);
    Corpus corpus = corpus_open(o.data);
    torch::Tensor token_bytes = bpb_token_bytes(tok, c.device);
    for (const char* split : {"train", "val"}) {
      LoaderOptions lo;
      lo.batch_size = o.device_batch_size;
      lo.seq_len = seq_len;
      lo.device = c.device;
      lo.rank = c.env.rank;
      lo.world = world;
      lo.local_world = c.env.local_world_size;
      lo.tokenizer_threads = o.tokenizer_threads;
      DataLoader loader(tok, corpus_split(corpus, split), lo);
      double bpb = evaluate_bpb(
          [&](const torch::Tensor& x, const torch::Tensor& y) { return gpt_loss(model, x, y, LossReduction::none); },
          [&] {
            LoaderBatch b = loader.next();
            return std::make_pair(b.inputs, b.targets);
          },
          steps, token_bytes, c.dist.get());
      log_info("%s bpb: %.6f (%lld tokens)", split, bpb, (long long)(steps * tokens_per_step));
      summary[std::string(split) + " bpb"] = bpb;
    }
  }

  if (has_mode(o.eval, "core")) {
    CoreOptions co;
    co.bundle_dir = bundle;
    co.max_per_task = o.max_per_task;
    co.batch_size = o.device_batch_size;
    CoreResult r = core_evaluate(model, tok, co, c.dist.get(),
                                 [](const CoreTaskResult& t) { log_info("%s", core_task_line(t).c_str()); });
    if (c.master()) {
      const std::string csv = core_csv_path(loaded.ref.step);
      atomic_write_file(csv, core_csv(r));
      log_info("CORE metric: %.4f (per task: %s)", r.core, csv.c_str());
    }
    summary["CORE metric"] = r.core;
    for (const CoreTaskResult& t : r.tasks) centered[t.label] = t.centered;
  }
  if (c.master())
    report_log("Base model evaluation",
               {summary, centered, samples.empty() ? ReportItem() : ReportItem("```\n" + samples + "```\n")});
  return 0;
}

}  // namespace

}  // namespace nanochat
