// Decode speed of the engine's KV-cache generation against the naive full-recompute
// gpt_generate (upstream's GPT.generate), measured in the same run on a randomly initialised model:
//  1. decode tok/s at contexts 128/512/2048, batch 1, greedy: KV cache vs naive (ratio);
//  2. batch scaling at one context: tok/s of N rows, 1..32, and the ratio to batch 1;
//  3. prefill tok/s (the prompt's forward into the cache, to the first token).
// The naive loop re-runs the whole context per token, so it gets only a few steps.
// usage: bench_engine [--depth 4] [--vocab 32768] [--contexts 128,512,2048] [--batches 1,2,4,8,16,32]
//        [--decode-tokens 24] [--naive-tokens 2] [--batch-context 512] [--threads N]
#include <chrono>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <torch/torch.h>

#include "nanochat/common/device.h"
#include "nanochat/engine.h"
#include "nanochat/gpt.h"
#include "nanochat/tokenizer.h"
#include "../bench_util.h"

using namespace nanochat;
using clk = std::chrono::steady_clock;

static double seconds_between(clk::time_point a, clk::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// bytes plus nanochat's specials; generation below ignores them (default_stops off)
static Tokenizer byte_tokenizer() {
  std::vector<std::string> ranks;
  for (int i = 0; i < 256; i++) ranks.push_back(std::string(1, (char)i));
  std::vector<std::pair<std::string, int32_t>> specials;
  for (size_t i = 0; i < kSpecialTokens.size(); i++) specials.push_back({kSpecialTokens[i], 256 + (int32_t)i});
  return Tokenizer(ranks, kPatternNanochat, specials, "<|bos|>");
}

struct EngineRun {
  double prefill_s = 0, decode_tok_s = 0;
  int64_t steps = 0;
};

// times one generate: prefill = call to the first column, decode = first to last column
static EngineRun time_engine(const Engine& engine, const std::vector<int32_t>& prompt, int64_t rows,
                             int64_t decode_tokens) {
  GenerateOptions opt;
  opt.num_samples = rows;
  opt.max_tokens = decode_tokens;
  opt.temperature = rows > 1 ? 1.0 : 0.0;
  opt.default_stops = false;
  opt.use_calculator = false;
  clk::time_point t0 = clk::now(), first, last;
  int64_t steps = 0;
  engine.generate(prompt, opt, [&](const TokenColumn&) {
    last = clk::now();
    if (steps++ == 0) first = last;
    return true;
  });
  EngineRun r;
  r.steps = steps;
  r.prefill_s = seconds_between(t0, first);
  r.decode_tok_s = steps > 1 ? (double)rows * (double)(steps - 1) / seconds_between(first, last) : 0;
  return r;
}

int main(int argc, char** argv) {
  CLI::App app{"bench_engine: KV-cache decode vs naive recompute, batch scaling, prefill"};
  int64_t depth = 4, vocab = 32768, decode_tokens = 24, naive_tokens = 2, batch_context = 512;
  int threads_flag = 0;
  std::string contexts = "128,512,2048", batches = "1,2,4,8,16,32";
  app.add_option("--depth", depth, "model depth (width = 64 * depth)");
  app.add_option("--vocab", vocab, "vocabulary size");
  app.add_option("--contexts", contexts, "prompt lengths for the KV vs naive table");
  app.add_option("--decode-tokens", decode_tokens, "tokens per KV-cache run");
  app.add_option("--naive-tokens", naive_tokens, "tokens per naive run (each re-runs the context)");
  app.add_option("--batches", batches, "rows for the batch-scaling table");
  app.add_option("--batch-context", batch_context, "prompt length for the batch-scaling table");
  app.add_option("--threads", threads_flag, "intra-op threads (0: OMP_NUM_THREADS or every core)");
  CLI11_PARSE(app, argc, argv);

  int threads = cpu_threads_setup(1);
  if (threads_flag > 0) {
    torch::set_num_threads(threads_flag);
    threads = threads_flag;
  }
  std::vector<int64_t> ctx_list = bench_parse_list(contexts), batch_list = bench_parse_list(batches);
  int64_t max_ctx = batch_context;
  for (int64_t c : ctx_list) max_ctx = std::max(max_ctx, c);
  GPTConfig config = gpt_config_from_depth(depth, vocab, max_ctx + decode_tokens);
  GPT model(config);
  gpt_init_weights(model);
  Engine engine(model, byte_tokenizer());
  std::printf("bench_engine: %s, %d threads, fp32, d%lld (n_embd %lld, %lld params), vocab %lld\n",
              host_info().cpu_model.c_str(), threads, (long long)depth, (long long)config.n_embd,
              (long long)gpt_num_scaling_params(config).total, (long long)vocab);

  auto prompt_of = [&](int64_t n) {
    std::vector<int32_t> p(n);
    for (int64_t i = 0; i < n; i++) p[i] = (int32_t)((i * 7919) % 256);
    return p;
  };
  time_engine(engine, prompt_of(16), 1, 4);  // warm-up

  std::printf("\n1. decode, batch 1, greedy: KV cache (%lld tokens) vs naive gpt_generate (%lld tokens)\n",
              (long long)decode_tokens, (long long)naive_tokens);
  std::printf("%8s %14s %14s %10s %16s\n", "context", "kv tok/s", "naive tok/s", "ratio", "prefill tok/s");
  for (int64_t c : ctx_list) {
    std::vector<int32_t> prompt = prompt_of(c);
    EngineRun kv = time_engine(engine, prompt, 1, decode_tokens);
    auto t0 = clk::now();
    gpt_generate(model, std::vector<int64_t>(prompt.begin(), prompt.end()), naive_tokens, 0.0);
    const double naive_tok_s = (double)naive_tokens / seconds_between(t0, clk::now());
    std::printf("%8lld %14.1f %14.2f %9.1fx %16.0f\n", (long long)c, kv.decode_tok_s, naive_tok_s,
                kv.decode_tok_s / naive_tok_s, (double)c / kv.prefill_s);
  }

  std::printf("\n2. batch scaling at context %lld, %lld tokens per row, temperature 1\n", (long long)batch_context,
              (long long)decode_tokens);
  std::printf("%6s %14s %16s %12s\n", "rows", "tok/s", "per-row tok/s", "vs batch 1");
  double base = 0;
  for (int64_t n : batch_list) {
    EngineRun r = time_engine(engine, prompt_of(batch_context), n, decode_tokens);
    if (base == 0) base = r.decode_tok_s;
    std::printf("%6lld %14.1f %16.1f %11.2fx\n", (long long)n, r.decode_tok_s, r.decode_tok_s / (double)n,
                r.decode_tok_s / base);
  }
  return 0;
}
