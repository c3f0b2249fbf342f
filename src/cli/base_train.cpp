// `nanochat base-train`: pretrain the GPT (spec §6). Upstream's flags and defaults (§6.1),
// plus the loader's and resume's; the loop lives in the base_train module.
#include <CLI/CLI.hpp>

#include "cli/commands.h"
#include "nanochat/base_train.h"

namespace nanochat {

void cli_register_base_train(CLI::App& app, int& exit_code) {
  auto* sub = app.add_subcommand("base-train", "Pretrain the base model (data-parallel under `nanochat launch`)");
  static BaseTrainOptions o;
  auto opt = [&](const char* name, auto& var, const char* help) {
    return sub->add_option(name, var, help)->capture_default_str();
  };
  opt("--run", o.run, "run name, recorded in <checkpoint dir>/metrics.jsonl (there is no wandb: "
                      "every step and eval is logged to that local file instead)");
  opt("--device-type", o.device_type, "cuda or cpu (empty: autodetect)")->check(CLI::IsMember({"", "cuda", "cpu"}));
  sub->add_flag("--fp8", o.fp8, "FP8 training (not implemented yet: warns and trains in the compute dtype)");
  opt("--fp8-recipe", o.fp8_recipe, "tensorwise or rowwise")->check(CLI::IsMember({"tensorwise", "rowwise"}));
  opt("--depth", o.depth, "number of layers; width, heads, batch and learning rates derive from it")
      ->check(CLI::Range(1, 1024));
  opt("--aspect-ratio", o.aspect_ratio, "model width = depth x aspect ratio (rounded up to the head dim)")
      ->check(CLI::PositiveNumber);
  opt("--head-dim", o.head_dim, "attention head dimension")->check(CLI::Range(2, 1024));
  opt("--max-seq-len", o.max_seq_len, "context length T")->check(CLI::Range(2, 1 << 20));
  opt("--window-pattern", o.window_pattern, "S (quarter context) / L (full) per layer, tiled; the last layer is L");
  opt("--num-iterations", o.num_iterations, "optimizer steps (-1: from --target-flops or the data ratio)");
  opt("--target-flops", o.target_flops, "training FLOPs to spend (-1: off)");
  opt("--target-param-data-ratio", o.target_param_data_ratio, "tokens per scaling parameter (-1: off)");
  opt("--device-batch-size", o.device_batch_size, "rows per rank per micro-step")->check(CLI::PositiveNumber);
  opt("--total-batch-size", o.total_batch_size, "tokens per optimizer step over all ranks (-1: auto from depth)");
  opt("--embedding-lr", o.embedding_lr, "AdamW lr of wte (value embeddings: half)");
  opt("--unembedding-lr", o.unembedding_lr, "AdamW lr of lm_head");
  opt("--weight-decay", o.weight_decay, "Muon cautious weight decay at the d12 reference (scaled by depth)");
  opt("--matrix-lr", o.matrix_lr, "Muon lr of the transformer matrices");
  opt("--scalar-lr", o.scalar_lr, "AdamW lr of the per-layer scalars");
  opt("--warmup-steps", o.warmup_steps, "linear lr warmup steps")->check(CLI::NonNegativeNumber);
  opt("--warmdown-ratio", o.warmdown_ratio, "fraction of steps of the final linear lr decay")->check(CLI::Range(0.0, 1.0));
  opt("--final-lr-frac", o.final_lr_frac, "lr at the end as a fraction of the peak")->check(CLI::Range(0.0, 1.0));
  cli_add_resume_flags(sub, o.save_every, o.resume_from_step, o.resume_latest);
  opt("--eval-every", o.eval_every, "val bpb every N steps (-1: off)");
  opt("--eval-tokens", o.eval_tokens, "val tokens per bpb evaluation")->check(CLI::PositiveNumber);
  opt("--core-metric-every", o.core_metric_every, "CORE metric every N steps (-1: off)");
  opt("--core-metric-max-per-task", o.core_metric_max_per_task, "examples per CORE task (-1: all)");
  opt("--sample-every", o.sample_every, "greedy samples every N steps (-1: off)");
  opt("--model-tag", o.model_tag, "checkpoint folder name (default d<depth>)");
  opt("--eval-bundle", o.eval_bundle, "CORE bundle folder (default: $NANOCHAT_BASE_DIR/eval_bundle, from "
                                      "`nanochat download eval-bundle`)");
  cli_add_data_flags(sub, o.data);
  opt("--tokenizer-threads", o.tokenizer_threads, "loader threads per rank (0: all but one core of the rank)")
      ->check(CLI::NonNegativeNumber);
  opt("--prefetch", o.prefetch, "batches the loader stages ahead")->check(CLI::Range(1, 64));
  opt("--min-doc-chars", o.min_doc_chars, "drop documents shorter than this many bytes")->check(CLI::NonNegativeNumber);
  sub->add_flag("--skip-bad-row-groups", o.skip_bad_row_groups,
                "warn about and skip a row group that fails to decode (default: stop with an error)");
  sub->callback([&exit_code] {
    o.argv = cli_argv();
    exit_code = base_train_run(o);
  });
}

}  // namespace nanochat
