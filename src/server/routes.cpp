// defines: server_routes_install
// The chat-web server's set-up and routes on cpp-httplib. Life of a request:
//   handler thread (httplib's pool): parse + check (4xx, no model work) -> prompt tokens ->
//   acquire a worker (FIFO; 503 when the queue is full or the server drains) -> stream.
// Streams use httplib's chunked content provider; the worker lease lives in the provider, so
// it is released when the response ends however it ends. A failed sink write (client gone)
// makes the engine's callback return false: the worker is free after at most one more step.
#include <atomic>
#include <cstring>
#include <ctime>
#include <memory>

#include "nanochat/common/error.h"
#include "nanochat/common/log.h"
#include "server/generation.h"
#include "server/server_state.h"

namespace nanochat {

namespace {

using json = nlohmann::ordered_json;  // keys in the order written: upstream's {"token","gpu"}, OpenAI's {"id","object",...}

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
  ServerState& st;
  WorkerLease lease;
  Lease(ServerState& s, int w) : st(s), lease(*s.pool, w) { st.in_flight++; }
  ~Lease() { st.in_flight--; }
  const ServerWorker& worker() const { return st.workers[lease.worker()]; }
};

// parse, check readiness, build the prompt, take a worker; throws ServerError
struct Prepared {
  ChatRequest req;
  std::vector<int32_t> prompt;
  std::shared_ptr<Lease> lease;
};
Prepared prepare(ServerState& st, const httplib::Request& http, bool openai) {
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

std::function<bool()> cancelled_fn(ServerState& st) {
  return [&st] { return st.stop_level >= 2; };
}

void account(ServerState& st, const GenerationOutcome& g) {
  st.served++;
  for (auto& c : g.choices) st.tokens_out += c.completion_tokens;
}

std::string sse(const json& j) { return "data: " + dump(j) + "\n\n"; }

void stream_headers(httplib::Response& res) {
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");  // proxies: do not buffer the stream
}

// ---- POST /chat/completions: upstream's stream ---------------------------------------------
void handle_upstream(ServerState& st, const httplib::Request& http, httplib::Response& res) {
  auto p = std::make_shared<Prepared>(prepare(st, http, false));
  stream_headers(res);
  res.set_chunked_content_provider("text/event-stream", [&st, p](size_t, httplib::DataSink& sink) {
    const ServerWorker& w = p->lease->worker();
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

void handle_openai(ServerState& st, const httplib::Request& http, httplib::Response& res) {
  auto p = std::make_shared<Prepared>(prepare(st, http, true));
  const std::string id = completion_id();
  const int64_t created = (int64_t)std::time(nullptr);
  if (!p->req.stream) {
    const ServerWorker& w = p->lease->worker();
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
    const ServerWorker& w = p->lease->worker();
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

json health_json(const ServerState& st) {
  const char* status = st.stop_level > 0 ? "shutting down" : st.ready ? "ok" : "loading";
  return {{"status", status},
          {"ready", st.ready && st.stop_level == 0},
          {"num_gpus", st.opt.device_type == "cuda" ? st.opt.num_gpus : 0},
          {"available_workers", st.ready ? st.pool->available() : 0}};
}

json stats_json(const ServerState& st) {
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

}  // namespace

void server_routes_install(HttpServer& svr, ServerState& st) {
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

}

}  // namespace nanochat
