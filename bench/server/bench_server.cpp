// Serving throughput of `nanochat chat-web` on a tiny model (tests/server_fixture.h: 2 layers,
// n_embd 128), driven over loopback by streaming clients on threads:
//   requests/s and p50/p99 time to first token (request sent -> first token event) with
//   1, 8 and 32 concurrent clients, each sending POST /chat/completions back to back.
// Baseline, same run: the same request through the Engine in this process (no HTTP, no
// queue), one after another; the table gives server/baseline ratios.
// --attacks instead: the server under each attack the hardening tests cover (the attacker on 127.0.0.2 ...
// 127.0.0.254, the legitimate client on 127.0.0.1 probing GET /health every 50 ms and chatting
// between), against the same probes with no attack, same run: /health p50/p99, the chats that
// succeeded, the server's descriptors at the peak; then key B's chat latency alone and while key A
// floods (one row, --max-queue 4), and A's 503s.
// usage: bench_server [--workers 2] [--requests 64] [--max-tokens 32] [--clients 1,8,32]
//        bench_server --attacks
//        bench_server --make-base-dir   (the tiny model for bench/soak_server.sh)
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <thread>
#include <vector>

#include <sys/stat.h>

#include <fstream>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "../bench_util.h"
#include "../http_load.h"
#include "nanochat/common/percentile.h"
#include "nanochat/checkpoint/checkpoint_gpt.h"
#include "nanochat/engine.h"
#include "http_raw_client.h"
#include "nanochat/server.h"
#include "server_fixture.h"

using namespace nanochat;
constexpr double kNoLimit = 1e30;  // seconds: every level runs all its requests

namespace {

struct AttackRow {
  const char* what;
  Legit legit;
  int peak_fds = 0;
  nlohmann::json connections;
};

void print_attack_row(const AttackRow& r, double quiet_p99) {
  const double p50 = percentile(r.legit.health_ms, 0.5), p99 = percentile(r.legit.health_ms, 0.99);
  std::printf("%-34s %7zu %9.2f %9.2f %10.2f %7d/%-4d %10.1f %9d %8lld %10lld\n", r.what, r.legit.health_ms.size(), p50,
              p99, quiet_p99 > 0 ? p99 / quiet_p99 : 0.0, r.legit.chats_ok, r.legit.chats,
              percentile(r.legit.chat_ms, 0.5), r.peak_fds, (long long)r.connections.value("peak", 0),
              (long long)(r.connections.value("shed_idle", 0) + r.connections.value("shed_partial", 0)));
  std::fflush(stdout);
}

// the probes for 3.5 s, started 1.2 s after the attack (its first round in)
AttackRow under_attack(const char* what, int port, pid_t pid, const std::string& body, int kind) {
  AttackRow r{what, {}, 0, {}};
  FdWatch fds(pid);
  std::unique_ptr<Slowloris> slow;
  std::unique_ptr<ConnectionFlood> flood;
  if (kind == 1) slow = std::make_unique<Slowloris>(port, 1000, 6);
  if (kind == 2) flood = std::make_unique<ConnectionFlood>(port, 10000, 6.0);
  if (kind != 0) std::this_thread::sleep_for(std::chrono::milliseconds(1200));
  r.legit = legit_traffic(port, 3.5, body);
  const nlohmann::json st = nlohmann::json::parse(raw_http(port, "GET", "/stats").body, nullptr, false);
  if (st.is_object()) r.connections = st["connections"];
  if (slow) slow->stop();
  if (flood) flood->stop();
  r.peak_fds = fds.stop();
  return r;
}

// a keyed chat on its own connection: its status and seconds
std::pair<int, double> keyed_chat(int port, const std::string& key, int max_tokens) {
  const std::string body = R"({"messages":[{"role":"user","content":"hello"}],"temperature":0,"max_tokens":)" +
                           std::to_string(max_tokens) + "}";
  const bench_clock::time_point t0 = bench_clock::now();
  const int fd = raw_connect(port);
  if (fd < 0) return {0, 0};
  raw_send(fd, "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nAuthorization: Bearer " +
                   key + "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
                   "\r\n\r\n" + body);
  const std::string raw = raw_read_all(fd, 60000);
  close(fd);
  return {raw.rfind("HTTP/1.1 ", 0) == 0 ? std::stoi(raw.substr(9, 3)) : 0, bench_seconds_since(t0)};
}

// key B's chat alone, then while key A keeps 12 long requests coming (one row, --max-queue 4)
void fairness(const std::string& base) {
  const std::string keys = base + "/keys_bench";
  std::ofstream(keys) << "key-a\nkey-b\n";
  chmod(keys.c_str(), 0600);
  ServerProcess server(NANOCHAT_BIN, base,
                       {"--workers", "1", "--max-batch", "1", "--max-queue", "4", "-q", "--api-key-file", keys});
  wait_until_healthy(server.port());
  const int port = server.port();
  keyed_chat(port, "key-b", 8);  // warm-up
  const auto alone = keyed_chat(port, "key-b", 8);
  std::vector<std::thread> flood;
  std::atomic<int> a_refused{0}, a_ok{0};
  for (int i = 0; i < 12; i++)
    flood.emplace_back([&] {
      const auto r = keyed_chat(port, "key-a", 200);
      (r.first == 503 ? a_refused : a_ok)++;
    });
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const auto flooded = keyed_chat(port, "key-b", 8);
  for (auto& t : flood) t.join();
  std::printf(
      "\nfair admission (one row, --max-queue 4): key B's chat alone %.0f ms (%d); while key A sends 12 long requests "
      "at once %.0f ms (%d), ratio %.1f; A: %d answered, %d refused 503\n",
      alone.second * 1e3, alone.first, flooded.second * 1e3, flooded.first, flooded.second / alone.second, a_ok.load(),
      a_refused.load());
}

int attacks_main(const std::string& base, const std::string& body) {
  raise_fd_limit(12000);
  ServerProcess server(NANOCHAT_BIN, base, {"--workers", "1", "-q"});
  wait_until_healthy(server.port());
  const rlimit limit{1024, 1024};
  prlimit(server.pid(), RLIMIT_NOFILE, &limit, nullptr);  // the server as under ulimit -n 1024
  const int port = server.port();
  legit_traffic(port, 0.5, body);  // warm-up
  std::printf(
      "bench_server --attacks: chat-web --workers 1 (--max-connections 256, 64 per client), ulimit -n 1024, "
      "%u hardware threads\n",
      std::thread::hardware_concurrency());
  std::printf("%-34s %7s %9s %9s %10s %12s %10s %9s %8s %10s\n", "attack", "probes", "health50", "health99",
              "p99/quiet", "chats ok", "chat50 ms", "srv fds", "conns", "shed");
  const AttackRow quiet = under_attack("none", port, server.pid(), body, 0);
  const double quiet_p99 = percentile(quiet.legit.health_ms, 0.99);
  print_attack_row(quiet, quiet_p99);
  print_attack_row(under_attack("1,000 slowloris (1 byte/s each)", port, server.pid(), body, 1), quiet_p99);
  print_attack_row(under_attack("10,000-connection flood", port, server.pid(), body, 2), quiet_p99);
  fairness(base);
  return 0;
}

}  // namespace

static int bench_main(int argc, char** argv, std::string& base) {
  CLI::App app{"bench_server: chat-web requests/s and time to first token"};
  int workers = 2, requests = 64;
  int64_t max_tokens = 32;
  std::string clients_list = "1,8,32";
  app.add_option("--workers", workers, "chat-web --workers (CPU)");
  app.add_option("--requests", requests, "requests per concurrency level");
  app.add_option("--max-tokens", max_tokens, "tokens per reply (greedy)");
  app.add_option("--clients", clients_list, "concurrency levels");
  bool make_base_dir = false, attacks = false;
  app.add_flag("--attacks", attacks,
               "the server under slowloris, a connection flood and one key's flood, against no attack");
  app.add_flag("--make-base-dir", make_base_dir,
               "only write the tiny model's NANOCHAT_BASE_DIR, print its path, keep it (bench/soak_server.sh)");
  CLI11_PARSE(app, argc, argv);

  base = tiny_chat_base_dir();
  if (make_base_dir) {
    std::printf("%s\n", base.c_str());
    base.clear();  // kept for the caller
    return 0;
  }
  const std::string prompt = "what is two plus three";
  nlohmann::json req = {
      {"messages", {{{"role", "user"}, {"content", prompt}}}}, {"temperature", 0}, {"max_tokens", max_tokens}};
  const std::string body = req.dump();
  if (attacks) return attacks_main(base, body);

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
  const double base_p50 = percentile(base_ttft, 0.5);

  ServerProcess server(NANOCHAT_BIN, base, {"--workers", std::to_string(workers), "-q", "--max-queue", "256"});
  if (server.port() == 0) {
    std::fprintf(stderr, "chat-web did not start:\n%s\n", server.log().c_str());
    return 1;
  }
  wait_until_healthy(server.port());
  bench_http_load(server.port(), 2, 4, kNoLimit, body);  // warm-up

  std::printf(
      "bench_server: tiny GPT (2 layers, n_embd 128, vocab %d), %lld tokens/reply (greedy), chat-web --workers %d, %u hardware threads\n",
      tok.vocab_size(), (long long)gen_tokens, workers, std::thread::hardware_concurrency());
  std::printf("baseline (engine in process, sequential): %.1f req/s, time to first token p50 %.2f ms\n\n", base_rps,
              base_p50);
  std::printf("%8s %9s %10s %12s %12s %14s %9s\n", "clients", "requests", "req/s", "ttft p50 ms", "ttft p99 ms",
              "req/s / base", "failures");
  std::stringstream ss(clients_list);
  for (std::string item; std::getline(ss, item, ',');) {
    int c = std::stoi(item);
    const LoadLevel r = bench_http_load(server.port(), c, std::max(requests, c), kNoLimit, body);
    const double rps = r.done / r.seconds;
    std::printf("%8d %9d %10.1f %12.2f %12.2f %14.2f %9d\n", c, r.done, rps, 1000 * percentile(r.ttft, 0.5),
                1000 * percentile(r.ttft, 0.99), rps / base_rps, r.failures);
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
