// Chat speed on a CPU by weight dtype: a d20-shaped model (20 layers, 1280 wide, vocab 65,536;
// random weights) in fp32, bf16 and int8 weights (gpt_prepare_for_inference), each in its own
// child process so that its peak RSS is its own, side by side with transformers' generate() of the
// same weights (export --format hf) when the venv has transformers, and upstream (Python) nanochat's
// Engine on the same weights when given a checkout of it (--upstream DIR or $UPSTREAM; upstream hard-codes
// q and k times 1.2 after their norm, which transformers' type lacks, so its rows run the model with
// that scale, as does one more of ours in fp32 whose greedy tokens are compared with upstream's).
// Per dtype and batch (1, 8):
// prefill tok/s (one forward of batch x prompt into the KV cache), decode tok/s through the
// engine (greedy, first token column to last), and at batch 1 the bytes a decode step reads
// (every Linear's weights as stored, the KV cache at mid-generation) per second against a
// STREAM-triad probe measured in the same run, before and after (the machine may be shared).
// --matvecs: the d20 decode's weight shapes alone, one row times each (int8 and bf16), against
// a plain read of the same bytes (the floor a matvec can reach), both over weights that do not
// fit the caches, at the bench's thread count.
// usage: bench_cpu_dtypes [--shape d20|d32|smoke] [--dtypes float32,bfloat16,int8] [--batches 1,8]
//        [--prompt 128] [--decode 32] [--hf] [--upstream DIR] [--threads N] [--matvecs]
#include <immintrin.h>
#include <sys/resource.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "nanochat/checkpoint.h"
#include "nanochat/checkpoint/checkpoint_gpt.h"
#include "nanochat/common/device.h"
#include "nanochat/common/error.h"
#include "nanochat/common/files.h"
#include "nanochat/engine.h"
#include "nanochat/gpt.h"
#include "nanochat/kernels/int8_linear.h"
#include "nanochat/telemetry/peak_flops.h"
#include "nanochat/tokenizer.h"
#include "../bench_util.h"

using namespace nanochat;
using json = nlohmann::ordered_json;

namespace {

struct Options {
  std::string shape = "d20", dtypes = "float32,bfloat16,int8", batches = "1,8", child_dtype, upstream;
  int64_t prompt = 128, decode = 32;
  bool hf = false, matvecs = false, upstream_qk = false;
  int threads = 0;
};

// the shapes of the table; the older architecture (no value embeddings, smear or layer
// scalars) is what transformers' `nanochat` type runs, so both sides compute the same model;
// `upstream_qk`: q and k times 1.2 after their norm, as upstream's GPT computes them
GPTConfig shape_config(const std::string& shape, bool upstream_qk = false) {
  GPTConfig c;
  if (shape == "d20") c.n_layer = 20, c.n_embd = 1280, c.vocab_size = 65536;
  else if (shape == "d32") c.n_layer = 32, c.n_embd = 2048, c.vocab_size = 65536;
  else if (shape == "smoke") c.n_layer = 2, c.n_embd = 128, c.vocab_size = 512;
  else fail("--shape %s: expected d20, d32 or smoke", shape.c_str());
  c.n_head = c.n_kv_head = c.n_embd / 128;
  c.sequence_len = 2048;
  c.window_pattern = "L";
  c.value_embeds = c.smear = c.layer_scalars = false;
  c.rope_theta = 10000.0;
  c.qk_scale = upstream_qk ? 1.2 : 1.0;
  return c;
}

// bytes, then byte pairs up to the model's vocab (the export checks that the sizes match), then
// nanochat's specials; the prompt below uses bytes only
Tokenizer bench_tokenizer(int64_t vocab) {
  std::vector<std::string> ranks;
  for (int i = 0; i < 256; i++) ranks.push_back(std::string(1, (char)i));
  for (int i = 0; (int64_t)(ranks.size() + kSpecialTokens.size()) < vocab; i++)
    ranks.push_back(std::string(1, (char)(i / 256)) + (char)(i % 256));
  std::vector<std::pair<std::string, int32_t>> specials;
  for (size_t i = 0; i < kSpecialTokens.size(); i++)
    specials.push_back({kSpecialTokens[i], (int32_t)(ranks.size() + i)});
  return Tokenizer(ranks, kPatternNanochat, specials, "<|bos|>");
}

// seeded: every child and the exported checkpoint hold the same weights
GPT random_model(const GPTConfig& c, torch::ScalarType dtype) {
  GPT m(c, torch::kCPU, dtype);
  gpt_init_weights(m, 7);
  torch::NoGradGuard ng;
  auto gen = gpt_make_generator(torch::kCPU, 11);
  for (auto& [name, p] : gpt_named_parameters(m))  // init leaves c_proj zero: every matrix gets values
    if (p.dim() == 2) p.add_(at::randn(p.sizes(), gen, p.options()) * 0.02);
  return m;
}

// this process's CPU time (every thread): at --threads 1 the decode's tokens per CPU-second do
// not count the time slices that other processes take
double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return (double)(u.ru_utime.tv_sec + u.ru_stime.tv_sec) + 1e-6 * (double)(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

double rss_gib(bool peak) {
  if (peak) {
    rusage u{};
    getrusage(RUSAGE_SELF, &u);
    return (double)u.ru_maxrss / (1 << 20);  // KiB
  }
  std::ifstream f("/proc/self/statm");
  long pages = 0, resident = 0;
  f >> pages >> resident;
  return (double)resident * 4096 / (1 << 30);
}

// what a decode step reads: every Linear's weights as stored (pair panels: 4-D; scales included) and the KV cache
double decode_bytes(GPT& model, int64_t ctx) {
  double bytes = 0;
  for (auto& [name, p] : gpt_named_parameters(model))
    if (p.dim() >= 2 && name.find("wte") == std::string::npos && name.find("value_embeds") == std::string::npos)
      bytes += (double)p.numel() * p.element_size();
  for (auto& b : model->blocks)
    for (auto* l : {&b->attn->c_q, &b->attn->c_k, &b->attn->c_v, &b->attn->c_proj, &b->mlp->c_fc, &b->mlp->c_proj})
      if ((*l)->int8()) bytes += (double)(*l)->scale.numel() * (*l)->scale.element_size();
  if (model->lm_head->int8()) bytes += (double)model->lm_head->scale.numel() * model->lm_head->scale.element_size();
  return bytes + (double)gpt_kv_read_bytes(model->config, ctx, model->compute_dtype);
}

// one dtype, in this process: the JSON line the parent reads
json run_child(const Options& o) {
  const GPTConfig c = shape_config(o.shape, o.upstream_qk);
  GPT model = random_model(c, gpt_inference_compute_dtype(o.child_dtype, "cpu"));
  gpt_prepare_for_inference(model, o.child_dtype);
  const double rss_loaded = rss_gib(false);
  Engine engine(model, bench_tokenizer(c.vocab_size));
  std::vector<int32_t> prompt(o.prompt);
  for (int64_t i = 0; i < o.prompt; i++) prompt[i] = (int32_t)((i * 7919) % 256);
  json out = {{"dtype", o.child_dtype}, {"rss_loaded_gib", rss_loaded}};
  torch::NoGradGuard ng;
  GenerateOptions warm;  // the first steps pay for one-time setup (kernel selection, allocator)
  warm.max_tokens = 4;
  warm.temperature = 0.0;
  warm.default_stops = false;
  warm.use_calculator = false;
  engine.generate(prompt, warm, [](const TokenColumn&) { return true; });
  for (int64_t rows : bench_parse_list(o.batches)) {
    // prefill: rows x prompt in one forward into a fresh cache (best of 2)
    double prefill = 1e30;
    for (int rep = 0; rep < 2; rep++) {
      KVCache kv = model->make_kv_cache(rows, o.prompt + 1);
      torch::Tensor ids = torch::tensor(std::vector<int64_t>(prompt.begin(), prompt.end())).repeat({rows, 1});
      auto t0 = bench_clock::now();
      model->forward(ids, &kv);
      prefill = std::min(prefill, bench_seconds_since(t0));
    }
    GenerateOptions g;
    g.num_samples = rows;
    g.max_tokens = o.decode;
    g.temperature = 0.0;
    g.default_stops = false;
    g.use_calculator = false;
    bench_clock::time_point first, last;
    double cpu_first = 0, cpu_last = 0;
    int64_t steps = 0;
    std::vector<double> step_s;  // the median step shrugs off the time slices another process takes
    std::vector<int32_t> first_row;
    engine.generate(prompt, g, [&](const TokenColumn& column) {
      first_row.push_back(column.tokens[0]);
      const auto now = bench_clock::now();
      cpu_last = cpu_seconds();
      if (steps++ == 0) first = now, cpu_first = cpu_last;
      else step_s.push_back(std::chrono::duration<double>(now - last).count());
      last = now;
      return true;
    });
    const double decode_s = std::chrono::duration<double>(last - first).count();
    std::sort(step_s.begin(), step_s.end());
    json r = {{"rows", rows},
              {"prefill_tok_s", (double)(rows * o.prompt) / prefill},
              {"decode_tok_s", (double)rows * (double)(steps - 1) / decode_s},
              {"decode_tok_s_median_step", step_s.empty() ? 0.0 : (double)rows / step_s[step_s.size() / 2]},
              {"decode_tok_per_cpu_s", (double)rows * (double)(steps - 1) / std::max(1e-9, cpu_last - cpu_first)}};
    if (rows == 1) {
      r["decode_bytes_per_s"] = decode_bytes(model, o.prompt + o.decode / 2) * (double)(steps - 1) / decode_s;
      out["tokens"] = first_row;
    }
    out["runs"].push_back(r);
  }
  out["rss_peak_gib"] = rss_gib(true);
  return out;
}

// the sum of a buffer's 64-bit words: every byte read once, next to no arithmetic
__attribute__((target("avx2"))) int64_t read_all(const uint8_t* p, int64_t bytes) {
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
  for (int64_t i = 0; i + 128 <= bytes; i += 128) {
    a0 = _mm256_add_epi64(a0, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i)));
    a1 = _mm256_add_epi64(a1, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 32)));
    a2 = _mm256_add_epi64(a2, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 64)));
    a3 = _mm256_add_epi64(a3, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 96)));
  }
  int64_t lanes[4];
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(lanes),
                      _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3)));
  return lanes[0] + lanes[1] + lanes[2] + lanes[3];
}

// one shape in one dtype: median seconds of a call, the weights cycled through enough copies
// (>= 256 MiB) that each call reads from memory as a decode step does
double median_call_seconds(int64_t copies, const std::function<void(int64_t)>& call) {
  std::vector<double> t;
  for (int64_t i = 0; i < std::max<int64_t>(copies * 4, 24); i++) {
    auto t0 = bench_clock::now();
    call(i % copies);
    t.push_back(bench_seconds_since(t0));
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

void run_matvecs(const Options& o) {
  const GPTConfig c = shape_config(o.shape);
  const int64_t d = c.n_embd;
  struct Shape {
    const char* what;
    int64_t out, in;
  };
  const std::vector<Shape> shapes = {
      {"attn c_q/k/v/proj", d, d}, {"mlp c_fc", 4 * d, d}, {"mlp c_proj", d, 4 * d}, {"lm_head", c.vocab_size, d}};
  std::printf("matvecs, one row, %d threads, %s: median us per call; GB/s of the weight bytes\n", at::get_num_threads(),
              o.shape.c_str());
  std::printf("%-18s %6s %6s %10s %9s %10s %9s %10s %9s\n", "", "out", "in", "read us", "GB/s", "int8 us", "GB/s",
              "bf16 us", "GB/s");
  torch::NoGradGuard ng;
  for (const Shape& s : shapes) {
    const int64_t bytes8 = s.out * s.in, copies = std::max<int64_t>(2, (256 << 20) / bytes8);
    std::vector<torch::Tensor> q, sc, w;
    for (int64_t i = 0; i < copies; i++) {
      torch::Tensor w32 = torch::randn({s.out, s.in}) * 0.02;
      auto [qi, si] = kernels_int8_quantize(w32, torch::kBFloat16, s.what);
      q.push_back(qi), sc.push_back(si);
      if (i * 2 < copies) w.push_back(w32.to(torch::kBFloat16));  // the same bytes as the int8 pool
    }
    const torch::Tensor x = torch::randn({1, 1, s.in}).to(torch::kBFloat16);
    volatile int64_t sink = 0;
    const double read = median_call_seconds(
        copies, [&](int64_t i) { sink = sink + read_all(static_cast<const uint8_t*>(q[i].data_ptr()), bytes8); });
    const double i8 = median_call_seconds(copies, [&](int64_t i) { kernels_int8_linear(x, q[i], sc[i]); });
    const double b16 = median_call_seconds((int64_t)w.size(), [&](int64_t i) { kernels_bf16_linear(x, w[i]); });
    std::printf("%-18s %6lld %6lld %10.1f %9.1f %10.1f %9.1f %10.1f %9.1f\n", s.what, (long long)s.out, (long long)s.in,
                read * 1e6, bytes8 / read / 1e9, i8 * 1e6, bytes8 / i8 / 1e9, b16 * 1e6, 2 * bytes8 / b16 / 1e9);
  }
}

// the last JSON line `cmd` prints; "" when it printed none or failed, with its last other line in `why`
std::string json_line_of(const std::string& cmd, std::string* why) {
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) fail("cannot run %s", cmd.c_str());
  std::string line, last, other;
  char buf[1 << 16];
  while (std::fgets(buf, sizeof buf, p)) {
    line = buf;
    if (!line.empty() && line[0] == '{') last = line;
    else if (line.find_first_not_of(" \n") != std::string::npos)
      other = line.substr(0, line.find_last_not_of(" \n") + 1);
  }
  int rc = pclose(p);
  if (rc != -1 && WIFEXITED(rc)) rc = WEXITSTATUS(rc);
  if (rc == 0 && !last.empty()) return last;
  *why = strprintf("exit status %d: %s", rc, other.empty() ? "no result line" : other.c_str());
  return "";
}

std::string last_line_of(const std::string& cmd) {
  std::string why, line = json_line_of(cmd, &why);
  if (line.empty()) fail("%s: %s", cmd.c_str(), why.c_str());
  return line;
}

// the same weights as our checkpoint base/base_checkpoints/<tag> (safetensors; the tensor names are
// upstream's state-dict keys), in the bench's config or with upstream's q/k scale
void save_bench_checkpoint(const Options& o, const std::string& tag, bool upstream_qk) {
  const GPTConfig c = shape_config(o.shape, upstream_qk);
  GPT m = random_model(c, torch::kFloat32);
  json meta = {{"step", 0}, {"model_config", gpt_config_to_json(c)}};
  const std::string dir = checkpoint_dir("base", tag);
  checkpoint_save_model(dir, 0, gpt_named_parameters(m), meta);
  checkpoint_mark_complete(dir, 0, 0);
}

std::string bench_base_dir(const Options& o) {
  const std::string base = std::filesystem::temp_directory_path() / ("nanochat_bench_dtypes_" + o.shape);
  setenv("NANOCHAT_BASE_DIR", base.c_str(), 1);
  tokenizer_save(bench_tokenizer(shape_config(o.shape).vocab_size), base + "/tokenizer");
  return base;
}

// a decode step of `r` reads what one of ours in dtype `d` reads: its bytes/s at r's speed
void bytes_as_ours(json& r, const std::string& d, const std::vector<json>& results) {
  for (auto& run : r["runs"])
    for (const json& ours : results)
      if (ours["dtype"] == d && ours["who"].get<std::string>().rfind("ours", 0) == 0 && run["rows"] == 1)
        for (const json& our_run : ours["runs"])
          if (our_run["rows"] == 1 && !run.contains("decode_bytes_per_s"))
            run["decode_bytes_per_s"] = our_run["decode_bytes_per_s"].get<double>() /
                                        our_run["decode_tok_s"].get<double>() * run["decode_tok_s"].get<double>();
}

// transformers' generate() in bf16 and fp32 on the bench's weights exported as its `nanochat` type
void run_hf(const Options& o, const std::string& base, std::vector<json>& results) {
  save_bench_checkpoint(o, "bench", false);
  checkpoint_export_hf("base", "bench", 0, base + "/hf");
  for (const char* d : {"bfloat16", "float32"}) {
    json r = json::parse(last_line_of(strprintf("%s %s/hf_generate.py %s/hf %s %s %lld %lld %d", NANOCHAT_PYTHON,
                                                NANOCHAT_BENCH_DIR, base.c_str(), d, o.batches.c_str(),
                                                (long long)o.prompt, (long long)o.decode, at::get_num_threads())));
    r["who"] = std::string("transformers ") + d;
    bytes_as_ours(r, d, results);
    results.push_back(r);
  }
}

// upstream's Engine in fp32 and bf16 on the bench's weights with upstream's q/k scale, and ours in
// fp32 on that model (`ours_cmd`); returns how many of their batch-1 greedy tokens agree, or a
// skip line when upstream's script cannot run
json run_upstream(const Options& o, const std::string& base, const std::string& ours_cmd, std::vector<json>& results) {
  save_bench_checkpoint(o, "bench_upstream", true);
  const std::string ckpt = checkpoint_dir("base", "bench_upstream");
  std::vector<json> rows;
  for (const char* d : {"float32", "bfloat16"}) {
    std::string why;
    const std::string line = json_line_of(
        strprintf("%s %s/upstream_generate.py '%s' '%s' %s %s %lld %lld %d 2>&1", NANOCHAT_PYTHON, NANOCHAT_BENCH_DIR,
                  o.upstream.c_str(), ckpt.c_str(), d, o.batches.c_str(), (long long)o.prompt, (long long)o.decode,
                  at::get_num_threads()),
        &why);
    if (line.empty())
      return {{"skipped", strprintf("upstream Engine: skipped, %s in %s gave %s", d, o.upstream.c_str(), why.c_str())}};
    rows.push_back(json::parse(line));
    rows.back()["who"] = std::string("upstream Engine ") + d;
    bytes_as_ours(rows.back(), "float32", results);  // upstream keeps fp32 weights on a CPU, bf16 casts them per call
  }
  json ours = json::parse(last_line_of(ours_cmd));
  ours["who"] = "ours float32, q/k x1.2";
  const json &a = ours["tokens"], &b = rows[0]["tokens"];
  int64_t prefix = 0, equal = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); i++) {
    equal += a[i] == b[i];
    if (equal == (int64_t)i + 1) prefix = equal;
  }
  results.push_back(ours);
  for (json& r : rows) results.push_back(r);
  return {{"prefix", prefix}, {"equal", equal}, {"of", std::min(a.size(), b.size())}};
}

double decode_at(const json& r, const json& rows) {
  for (const json& run : r["runs"])
    if (run["rows"] == rows) return run["decode_tok_s"].get<double>();
  return 0.0;
}

void print_row(const std::string& who, const json& r, double stream, double base_decode, double upstream_decode) {
  std::string bw = "";
  if (r.contains("decode_bytes_per_s")) {
    const double b = r["decode_bytes_per_s"].get<double>();
    bw = strprintf("%6.1f GB/s %4.0f%%", b / 1e9, 100 * b / stream);
  }
  const double median = r.value("decode_tok_s_median_step", 0.0);
  const double per_cpu = r.value("decode_tok_per_cpu_s", 0.0);
  const std::string median_s = (median > 0 ? strprintf("%10.2f", median) : strprintf("%10s", "-")) +
                               (per_cpu > 0 ? strprintf(" %9.2f", per_cpu) : strprintf(" %9s", "-"));
  const double decode = r["decode_tok_s"].get<double>();
  const std::string vs_upstream = upstream_decode > 0 ? strprintf("%8.2fx", decode / upstream_decode) : "";
  std::printf("%-24s %4lld %12.1f %12.2f %s %8.2fx %s  %s\n", who.c_str(), (long long)r["rows"].get<int64_t>(),
              r["prefill_tok_s"].get<double>(), decode, median_s.c_str(), decode / base_decode, vs_upstream.c_str(),
              bw.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_cpu_dtypes: fp32, bf16 and int8 weights against transformers' generate() and upstream's Engine"};
  Options o;
  app.add_option("--shape", o.shape, "d20, d32 or smoke (a tiny model: checks that the bench runs)");
  app.add_option("--dtypes", o.dtypes, "ours, comma-separated");
  app.add_option("--batches", o.batches, "decode rows");
  app.add_option("--prompt", o.prompt, "prompt tokens");
  app.add_option("--decode", o.decode, "tokens generated per row");
  app.add_flag("--hf", o.hf, "also transformers' generate() in bf16 and fp32 (.venv's python)");
  app.add_option("--upstream", o.upstream,
                 "a checkout of upstream (Python) nanochat: also its Engine in fp32 and bf16 (default: $UPSTREAM)");
  app.add_option("--threads", o.threads, "intra-op threads (0: every core)");
  app.add_option("--child", o.child_dtype, "internal: run one dtype and print its JSON");
  app.add_flag("--upstream-qk", o.upstream_qk, "internal: the child's model with upstream's q/k scale");
  app.add_flag("--matvecs", o.matvecs, "only the decode's matvecs, int8 and bf16, against a plain read of the weights");
  CLI11_PARSE(app, argc, argv);
  if (o.upstream.empty() && std::getenv("UPSTREAM")) o.upstream = std::getenv("UPSTREAM");
  if (o.threads > 0) torch::set_num_threads(o.threads);
  else cpu_threads_setup(1);
  try {
    if (o.matvecs) {
      run_matvecs(o);
      return 0;
    }
    if (!o.child_dtype.empty()) {
      std::printf("%s\n", run_child(o).dump().c_str());
      return 0;
    }
    const GPTConfig c = shape_config(o.shape);
    const double stream0 = peak_bandwidth_measure_cpu(0.5);
    std::printf(
        "bench_cpu_dtypes: %s, %d threads, %s (%lld layers, n_embd %lld, vocab %lld), prompt %lld, decode %lld\n",
        host_info().cpu_model.c_str(), at::get_num_threads(), o.shape.c_str(), (long long)c.n_layer,
        (long long)c.n_embd, (long long)c.vocab_size, (long long)o.prompt, (long long)o.decode);
    std::vector<json> results;
    const std::string self = std::filesystem::read_symlink("/proc/self/exe");
    const std::string common = strprintf(" --shape %s --batches %s --prompt %lld --decode %lld --threads %d",
                                         o.shape.c_str(), o.batches.c_str(), (long long)o.prompt, (long long)o.decode,
                                         at::get_num_threads());
    std::stringstream ss(o.dtypes);
    for (std::string d; std::getline(ss, d, ',');) {
      results.push_back(json::parse(last_line_of(self + " --child " + d + common)));
      results.back()["who"] = "ours " + d;
    }
    json agreement = {{"skipped", "upstream Engine: skipped, no upstream checkout (--upstream DIR or UPSTREAM=DIR)"}};
    if (o.hf || !o.upstream.empty()) {
      const std::string base = bench_base_dir(o);
      if (o.hf) run_hf(o, base, results);
      if (!o.upstream.empty())
        agreement = run_upstream(o, base, self + " --child float32 --upstream-qk" + common, results);
      remove_tree(base);
    }
    const double stream1 = peak_bandwidth_measure_cpu(0.5);
    const double stream = std::max(stream0, stream1);
    std::printf("STREAM triad: %.1f GB/s before, %.1f GB/s after (percentages below are of the larger)\n",
                stream0 / 1e9, stream1 / 1e9);
    const json* upstream = nullptr;  // the ratios' second baseline: upstream's default on a CPU, fp32
    for (const json& r : results)
      if (r["who"] == "upstream Engine float32") upstream = &r;
    std::printf("\n%-24s %4s %12s %12s %10s %9s %9s %9s  %s\n", "", "rows", "prefill t/s", "decode t/s", "median t/s",
                "cpu-s t/s", "vs base", upstream ? "vs up f32" : "", "batch-1 bytes/s");
    for (const json& r : results)
      for (const json& run : r["runs"])  // base: the first result (ours in the first dtype) at the same rows
        print_row(r["who"].get<std::string>(), run, stream, decode_at(results[0], run["rows"]),
                  upstream ? decode_at(*upstream, run["rows"]) : 0.0);
    std::printf("\n%-24s %10s %10s\n", "", "RSS GiB", "peak GiB");
    for (const json& r : results)
      std::printf("%-24s %10.2f %10.2f\n", r["who"].get<std::string>().c_str(), r["rss_loaded_gib"].get<double>(),
                  r["rss_peak_gib"].get<double>());
    if (agreement.contains("skipped")) std::printf("\n%s\n", agreement["skipped"].get<std::string>().c_str());
    else
      std::printf(
          "\ngreedy tokens at batch 1, fp32, q/k x1.2: ours and upstream's Engine agree on the first %lld of "
          "%lld (%lld positions equal)\n",
          (long long)agreement["prefix"].get<int64_t>(), (long long)agreement["of"].get<int64_t>(),
          (long long)agreement["equal"].get<int64_t>());
    json all = {{"stream_bytes_per_s", stream}, {"upstream_agreement", agreement}, {"results", results}};
    std::printf("%s\n", all.dump().c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_cpu_dtypes: %s\n", e.what());
    return 1;
  }
  return 0;
}
