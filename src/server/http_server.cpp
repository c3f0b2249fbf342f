// defines: server_run
// The chat-web server on cpp-httplib. Life of a request:
//   handler thread (httplib's pool): parse + check (4xx, no model work) -> prompt tokens ->
//   acquire a worker (FIFO; 503 when the queue is full or the server drains) -> stream.
// Streams use httplib's chunked content provider; the worker lease lives in the provider, so
// it is released when the response ends however it ends. A failed sink write (client gone)
// makes the engine's callback return false: the worker is free after at most one more step.
// Shutdown: the first SIGINT/SIGTERM drains (new and queued requests 503, in-flight streams
// run to their end), a second cancels in-flight streams (each still sends its final event);
// then the listener stops and server_run returns 0.
#include <httplib.h>
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <memory>
#include <thread>

#include <torch/torch.h>

#include "nanochat/checkpoint_gpt.h"
#include "nanochat/common/base_dir.h"
#include "nanochat/common/device.h"
#include "nanochat/common/error.h"
#include "nanochat/common/log.h"
#include "nanochat/engine.h"
#include "nanochat/server.h"
#include "server/generation.h"

namespace nanochat {

namespace {

using json = nlohmann::ordered_json;  // keys in the order written: upstream's {"token","gpu"}, OpenAI's {"id","object",...}
using clk = std::chrono::steady_clock;

std::atomic<int> g_signals{0};
void on_signal(int) { g_signals.fetch_add(1); }

struct Worker {
  int gpu_id;  // the device index (upstream's "gpu" field); on CPU the worker's index
  std::string device;
  std::shared_ptr<const Engine> engine;  // CPU workers share one model copy
};

struct State {
  ServerOptions opt;
  std::atomic<bool> ready{false};
  std::atomic<int> stop_level{0};  // 0 serving, 1 draining, 2 cancelling in-flight streams
  std::atomic<int> in_flight{0};   // requests holding a worker
  std::atomic<int64_t> served{0}, tokens_out{0};
  std::vector<Worker> workers;  // written once by the loader before `ready`
  std::unique_ptr<WorkerPool> pool;
  std::string model_id;
  int64_t created = (int64_t)std::time(nullptr);
  std::string load_error;
};

// json as UTF-8 (Python's ensure_ascii=False); a bad byte would become U+FFFD
std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

void send_error(httplib::Response& res, int status, const std::string& message) {
  const char* type = status == 400 || status == 413 ? "invalid_request_error"
                     : status == 404 || status == 405 ? "not_found_error"
                     : status == 503                ? "unavailable_error"
                                                    : "server_error";
  // "error" for OpenAI clients, "detail" as FastAPI answered upstream's UI
  json body = {{"error", {{"message", message}, {"type", type}, {"code", status}}}, {"detail", message}};
  res.status = status;
  res.set_content(dump(body), "application/json");
}

const char* content_type_of(const std::string& path) {
  auto ends = [&](const char* ext) {
    size_t n = std::strlen(ext);
    return path.size() >= n && path.compare(path.size() - n, n, ext) == 0;
  };
  if (ends(".html")) return "text/html; charset=utf-8";
  if (ends(".js")) return "text/javascript; charset=utf-8";
  if (ends(".css")) return "text/css; charset=utf-8";
  if (ends(".svg")) return "image/svg+xml";
  if (ends(".png")) return "image/png";
  if (ends(".ico")) return "image/x-icon";
  return "application/octet-stream";
}

// Holds a worker and counts the request in flight; shared by the stream provider
struct Lease {
  State& st;
  WorkerLease lease;
  Lease(State& s, int w) : st(s), lease(*s.pool, w) { st.in_flight++; }
  ~Lease() { st.in_flight--; }
  const Worker& worker() const { return st.workers[lease.worker()]; }
};

// parse, check readiness, build the prompt, take a worker; throws ServerError
struct Prepared {
  ChatRequest req;
  std::vector<int32_t> prompt;
  std::shared_ptr<Lease> lease;
};
Prepared prepare(State& st, const httplib::Request& http, bool openai) {
  Prepared p;
  p.req = server_parse_chat_request(http.body, openai, st.opt.defaults, st.opt.limits);
  if (st.stop_level > 0) throw ServerError(503, "the server is shutting down");
  if (!st.ready) throw ServerError(503, "the model is still loading; retry when GET /health answers 200");
  const Engine& engine = *st.workers[0].engine;
  p.prompt = server_prompt_tokens(engine.tokenizer(), p.req.messages);
  const int64_t room = engine.model().max_positions - (int64_t)p.prompt.size();
  if (room < 1)
    throw ServerError(400, strprintf("the conversation is %zu tokens; the model handles at most %lld",
                                     p.prompt.size(), (long long)engine.model().max_positions - 1));
  int w = st.pool->acquire();  // waits its turn
  if (w < 0)
    throw ServerError(503, st.stop_level > 0 ? "the server is shutting down" : "too many requests are queued; retry later");
  p.lease = std::make_shared<Lease>(st, w);
  return p;
}

std::function<bool()> cancelled_fn(State& st) {
  return [&st] { return st.stop_level >= 2; };
}

void account(State& st, const GenerationOutcome& g) {
  st.served++;
  for (auto& c : g.choices) st.tokens_out += c.completion_tokens;
}

std::string sse(const json& j) { return "data: " + dump(j) + "\n\n"; }

void stream_headers(httplib::Response& res) {
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");  // proxies: do not buffer the stream
}

// ---- POST /chat/completions: upstream's stream ---------------------------------------------
void handle_upstream(State& st, const httplib::Request& http, httplib::Response& res) {
  auto p = std::make_shared<Prepared>(prepare(st, http, false));
  stream_headers(res);
  res.set_chunked_content_provider("text/event-stream", [&st, p](size_t, httplib::DataSink& sink) {
    const Worker& w = p->lease->worker();
    auto write = [&](const std::string& s) { return sink.write(s.data(), s.size()); };
    try {
      GenerationOutcome g = server_generate(
          *w.engine, p->req, p->prompt,
          [&](int, const std::string& text) { return write(sse({{"token", text}, {"gpu", w.gpu_id}})); },
          cancelled_fn(st));
      account(st, g);
      if (!g.client_gone) write(sse({{"done", true}}));
    } catch (const std::exception& e) {  // headers are out: the error becomes an event
      write(sse({{"error", e.what()}}));
      write(sse({{"done", true}}));
    }
    sink.done();
    p->lease.reset();  // the worker is free before the connection thread moves on
    return true;
  });
}

// ---- POST /v1/chat/completions: OpenAI's schema --------------------------------------------
std::string completion_id() {
  static std::atomic<uint64_t> counter{0};
  return strprintf("chatcmpl-%llx%06llx", (unsigned long long)std::time(nullptr),
                   (unsigned long long)(counter.fetch_add(1) & 0xffffff));
}

json usage_json(const GenerationOutcome& g) {
  int64_t completion = 0;
  for (auto& c : g.choices) completion += c.completion_tokens;
  return {{"prompt_tokens", g.prompt_tokens}, {"completion_tokens", completion},
          {"total_tokens", g.prompt_tokens + completion}};
}

void handle_openai(State& st, const httplib::Request& http, httplib::Response& res) {
  auto p = std::make_shared<Prepared>(prepare(st, http, true));
  const std::string id = completion_id();
  const int64_t created = (int64_t)std::time(nullptr);
  if (!p->req.stream) {
    const Worker& w = p->lease->worker();
    GenerationOutcome g = server_generate(*w.engine, p->req, p->prompt, [](int, const std::string&) { return true; },
                                          cancelled_fn(st));
    p->lease.reset();
    account(st, g);
    json choices = json::array();
    for (size_t i = 0; i < g.choices.size(); i++)
      choices.push_back({{"index", i},
                         {"message", {{"role", "assistant"}, {"content", g.choices[i].text}}},
                         {"logprobs", nullptr},
                         {"finish_reason", g.choices[i].finish_reason}});
    json body = {{"id", id},           {"object", "chat.completion"}, {"created", created},
                 {"model", st.model_id}, {"choices", choices},         {"usage", usage_json(g)},
                 {"system_fingerprint", "nanochat-" NANOCHAT_VERSION}};
    res.set_content(dump(body), "application/json");
    return;
  }
  stream_headers(res);
  res.set_chunked_content_provider("text/event-stream", [&st, p, id, created](size_t, httplib::DataSink& sink) {
    const Worker& w = p->lease->worker();
    auto chunk = [&](json choices, const json& usage = nullptr) {
      json j = {{"id", id},           {"object", "chat.completion.chunk"}, {"created", created},
                {"model", st.model_id}, {"choices", std::move(choices)}};
      if (p->req.include_usage) j["usage"] = usage;  // null on all but the last chunk, as OpenAI
      std::string s = sse(j);
      return sink.write(s.data(), s.size());
    };
    auto delta = [](int64_t i, json d, json finish) {
      return json::array({{{"index", i}, {"delta", std::move(d)}, {"logprobs", nullptr}, {"finish_reason", finish}}});
    };
    bool ok = true;
    for (int64_t i = 0; i < p->req.n && ok; i++) ok = chunk(delta(i, {{"role", "assistant"}, {"content", ""}}, nullptr));
    if (ok) {
      try {
        GenerationOutcome g = server_generate(
            *w.engine, p->req, p->prompt,
            [&](int row, const std::string& text) { return chunk(delta(row, {{"content", text}}, nullptr)); },
            cancelled_fn(st));
        account(st, g);
        ok = !g.client_gone;
        for (size_t i = 0; i < g.choices.size() && ok; i++)
          ok = chunk(delta((int64_t)i, json::object(), g.choices[i].finish_reason));
        if (ok && p->req.include_usage) ok = chunk(json::array(), usage_json(g));
      } catch (const std::exception& e) {
        std::string s = sse({{"error", {{"message", e.what()}, {"type", "server_error"}, {"code", 500}}}});
        ok = sink.write(s.data(), s.size());
      }
    }
    if (ok) sink.write("data: [DONE]\n\n", 14);
    sink.done();
    p->lease.reset();
    return true;
  });
}

// httplib 0.11 listens with a backlog of 5: a burst of connections beyond it has its SYNs
// dropped and retried a second later. Linux lets listen() be called again to raise it.
struct HttpServer : httplib::Server {
  void raise_backlog(int n) { ::listen(svr_sock_, n); }
};

json health_json(const State& st) {
  const char* status = st.stop_level > 0 ? "shutting down" : st.ready ? "ok" : "loading";
  return {{"status", status},
          {"ready", st.ready && st.stop_level == 0},
          {"num_gpus", st.opt.device_type == "cuda" ? st.opt.num_gpus : 0},
          {"available_workers", st.ready ? st.pool->available() : 0}};
}

json stats_json(const State& st) {
  json workers = json::array();
  if (st.ready)
    for (auto& w : st.workers) workers.push_back({{"gpu_id", w.gpu_id}, {"device", w.device}});
  int total = st.ready ? st.pool->size() : 0, avail = st.ready ? st.pool->available() : 0;
  return {{"total_workers", total},
          {"available_workers", avail},
          {"busy_workers", total - avail},
          {"queued_requests", st.ready ? st.pool->queued() : 0},
          {"requests_served", st.served.load()},
          {"tokens_generated", st.tokens_out.load()},
          {"uptime_s", (int64_t)std::time(nullptr) - st.created},
          {"model", st.model_id},
          {"workers", workers}};
}

// which methods a known path takes (for 405 and OPTIONS)
const char* allowed_methods(const std::string& path) {
  if (path == "/chat/completions" || path == "/v1/chat/completions") return "POST, OPTIONS";
  if (path == "/" || path == "/health" || path == "/stats" || path == "/v1/models" || server_web_asset(path))
    return "GET, HEAD, OPTIONS";
  return nullptr;
}

// one model per device; CPU workers share one copy
void load_models(State& st) {
  const ServerOptions& o = st.opt;
  Tokenizer tok = tokenizer_load(base_dir_path("tokenizer"));
  const torch::ScalarType dtype = compute_dtype_detect(o.device_type);
  int copies = o.device_type == "cuda" ? o.num_gpus : 1;
  std::vector<std::shared_ptr<const Engine>> engines;
  for (int i = 0; i < copies; i++) {
    torch::Device device = o.device_type == "cuda" ? torch::Device(torch::kCUDA, i) : torch::Device(torch::kCPU);
    LoadedGPT m = checkpoint_load_gpt(o.source, o.model_tag, o.step, device, dtype, tok.vocab_size());
    if (i == 0) {
      std::string dir = m.ref.dir;
      st.model_id = dir.substr(dir.find_last_of('/') + 1);
      log_info("chat-web: loaded %s step %lld (%s) on %s", m.ref.dir.c_str(), (long long)m.ref.step,
               dtype_name(dtype).c_str(), o.device_type.c_str());
    }
    engines.push_back(std::make_shared<const Engine>(m.model, tok));
  }
  std::vector<Worker> workers;
  if (o.device_type == "cuda") {
    for (int i = 0; i < o.num_gpus; i++) workers.push_back({i, strprintf("cuda:%d", i), engines[i]});
  } else {
    for (int i = 0; i < o.workers; i++) workers.push_back({i, "cpu", engines[0]});
  }
  st.workers = std::move(workers);
  st.pool = std::make_unique<WorkerPool>((int)st.workers.size(), o.max_queue);
}

}  // namespace

int server_run(const ServerOptions& options) {
  State st;
  st.opt = options;
  st.opt.device_type = device_autodetect(options.device_type);
  if (st.opt.device_type == "cuda" && (int)torch::cuda::device_count() < st.opt.num_gpus)
    fail("--num-gpus %d but only %d CUDA devices are visible", st.opt.num_gpus, (int)torch::cuda::device_count());
  if (st.opt.device_type != "cuda" && st.opt.num_gpus > 1) fail("--num-gpus %d needs CUDA; on the CPU use --workers", st.opt.num_gpus);
  cpu_threads_setup(st.opt.device_type == "cuda" ? 1 : st.opt.workers);

  HttpServer svr;
  // every connection needs a thread while it waits for a worker or streams: room for the
  // workers, the queue and a few UI/health requests
  const size_t threads = (size_t)st.opt.workers + st.opt.num_gpus + st.opt.max_queue + 8;
  svr.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  svr.set_payload_max_length((size_t)st.opt.limits.max_body_bytes);
  svr.set_read_timeout(30);
  svr.set_write_timeout(30);
  svr.set_keep_alive_timeout(5);
  svr.set_tcp_nodelay(true);
  svr.set_default_headers({{"Access-Control-Allow-Origin", "*"}});  // CORS: everything, as upstream

  auto guarded = [&st](auto fn) {
    return [&st, fn](const httplib::Request& req, httplib::Response& res) {
      try {
        fn(st, req, res);
      } catch (const ServerError& e) {
        send_error(res, e.status, e.what());
      } catch (const std::exception& e) {
        send_error(res, 500, e.what());
      }
    };
  };
  svr.Post("/chat/completions", guarded(handle_upstream));
  svr.Post("/v1/chat/completions", guarded(handle_openai));
  svr.Get("/health", [&st](const httplib::Request&, httplib::Response& res) {
    json h = health_json(st);
    res.status = h["ready"].get<bool>() ? 200 : 503;
    res.set_content(dump(h), "application/json");
  });
  svr.Get("/stats", [&st](const httplib::Request&, httplib::Response& res) {
    res.set_content(dump(stats_json(st)), "application/json");
  });
  svr.Get("/v1/models", [&st](const httplib::Request&, httplib::Response& res) {
    json data = json::array();
    if (st.ready) data.push_back({{"id", st.model_id}, {"object", "model"}, {"created", st.created}, {"owned_by", "nanochat"}});
    res.set_content(dump({{"object", "list"}, {"data", data}}), "application/json");
  });
  svr.Get("/(.*)", [](const httplib::Request& req, httplib::Response& res) {
    if (const WebAsset* a = server_web_asset(req.path == "/" ? "/ui.html" : req.path))
      return res.set_content((const char*)a->data, a->size, content_type_of(a->path));
    if (const char* allow = allowed_methods(req.path)) {  // GET on a POST route
      res.set_header("Allow", allow);
      return send_error(res, 405, "method " + req.method + " is not allowed on " + req.path + " (allowed: " + allow + ")");
    }
    send_error(res, 404, "no such path: " + req.path);
  });
  svr.Options("/(.*)", [](const httplib::Request& req, httplib::Response& res) {
    const char* allow = allowed_methods(req.path);
    if (!allow) return send_error(res, 404, "no such path: " + req.path);
    res.status = 204;
    res.set_header("Allow", allow);
    res.set_header("Access-Control-Allow-Methods", allow);
    res.set_header("Access-Control-Allow-Headers", "*");
  });
  // httplib reads (and discards) a body over the cap before its 413; one declared absurdly
  // large (8x the cap) is refused from its Content-Length alone, the body left unread
  const size_t max_body = (size_t)st.opt.limits.max_body_bytes;
  svr.set_pre_routing_handler([max_body](const httplib::Request& req, httplib::Response& res) {
    if (!req.has_header("Content-Length")) return httplib::Server::HandlerResponse::Unhandled;
    const std::string v = req.get_header_value("Content-Length");
    const bool close = req.get_header_value("Connection") != "close";  // (else httplib adds it)
    if (v.empty() || v.size() > 18 || v.find_first_not_of("0123456789") != std::string::npos) {
      if (close) res.set_header("Connection", "close");
      send_error(res, 400, "bad Content-Length");
      return httplib::Server::HandlerResponse::Handled;
    }
    if (std::stoull(v) <= 8 * max_body) return httplib::Server::HandlerResponse::Unhandled;
    if (close) res.set_header("Connection", "close");
    send_error(res, 413, strprintf("request body too large (%s bytes; the limit is %zu)", v.c_str(), max_body));
    return httplib::Server::HandlerResponse::Handled;
  });
  // httplib's own refusals (no route, 413, 400 on an unparsable request) get a JSON body;
  // a known path with another method is 405
  svr.set_error_handler(httplib::Server::HandlerWithResponse([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
    const char* allow = allowed_methods(req.path);
    if (res.status == 404 && allow) {
      res.set_header("Allow", allow);
      send_error(res, 405, "method " + req.method + " is not allowed on " + req.path + " (allowed: " + allow + ")");
    } else if (res.status == 404) {
      send_error(res, 404, "no such path: " + req.path);
    } else if (res.status == 413) {
      send_error(res, 413, strprintf("request body too large (limit %zu bytes)", (size_t)kServerLimits.max_body_bytes));
    } else {
      send_error(res, res.status, res.status == 400 ? "malformed HTTP request" : "request refused");
    }
    return httplib::Server::HandlerResponse::Handled;
  }));
  svr.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
    send_error(res, 500, "internal error");
  });
  if (!st.opt.quiet)
    svr.set_logger([](const httplib::Request& req, const httplib::Response& res) {
      log_info("%s %s %d", req.method.c_str(), req.path.c_str(), res.status);
    });

  int port = st.opt.port;
  if (port == 0) {
    port = svr.bind_to_any_port(st.opt.host);
    if (port < 0) fail("cannot bind %s on any port", st.opt.host.c_str());
  } else if (!svr.bind_to_port(st.opt.host, port)) {
    fail("cannot bind %s:%d (in use? try --port)", st.opt.host.c_str(), port);
  }

  svr.raise_backlog(1024);

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
  // the watcher: signals -> drain -> cancel -> stop the listener
  std::thread watcher([&] {
    bool announced = false;
    while (true) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
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
      if (!loader_done) continue;  // the model may be half loaded; st.pool appears with it
      if (st.pool) st.pool->shutdown();
      if (st.in_flight == 0) break;
    }
    while (!svr.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));  // stop() before listen is lost
    svr.stop();
  });
  svr.listen_after_bind();
  watcher.join();
  loader.join();
  if (!st.load_error.empty()) fail("chat-web: %s", st.load_error.c_str());
  std::printf("chat-web: stopped after %lld requests\n", (long long)st.served.load());
  return 0;
}

}  // namespace nanochat
