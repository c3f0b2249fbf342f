// Continuous batching, measured on a random 6-layer, 256-wide chat model (the tiny test
// tokenizer, vocab ~300), greedy, every reply running its whole budget:
//  1. in process: N requests through one Scheduler at once (--max-batch N) against the same N
//     one after another (Engine::generate, no scheduler), back to back in this process, and
//     the bound: one request of N samples (one prefill, all rows at one position);
//  2. over loopback HTTP (`nanochat chat-web`, POST /chat/completions streaming), a load
//     generator of 1, 4, 16, 64 concurrent clients, each sending requests back to back, a
//     bounded count and time per level: aggregate tokens/s, p50/p99 time to first token and
//     per-token latency (gaps between token events), for chat-web --max-batch 64 against
//     --max-batch 1 (one request at a time per worker), same binary, same run: both servers
//     up at once, each level run on one right after the other.
// usage: bench_serving [--requests 16] [--max-tokens 64] [--clients 1,4,16,64] [--seconds 60]
//        [--depth 6] [--width 256] [--http-only|--engine-only]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <sstream>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>

#include "../bench_util.h"
#include "../http_load.h"
#include "nanochat/common/percentile.h"
#include "nanochat/checkpoint.h"
#include "nanochat/checkpoint/checkpoint_gpt.h"
#include "nanochat/engine.h"
#include "nanochat/engine/infer_bench.h"
#include "nanochat/engine/scheduler.h"
#include "nanochat/server.h"
#include "server_fixture.h"

using namespace nanochat;

static GPTConfig bench_config(int64_t vocab, int64_t depth, int64_t width) {
  GPTConfig c;
  c.sequence_len = 256;
  c.vocab_size = vocab;
  c.n_layer = depth;
  c.n_head = std::max<int64_t>(1, width / 128);
  c.n_kv_head = c.n_head;
  c.n_embd = width;
  c.window_pattern = "SSSL";
  return c;
}

static GPT bench_model(const GPTConfig& c) {
  GPT m(c);
  gpt_init_weights(m, 42);
  torch::NoGradGuard ng;
  auto gen = gpt_make_generator(torch::kCPU, 3);
  for (auto& [name, p] : gpt_named_parameters(m)) p.add_(at::randn(p.sizes(), gen, p.options()) * 0.3);
  return m;
}

// NANOCHAT_BASE_DIR with the tokenizer and the model as SFT checkpoint "d<depth>" step 0
static std::string bench_base_dir(const Tokenizer& tok, const GPTConfig& c, GPT& m) {
  char tmpl[] = "/tmp/nanochat_server_XXXXXX";
  std::string base = mkdtemp(tmpl);
  setenv("NANOCHAT_BASE_DIR", base.c_str(), 1);
  tokenizer_save(tok, base + "/tokenizer");
  nlohmann::ordered_json meta;
  meta["step"] = 0;
  meta["model_config"] = gpt_config_to_json(c);
  std::string dir = checkpoint_dir("sft", "d" + std::to_string(c.n_layer));
  checkpoint_save_model(dir, 0, gpt_named_parameters(m), meta);
  checkpoint_mark_complete(dir, 0, 0);
  return base;
}

int main(int argc, char** argv) {
  CLI::App app{"bench_serving: continuous batching against one request at a time"};
  int requests = 16;
  int64_t max_tokens = 64, depth = 6, width = 256;
  double seconds = 60;
  std::string clients_list = "1,4,16,64";
  bool http_only = false, engine_only = false;
  app.add_option("--requests", requests,
                 "in-process: concurrent greedy requests (and the sequential baseline's count)");
  app.add_option("--max-tokens", max_tokens, "tokens per reply");
  app.add_option("--clients", clients_list, "HTTP: concurrency levels");
  app.add_option("--seconds", seconds, "HTTP: at most this long per level and configuration");
  app.add_option("--depth", depth, "layers");
  app.add_option("--width", width, "n_embd (heads of 128)");
  app.add_flag("--http-only", http_only, "skip the in-process comparison");
  app.add_flag("--engine-only", engine_only, "skip the HTTP load");
  CLI11_PARSE(app, argc, argv);

  Tokenizer tok = tiny_chat_tokenizer();
  GPTConfig cfg = bench_config(tok.vocab_size(), depth, width);
  GPT model = bench_model(cfg);
  auto engine = std::make_shared<const Engine>(model, tok);
  std::printf(
      "bench_serving: random GPT %lld layers, n_embd %lld, vocab %d; %lld greedy tokens per reply; %u hardware threads, "
      "torch threads %d\n",
      (long long)depth, (long long)width, tok.vocab_size(), (long long)max_tokens, std::thread::hardware_concurrency(),
      at::get_num_threads());

  GenerateOptions o;
  o.max_tokens = max_tokens;
  o.temperature = 0;
  o.use_calculator = false;
  o.default_stops = false;  // every reply runs its whole budget: equal work on both sides
  nlohmann::json msgs = {{{"role", "user"}, {"content", "what is two plus three"}}};
  const std::vector<int32_t> prompt = server_prompt_tokens(tok, msgs);

  if (!http_only) {
    // three rounds, the three ways interleaved (the machine is shared: its load moves between
    // runs); the best time of each way, and every round's ratio
    torch::NoGradGuard ng;
    SchedulerOptions so;
    so.max_batch = requests;
    so.prefix_cache = false;  // the same prompt each time: measure batching alone
    Scheduler sched(engine, so);
    engine->generate(prompt, o);  // warm-up
    sched.generate(prompt, o);
    GenerateOptions rows = o;  // the bound: one request of N samples (one prefill, rows in step, no scheduler)
    rows.num_samples = requests;
    double seq = 1e30, batched = 1e30, uniform = 1e30;
    std::vector<double> ratios;
    for (int round = 0; round < 3; round++) {
      bench_clock::time_point t0 = bench_clock::now();
      for (int i = 0; i < requests; i++) engine->generate(prompt, o);
      const double s1 = bench_seconds_since(t0);
      t0 = bench_clock::now();
      std::vector<std::thread> threads;
      for (int i = 0; i < requests; i++) threads.emplace_back([&] { sched.generate(prompt, o); });
      for (auto& t : threads) t.join();
      const double s2 = bench_seconds_since(t0);
      t0 = bench_clock::now();
      engine->generate(prompt, rows);
      const double s3 = bench_seconds_since(t0);
      seq = std::min(seq, s1);
      batched = std::min(batched, s2);
      uniform = std::min(uniform, s3);
      ratios.push_back(s1 / s2);
    }
    const double toks = (double)requests * (double)max_tokens;
    std::printf("\nin process, %d requests (best of 3 rounds):\n", requests);
    std::printf("  one after another (Engine::generate): %7.3f s  %8.1f tokens/s\n", seq, toks / seq);
    std::printf("  together (Scheduler, max_batch %d):  %7.3f s  %8.1f tokens/s\n", requests, batched, toks / batched);
    std::printf("  speed-up: %.2fx (rounds: %.2fx %.2fx %.2fx)\n", seq / batched, ratios[0], ratios[1], ratios[2]);
    std::printf(
        "  bound: one request of %d samples (Engine::generate, rows in step): %7.3f s  %8.1f tokens/s  (%.2fx)\n",
        requests, uniform, toks / uniform, seq / uniform);
    std::fflush(stdout);
  }
  if (engine_only) return 0;

  std::string base = bench_base_dir(tok, cfg, model);
  nlohmann::json req = {{"messages", msgs}, {"temperature", 0}, {"max_tokens", max_tokens}};
  const std::string body = req.dump();
  std::vector<int> levels;
  std::stringstream ss(clients_list);
  for (std::string item; std::getline(ss, item, ',');) levels.push_back(std::stoi(item));
  const int top = *std::max_element(levels.begin(), levels.end());
  struct Config {
    const char* name;
    int max_batch;
  };
  std::vector<LoadLevel> results[2];
  // one row more than the most clients: chat-web leaves one row to other addresses (every bench
  // client is 127.0.0.1), so max-batch N would hold the Nth request back for a whole reply
  const Config configs[2] = {{"one at a time", 1}, {"batched", std::max(top, 1) + 1}};
  // both servers up at once, each level run on one then the other (the machine's load drifts)
  std::vector<std::unique_ptr<ServerProcess>> servers;
  for (int k = 0; k < 2; k++) {
    servers.push_back(std::make_unique<ServerProcess>(
        NANOCHAT_BIN, base,
        std::vector<std::string>{"-q", "--max-batch", std::to_string(configs[k].max_batch), "--max-queue", "512",
                                 "--no-prefix-cache"}));
    if (servers[k]->port() == 0) {
      std::fprintf(stderr, "chat-web did not start:\n%s\n", servers[k]->log().c_str());
      return 1;
    }
    wait_until_healthy(servers[k]->port());
    bench_http_load(servers[k]->port(), 2, 2, seconds, body);  // warm-up
  }
  for (int c : levels)
    for (int k = 0; k < 2; k++)
      results[k].push_back(bench_http_load(servers[k]->port(), c, std::max(requests, c), seconds, body));
  servers.clear();
  std::printf(
      "\nHTTP loopback, chat-web --workers 1 (replies of ~%lld tokens; a token event may carry more than one token "
      "when a character spans several):\n",
      (long long)max_tokens);
  std::printf("%8s %-14s %6s %10s %11s %11s %12s %12s %9s\n", "clients", "server", "reqs", "tokens/s", "ttft p50 ms",
              "ttft p99 ms", "token p50 ms", "token p99 ms", "failures");
  for (size_t i = 0; i < levels.size(); i++) {
    for (int k = 0; k < 2; k++) {
      const LoadLevel& lv = results[k][i];
      std::printf("%8d %-14s %6d %10.1f %11.1f %11.1f %12.2f %12.2f %9d\n", levels[i], configs[k].name, lv.done,
                  (double)lv.tokens / lv.seconds, 1000 * percentile(lv.ttft, 0.5), 1000 * percentile(lv.ttft, 0.99),
                  1000 * percentile(lv.gaps, 0.5), 1000 * percentile(lv.gaps, 0.99), lv.failures);
    }
    const LoadLevel &a = results[0][i], &b = results[1][i];
    std::printf("%8s %-14s tokens/s ratio batched / one at a time: %.2fx\n", "", "",
                ((double)b.tokens / b.seconds) / std::max(1e-9, (double)a.tokens / a.seconds));
  }
  if (base.rfind("/tmp/nanochat_server_", 0) == 0) std::system(("rm -rf " + base).c_str());
  return 0;
}
