// The chat-web server's set-up and routes on cpp-httplib. Life of a request:
//   connection thread (connection.cpp): bounded head -> guard (guards.cpp: Host, Origin, API
//   key, connection cap, body size) -> a share of the parse budget (parse_budget.h) -> body
//   read through httplib's content reader, capped after decompression -> parse + check (4xx,
//   no model work; the share given back) -> prompt tokens -> queued at the
//   least loaded worker's scheduler until its rows are free (first come first served; 503 when
//   that queue is full or the server drains) -> generate.
// Streams use httplib's content provider, which holds the request's ticket, so its rows are
// freed when the response ends however it ends. A client that goes away (a failed sink write,
// or its socket closed while a non-streaming reply is generated) makes the engine's callback
// return false: the rows are free after at most one more step.
#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstring>
#include <ctime>
#include <memory>

#include "nanochat/common/error.h"
#include "nanochat/common/log.h"
#include "server/generation.h"
#include "server/routes.h"

namespace nanochat {

namespace {

using json =
    nlohmann::ordered_json;  // keys in the order written: upstream's {"token","gpu"}, OpenAI's {"id","object",...}

// json as UTF-8 (Python's ensure_ascii=False); a bad byte would become U+FFFD
std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

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

// a second signal, or the client's socket closed (checked every decode step: one poll)
std::function<bool()> cancelled_fn(ServerState& st, RequestContext* ctx) {
  return [&st, ctx] { return st.stop_level >= 2 || (ctx && ctx->client_gone()); };
}

// the worker whose scheduler holds or waits for the fewest rows (the first of equals)
const ServerWorker& least_loaded(const ServerState& st) {
  const ServerWorker* best = &st.workers[0];
  int64_t best_load = best->scheduler->load();
  for (size_t i = 1; i < st.workers.size() && best_load > 0; i++) {
    const int64_t load = st.workers[i].scheduler->load();
    if (load < best_load) best = &st.workers[i], best_load = load;
  }
  return *best;
}

// A request from its admission to the end of its response (however it ends): counted in
// flight, its rows held by its ticket; shared by the stream provider
struct Prepared {
  ServerState& st;
  RequestContext* ctx = nullptr;  // its connection's
  ChatRequest req;
  int64_t prompt_len = 0;
  const ServerWorker* worker = nullptr;
  std::shared_ptr<Scheduler::Ticket> ticket;
  explicit Prepared(ServerState& s) : st(s) { st.in_flight++; }
  ~Prepared() {
    ticket.reset();  // an unfinished request is cancelled
    st.in_flight--;
  }
  Prepared(const Prepared&) = delete;
  Prepared& operator=(const Prepared&) = delete;
};

// check readiness, build the prompt, queue it at the least loaded worker and wait there
// for its rows in its key's queue (its limits checked once, by the scheduler); all
// before the response begins, so a refusal is still a status. Throws ServerError.
std::shared_ptr<Prepared> prepare(ServerState& st, ChatRequest chat, RequestContext* ctx, int key_index,
                                  const std::string& address) {
  auto p = std::make_shared<Prepared>(st);
  p->ctx = ctx;
  p->req = std::move(chat);
  if (st.stop_level > 0) throw ServerError(503, "the server is shutting down");
  if (!st.ready) throw ServerError(503, "the model is still loading; retry when GET /health answers 200", 1);
  const ServerWorker& w = least_loaded(st);
  std::vector<int32_t> prompt;
  try {
    prompt = server_prompt_tokens(w.engine->tokenizer(), p->req.messages);
  } catch (const Error& e) {  // the tokenizer refused the text (a pattern's per-text budget spent): the input's fault
    throw ServerError(400, std::string("the prompt could not be tokenized: ") + e.what());
  }
  p->prompt_len = (int64_t)prompt.size();
  const int64_t row_len = w.scheduler->row_len();
  const GenerateOptions o = server_generate_options(p->req, p->prompt_len, row_len,
                                                    server_cache_scope(key_index, p->req.cache_salt));
  if (o.max_tokens < 1)  // the reply is cut to the row's room; none left is the conversation's fault
    throw ServerError(400, strprintf("the conversation is %zu tokens; the model handles at most %lld", prompt.size(),
                                     (long long)row_len - 1));
  p->worker = &w;
  try {
    p->ticket = w.scheduler->submit(prompt, o,
                                    server_queue_key(key_index, address));  // fair admission: its key's own queue
    if (!w.scheduler->wait_admitted(*p->ticket, cancelled_fn(st, ctx)))
      throw ServerError(503, st.stop_level > 0 ? "the server is shutting down" : "the request was cancelled");
  } catch (const SchedulerRefused& e) {
    if (e.closed) throw ServerError(503, "the server is shutting down");
    throw ServerError(503, "too many requests are queued; retry later", 1);
  } catch (const ServerError&) {
    throw;
  } catch (const Error& e) {  // the request's own limits (more samples than --max-batch rows)
    std::string m = e.what();
    if (m.rfind("generate: ", 0) == 0) m = m.substr(10);
    throw ServerError(400, m);
  }
  return p;
}

void account(ServerState& st, const GenerationOutcome& g) {
  st.served++;
  for (auto& c : g.choices) st.tokens_out += c.completion_tokens;
}

std::string sse(const json& j) { return "data: " + dump(j) + "\n\n"; }

// an SSE stream: chunked for HTTP/1.1; an HTTP/1.0 client knows no chunks, so its stream is
// delimited by the connection's close (RFC 9112 6.3)
void stream_response(RequestContext* ctx, const httplib::Request& req, httplib::Response& res,
                     std::function<bool(size_t, httplib::DataSink&)> provider) {
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");  // proxies: do not buffer the stream
  if (req.version == "HTTP/1.0") {
    server_close_after(ctx, req, res);
    res.set_content_provider("text/event-stream", std::move(provider));
  } else {
    res.set_chunked_content_provider("text/event-stream", std::move(provider));
  }
}

// ---- POST /chat/completions: upstream's stream ---------------------------------------------
void handle_upstream(ServerState& st, const httplib::Request& req, ChatRequest chat, RequestContext* ctx, int key_index,
                     httplib::Response& res) {
  std::shared_ptr<Prepared> p = prepare(st, std::move(chat), ctx, key_index, req.remote_addr);
  stream_response(ctx, req, res, [&st, p](size_t, httplib::DataSink& sink) {
    const ServerWorker& w = *p->worker;
    auto write = [&](const std::string& s) { return sink.write(s.data(), s.size()); };
    try {
      GenerationOutcome g = server_generate(
          *w.scheduler, *p->ticket, p->req, p->prompt_len,
          [&](int, const std::string& text) {
            return write(sse({{"token", text}, {"gpu", w.index}}));
          },
          cancelled_fn(st, p->ctx));
      account(st, g);
      if (!g.client_gone) write(sse({{"done", true}}));
    } catch (const std::exception& e) {  // headers are out: the error becomes an event
      write(sse({{"error", server_internal_error("stream", e)}}));
      write(sse({{"done", true}}));
    }
    sink.done();
    p->ticket.reset();  // the rows are free before the connection thread moves on
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
  return {{"prompt_tokens", g.prompt_tokens},
          {"completion_tokens", completion},
          {"total_tokens", g.prompt_tokens + completion},
          {"prompt_tokens_details", {{"cached_tokens", g.cached_tokens}}}};
}

void handle_openai(ServerState& st, const httplib::Request& req, ChatRequest chat, RequestContext* ctx, int key_index,
                   httplib::Response& res) {
  std::shared_ptr<Prepared> p = prepare(st, std::move(chat), ctx, key_index, req.remote_addr);
  const std::string id = completion_id();
  const int64_t created = (int64_t)std::time(nullptr);
  if (!p->req.stream) {
    const ServerWorker& w = *p->worker;
    GenerationOutcome g = server_generate(
        *w.scheduler, *p->ticket, p->req, p->prompt_len, [](int, const std::string&) { return true; },
        cancelled_fn(st, ctx));
    p.reset();
    account(st, g);
    json choices = json::array();
    for (size_t i = 0; i < g.choices.size(); i++)
      choices.push_back({{"index", i},
                         {"message", {{"role", "assistant"}, {"content", g.choices[i].text}}},
                         {"logprobs", nullptr},
                         {"finish_reason", g.choices[i].finish_reason}});
    json body = {{"id", id},
                 {"object", "chat.completion"},
                 {"created", created},
                 {"model", st.model_id},
                 {"choices", choices},
                 {"usage", usage_json(g)},
                 {"system_fingerprint", "nanochat-" NANOCHAT_VERSION}};
    res.set_content(dump(body), "application/json");
    return;
  }
  stream_response(ctx, req, res, [&st, p, id, created](size_t, httplib::DataSink& sink) {
    const ServerWorker& w = *p->worker;
    auto chunk = [&](json choices, const json& usage = nullptr) {
      json j = {{"id", id},
                {"object", "chat.completion.chunk"},
                {"created", created},
                {"model", st.model_id},
                {"choices", std::move(choices)}};
      if (p->req.include_usage) j["usage"] = usage;  // null on all but the last chunk, as OpenAI
      std::string s = sse(j);
      return sink.write(s.data(), s.size());
    };
    auto delta = [](int64_t i, json d, json finish) {
      return json::array({{{"index", i}, {"delta", std::move(d)}, {"logprobs", nullptr}, {"finish_reason", finish}}});
    };
    bool ok = true;
    for (int64_t i = 0; i < p->req.n && ok; i++)
      ok = chunk(delta(i, {{"role", "assistant"}, {"content", ""}}, nullptr));
    if (ok) {
      try {
        GenerationOutcome g = server_generate(
            *w.scheduler, *p->ticket, p->req, p->prompt_len,
            [&](int row, const std::string& text) {
              return chunk(delta(row, {{"content", text}}, nullptr));
            },
            cancelled_fn(st, p->ctx));
        account(st, g);
        ok = !g.client_gone;
        for (size_t i = 0; i < g.choices.size() && ok; i++)
          ok = chunk(delta((int64_t)i, json::object(), g.choices[i].finish_reason));
        if (ok && p->req.include_usage) ok = chunk(json::array(), usage_json(g));
      } catch (const std::exception& e) {
        std::string s = sse(
            {{"error", {{"message", server_internal_error("stream", e)}, {"type", "server_error"}, {"code", 500}}}});
        ok = sink.write(s.data(), s.size());
      }
    }
    if (ok) sink.write("data: [DONE]\n\n", 14);
    sink.done();
    p->ticket.reset();
    return true;
  });
}

// workers with no request holding or waiting for rows
int idle_workers(const ServerState& st) {
  int n = 0;
  if (st.ready)
    for (auto& w : st.workers) n += w.scheduler->load() == 0;
  return n;
}

json health_json(const ServerState& st) {
  const char* status = st.stop_level > 0 ? "shutting down" : st.ready ? "ok" : "loading";
  return {{"status", status},
          {"ready", st.ready && st.stop_level == 0},
          {"num_gpus", st.opt.device_type == "cuda" ? st.opt.num_gpus : 0},
          {"available_workers", idle_workers(st)}};
}

// workers: a worker is available when no request holds or waits for its rows; rows and KV
// summed over workers
// the event loop's counters (connections.h)
json connections_json(const ServerState& st) {
  if (!st.http) return json::object();
  const ConnectionStats c = st.http->stats();
  return {{"open", c.open},
          {"peak", c.peak},
          {"accepted", c.accepted},
          {"shed_idle", c.shed_idle},
          {"shed_partial", c.shed_partial},
          {"refused_per_client", c.refused_client},
          {"refused_full", c.refused_full},
          {"paused", c.paused},
          {"timed_out", c.timed_out}};
}

json stats_json(const ServerState& st) {
  json workers = json::array();
  SchedulerStats sum;
  if (st.ready)
    for (auto& w : st.workers) {
      SchedulerStats s = w.scheduler->stats();
      workers.push_back({{"gpu_id", w.index}, {"device", w.device}});
      sum.running += s.running;
      sum.waiting += s.waiting;
      sum.rows_total += s.rows_total;
      sum.rows_busy += s.rows_busy;
      sum.rows_cached += s.rows_cached;
      sum.kv_bytes += s.kv_bytes;
      sum.decode_steps += s.decode_steps;
      sum.decode_rows += s.decode_rows;
      sum.prefill_forwards += s.prefill_forwards;
      sum.prefill_seconds += s.prefill_seconds;
      sum.decode_seconds += s.decode_seconds;
      sum.sample_seconds += s.sample_seconds;
      sum.prompt_tokens += s.prompt_tokens;
      sum.cached_tokens += s.cached_tokens;
      sum.tokens_per_s += s.tokens_per_s;
      sum.row_len = s.row_len;
    }
  const int total = st.ready ? (int)st.workers.size() : 0, avail = idle_workers(st);
  return {
      {"total_workers", total},
      {"available_workers", avail},
      {"busy_workers", total - avail},
      {"queued_requests", sum.waiting},
      {"running_requests", sum.running},
      {"waiting_requests", sum.waiting},
      {"requests_served", st.served.load()},
      {"tokens_generated", st.tokens_out.load()},
      {"tokens_per_s", sum.tokens_per_s},
      {"batch",
       {{"max_rows", sum.rows_total},
        {"rows_in_use", sum.rows_busy},
        {"mean_rows_per_step", sum.decode_steps ? (double)sum.decode_rows / (double)sum.decode_steps : 0.0},
        {"decode_steps", sum.decode_steps},
        {"decode_rows", sum.decode_rows},
        {"prefill_forwards", sum.prefill_forwards},
        {"prefill_seconds", sum.prefill_seconds},
        {"decode_seconds", sum.decode_seconds},
        {"sample_seconds", sum.sample_seconds}}},
      {"kv_pool",
       {{"rows", sum.rows_total},
        {"rows_in_use", sum.rows_busy},
        {"rows_cached", sum.rows_cached},
        {"positions_per_row", sum.row_len},
        {"bytes", sum.kv_bytes}}},
      {"prefix_cache",
       {{"enabled", st.opt.prefix_cache}, {"prompt_tokens", sum.prompt_tokens}, {"cached_tokens", sum.cached_tokens}}},
      {"connections", connections_json(st)},
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

// The request body through httplib's content reader: decompressed (gzip, deflate, br) and
// de-chunked there, counted here, so no encoding gets more than max_body_bytes into memory
// (httplib 0.11.4 caps neither a chunked body nor a decompressed one).

std::string read_body(const ServerState& st, RequestContext* ctx, const httplib::Request& req, httplib::Response& res,
                      const httplib::ContentReader& reader) {
  const size_t max = (size_t)st.opt.limits.max_body_bytes;
  if (req.is_multipart_form_data()) {
    server_close_after(ctx, req, res);
    throw ServerError(415, "multipart bodies are not accepted; send the request as JSON");
  }
  std::string body;
  if (req.has_header("Content-Length") && req.get_header_value("Content-Encoding").empty())  // no doubling as it grows
    body.reserve(std::min<size_t>(max, req.get_header_value<uint64_t>("Content-Length")));
  bool over = false;
  const bool ok = reader([&](const char* data, size_t n) {
    if (body.size() + n > max) return !(over = true);
    body.append(data, n);
    return true;
  });
  if (over) {
    server_close_after(ctx, req, res);  // the rest of the body stays unread
    throw ServerError(413, strprintf("request body too large (limit %zu bytes, after decompression)", max));
  }
  if (!ok) {
    server_close_after(ctx, req, res);
    throw ServerError(400, "the request body could not be read (bad chunked framing or compression)");
  }
  return body;
}

// the body read and parsed under a share of the parse budget (parse_budget.h): the body and
// its document are freed before the request waits for rows
ChatRequest read_and_parse(ServerState& st, RequestContext* ctx, const httplib::Request& req, httplib::Response& res,
                           const httplib::ContentReader& reader, bool openai) {
  const int64_t max = st.opt.limits.max_body_bytes;
  int64_t n = max;  // chunked or compressed: up to the cap
  if (req.has_header("Content-Length") && req.get_header_value("Content-Encoding").empty())
    n = std::min<int64_t>(max, (int64_t)req.get_header_value<uint64_t>("Content-Length"));
  ParseShare share(st.parse_budget, n, std::chrono::milliseconds(2000));
  if (!share.held()) {
    server_close_after(ctx, req, res);  // its body stays unread
    throw ServerError(503, "too many requests are being parsed at once; retry later", 1);
  }
  return server_parse_chat_request(read_body(st, ctx, req, res, reader), openai, st.opt.defaults, st.opt.limits);
}

// CORS only for the --cors-origin; same-origin pages need none
void add_cors_headers(const ServerState& st, const httplib::Request& req, httplib::Response& res) {
  if (st.opt.cors_origin.empty() || req.get_header_value("Origin") != st.opt.cors_origin) return;
  res.set_header("Access-Control-Allow-Origin", st.opt.cors_origin);
  res.set_header("Vary", "Origin");
  if (req.method == "OPTIONS" && res.status == 204) {
    res.set_header("Access-Control-Allow-Methods", res.get_header_value("Allow"));
    res.set_header("Access-Control-Allow-Headers", "Content-Type, Authorization");
  }
}

}  // namespace

std::string server_error_json(int status, const std::string& message) {
  const char* type = status == 401                    ? "authentication_error"
                     : status == 403                  ? "permission_error"
                     : status == 404 || status == 405 ? "not_found_error"
                     : status == 503                  ? "unavailable_error"
                     : status >= 400 && status < 500  ? "invalid_request_error"
                                                      : "server_error";
  // "error" for OpenAI clients, "detail" as FastAPI answered upstream's UI
  json body = {{"error", {{"message", message}, {"type", type}, {"code", status}}}, {"detail", message}};
  return dump(body);
}

void server_send_error(httplib::Response& res, int status, const std::string& message) {
  res.status = status;
  res.set_content(server_error_json(status, message), "application/json");
}

void server_close_after(RequestContext* ctx, const httplib::Request& req, httplib::Response& res) {
  if (ctx) ctx->close_after = true;
  if (req.get_header_value("Connection") != "close") res.set_header("Connection", "close");
}

void server_routes_install(HttpServer& svr, ServerState& st) {
  const ServerOptions& o = st.opt;
  svr.limits.request.max_line = (size_t)o.limits.max_header_line;
  svr.limits.request.max_headers = (size_t)o.limits.max_headers;
  svr.limits.request.max_body = (uint64_t)o.limits.max_body_bytes;
  svr.limits.request.max_raw_body = 2 * (size_t)o.limits.max_body_bytes + (64 << 10);  // chunk framing's room
  svr.limits.deadline_ms = (int)(o.request_deadline * 1000);
  svr.limits.max_connections = o.max_connections;
  svr.limits.max_per_client = server_max_per_client(o);
  svr.set_payload_max_length((size_t)o.limits.max_body_bytes);
  svr.set_read_timeout(30);
  svr.set_write_timeout(30);
  svr.set_keep_alive_timeout(5);
  svr.set_tcp_nodelay(true);
  st.parse_budget.set_bytes(o.limits.max_parsing_bytes);

  auto chat = [&st, &svr](auto fn, bool openai) {
    return httplib::Server::HandlerWithContentReader([&st, &svr, fn, openai](const httplib::Request& req,
                                                                             httplib::Response& res,
                                                                             const httplib::ContentReader& reader) {
      RequestContext* ctx = svr.context(req);
      try {
        // the key the guard let in (-1 without keys): the request's prefix-cache scope
        const int key = st.opt.api_keys.empty()
                            ? -1
                            : server_bearer_key(req.get_header_value("Authorization"), st.opt.api_keys);
        fn(st, req, read_and_parse(st, ctx, req, res, reader, openai), ctx, key, res);
      } catch (const ServerError& e) {
        if (e.retry_after_s > 0) res.set_header("Retry-After", std::to_string(e.retry_after_s));
        server_send_error(res, e.status, e.what());
      } catch (const std::exception& e) {
        server_send_error(res, 500, server_internal_error(req.path.c_str(), e));
      }
    });
  };
  svr.Post("/chat/completions", chat(handle_upstream, false));
  svr.Post("/v1/chat/completions", chat(handle_openai, true));
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
    if (st.ready)
      data.push_back({{"id", st.model_id}, {"object", "model"}, {"created", st.created}, {"owned_by", "nanochat"}});
    res.set_content(dump({{"object", "list"}, {"data", data}}), "application/json");
  });
  svr.Get("/(.*)", [](const httplib::Request& req, httplib::Response& res) {
    if (const WebAsset* a = server_web_asset(req.path == "/" ? "/ui.html" : req.path))
      return res.set_content((const char*)a->data, a->size, content_type_of(a->path));
    if (const char* allow = allowed_methods(req.path)) {  // GET on a POST route
      res.set_header("Allow", allow);
      return server_send_error(res, 405,
                               "method " + req.method + " is not allowed on " + req.path + " (allowed: " + allow + ")");
    }
    server_send_error(res, 404, "no such path: " + req.path);
  });
  svr.Options("/(.*)", [](const httplib::Request& req, httplib::Response& res) {
    const char* allow = allowed_methods(req.path);
    if (!allow) return server_send_error(res, 404, "no such path: " + req.path);
    res.status = 204;
    res.set_header("Allow", allow);
  });
  // httplib's own refusals (no route, 413, 400 on an unparsable request) get a JSON body;
  // a known path with another method is 405
  svr.set_error_handler(
      httplib::Server::HandlerWithResponse([&svr](const httplib::Request& req, httplib::Response& res) {
        if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
        const char* allow = allowed_methods(req.path);
        if (res.status == 404 && allow) {
          res.set_header("Allow", allow);
          server_send_error(res, 405,
                            "method " + req.method + " is not allowed on " + req.path + " (allowed: " + allow + ")");
        } else if (res.status == 404) {
          server_send_error(res, 404, "no such path: " + req.path);
        } else if (res.status == 413) {
          server_send_error(res, 413, "request body too large");
        } else {
          if (res.status == 400)
            server_close_after(svr.context(req), req, res);  // a malformed request: nothing after it is trusted
          server_send_error(res, res.status, res.status == 400 ? "malformed HTTP request" : "request refused");
        }
        return httplib::Server::HandlerResponse::Handled;
      }));
  svr.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
    server_send_error(res, 500, "internal error");
  });
  svr.set_pre_routing_handler([&st, &svr](const httplib::Request& req, httplib::Response& res) {
    return server_guard(st, req, res, svr.context(req));
  });
  // Expect: 100-continue is answered after the guard (key, Host, Origin, size) passed: a
  // refused client gets the refusal, not an invitation to send its body
  // (the event loop does so before it reads the body: continue_guard; httplib's own 100 then
  // goes unsent)
  svr.set_expect_100_continue_handler([&st, &svr](const httplib::Request& req, httplib::Response& res) {
    return server_guard(st, req, res, svr.context(req)) == httplib::Server::HandlerResponse::Handled ? res.status : 100;
  });
  svr.continue_guard = [&st](const httplib::Request& req, httplib::Response& res, RequestContext& ctx) {
    return server_guard(st, req, res, &ctx);
  };
  svr.set_post_routing_handler(
      [&st](const httplib::Request& req, httplib::Response& res) { add_cors_headers(st, req, res); });
  // the path is percent-decoded by httplib: CR, LF and ESC from it are escaped, so a request
  // cannot forge log lines or drive the terminal
  if (!st.opt.quiet)
    svr.set_logger([](const httplib::Request& req, const httplib::Response& res) {
      log_info("%s %s %d", server_log_escape(req.method).c_str(), server_log_escape(req.path).c_str(), res.status);
    });
}

}  // namespace nanochat
