// The security policy every request meets before routing (server_guard: reserved headers,
// Host, Origin, the connection cap, the API key, bodies where none belong) and its pieces:
// the API keys and the prefix-cache scope they give. A server bound to loopback is reachable
// from every web page the user opens: a page on evil.example can resolve its own name to
// 127.0.0.1 (DNS rebinding) and then talk to us "same-origin", so only loopback names are
// accepted in Host there.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <cstdlib>

#include "nanochat/common/error.h"
#include "nanochat/common/log.h"
#include "nanochat/common/ascii.h"
#include "nanochat/server.h"
#include "server/routes.h"

namespace nanochat {

namespace {

// "" or ":" followed by 1-5 digits
bool is_port_suffix(const std::string& s) {
  if (s.empty()) return true;
  if (s[0] != ':' || s.size() < 2 || s.size() > 6) return false;
  for (size_t i = 1; i < s.size(); i++)
    if (!std::isdigit((unsigned char)s[i])) return false;
  return true;
}

// the methods httplib 0.11.4 reads a body for
bool may_have_body(const httplib::Request& req) {
  return req.method == "POST" || req.method == "PUT" || req.method == "PATCH" || req.method == "DELETE" ||
         req.method == "PRI";
}

bool is_api_path(const std::string& path) {
  return path == "/chat/completions" || path == "/stats" || path.rfind("/v1/", 0) == 0;
}

}  // namespace

bool server_host_is_loopback_name(const std::string& host) {
  const std::string h = ascii_lower(host);
  for (const char* name : {"localhost", "127.0.0.1", "[::1]"}) {
    const std::string n = name;
    if (h.compare(0, n.size(), n) == 0 && is_port_suffix(h.substr(n.size()))) return true;
  }
  return false;
}

bool server_bind_is_loopback(const std::string& bind_host) {
  const std::string h = ascii_lower(bind_host);
  return h == "localhost" || h == "::1" || h == "[::1]" || h.rfind("127.", 0) == 0;
}

std::string server_log_escape(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (unsigned char c : s) {
    if (c < 0x20 || c == 0x7f || c == '\\') {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out += (char)c;
    }
  }
  return out;
}

bool server_bearer_ok(const std::string& authorization, const std::string& key) {
  if (key.empty() || authorization.size() < 7 || ascii_lower(authorization.substr(0, 6)) != "bearer" ||
      authorization[6] != ' ')
    return false;
  size_t start = 7;
  while (start < authorization.size() && authorization[start] == ' ') start++;
  const std::string given = authorization.substr(start);
  // constant time in the key's length: no timing hint of how much of a guess was right
  unsigned char diff = given.size() != key.size();
  for (size_t i = 0; i < given.size(); i++) diff |= (unsigned char)(given[i] ^ key[i % key.size()]);
  return diff == 0;
}

int server_bearer_key(const std::string& authorization, const std::vector<std::string>& keys) {
  int found = -1;
  for (size_t i = 0; i < keys.size(); i++)  // no early exit: the time does not tell which key
    if (server_bearer_ok(authorization, keys[i]) && found < 0) found = (int)i;
  return found;
}

namespace {

// a key as it came from `from`: refused empty, or holding a space or control character
void check_key(const std::string& key, const std::string& from) {
  if (key.empty())
    fail("%s: the API key is empty (an unset variable?); give a key or leave the option out", from.c_str());
  for (unsigned char c : key)
    if (c <= 0x20 || c == 0x7f) fail("%s: the API key holds a space or control character", from.c_str());
}

// the file's lines, read through one descriptor whose mode was checked (no swap in between)
std::vector<std::string> read_key_file(const std::string& file) {
  const std::string from = "--api-key-file " + file;
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("%s: cannot read it", from.c_str());
  struct stat sb {};
  if (::fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
    ::close(fd);
    fail("%s: not a regular file", from.c_str());
  }
  if (sb.st_mode & 077) {
    ::close(fd);
    fail("%s: mode %04o lets other users read or write the keys; chmod 600 it", from.c_str(),
         (unsigned)(sb.st_mode & 07777));
  }
  std::string text;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof buf)) > 0 && text.size() < (1u << 20)) text.append(buf, (size_t)n);
  ::close(fd);
  if (n < 0) fail("%s: cannot read it", from.c_str());
  std::vector<std::string> keys;
  size_t line = 0;
  for (size_t at = 0; at < text.size();) {
    size_t end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    std::string key = text.substr(at, end - at);
    at = end + 1;
    line++;
    if (!key.empty() && key.back() == '\r') key.pop_back();
    if (key.empty()) continue;
    check_key(key, strprintf("%s line %zu", from.c_str(), line));
    for (const std::string& k : keys)
      if (k == key) fail("%s line %zu: the same key as an earlier line", from.c_str(), line);
    keys.push_back(key);
  }
  if (keys.empty()) fail("%s: the file holds no key", from.c_str());
  return keys;
}

}  // namespace

std::vector<std::string> server_api_keys_resolve(const std::string* flag, const std::string& file) {
  if (flag) {
    check_key(*flag, "--api-key");
    return {*flag};
  }
  if (!file.empty()) return read_key_file(file);
  if (const char* env = std::getenv("NANOCHAT_API_KEY")) {
    check_key(env, "NANOCHAT_API_KEY");
    return {env};
  }
  return {};
}

std::string server_queue_key(int key_index, const std::string& address) {
  return key_index >= 0 ? strprintf("key %d", key_index) : "address " + address;
}

std::string server_cache_scope(int key_index, const std::string& cache_salt) {
  // the key's index never holds a newline: "k<index>\n" and any salt split one way only
  return strprintf("k%d\n", key_index) + cache_salt;
}

// Every request before routing and before its body is read; a refusal is Handled.
httplib::Server::HandlerResponse server_guard(const ServerState& st, const httplib::Request& req,
                                              httplib::Response& res, RequestContext* ctx) {
  using HR = httplib::Server::HandlerResponse;
  auto refuse = [&](int status, const std::string& message) {
    if (may_have_body(req)) server_close_after(ctx, req, res);  // its body stays unread
    server_send_error(res, status, message);
    return HR::Handled;
  };
  // httplib 0.11.4 adds REMOTE_ADDR/REMOTE_PORT/LOCAL_ADDR/LOCAL_PORT as request headers after
  // the client's own: a client-sent one would shadow them (CVE-2025-66570)
  for (const char* name : {"REMOTE_ADDR", "REMOTE_PORT", "LOCAL_ADDR", "LOCAL_PORT"})
    if (req.get_header_value_count(name) != 1)
      return refuse(400, std::string("reserved header ") + name + " in the request");
  const std::string host = req.get_header_value("Host");
  if (server_bind_is_loopback(st.opt.host) && !server_host_is_loopback_name(host))
    return refuse(403, "Host '" + host +
                           "' is not a loopback name (localhost, 127.0.0.1, [::1]); this server is bound to " +
                           st.opt.host);
  // a page on another origin: refused unless it is the --cors-origin (a browser sends Origin
  // on every cross-origin request, "simple" text/plain POSTs included)
  if (req.has_header("Origin")) {
    const std::string origin = req.get_header_value("Origin");
    const bool same = ascii_lower(origin) == "http://" + ascii_lower(host) ||
                      ascii_lower(origin) == "https://" + ascii_lower(host);
    if (!same && (st.opt.cors_origin.empty() || origin != st.opt.cors_origin))
      return refuse(403, "cross-origin request from '" + origin + "' refused (allow one origin with --cors-origin)");
  }
  if (ctx && ctx->overflow && !((req.method == "GET" || req.method == "HEAD") && req.path == "/health")) {
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
  const std::string encoding = ascii_lower(req.get_header_value("Content-Encoding"));
  if (!chat && !encoding.empty() && encoding != "identity")
    return refuse(415, "a compressed body is only accepted by the chat routes");
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

std::string server_internal_error(const char* where, const std::exception& e) {
  log_error("chat-web: %s: %s", where, e.what());
  return "internal error (the server log has the details)";
}

}  // namespace nanochat
