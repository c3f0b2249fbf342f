// The chat-web server's lifecycle: bind, signals, the model loaded in the background while
// GET /health answers 503, then serving until a signal. Shutdown: the first SIGINT/SIGTERM
// drains (new and queued requests 503, in-flight streams run to their end), a second
// cancels in-flight streams (each still sends its final event); then the listener stops and
// server_run returns 0. The routes are set up in routes.cpp.
#include <malloc.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <thread>

#include <torch/torch.h>

#include "nanochat/checkpoint/checkpoint_gpt.h"
#include "nanochat/common/base_dir.h"
#include "nanochat/common/device.h"
#include "nanochat/common/error.h"
#include "nanochat/common/log.h"
#include "server/routes.h"

namespace nanochat {

namespace {

std::atomic<int> g_signals{0};
void on_signal(int) { g_signals.fetch_add(1); }

// one model per device; CPU workers share one copy
void load_models(ServerState& st) {
  const ServerOptions& o = st.opt;
  Tokenizer tok = tokenizer_load(base_dir_path("tokenizer"));
  const torch::ScalarType dtype = gpt_inference_compute_dtype(o.dtype, o.device_type);
  int copies = o.device_type == "cuda" ? o.num_gpus : 1;
  std::vector<std::shared_ptr<const Engine>> engines;
  for (int i = 0; i < copies; i++) {
    torch::Device device = o.device_type == "cuda" ? torch::Device(torch::kCUDA, i) : torch::Device(torch::kCPU);
    LoadedGPT m = checkpoint_load_gpt(o.source, o.model_tag, o.step, device, dtype, tok.vocab_size());
    gpt_prepare_for_inference(m.model, o.dtype);
    if (i == 0) {
      std::string dir = m.ref.dir;
      st.model_id = dir.substr(dir.find_last_of('/') + 1);
      log_info("chat-web: loaded %s step %lld (%s) on %s", m.ref.dir.c_str(), (long long)m.ref.step,
               dtype_name(dtype).c_str(), o.device_type.c_str());
    }
    engines.push_back(std::make_shared<const Engine>(m.model, tok));
  }
  server_workers_setup(st, engines);
}

}  // namespace

int server_max_per_client(const ServerOptions& o) {
  return o.max_connections_per_client > 0 ? o.max_connections_per_client : std::max(1, o.max_connections / 4);
}

int server_run(const ServerOptions& options) {
  ServerState st;
  st.opt = options;
  st.opt.device_type = device_autodetect(options.device_type);
  if (st.opt.device_type == "cuda" && (int)torch::cuda::device_count() < st.opt.num_gpus)
    fail("--num-gpus %d but only %d CUDA devices are visible", st.opt.num_gpus, (int)torch::cuda::device_count());
  if (st.opt.device_type != "cuda" && st.opt.num_gpus > 1)
    fail("--num-gpus %d needs CUDA; on the CPU use --workers", st.opt.num_gpus);
  cpu_threads_setup(st.opt.device_type == "cuda" ? 1 : st.opt.workers);

  HttpServer svr;
  st.http = &svr;
  server_routes_install(svr, st);

  int port = st.opt.port;
  if (port == 0) {
    port = svr.bind_to_any_port(st.opt.host);
    if (port < 0) fail("cannot bind %s on any port", st.opt.host.c_str());
  } else if (!svr.bind_to_port(st.opt.host, port)) {
    fail("cannot bind %s:%d (in use? try --port)", st.opt.host.c_str(), port);
  }

  svr.raise_backlog(4096);  // (Linux caps it at net.core.somaxconn, 4096 by default)

  struct sigaction sa = {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  std::signal(SIGPIPE, SIG_IGN);  // a closed client is a failed write, not a dead server
  g_signals = 0;

  std::printf("chat-web: listening on http://%s:%d/ (loading the model; GET /health is 503 until ready)\n",
              st.opt.host.c_str(), port);
  std::fflush(stdout);

  std::atomic<bool> loader_done{false};
  std::thread loader([&] {
    try {
      load_models(st);
      st.ready = true;
      std::printf("chat-web: ready on http://%s:%d/ with %d worker%s\n", st.opt.host.c_str(), port,
                  (int)st.workers.size(), st.workers.size() == 1 ? "" : "s");
      std::fflush(stdout);
    } catch (const std::exception& e) {
      st.load_error = e.what();
    }
    loader_done = true;
  });
  // the watcher: signals -> drain -> cancel -> stop the listener; and the allocator's free
  // memory back to the system whenever the server goes idle
  std::thread watcher([&] {
    bool announced = false;
    int64_t trimmed_at = 0;
    while (true) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      if (st.in_flight == 0 && st.served != trimmed_at) {
        trimmed_at = st.served;
        malloc_trim(0);
      }
      int sigs = g_signals.load();
      if (loader_done && !st.load_error.empty()) break;
      if (sigs == 0) continue;
      if (!announced) {
        st.stop_level = 1;
        log_info("chat-web: shutting down: %d request%s in flight finish first (signal again to cancel them)",
                 st.in_flight.load(), st.in_flight == 1 ? "" : "s");
        announced = true;
      }
      if (sigs >= 2) st.stop_level = 2;
      if (!loader_done) continue;  // the model may be half loaded; the workers appear with it
      for (auto& w : st.workers) w.scheduler->close_queue();  // queued requests: 503
      if (st.in_flight == 0) break;
    }
    svr.stop_serving();
  });
  svr.serve();
  watcher.join();
  loader.join();
  if (!st.load_error.empty()) fail("chat-web: %s", st.load_error.c_str());
  std::printf("chat-web: stopped after %lld requests\n", (long long)st.served.load());
  return 0;
}

}  // namespace nanochat
