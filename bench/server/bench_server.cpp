// defines: main (bench_server)
// Serving throughput of `nanochat chat-web` on a tiny model (tests/server_fixture.h: 2 layers,
// n_embd 128), driven over loopback by streaming clients on threads:
//   requests/s and p50/p99 time to first token (request sent -> first token event) with
//   1, 8 and 32 concurrent clients, each sending POST /chat/completions back to back.
// Baseline, same run: the same request through the Engine in this process (no HTTP, no
// queue), one after another; the table gives server/baseline ratios.
// usage: bench_server [--workers 2] [--requests 64] [--max-tokens 32] [--clients 1,8,32]
//        bench_server --make-base-dir   (the tiny model for bench/soak_server.sh)
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>

#include "../bench_util.h"
#include "../http_load.h"
#include "nanochat/checkpoint/checkpoint_gpt.h"
#include "nanochat/engine.h"
#include "nanochat/engine/infer_bench.h"
#include "nanochat/server.h"
#include "server_fixture.h"

using namespace nanochat;
constexpr double kNoLimit = 1e30;  // seconds: every level runs all its requests

static int bench_main(int argc, char** argv, std::string& base) {
  CLI::App app{"bench_server: chat-web requests/s and time to first token"};
  int workers = 2, requests = 64;
  int64_t max_tokens = 32;
  std::string clients_list = "1,8,32";
  app.add_option("--workers", workers, "chat-web --workers (CPU)");
  app.add_option("--requests", requests, "requests per concurrency level");
  app.add_option("--max-tokens", max_tokens, "tokens per reply (greedy)");
  app.add_option("--clients", clients_list, "concurrency levels");
  bool make_base_dir = false;
  app.add_flag("--make-base-dir", make_base_dir, "only write the tiny model's NANOCHAT_BASE_DIR, print its path, keep it (bench/soak_server.sh)");
  CLI11_PARSE(app, argc, argv);

  base = tiny_chat_base_dir();
  if (make_base_dir) {
    std::printf("%s\n", base.c_str());
    base.clear();  // kept for the caller
    return 0;
  }
  const std::string prompt = "what is two plus three";
  nlohmann::json req = {{"messages", {{{"role", "user"}, {"content", prompt}}}}, {"temperature", 0}, {"max_tokens", max_tokens}};
  const std::string body = req.dump();

  // baseline: the engine in process, same prompt and options, one request after another
  at::set_num_threads(1);
  Tokenizer tok = tokenizer_load(base + "/tokenizer");
  Engine engine(checkpoint_load_gpt("sft", "d2", 0, torch::kCPU, torch::kFloat32, tok.vocab_size()).model, tok);
  std::vector<int32_t> ids = server_prompt_tokens(tok, req["messages"]);
  GenerateOptions o;
  o.max_tokens = max_tokens;
  o.temperature = 0;
  std::vector<double> base_ttft;
  int64_t gen_tokens = 0;
  const int base_requests = 16;
  const bench_clock::time_point b0 = bench_clock::now();
  for (int i = 0; i < base_requests; i++) {
    torch::NoGradGuard ng;
    const bench_clock::time_point t0 = bench_clock::now();
    bool first = true;
    GenerateResult r = engine.generate(ids, o, [&](const TokenColumn&) {
      if (first) base_ttft.push_back(1000 * bench_seconds_since(t0));
      first = false;
      return true;
    });
    gen_tokens = r.steps;
  }
  const double base_rps = base_requests / bench_seconds_since(b0);
  const double base_p50 = infer_bench_percentile(base_ttft, 0.5);

  ServerProcess server(NANOCHAT_BIN, base, {"--workers", std::to_string(workers), "-q", "--max-queue", "256"});
  if (server.port() == 0) {
    std::fprintf(stderr, "chat-web did not start:\n%s\n", server.log().c_str());
    return 1;
  }
  wait_until_healthy(server.port());
  bench_http_load(server.port(), 2, 4, kNoLimit, body);  // warm-up

  std::printf("bench_server: tiny GPT (2 layers, n_embd 128, vocab %d), %lld tokens/reply (greedy), chat-web --workers %d, %u hardware threads\n",
              tok.vocab_size(), (long long)gen_tokens, workers, std::thread::hardware_concurrency());
  std::printf("baseline (engine in process, sequential): %.1f req/s, time to first token p50 %.2f ms\n\n", base_rps, base_p50);
  std::printf("%8s %9s %10s %12s %12s %14s %9s\n", "clients", "requests", "req/s", "ttft p50 ms", "ttft p99 ms", "req/s / base", "failures");
  std::stringstream ss(clients_list);
  for (std::string item; std::getline(ss, item, ',');) {
    int c = std::stoi(item);
    const LoadLevel r = bench_http_load(server.port(), c, std::max(requests, c), kNoLimit, body);
    const double rps = r.done / r.seconds;
    std::printf("%8d %9d %10.1f %12.2f %12.2f %14.2f %9d\n", c, r.done, rps, 1000 * infer_bench_percentile(r.ttft, 0.5),
                1000 * infer_bench_percentile(r.ttft, 0.99), rps / base_rps, r.failures);
    std::fflush(stdout);
  }
  return 0;  // `server` is killed here
}

int main(int argc, char** argv) {
  std::string base;
  int rc = bench_main(argc, argv, base);
  if (base.rfind("/tmp/nanochat_server_", 0) == 0) std::system(("rm -rf " + base).c_str());
  return rc;
}
