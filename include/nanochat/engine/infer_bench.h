// The inference benchmark (upstream's scripts/infer_bench.py): what a checkpoint costs to run,
// sweeping the decode batch size. Prefill (the prompt at once) is compute-bound; decode (one
// token a step) re-reads every weight and the KV cache to do little math, so it is bound by
// memory bandwidth and batching is nearly free until compute saturates. MBU, the decode twin
// of training's MFU, is the bytes a decode step must read (the weights as stored, plus each
// row's KV cache at the middle of the generation) per second over the device's peak
// bandwidth: a table for known GPUs, a STREAM-triad probe on a CPU. Generation goes through
// the engine (its batch-1 prefill copied into N rows, its KV cache, its decode loop), timed
// at each token column it hands back, which the engine has already copied to the host.
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "nanochat/gpt.h"
#include "nanochat/tokenizer.h"

namespace nanochat {

struct InferBenchOptions {
  int64_t prompt_tokens = 2048;  // clamped so that prompt + decode fits the model's sequence_len
  int64_t decode_tokens = 256;   // per row
  std::vector<int64_t> batch_sizes = {1, 8, 32, 128};
  double temperature = 0.0;
  double peak_bandwidth = 0;  // bytes/s; 0: the GPU table, or the CPU probe
};

// one timed generation's decode steps: median and p90 step latency, tok/s
struct InferBenchStep {
  double median_sec = 0, p90_sec = 0;
  double tok_per_sec_row = 0, tok_per_sec_total = 0;  // steps / their summed time (x batch)
};

InferBenchStep infer_bench_step_stats(const std::vector<double>& step_sec, int64_t batch_size);
// 100 * bytes_per_step / step_sec / peak_bytes_per_sec (0 for an unknown peak)
double infer_bench_mbu_percent(double bytes_per_step, double step_sec, double peak_bytes_per_sec);
// bytes of the parameters as the model stores them: what each decode step reads
int64_t infer_bench_weight_bytes(const GPT& model);
// a natural-language prompt of exactly n tokens, <|bos|> first (argmax decoding of random ids
// degenerates; a real text keeps it honest)
std::vector<int32_t> infer_bench_prompt(const Tokenizer& tok, int64_t n);

// runs the benchmark on `model` (on its device, in its compute dtype), printing the readable
// card and table to `card` as it goes; returns everything as one JSON object (upstream's keys
// and ours), which the caller prints as the last line. `checkpoint` (source, model_tag, step,
// model_config) heads the JSON. Error on options that cannot run.
nlohmann::ordered_json infer_bench_run(GPT& model, const Tokenizer& tok, const InferBenchOptions& options,
                                       const nlohmann::ordered_json& checkpoint, FILE* card);

}  // namespace nanochat
