// The chat-web server's routes (routes.cpp) and the policy every request meets first
// (guards.cpp), with the one JSON error format every refusal uses (the event loop's too).
// Internal to the server module.
#pragma once
#include <httplib.h>

#include <string>

#include "server/connections.h"
#include "server/state.h"

namespace nanochat {

// the one-line JSON error every refusal carries: {"error":{message,type,code},"detail":message}
std::string server_error_json(int status, const std::string& message);
// that error as the response
void server_send_error(httplib::Response& res, int status, const std::string& message);
// the connection closes once this response is out (its body is left unread); said in the
// response too (httplib adds the header itself when the request asked for the close)
void server_close_after(RequestContext* ctx, const httplib::Request& req, httplib::Response& res);

// Every request before routing and before its body is read (guards.cpp); a refusal is Handled.
// `ctx`: its connection's (null: none known)
httplib::Server::HandlerResponse server_guard(const ServerState& st, const httplib::Request& req,
                                              httplib::Response& res, RequestContext* ctx);

// the server's threads, limits, headers, and every route with its error handling (routes.cpp)
void server_routes_install(HttpServer& svr, ServerState& st);

}  // namespace nanochat
