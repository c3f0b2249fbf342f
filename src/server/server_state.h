// defines: ServerWorker, ServerState, HttpServer, server_routes_install
// What the chat-web server's routes (routes.cpp) and its lifecycle (http_server.cpp) share:
// the workers, the request counters and the stop level. Internal to the server module.
#pragma once
#include <httplib.h>
#include <sys/socket.h>

#include <atomic>
#include <ctime>
#include <memory>
#include <string>
#include <vector>

#include "nanochat/engine.h"
#include "nanochat/server.h"

namespace nanochat {

struct ServerWorker {
  int gpu_id;  // the device index (upstream's "gpu" field); on CPU the worker's index
  std::string device;
  std::shared_ptr<const Engine> engine;  // CPU workers share one model copy
};

struct ServerState {
  ServerOptions opt;
  std::atomic<bool> ready{false};
  std::atomic<int> stop_level{0};  // 0 serving, 1 draining, 2 cancelling in-flight streams
  std::atomic<int> in_flight{0};   // requests holding a worker
  std::atomic<int64_t> served{0}, tokens_out{0};
  std::vector<ServerWorker> workers;  // written once by the loader before `ready`
  std::unique_ptr<WorkerPool> pool;
  std::string model_id;
  int64_t created = (int64_t)std::time(nullptr);
  std::string load_error;
};

// httplib 0.11 listens with a backlog of 5: a burst of connections beyond it has its SYNs
// dropped and retried a second later. Linux lets listen() be called again to raise it.
struct HttpServer : httplib::Server {
  void raise_backlog(int n) { ::listen(svr_sock_, n); }
};

// the server's threads, limits, headers, and every route with its error handling (routes.cpp)
void server_routes_install(HttpServer& svr, ServerState& st);

}  // namespace nanochat
