// The chat-web server's state: its workers (one scheduler each), the request counters and the
// stop level, which the routes (routes.cpp) and the lifecycle (http_server.cpp) share.
// Internal to the server module.
#pragma once
#include <atomic>
#include <ctime>
#include <memory>
#include <string>
#include <vector>

#include "nanochat/engine.h"
#include "nanochat/engine/scheduler.h"
#include "nanochat/server.h"
#include "server/parse_budget.h"

namespace nanochat {

class HttpServer;

struct ServerWorker {
  int index;  // the worker's index: on CUDA its device's, on the CPU its place among --workers (upstream's "gpu" field)
  std::string device;
  std::shared_ptr<const Engine> engine;  // CPU workers share one model copy
  std::shared_ptr<Scheduler> scheduler;  // its decode batch
};

struct ServerState {
  ServerOptions opt;
  std::atomic<bool> ready{false};
  std::atomic<int> stop_level{0};  // 0 serving, 1 draining, 2 cancelling in-flight streams
  std::atomic<int> in_flight{0};   // requests admitted and not yet answered
  std::atomic<int64_t> served{0}, tokens_out{0};
  std::vector<ServerWorker> workers;  // written once by the loader before `ready`
  std::string model_id;
  int64_t created = (int64_t)std::time(nullptr);
  std::string load_error;
  const HttpServer* http = nullptr;  // its connections' counters (GET /stats) and request contexts
  ParseBudget parse_budget{kServerLimits.max_parsing_bytes};  // set from opt.limits at install
};

// the workers (one per GPU, or --workers on the CPU), each a scheduler of max_batch rows over
// its engine with its own queues (workers.cpp)
void server_workers_setup(ServerState& st, const std::vector<std::shared_ptr<const Engine>>& engines);

}  // namespace nanochat
