// defines: server_routes_install, server_error_json
// The chat-web server's set-up and routes on cpp-httplib. Life of a request:
//   connection thread (connection.cpp): bounded head -> guard (Host, Origin, API key,
//   connection cap, body size) -> body read through httplib's content reader, capped after
//   decompression -> parse + check (4xx, no model work) -> prompt tokens -> acquire a worker
//   (FIFO; 503 when the queue is full or the server drains) -> generate.
// Streams use httplib's chunked content provider; the worker lease lives in the provider, so
// it is released when the response ends however it ends. A client that goes away (a failed
// sink write, or its socket closed while a non-streaming reply is generated) makes the
// engine's callback return false: the worker is free after at most one more step.
#include <algorithm>
#include <atomic>
#include <cctype>
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
  res.status = status;
  res.set_content(server_error_json(status, message), "application/json");
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
  const ServerWorker& worker() const { return st.workers[lease.worker() % st.workers.size()]; }  // a row of that worker
};

// parse, check readiness, build the prompt, take a worker; throws ServerError
struct Prepared {
  ChatRequest req;
  std::vector<int32_t> prompt;
  std::string scope;  // whose prefix cache it may reuse (its API key and cache_salt)
  std::shared_ptr<Lease> lease;
};
Prepared prepare(ServerState& st, const std::string& body, bool openai, int key_index) {
  Prepared p;
  p.req = server_parse_chat_request(body, openai, st.opt.defaults, st.opt.limits);
  p.scope = server_cache_scope(key_index, p.req.cache_salt);
  if (st.stop_level > 0) throw ServerError(503, "the server is shutting down");
  if (!st.ready) throw ServerError(503, "the model is still loading; retry when GET /health answers 200");
  const Scheduler& sched = *st.workers[0].scheduler;
  p.prompt = server_prompt_tokens(sched.engine().tokenizer(), p.req.messages);
  const int64_t room = sched.row_len() - (int64_t)p.prompt.size();
  if (room < 1)
    throw ServerError(400, strprintf("the conversation is %zu tokens; the model handles at most %lld",
                                     p.prompt.size(), (long long)sched.row_len() - 1));
  if (p.req.n > sched.max_batch())
    throw ServerError(400, strprintf("n is %lld but this server decodes at most %lld rows together (--max-batch)",
                                     (long long)p.req.n, (long long)sched.max_batch()));
  int w = st.pool->acquire();  // waits its turn
  if (w < 0)
    throw ServerError(503, st.stop_level > 0 ? "the server is shutting down" : "too many requests are queued; retry later");
  p.lease = std::make_shared<Lease>(st, w);
  return p;
}

// a second signal, or the client's socket closed (checked every decode step: one poll)
std::function<bool()> cancelled_fn(ServerState& st) {
  return [&st] { return st.stop_level >= 2 || server_connection_gone(); };
}

void account(ServerState& st, const GenerationOutcome& g) {
  st.served++;
  for (auto& c : g.choices) st.tokens_out += c.completion_tokens;
}

std::string sse(const json& j) { return "data: " + dump(j) + "\n\n"; }

void close_after(const httplib::Request& req, httplib::Response& res);

// an SSE stream: chunked for HTTP/1.1; an HTTP/1.0 client knows no chunks, so its stream is
// delimited by the connection's close (RFC 9112 6.3)
void stream_response(const httplib::Request& req, httplib::Response& res,
                     std::function<bool(size_t, httplib::DataSink&)> provider) {
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");  // proxies: do not buffer the stream
  if (req.version == "HTTP/1.0") {
    close_after(req, res);
    res.set_content_provider("text/event-stream", std::move(provider));
  } else {
    res.set_chunked_content_provider("text/event-stream", std::move(provider));
  }
}

// ---- POST /chat/completions: upstream's stream ---------------------------------------------
void handle_upstream(ServerState& st, const httplib::Request& req, const std::string& body, int key_index,
                     httplib::Response& res) {
  auto p = std::make_shared<Prepared>(prepare(st, body, false, key_index));
  stream_response(req, res, [&st, p](size_t, httplib::DataSink& sink) {
    const ServerWorker& w = p->lease->worker();
    auto write = [&](const std::string& s) { return sink.write(s.data(), s.size()); };
    try {
      GenerationOutcome g = server_generate(
          *w.scheduler, p->req, p->prompt, p->scope,
          [&](int, const std::string& text) { return write(sse({{"token", text}, {"gpu", w.gpu_id}})); },
          cancelled_fn(st));
      account(st, g);
      if (!g.client_gone) write(sse({{"done", true}}));
    } catch (const std::exception& e) {  // headers are out: the error becomes an event
      write(sse({{"error", server_internal_error("stream", e)}}));
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
          {"total_tokens", g.prompt_tokens + completion},
          {"prompt_tokens_details", {{"cached_tokens", g.cached_tokens}}}};
}

void handle_openai(ServerState& st, const httplib::Request& req, const std::string& body, int key_index,
                   httplib::Response& res) {
  auto p = std::make_shared<Prepared>(prepare(st, body, true, key_index));
  const std::string id = completion_id();
  const int64_t created = (int64_t)std::time(nullptr);
  if (!p->req.stream) {
    const ServerWorker& w = p->lease->worker();
    GenerationOutcome g = server_generate(*w.scheduler, p->req, p->prompt, p->scope, [](int, const std::string&) { return true; },
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
  stream_response(req, res, [&st, p, id, created](size_t, httplib::DataSink& sink) {
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
            *w.scheduler, p->req, p->prompt, p->scope,
            [&](int row, const std::string& text) { return chunk(delta(row, {{"content", text}}, nullptr)); },
            cancelled_fn(st));
        account(st, g);
        ok = !g.client_gone;
        for (size_t i = 0; i < g.choices.size() && ok; i++)
          ok = chunk(delta((int64_t)i, json::object(), g.choices[i].finish_reason));
        if (ok && p->req.include_usage) ok = chunk(json::array(), usage_json(g));
      } catch (const std::exception& e) {
        std::string s = sse({{"error", {{"message", server_internal_error("stream", e)}, {"type", "server_error"}, {"code", 500}}}});
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
          {"available_workers", st.ready ? st.pool->idle_groups((int)st.workers.size()) : 0}};
}

// workers: a worker is available when none of its rows is taken; rows and KV summed over workers
json stats_json(const ServerState& st) {
  json workers = json::array();
  SchedulerStats sum;
  if (st.ready)
    for (auto& w : st.workers) {
      SchedulerStats s = w.scheduler->stats();
      workers.push_back({{"gpu_id", w.gpu_id}, {"device", w.device}});
      sum.running += s.running;
      sum.waiting += s.waiting;
      sum.rows_total += s.rows_total;
      sum.rows_busy += s.rows_busy;
      sum.rows_cached += s.rows_cached;
      sum.kv_bytes += s.kv_bytes;
      sum.decode_steps += s.decode_steps;
      sum.decode_rows += s.decode_rows;
      sum.prompt_tokens += s.prompt_tokens;
      sum.cached_tokens += s.cached_tokens;
      sum.tokens_per_s += s.tokens_per_s;
      sum.row_len = s.row_len;
    }
  int total = st.ready ? (int)st.workers.size() : 0, avail = st.ready ? st.pool->idle_groups(total) : 0;
  const int queued = st.ready ? st.pool->queued() : 0;
  return {{"total_workers", total},
          {"available_workers", avail},
          {"busy_workers", total - avail},
          {"queued_requests", queued},
          {"running_requests", sum.running},
          {"waiting_requests", queued + sum.waiting},
          {"requests_served", st.served.load()},
          {"tokens_generated", st.tokens_out.load()},
          {"tokens_per_s", sum.tokens_per_s},
          {"batch", {{"max_rows", sum.rows_total},
                     {"rows_in_use", sum.rows_busy},
                     {"mean_rows_per_step", sum.decode_steps ? (double)sum.decode_rows / (double)sum.decode_steps : 0.0},
                     {"decode_steps", sum.decode_steps}}},
          {"kv_pool", {{"rows", sum.rows_total},
                       {"rows_in_use", sum.rows_busy},
                       {"rows_cached", sum.rows_cached},
                       {"positions_per_row", sum.row_len},
                       {"bytes", sum.kv_bytes}}},
          {"prefix_cache", {{"enabled", st.opt.prefix_cache},
                            {"prompt_tokens", sum.prompt_tokens},
                            {"cached_tokens", sum.cached_tokens}}},
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
// the connection closes once this response is out (its body is left unread); said in the
// response too (httplib adds the header itself when the request asked for the close)
void close_after(const httplib::Request& req, httplib::Response& res) {
  server_connection_close_after();
  if (req.get_header_value("Connection") != "close") res.set_header("Connection", "close");
}

std::string read_body(const ServerState& st, const httplib::Request& req, httplib::Response& res,
                      const httplib::ContentReader& reader) {
  const size_t max = (size_t)st.opt.limits.max_body_bytes;
  if (req.is_multipart_form_data()) {
    close_after(req, res);
    throw ServerError(415, "multipart bodies are not accepted; send the request as JSON");
  }
  std::string body;
  bool over = false;
  const bool ok = reader([&](const char* data, size_t n) {
    if (body.size() + n > max) return !(over = true);
    body.append(data, n);
    return true;
  });
  if (over) {
    close_after(req, res);  // the rest of the body stays unread
    throw ServerError(413, strprintf("request body too large (limit %zu bytes, after decompression)", max));
  }
  if (!ok) {
    close_after(req, res);
    if (int refused = server_connection_refused()) throw ServerError(refused, "request refused");  // already answered
    throw ServerError(400, "the request body could not be read (bad chunked framing or compression)");
  }
  return body;
}

// the methods httplib 0.11.4 reads a body for
bool may_have_body(const httplib::Request& req) {
  return req.method == "POST" || req.method == "PUT" || req.method == "PATCH" || req.method == "DELETE" || req.method == "PRI";
}

bool is_api_path(const std::string& path) {
  return path == "/chat/completions" || path == "/stats" || path.rfind("/v1/", 0) == 0;
}

std::string lower(std::string s) {
  for (char& c : s) c = (char)std::tolower((unsigned char)c);
  return s;
}

// Every request before routing and before its body is read; a refusal is Handled.
httplib::Server::HandlerResponse guard(const ServerState& st, const httplib::Request& req, httplib::Response& res) {
  using HR = httplib::Server::HandlerResponse;
  auto refuse = [&](int status, const std::string& message) {
    if (may_have_body(req)) close_after(req, res);  // its body stays unread
    send_error(res, status, message);
    return HR::Handled;
  };
  // httplib 0.11.4 adds REMOTE_ADDR/REMOTE_PORT/LOCAL_ADDR/LOCAL_PORT as request headers after
  // the client's own: a client-sent one would shadow them (CVE-2025-66570)
  for (const char* name : {"REMOTE_ADDR", "REMOTE_PORT", "LOCAL_ADDR", "LOCAL_PORT"})
    if (req.get_header_value_count(name) != 1) return refuse(400, std::string("reserved header ") + name + " in the request");
  const std::string host = req.get_header_value("Host");
  if (server_bind_is_loopback(st.opt.host) && !server_host_is_loopback_name(host))
    return refuse(403, "Host '" + host + "' is not a loopback name (localhost, 127.0.0.1, [::1]); this server is bound to " +
                           st.opt.host);
  // a page on another origin: refused unless it is the --cors-origin (a browser sends Origin
  // on every cross-origin request, "simple" text/plain POSTs included)
  if (req.has_header("Origin")) {
    const std::string origin = req.get_header_value("Origin");
    const bool same = lower(origin) == "http://" + lower(host) || lower(origin) == "https://" + lower(host);
    if (!same && (st.opt.cors_origin.empty() || origin != st.opt.cors_origin))
      return refuse(403, "cross-origin request from '" + origin + "' refused (allow one origin with --cors-origin)");
  }
  if (server_connection_overflow() && !((req.method == "GET" || req.method == "HEAD") && req.path == "/health")) {
    res.set_header("Retry-After", "1");
    return refuse(503, strprintf("too many connections (the limit is %d); retry later", st.opt.max_connections));
  }
  if (!st.opt.api_keys.empty() && req.method != "OPTIONS" && is_api_path(req.path) &&
      server_bearer_key(req.get_header_value("Authorization"), st.opt.api_keys) < 0) {
    res.set_header("WWW-Authenticate", "Bearer");
    return refuse(401, "missing or wrong API key (send Authorization: Bearer <key>)");
  }
  // a body only for the chat routes' bounded reader: anywhere else httplib would read it whole
  // (and inflate a compressed one without a cap, CVE-2026-22776)
  const bool chat = req.method == "POST" && (req.path == "/chat/completions" || req.path == "/v1/chat/completions");
  const std::string encoding = lower(req.get_header_value("Content-Encoding"));
  if (!chat && !encoding.empty() && encoding != "identity") return refuse(415, "a compressed body is only accepted by the chat routes");
  if (req.method == "PRI") return refuse(405, "method PRI is not allowed");
  if (req.has_header("Content-Length")) {
    const std::string v = req.get_header_value("Content-Length");
    if (v.empty() || v.size() > 18 || v.find_first_not_of("0123456789") != std::string::npos)
      return refuse(400, "bad Content-Length");
    if (std::stoull(v) > (uint64_t)st.opt.limits.max_body_bytes)  // refused unread
      return refuse(413, strprintf("request body too large (%s bytes; the limit is %lld)", v.c_str(),
                                   (long long)st.opt.limits.max_body_bytes));
  }
  return HR::Unhandled;
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
  const char* type = status == 401                                  ? "authentication_error"
                     : status == 403                                ? "permission_error"
                     : status == 404 || status == 405               ? "not_found_error"
                     : status == 503                                ? "unavailable_error"
                     : status >= 400 && status < 500                ? "invalid_request_error"
                                                                    : "server_error";
  // "error" for OpenAI clients, "detail" as FastAPI answered upstream's UI
  json body = {{"error", {{"message", message}, {"type", type}, {"code", status}}}, {"detail", message}};
  return dump(body);
}

void server_routes_install(HttpServer& svr, ServerState& st) {
  const ServerOptions& o = st.opt;
  svr.limits.max_line = (size_t)o.limits.max_header_line;
  svr.limits.max_headers = (size_t)o.limits.max_headers;
  svr.limits.max_raw_body = 2 * (size_t)o.limits.max_body_bytes + (64 << 10);  // chunk framing's room
  svr.limits.deadline_ms = (int)(o.request_deadline * 1000);
  svr.limits.max_connections = o.max_connections;
  svr.set_payload_max_length((size_t)o.limits.max_body_bytes);
  svr.set_read_timeout(30);
  svr.set_write_timeout(30);
  svr.set_keep_alive_timeout(5);
  svr.set_tcp_nodelay(true);

  auto chat = [&st](auto fn) {
    return httplib::Server::HandlerWithContentReader(
        [&st, fn](const httplib::Request& req, httplib::Response& res, const httplib::ContentReader& reader) {
          try {
            // the key the guard let in (-1 without keys): the request's prefix-cache scope
            const int key = st.opt.api_keys.empty() ? -1 : server_bearer_key(req.get_header_value("Authorization"), st.opt.api_keys);
            fn(st, req, read_body(st, req, res, reader), key, res);
          } catch (const ServerError& e) {
            send_error(res, e.status, e.what());
          } catch (const std::exception& e) {
            send_error(res, 500, server_internal_error(req.path.c_str(), e));
          }
        });
  };
  svr.Post("/chat/completions", chat(handle_upstream));
  svr.Post("/v1/chat/completions", chat(handle_openai));
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
      send_error(res, 413, "request body too large");
    } else {
      if (res.status == 400) server_connection_close_after();  // a malformed request: nothing after it is trusted
      send_error(res, res.status, res.status == 400 ? "malformed HTTP request" : "request refused");
    }
    return httplib::Server::HandlerResponse::Handled;
  }));
  svr.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
    send_error(res, 500, "internal error");
  });
  svr.set_pre_routing_handler([&st](const httplib::Request& req, httplib::Response& res) { return guard(st, req, res); });
  // Expect: 100-continue is answered after the guard (key, Host, Origin, size) passed: a
  // refused client gets the refusal, not an invitation to send its body
  svr.set_expect_100_continue_handler([&st](const httplib::Request& req, httplib::Response& res) {
    return guard(st, req, res) == httplib::Server::HandlerResponse::Handled ? res.status : 100;
  });
  svr.set_post_routing_handler([&st](const httplib::Request& req, httplib::Response& res) { add_cors_headers(st, req, res); });
  // the path is percent-decoded by httplib: CR, LF and ESC from it are escaped, so a request
  // cannot forge log lines or drive the terminal
  if (!st.opt.quiet)
    svr.set_logger([](const httplib::Request& req, const httplib::Response& res) {
      const int refused = server_connection_refused();  // our own answer replaced httplib's
      log_info("%s %s %d", server_log_escape(req.method).c_str(), server_log_escape(req.path).c_str(),
               refused ? refused : res.status);
    });

}

}  // namespace nanochat
