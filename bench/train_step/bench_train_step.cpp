// One full pretraining step (forward, backward and the MuonAdamW update, as base-train runs it)
// against the same model and optimizer written in plain PyTorch (reference_step.py beside this
// file runs the project's reference, tests/fixtures/gpt_reference.py and optim_reference.py), run eagerly and under torch.compile, with the same shapes, threads,
// dtype, init and batch. For each depth x dtype it prints tokens/s, the step split into
// forward+backward and optimizer time, MFU against the matmul roof of the same dtype measured
// in this run, the process's peak RSS, and the ratios ours/eager and ours/compiled.
//
// Every measurement runs in a process of its own, so each peak RSS is that run's alone: our step
// in a forked child (getrusage(RUSAGE_SELF) there, sent back through a pipe), the reference as a
// subprocess that prints one JSON line. The parent never runs a torch op itself: OpenMP's thread
// pool does not survive fork(), and it would lend the children its own pages.
// Both sides draw the batch from the same seeded CPU generator and init from seed 42, so their
// first losses should agree (a check that the two models are the same model).
// usage: bench_train_step [--depths 4,8] [--dtypes float32,bfloat16] [--seq-len 512] [--batch 8]
//        [--vocab 32768] [--steps 5] [--warmup 2] [--threads N] [--device cpu|cuda] [--no-python]
//        [--trace PREFIX] [--reference-default-malloc]
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <torch/csrc/autograd/profiler_legacy.h>
#include <torch/torch.h>

#include "nanochat/common/device.h"
#include "nanochat/common/error.h"
#include "nanochat/gpt.h"
#include "nanochat/optim.h"
#include "../bench_util.h"

using namespace nanochat;
using nlohmann::json;

struct Options {
  std::string depths = "4,8", dtypes = "float32,bfloat16", device = "cpu", window_pattern = "L", trace;
  int64_t seq_len = 512, batch = 8, vocab = 32768;
  int steps = 5, warmup = 2, threads = 0;
  bool no_python = false, reference_default_malloc = false;
};

// what a child sends back: plain bytes through a pipe
struct OursResult {
  double tok_s, tok_s_best, step_ms, fwd_bwd_ms, optim_ms, peak_rss_mb, peak_dev_mb, loss_first, loss_last, warmup_s;
};

// /proc/loadavg's 1-minute figure: other work on the machine makes every figure here slower
static double load_average() {
  double l = -1;
  if (FILE* f = std::fopen("/proc/loadavg", "r")) {
    if (std::fscanf(f, "%lf", &l) != 1) l = -1;
    std::fclose(f);
  }
  return l;
}

static double peak_rss_mb() {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return (double)ru.ru_maxrss / 1024.0;  // Linux reports KiB
}

// runs fn in a forked child and returns what it computed; a crash or a throw there is an Error here
template <class R>
static R run_in_child(const char* what, const std::function<R()>& fn) {
  int fd[2];
  if (pipe(fd) != 0) fail("pipe() failed for %s", what);
  std::fflush(stdout);
  pid_t pid = fork();
  if (pid < 0) fail("fork() failed for %s", what);
  if (pid == 0) {
    close(fd[0]);
    int rc = 1;
    try {
      R r = fn();
      rc = write(fd[1], &r, sizeof r) == (ssize_t)sizeof r ? 0 : 1;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "%s: %s\n", what, e.what());
    }
    std::fflush(stdout);
    _exit(rc);
  }
  close(fd[1]);
  R r{};
  ssize_t got = read(fd[0], &r, sizeof r);
  close(fd[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (got != (ssize_t)sizeof r || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
    fail("%s failed in its child process (status %d)", what, status);
  return r;
}

// the best of a few n^3 matmuls in `dtype` on `device`, FLOP/s: the roof MFU is measured against
static double matmul_roof(torch::Device device, torch::ScalarType dtype) {
  double best = 0;
  for (int64_t n : {1024, 2048}) {
    auto o = torch::TensorOptions().device(device).dtype(dtype);
    torch::Tensor a = torch::randn({n, n}, o), b = torch::randn({n, n}, o);
    torch::Tensor c = torch::mm(a, b);  // warm-up
    for (int r = 0; r < (n == 1024 ? 5 : 2); r++) {
      device_synchronize(device);
      auto t0 = bench_clock::now();
      c = torch::mm(a, b);
      device_synchronize(device);
      best = std::max(best, 2.0 * (double)(n * n * n) / bench_seconds_since(t0));
    }
  }
  return best;
}

// our step, as base_train's loop runs it (loss.item() each step is the one host sync it has)
static OursResult run_ours(const Options& o, int64_t depth, torch::ScalarType dtype, torch::Device device) {
  GPTConfig c = gpt_config_from_depth(depth, o.vocab, o.seq_len, o.window_pattern, 64, 128);
  GPT model(c, device, dtype);
  gpt_init_weights(model, 42);
  MuonAdamW opt(optim_param_groups_gpt(gpt_named_parameters(model), c.n_embd), nullptr, dtype);
  at::Generator gen = gpt_make_generator(torch::kCPU, 1234);  // the reference's batch, same draws
  torch::Tensor idx = torch::randint(o.vocab, {o.batch, o.seq_len}, gen, torch::kLong).to(device);
  torch::Tensor tgt = torch::randint(o.vocab, {o.batch, o.seq_len}, gen, torch::kLong).to(device);
  std::vector<double> losses;
  double fwd_bwd = 0, optim = 0, best = 1e30;
  auto step = [&]() {
    auto t0 = bench_clock::now();
    torch::Tensor loss = gpt_loss(model, idx, tgt);
    loss.backward();
    device_synchronize(device);
    auto t1 = bench_clock::now();
    opt.step();
    opt.zero_grad();
    losses.push_back(loss.item<double>());
    fwd_bwd += std::chrono::duration<double>(t1 - t0).count();
    optim += bench_seconds_since(t1);
    best = std::min(best, bench_seconds_since(t0));
  };
  auto t0 = bench_clock::now();
  for (int s = 0; s < o.warmup; s++) step();
  const double warmup_s = bench_seconds_since(t0);
  fwd_bwd = optim = 0;
  best = 1e30;
  for (int s = 0; s < o.steps; s++) step();
  const double step_s = (fwd_bwd + optim) / o.steps;
  const int64_t dev_peak = device_peak_memory_bytes(device);  // -1 on the CPU
  const double fwd_bwd_ms = 1000 * fwd_bwd / o.steps, optim_ms = 1000 * optim / o.steps;
  const double loss_last = losses.back();
  if (!o.trace.empty()) {  // one more step under the profiler, outside the figures
    const std::string path = strprintf("%s.d%lld.%s.json", o.trace.c_str(), (long long)depth, c10::toString(dtype));
    torch::autograd::profiler::RecordProfile record(path);
    auto t = bench_clock::now();
    step();
    std::printf("  trace of one step (%.0f ms under the profiler): %s\n", 1000 * bench_seconds_since(t), path.c_str());
  }
  return {(double)(o.batch * o.seq_len) / step_s,
          (double)(o.batch * o.seq_len) / best,
          1000 * step_s,
          fwd_bwd_ms,
          optim_ms,
          peak_rss_mb(),
          dev_peak < 0 ? -1.0 : (double)dev_peak / 1048576.0,
          losses.front(),
          loss_last,
          warmup_s};
}

// the Python reference as a subprocess; its last line is one JSON object
static json run_reference(const Options& o, int64_t depth, const std::string& dtype, int threads, bool compiled) {
  const std::string err = strprintf("/tmp/bench_train_step_ref_%d.err", (int)getpid());
  // the reference gets the malloc thresholds that our runs set (cpu_malloc_setup), so that the
  // ratio is the code's and not glibc's; --reference-default-malloc runs it as Python runs
  const std::string malloc_env = o.reference_default_malloc
                                     ? ""
                                     : "MALLOC_MMAP_THRESHOLD_=1073741824 MALLOC_TRIM_THRESHOLD_=1073741824 ";
  const std::string cmd =
      malloc_env + strprintf(
                       "%s %s --depth %lld --seq-len %lld --batch %lld --vocab %lld --dtype %s --threads %d --steps %d "
                       "--warmup %d --compile %d --device %s --window-pattern %s 2>%s",
                       NANOCHAT_PYTHON, NANOCHAT_BENCH_SCRIPT, (long long)depth, (long long)o.seq_len,
                       (long long)o.batch, (long long)o.vocab, dtype.c_str(), threads, o.steps, o.warmup,
                       compiled ? 1 : 0, o.device.c_str(), o.window_pattern.c_str(), err.c_str());
  std::fflush(stdout);
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) fail("could not start the reference: %s", cmd.c_str());
  std::string out, last;
  char buf[4096];
  while (std::fgets(buf, sizeof buf, p)) out += buf;
  const int rc = pclose(p);
  for (size_t a = 0, b; a < out.size(); a = b + 1) {
    b = out.find('\n', a);
    if (b == std::string::npos) b = out.size();
    if (out[a] == '{') last = out.substr(a, b - a);
  }
  if (rc != 0 || last.empty())
    fail("the reference failed (exit %d): %s\n  its stderr is in %s", rc, cmd.c_str(), err.c_str());
  std::remove(err.c_str());
  return json::parse(last);
}

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"bench_train_step: our training step against the plain-PyTorch reference, eager and compiled"};
  app.add_option("--depths", o.depths, "comma-separated depths");
  app.add_option("--dtypes", o.dtypes, "comma-separated compute dtypes: float32, bfloat16");
  app.add_option("--seq-len", o.seq_len);
  app.add_option("--batch", o.batch);
  app.add_option("--vocab", o.vocab);
  app.add_option("--steps", o.steps, "timed steps per run")->check(CLI::PositiveNumber);
  app.add_option("--warmup", o.warmup, "untimed steps first (they include torch.compile's compilation)")
      ->check(CLI::PositiveNumber);
  app.add_option("--threads", o.threads, "intra-op threads for every run (default: cores)");
  app.add_option("--device", o.device, "cpu or cuda (the reference runs there too)");
  app.add_option("--window-pattern", o.window_pattern, "L is plain causal attention on both sides");
  app.add_flag("--no-python", o.no_python, "our step only");
  app.add_flag("--reference-default-malloc", o.reference_default_malloc,
               "run the reference with glibc's default malloc thresholds (ours raises them: cpu_malloc_setup)");
  app.add_option("--trace", o.trace,
                 "profile one extra step of ours into <prefix>.d<depth>.<dtype>.json (chrome trace)");
  CLI11_PARSE(app, argc, argv);

  // thread count for everyone; the children set it themselves (the parent runs no torch op)
  const int threads = o.threads > 0 ? o.threads : cpu_threads_setup(1);
  cpu_malloc_setup();  // as compute_init does for base-train; the forked children inherit it
  // no device_autodetect here: a CUDA context made before fork() is unusable in the children
  if (o.device != "cpu" && o.device != "cuda") fail("--device: '%s' is not cpu or cuda", o.device.c_str());
  const std::string device_type = o.device;
  const torch::Device device(device_type);
  std::vector<std::string> dtypes;
  std::stringstream ss(o.dtypes);
  for (std::string item; std::getline(ss, item, ',');) dtypes.push_back(item);
  std::printf(
      "bench_train_step: %s, %d threads, %s, B=%lld T=%lld vocab %lld, window %s, %d warm-up + %d timed "
      "steps\n",
      device_type == "cpu" ? host_info().cpu_model.c_str() : "cuda", threads, device_type.c_str(), (long long)o.batch,
      (long long)o.seq_len, (long long)o.vocab, o.window_pattern.c_str(), o.warmup, o.steps);

  struct Row {
    int64_t depth, n_embd, flops_per_token;
    std::string dtype;
    double roof;
    OursResult ours;
    json eager, compiled;
  };
  std::vector<Row> rows;
  json roofs = json::object();
  auto total0 = bench_clock::now();
  const double load_start = load_average();
  for (const std::string& dtype_s : dtypes) {
    if (dtype_s != "float32" && dtype_s != "bfloat16")
      fail("--dtypes: unknown dtype '%s' (float32, bfloat16)", dtype_s.c_str());
    const torch::ScalarType dtype = dtype_s == "bfloat16" ? torch::kBFloat16 : torch::kFloat32;
    struct Roof {
      double flops;
    };
    const double roof = run_in_child<Roof>("matmul roof", [&]() {
                          at::set_num_threads(threads);
                          return Roof{matmul_roof(device, dtype)};
                        }).flops;
    roofs[dtype_s] = roof;
    std::printf("matmul roof %s (best of 1024^3 and 2048^3 mm): %.1f GFLOP/s\n", dtype_s.c_str(), roof / 1e9);
    for (int64_t depth : bench_parse_list(o.depths)) {
      GPTConfig c = gpt_config_from_depth(depth, o.vocab, o.seq_len, o.window_pattern, 64, 128);
      Row r{depth, c.n_embd, gpt_estimate_flops(c), dtype_s, roof, {}, json(), json()};
      r.ours = run_in_child<OursResult>("our step", [&]() {
        at::set_num_threads(threads);
        return run_ours(o, depth, dtype, device);
      });
      std::printf("  d%lld %s ours: %.1f tok/s, %.0f ms/step, peak RSS %.0f MB, loss %.4f -> %.4f\n", (long long)depth,
                  dtype_s.c_str(), r.ours.tok_s, r.ours.step_ms, r.ours.peak_rss_mb, r.ours.loss_first,
                  r.ours.loss_last);
      if (!o.no_python)
        for (bool compiled : {false, true}) {
          json j = run_reference(o, depth, dtype_s, threads, compiled);
          std::printf("  d%lld %s %s: %.1f tok/s, %.0f ms/step, peak RSS %.0f MB, compile %.1f s, loss %.4f -> %.4f\n",
                      (long long)depth, dtype_s.c_str(), compiled ? "compiled" : "eager",
                      j["tok_per_sec"].get<double>(), j["step_ms"].get<double>(), j["peak_rss_mb"].get<double>(),
                      j["compile_s"].get<double>(), j["loss_first"].get<double>(), j["loss_last"].get<double>());
          (compiled ? r.compiled : r.eager) = j;
        }
      rows.push_back(r);
    }
  }
  const double total_s = bench_seconds_since(total0);

  // ---- the table ----
  auto num = [](const json& j, const char* k) { return j.is_null() ? 0.0 : j[k].get<double>(); };
  std::printf("\n%-10s %6s %10s %9s %9s %9s %10s %10s %7s | %8s %8s %8s %10s | %6s %6s\n", "config", "width",
              "ours tok/s", "fwd+bwd", "optim", "eager", "compiled", "ours/eag", "ours/cmp", "RSS ours", "RSS eag",
              "RSS cmp", "ours/cmp", "MFU", "cmp s");
  std::printf("%-10s %6s %10s %9s %9s %9s %10s %10s %7s | %8s %8s %8s %10s | %6s %6s\n", "", "", "", "ms", "ms",
              "tok/s", "tok/s", "", "", "MB", "MB", "MB", "RSS", "ours", "");
  json out_rows = json::array();
  for (const Row& r : rows) {
    const double eager = num(r.eager, "tok_per_sec"), comp = num(r.compiled, "tok_per_sec");
    const double rss_e = num(r.eager, "peak_rss_mb"), rss_c = num(r.compiled, "peak_rss_mb");
    const double mfu = (double)r.flops_per_token * r.ours.tok_s / r.roof;
    const std::string name = strprintf("d%lld %s", (long long)r.depth, r.dtype == "bfloat16" ? "bf16" : "fp32");
    std::printf(
        "%-10s %6lld %10.1f %9.0f %9.0f %9.1f %10.1f %9.2fx %6.2fx | %8.0f %8.0f %8.0f %9.2fx | %5.1f%% %6.1f\n",
        name.c_str(), (long long)r.n_embd, r.ours.tok_s, r.ours.fwd_bwd_ms, r.ours.optim_ms, eager, comp,
        eager > 0 ? r.ours.tok_s / eager : 0.0, comp > 0 ? r.ours.tok_s / comp : 0.0, r.ours.peak_rss_mb, rss_e, rss_c,
        rss_c > 0 ? r.ours.peak_rss_mb / rss_c : 0.0, 100 * mfu, num(r.compiled, "compile_s"));
    json row = {{"depth", r.depth},
                {"dtype", r.dtype},
                {"n_embd", r.n_embd},
                {"flops_per_token", r.flops_per_token},
                {"roof_flops", r.roof},
                {"ours",
                 {{"tok_per_sec", r.ours.tok_s},
                  {"tok_per_sec_best", r.ours.tok_s_best},
                  {"step_ms", r.ours.step_ms},
                  {"fwd_bwd_ms", r.ours.fwd_bwd_ms},
                  {"optim_ms", r.ours.optim_ms},
                  {"peak_rss_mb", r.ours.peak_rss_mb},
                  {"peak_device_mb", r.ours.peak_dev_mb},
                  {"mfu", mfu},
                  {"loss_first", r.ours.loss_first},
                  {"loss_last", r.ours.loss_last},
                  {"warmup_s", r.ours.warmup_s}}},
                {"eager", r.eager},
                {"compiled", r.compiled}};
    if (eager > 0) row["ours_over_eager"] = r.ours.tok_s / eager;
    if (comp > 0) row["ours_over_compiled"] = r.ours.tok_s / comp;
    if (comp > 0) row["ours_over_compiled_best"] = r.ours.tok_s_best / num(r.compiled, "tok_per_sec_best");
    if (rss_c > 0) row["rss_ours_over_compiled"] = r.ours.peak_rss_mb / rss_c;
    if (rss_e > 0) row["rss_ours_over_eager"] = r.ours.peak_rss_mb / rss_e;
    out_rows.push_back(row);
  }
  // the machine may be shared: the fastest step of each run is the figure least disturbed by other load
  std::printf("\nfastest step of each run, tok/s:\n%-10s %10s %10s %10s %9s %9s\n", "config", "ours", "eager",
              "compiled", "ours/eag", "ours/cmp");
  for (const Row& r : rows) {
    const double e = num(r.eager, "tok_per_sec_best"), c = num(r.compiled, "tok_per_sec_best");
    std::printf("d%-3lld %-6s %10.1f %10.1f %10.1f %8.2fx %8.2fx\n", (long long)r.depth,
                r.dtype == "bfloat16" ? "bf16" : "fp32", r.ours.tok_s_best, e, c, e > 0 ? r.ours.tok_s_best / e : 0.0,
                c > 0 ? r.ours.tok_s_best / c : 0.0);
  }
  std::printf("\nfirst / last loss on the same fixed batch (same init, same draws: first losses should agree):\n");
  for (const Row& r : rows)
    std::printf("  d%lld %-8s ours %.4f / %.4f   eager %.4f / %.4f   compiled %.4f / %.4f\n", (long long)r.depth,
                r.dtype.c_str(), r.ours.loss_first, r.ours.loss_last, num(r.eager, "loss_first"),
                num(r.eager, "loss_last"), num(r.compiled, "loss_first"), num(r.compiled, "loss_last"));
  const double load_end = load_average();
  std::printf(
      "target: ours >= 1.2x compiled tok/s and <= its peak RSS; whole bench took %.0f s; load average %.2f at "
      "the start, %.2f at the end (%d threads per run)\n",
      total_s, load_start, load_end, threads);
  json all = {{"bench", "train_step"},
              {"device", device_type},
              {"threads", threads},
              {"batch", o.batch},
              {"seq_len", o.seq_len},
              {"vocab", o.vocab},
              {"steps", o.steps},
              {"warmup", o.warmup},
              {"window_pattern", o.window_pattern},
              {"roof_flops", roofs},
              {"total_s", total_s},
              {"load_average_start", load_start},
              {"load_average_end", load_end},
              {"rows", out_rows}};
  std::printf("%s\n", all.dump().c_str());
  return 0;
}
