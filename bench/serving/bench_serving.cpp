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
// --dtype float32|bfloat16|int8 runs both sides with those weights (chat-web's --dtype);
// --ways picks which of the in-process ways run (one at a time under `perf record`); --linears
// times the model's Linears at 1 to 128 rows, then a step's all in order (and, on AMX, without
// it: NANOCHAT_AMX=0 runs every way without it); --steps the model's
// forwards alone at 1, 4 and 16 rows. NANOCHAT_BENCH_BIN
// names the chat-web binary. With both ways and the bound, the ceiling: one core's peak
// multiply-add rate (peak_macs.h) and the ratio the bound's rows would reach at it. The
// together way also prints how many forwards its prompts went in and its rows per step.
// usage: bench_serving [--requests 16] [--max-tokens 64] [--clients 1,4,16,64] [--seconds 60]
//        [--depth 6] [--width 256] [--dtype float32] [--ways sequential,together,bound]
//        [--http-only|--engine-only] [--profile] [--linears] [--steps]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <sstream>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <torch/csrc/autograd/profiler_legacy.h>

#include "../bench_util.h"
#include "../http_load.h"
#include "nanochat/common/percentile.h"
#include "nanochat/checkpoint.h"
#include "nanochat/checkpoint/checkpoint_gpt.h"
#include "nanochat/engine.h"
#include "nanochat/engine/infer_bench.h"
#include "nanochat/engine/scheduler.h"
#include "nanochat/kernels/int8_linear.h"
#include "nanochat/kernels/panel_linear.h"
#include "nanochat/server.h"
#include "peak_macs.h"
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

// fp32 master weights, as a checkpoint holds them; the in-process model then gets the --dtype
// the server will apply at load
static GPT bench_model(const GPTConfig& c, const std::string& dtype) {
  GPT m(c, torch::kCPU, gpt_inference_compute_dtype(dtype, "cpu"));
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

// the median of `reps` calls, in microseconds
template <typename F>
static double median_us(int reps, F&& f) {
  std::vector<double> t;
  for (int i = 0; i < reps; i++) {
    bench_clock::time_point t0 = bench_clock::now();
    f();
    t.push_back(1e6 * bench_seconds_since(t0));
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// --linears: the model's Linear shapes at 1 to 128 rows, the way the model runs them (Linear's
// forward: the pair panels' kernel on AVX512-BF16), ATen's at::linear of the same weight, and the
// row-major tiles of kernels_rows_linear
static void bench_linears(GPT& model, const std::string& dtype) {
  torch::NoGradGuard ng;
  std::printf("\n%s Linears, microseconds a call (median of 200): model's path / at::linear / rows kernel\n",
              dtype.c_str());
  std::vector<std::pair<std::string, Linear>> layers = {{"attn.c_q", model->blocks[0]->attn->c_q},
                                                        {"mlp.c_fc", model->blocks[0]->mlp->c_fc},
                                                        {"mlp.c_proj", model->blocks[0]->mlp->c_proj},
                                                        {"lm_head", model->lm_head}};
  for (auto& [name, l] : layers) {
    const int64_t in = l->in_features, out = l->out_features;
    const auto dt = model->compute_dtype;
    // the model's path reads the weight's pair panels where it has them, the other two (out, in)
    torch::Tensor plain = l->panels ? kernels_unpack_pair_panels(l->weight, out) : l->weight;
    torch::Tensor deq = l->int8() ? plain.to(dt).mul(l->scale.to(dt).unsqueeze(1)) : plain;
    std::printf("  %-10s %5lld -> %-5lld", name.c_str(), (long long)in, (long long)out);
    for (int64_t rows : {1, 2, 4, 8, 12, 16, 32, 64, 128}) {
      torch::Tensor x = torch::randn({rows, 1, in}).to(model->compute_dtype);
      const double a = median_us(200, [&] { l->forward(x); });
      const double b = median_us(200, [&] { at::linear(x, deq); });
      const double c = kernels_rows_linear_supported()
                           ? median_us(200, [&] { kernels_rows_linear(x, plain, l->scale); })
                           : NAN;
      std::printf("  %lld: %.1f/%.1f/%.1f", (long long)rows, a, b, c);
    }
    std::printf("\n");
  }
  // a step's Linears one after another, every block's then lm_head's: their weights come from
  // L3 or memory, as in a decode step, where a Linear timed on its own above stays in L2
  std::vector<Linear> step;
  for (auto& b : model->blocks)
    for (Linear l : {b->attn->c_q, b->attn->c_k, b->attn->c_v, b->attn->c_proj, b->mlp->c_fc, b->mlp->c_proj})
      step.push_back(l);
  step.push_back(model->lm_head);
  // where the panels run on AMX, the same again on AVX512-BF16 alone
  const bool amx = model->lm_head->panels && kernels_panel_linear_amx();
  for (int64_t rows : {1, 4, 16}) {
    std::map<int64_t, torch::Tensor> x;  // an input per width (n_embd, 4 n_embd)
    for (auto& l : step) x.emplace(l->in_features, torch::randn({rows, 1, l->in_features}).to(model->compute_dtype));
    auto time_step = [&] {
      return median_us(200, [&] {
        for (auto& l : step) l->forward(x.at(l->in_features));
      });
    };
    const double us = time_step();
    std::printf("  a step's %zu Linears one after another, %lld rows: %.1f us", step.size(), (long long)rows, us);
    if (amx) {
      kernels_panel_linear_set_amx(false);
      const double vectors = time_step();
      kernels_panel_linear_set_amx(true);
      std::printf(" (AVX512-BF16 alone %.1f us: AMX %.2fx)", vectors, vectors / us);
    }
    std::printf("\n");
  }
}

// --profile: one more run of a way under ATen's profiler, on this thread; the time of the ATen ops
// our code calls (an op's own calls inside it not counted again), by name, most first, and the
// rest of the run: our kernels (the Linears' panels, attention) and everything between the ops
static void profile_run(const char* what, int64_t steps, const std::function<void()>& run) {
  std::map<std::string, std::pair<double, int64_t>> ops;  // name -> (us, calls)
  bench_clock::time_point t0;
  {
    torch::autograd::profiler::TLSLegacyProfilerGuard guard(
        torch::profiler::impl::ProfilerConfig(torch::profiler::impl::ProfilerState::CPU),
        [&](const torch::autograd::profiler::thread_event_lists& lists) {
          for (const auto& events : lists) {
            std::vector<const torch::autograd::profiler::LegacyEvent*> open;
            for (const auto& e : events) {
              if (e.kind() == torch::autograd::profiler::EventKind::PushRange) {
                open.push_back(&e);
              } else if (e.kind() == torch::autograd::profiler::EventKind::PopRange && !open.empty()) {
                const auto* start = open.back();
                open.pop_back();
                if (open.empty()) {  // an op our code called, not one inside another
                  auto& [us, calls] = ops[start->name()];
                  us += start->cpuElapsedUs(e);
                  calls++;
                }
              }
            }
          }
        });
    t0 = bench_clock::now();
    run();
  }
  const double total = 1e6 * bench_seconds_since(t0);  // includes the profiler's own cost
  std::vector<std::pair<double, std::string>> by_time;
  double in_ops = 0;
  for (auto& [name, v] : ops) by_time.push_back({v.first, name}), in_ops += v.first;
  std::sort(by_time.rbegin(), by_time.rend());
  std::printf("\n%s under the profiler: %.0f us a step (%lld steps), ATen ops %.0f us, the rest %.0f us\n", what,
              total / steps, (long long)steps, in_ops / steps, (total - in_ops) / steps);
  for (size_t i = 0; i < std::min<size_t>(by_time.size(), 14); i++)
    std::printf("  %8.1f us a step  %6.1f calls  %s\n", by_time[i].first / steps,
                (double)ops[by_time[i].second].second / steps, by_time[i].second.c_str());
}

// How far batching can go on this core: N rows of a step cost N rows of multiply-adds. At the peak
// rate of the instruction the weights' dtype runs on, with nothing else in a step, how fast would
// the bound's decode be, and `together` (each request's prompt prefilled too, as one at a time
// does), against one after another as measured?
static void print_ceiling(const GPTConfig& cfg, const std::string& dtype, int requests, int64_t prompt_tokens,
                          int64_t max_tokens, double seq, double bound) {
  double fma = NAN, pairs = NAN, quads = NAN;  // the best of three: the clock moves (a shared machine)
  for (int i = 0; i < 3; i++) {
    fma = std::fmax(fma, peak_macs::fp32_fma());
    pairs = std::fmax(pairs, peak_macs::bf16_pairs());
    quads = std::fmax(quads, peak_macs::int8_quads());
  }
  // the rows kernel: fp32 rows (and bf16 rows without AVX512-BF16) run FMA, bf16 rows bf16 pairs
  const double peak = dtype == "float32" || std::isnan(pairs) ? fma : pairs;
  const double per_token = (double)gpt_num_matmul_params(cfg);  // the Linears' multiply-adds
  const double decode = per_token * requests * max_tokens, prompts = per_token * requests * prompt_tokens;
  std::printf("  one core's peak multiply-adds: fp32 FMA %.1f G/s, bf16 pairs %.1f G/s, int8 u8 x s8 quads %.1f G/s\n",
              fma / 1e9, pairs / 1e9, quads / 1e9);
  std::printf("  the bound's Linears ran %.1f G multiply-adds/s, %.0f%% of the %.1f G/s its rows run at\n",
              decode / bound / 1e9, 100 * decode / bound / peak, peak / 1e9);
  std::printf(
      "  ceiling at that peak, nothing else in a step: the bound %.2fx, together (their %lld-token prompts too) "
      "%.2fx one after another\n",
      seq / (decode / peak), (long long)prompt_tokens, seq / ((decode + prompts) / peak));
}

// --steps: the model's forwards alone (no scheduler, no sampling) at 1, 4 and 16 rows, as the
// scheduler runs them: a decode step with the rows at their own positions (a batch's rows are at
// different lengths), and the rows' 17-token prompts in one forward (the chat prompt's length
// here). Per row, against one row: what batching gains in each phase (run under `perf record`).
static void bench_steps(GPT& model, int64_t max_tokens, int64_t prompt_len) {
  torch::NoGradGuard ng;
  EngineModel em = engine_model_from_gpt(model);
  std::printf("\nforwards alone, microseconds (median): decode rows at positions %lld..%lld, prompts of %lld tokens\n",
              (long long)prompt_len, (long long)(prompt_len + max_tokens), (long long)prompt_len);
  double decode_one = 0, prompt_one = 0;
  for (int64_t rows : {1, 4, 16}) {
    KVCache cache = model->make_kv_cache(rows, prompt_len + max_tokens + 1);
    std::vector<int64_t> pos(rows);
    for (int64_t b = 0; b < rows; b++) pos[b] = prompt_len + (b * max_tokens) / rows;
    torch::Tensor ids = torch::full({rows, 1}, 7, torch::kLong);
    const double decode = median_us(400, [&] {
      KVCache view = cache.view_rows(0, rows, 0);
      view.set_row_positions(pos);
      em.forward(ids, view);
    });
    torch::Tensor prompt_ids = torch::full({rows, prompt_len}, 7, torch::kLong);
    const std::vector<int64_t> last(rows, prompt_len - 1);
    const double prompt = median_us(50, [&] {
      KVCache view = cache.view_rows(0, rows, 0);
      engine_forward_last(em, prompt_ids, view, last);
    });
    if (rows == 1) decode_one = decode, prompt_one = prompt;
    std::printf("  %2lld rows: a decode step %7.1f (%6.1f a row, %.2fx one row's rate); their prompts %8.1f (%.2fx)\n",
                (long long)rows, decode, decode / rows, decode_one * rows / decode, prompt, prompt_one * rows / prompt);
  }
}

int main(int argc, char** argv) {
  CLI::App app{"bench_serving: continuous batching against one request at a time"};
  int requests = 16;
  int64_t max_tokens = 64, depth = 6, width = 256;
  double seconds = 60;
  int rounds = 3;
  std::string clients_list = "1,4,16,64", dtype = "float32", ways = "sequential,together,bound";
  bool http_only = false, engine_only = false, linears = false, profile = false, steps = false;
  app.add_option("--requests", requests,
                 "in-process: concurrent greedy requests (and the sequential baseline's count)");
  app.add_option("--max-tokens", max_tokens, "tokens per reply");
  app.add_option("--clients", clients_list, "HTTP: concurrency levels");
  app.add_option("--seconds", seconds, "HTTP: at most this long per level and configuration");
  app.add_option("--depth", depth, "layers");
  app.add_option("--width", width, "n_embd (heads of 128)");
  app.add_option("--dtype", dtype, "weights: float32, bfloat16 or int8 (chat-web's --dtype)");
  app.add_option("--rounds", rounds, "in-process: interleaved rounds (the best of each way is reported)");
  app.add_option("--ways", ways, "in-process: which of sequential, together, bound run");
  app.add_flag("--profile", profile, "in-process: one more run of sequential and bound under ATen's profiler");
  app.add_flag("--linears", linears, "time the model's Linears at 1 to 128 rows (then exit)");
  app.add_flag("--steps", steps, "time the model's decode and prompt forwards alone at 1, 4 and 16 rows (then exit)");
  app.add_flag("--http-only", http_only, "skip the in-process comparison");
  app.add_flag("--engine-only", engine_only, "skip the HTTP load");
  CLI11_PARSE(app, argc, argv);

  Tokenizer tok = tiny_chat_tokenizer();
  GPTConfig cfg = bench_config(tok.vocab_size(), depth, width);
  GPT model = bench_model(cfg, dtype);
  std::string base = engine_only || linears || steps ? "" : bench_base_dir(tok, cfg, model);  // fp32 weights on disk
  gpt_prepare_for_inference(model, dtype);
  auto engine = std::make_shared<const Engine>(model, tok);
  std::printf(
      "bench_serving: random GPT %lld layers, n_embd %lld, vocab %d, %s weights; %lld greedy tokens per reply; %u "
      "hardware threads, torch threads %d\n",
      (long long)depth, (long long)width, tok.vocab_size(), dtype.c_str(), (long long)max_tokens,
      std::thread::hardware_concurrency(), at::get_num_threads());
  if (linears) {
    bench_linears(model, dtype);
    return 0;
  }

  GenerateOptions o;
  o.max_tokens = max_tokens;
  o.temperature = 0;
  o.use_calculator = false;
  o.default_stops = false;  // every reply runs its whole budget: equal work on both sides
  nlohmann::json msgs = {{{"role", "user"}, {"content", "what is two plus three"}}};
  const std::vector<int32_t> prompt = server_prompt_tokens(tok, msgs);
  if (steps) {
    bench_steps(model, max_tokens, (int64_t)prompt.size());
    return 0;
  }

  if (!http_only) {
    // `rounds` rounds, the ways interleaved (the machine is shared: its load moves between
    // runs); the best time of each way, and every round's ratio
    const bool run_seq = ways.find("sequential") != std::string::npos;
    const bool run_together = ways.find("together") != std::string::npos;
    const bool run_bound = ways.find("bound") != std::string::npos;
    torch::NoGradGuard ng;
    SchedulerOptions so;
    so.max_batch = requests;
    so.prefix_cache = false;  // the same prompt each time: measure batching alone
    Scheduler sched(engine, so);
    GenerateOptions rows = o;  // the bound: one request of N samples (one prefill, rows in step, no scheduler)
    rows.num_samples = requests;
    if (run_seq) engine->generate(prompt, o);  // warm-up
    if (run_together) sched.generate(prompt, o);
    if (run_bound) engine->generate(prompt, rows);
    const SchedulerStats warm = sched.stats();  // the rounds' own counts: less the warm-up's
    double seq = 1e30, batched = 1e30, uniform = 1e30;
    std::string ratios;
    for (int round = 0; round < rounds; round++) {
      bench_clock::time_point t0 = bench_clock::now();
      for (int i = 0; run_seq && i < requests; i++) engine->generate(prompt, o);
      const double s1 = bench_seconds_since(t0);
      t0 = bench_clock::now();
      std::vector<std::thread> threads;
      for (int i = 0; run_together && i < requests; i++) threads.emplace_back([&] { sched.generate(prompt, o); });
      for (auto& t : threads) t.join();
      const double s2 = bench_seconds_since(t0);
      t0 = bench_clock::now();
      if (run_bound) engine->generate(prompt, rows);
      const double s3 = bench_seconds_since(t0);
      seq = std::min(seq, s1);
      batched = std::min(batched, s2);
      uniform = std::min(uniform, s3);
      char r[32];
      std::snprintf(r, sizeof r, " %.2fx", s1 / s2);
      ratios += r;
    }
    const double toks = (double)requests * (double)max_tokens;
    std::printf("\nin process, %d requests (best of %d rounds):\n", requests, rounds);
    if (run_seq) std::printf("  one after another (Engine::generate): %7.3f s  %8.1f tokens/s\n", seq, toks / seq);
    if (run_together)
      std::printf("  together (Scheduler, max_batch %d):  %7.3f s  %8.1f tokens/s\n", requests, batched,
                  toks / batched);
    if (run_together) {
      const SchedulerStats st = sched.stats();
      const int64_t forwards = st.prefill_forwards - warm.prefill_forwards, steps = st.decode_steps - warm.decode_steps;
      std::printf("    its prompts went in %lld forwards, %.1f prompts each; %.1f rows a decode step\n",
                  (long long)forwards, (double)(rounds * requests) / (double)std::max<int64_t>(1, forwards),
                  (double)(st.decode_rows - warm.decode_rows) / (double)std::max<int64_t>(1, steps));
      const double pf = (st.prefill_seconds - warm.prefill_seconds) / rounds;
      const double dec = (st.decode_seconds - warm.decode_seconds) / rounds;
      const double smp = (st.sample_seconds - warm.sample_seconds) / rounds;
      std::printf("    a round's time: prompt forwards %.3f s, decode steps %.3f s (%.2f ms each), sampling %.3f s\n",
                  pf, dec, 1000 * dec * rounds / (double)std::max<int64_t>(1, steps), smp);
    }
    if (run_seq && run_together) std::printf("  speed-up: %.2fx (rounds:%s)\n", seq / batched, ratios.c_str());
    if (run_bound)
      std::printf("  bound: one request of %d samples (Engine::generate, rows in step): %7.3f s  %8.1f tokens/s",
                  requests, uniform, toks / uniform);
    if (run_bound) std::printf(run_seq ? "  (%.2fx)\n" : "\n", seq / uniform);
    if (run_seq && run_bound) print_ceiling(cfg, dtype, requests, (int64_t)prompt.size(), max_tokens, seq, uniform);
    if (profile && run_seq) profile_run("one request alone", max_tokens, [&] { engine->generate(prompt, o); });
    if (profile && run_bound) profile_run("the bound", max_tokens, [&] { engine->generate(prompt, rows); });
    std::fflush(stdout);
  }
  if (engine_only) return 0;

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
  // NANOCHAT_BENCH_BIN: another build's binary (a before/after comparison in one session)
  const char* bin = std::getenv("NANOCHAT_BENCH_BIN") ? std::getenv("NANOCHAT_BENCH_BIN") : NANOCHAT_BIN;
  std::vector<std::unique_ptr<ServerProcess>> servers;
  for (int k = 0; k < 2; k++) {
    servers.push_back(std::make_unique<ServerProcess>(
        bin, base,
        std::vector<std::string>{"-q", "--max-batch", std::to_string(configs[k].max_batch), "--max-queue", "512",
                                 "--no-prefix-cache", "--dtype", dtype}));
    if (servers[k]->port() == 0) {
      std::fprintf(stderr, "chat-web did not start:\n%s\n", servers[k]->log().c_str());
      return 1;
    }
    wait_until_healthy(servers[k]->port());
    bench_http_load(servers[k]->port(), 2, 2, seconds, body);  // warm-up
  }
  // each level's share of the servers' /stats counters: where a server's time went
  auto batch_stats = [](int port) { return nlohmann::json::parse(raw_http(port, "GET", "/stats").body)["batch"]; };
  std::vector<std::string> spent[2];
  for (int c : levels)
    for (int k = 0; k < 2; k++) {
      const nlohmann::json before = batch_stats(servers[k]->port());
      results[k].push_back(bench_http_load(servers[k]->port(), c, std::max(requests, c), seconds, body));
      const nlohmann::json after = batch_stats(servers[k]->port());
      auto delta = [&](const char* key) {  // NaN from a binary whose /stats lacks it (NANOCHAT_BENCH_BIN)
        return after.contains(key) && before.contains(key) ? after[key].get<double>() - before[key].get<double>() : NAN;
      };
      const double wall = results[k].back().seconds, pf = delta("prefill_seconds"), dec = delta("decode_seconds");
      const double forwards = delta("prefill_forwards"), steps = delta("decode_steps"), smp = delta("sample_seconds");
      char line[320];
      std::snprintf(line, sizeof line,
                    "%8d %-14s of %.3f s: %lld prompt forwards %.3f s (%.2f ms each), %lld decode steps %.3f s "
                    "(%.2f ms each, %.1f rows), sampling %.3f s (%.0f us a step), the rest %.3f s",
                    c, configs[k].name, wall, (long long)forwards, pf, 1000 * pf / std::max(1.0, forwards),
                    (long long)steps, dec, 1000 * dec / std::max(1.0, steps),
                    delta("decode_rows") / std::max(1.0, steps), smp, 1e6 * smp / std::max(1.0, steps),
                    wall - pf - dec - (std::isnan(smp) ? 0 : smp));
      spent[k].push_back(line);
    }
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
    for (int k = 0; k < 2; k++) std::printf("%s\n", spent[k][i].c_str());
  }
  if (base.rfind("/tmp/nanochat_server_", 0) == 0) std::system(("rm -rf " + base).c_str());
  return 0;
}
