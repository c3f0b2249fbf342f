// `nanochat infer-bench` (upstream's scripts/infer_bench.py): load a checkpoint on one device
// and measure what it costs to run (time to first token, decode latency and throughput per
// batch size, prefill speed, memory, KV-cache bytes, bandwidth utilisation). The readable card
// comes first; the last line of stdout is the same as one JSON object, for scripts:
//   nanochat infer-bench -i base | tail -1 | jq .sweep
#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>

#include "cli/commands.h"
#include "nanochat/checkpoint/checkpoint_gpt.h"
#include "nanochat/common/base_dir.h"
#include "nanochat/common/device.h"
#include "nanochat/engine/infer_bench.h"
#include "nanochat/telemetry/peak_flops.h"
#include "nanochat/tokenizer.h"

namespace nanochat {

namespace {

struct InferBenchFlags {
  std::string source = "base", tag, device_type, dtype;
  int64_t step = -1;
  InferBenchOptions bench;
};

int infer_bench_main(const InferBenchFlags& f) {
  const std::string device_type = device_autodetect(f.device_type);
  cpu_threads_setup(1);
  const torch::Device device = device_for_rank(device_type, 0);
  Tokenizer tok = tokenizer_load(base_dir_path("tokenizer"));
  LoadedGPT m = checkpoint_load_gpt(f.source, f.tag, f.step, device, gpt_inference_compute_dtype(f.dtype, device_type),
                                    tok.vocab_size());
  gpt_prepare_for_inference(m.model, f.dtype);
  nlohmann::ordered_json checkpoint = {{"source", f.source},
                                       {"model_tag", std::filesystem::path(m.ref.dir).filename().string()},
                                       {"checkpoint_dir", m.ref.dir},
                                       {"step", m.ref.step},
                                       {"model_config", gpt_config_to_json(m.config)}};
  nlohmann::ordered_json result = infer_bench_run(m.model, tok, f.bench, checkpoint, stdout);
  std::printf("%s\n", result.dump().c_str());
  return 0;
}

}  // namespace

void cli_register_infer_bench(CLI::App& app, int& exit_code) {
  auto* sub = app.add_subcommand("infer-bench",
                                 "Inference benchmark: latency, throughput, memory and bandwidth "
                                 "utilisation of a checkpoint over decode batch sizes (JSON last)");
  static InferBenchFlags f;
  cli_add_checkpoint_flags(sub, f.source, f.tag, f.step);
  cli_add_inference_dtype_flag(sub, f.dtype);
  sub->add_option("--prompt-tokens", f.bench.prompt_tokens, "prompt length for the prefill (clamped to fit)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  sub->add_option("--decode-tokens", f.bench.decode_tokens, "tokens generated per row")
      ->check(CLI::Range((int64_t)2, (int64_t)1 << 30))
      ->capture_default_str();
  sub->add_option("--batch-sizes", f.bench.batch_sizes, "decode batch sizes, comma-separated")
      ->delimiter(',')
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  sub->add_option("-t,--temperature", f.bench.temperature, "sampling temperature (0: greedy)")
      ->check(CLI::Range(0.0, 2.0))
      ->capture_default_str();
  sub->add_option("--peak-bandwidth", f.bench.peak_bandwidth,
                  "device peak bandwidth in bytes/s for MBU (0: the GPU "
                  "table, or a probe on the CPU)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  sub->add_option("--device-type", f.device_type, "cuda or cpu (default: cuda when available)")
      ->check(CLI::IsMember({"", "cuda", "cpu"}));
  sub->callback([&exit_code] { exit_code = infer_bench_main(f); });
}

}  // namespace nanochat
