// defines: server_host_is_loopback_name, server_bind_is_loopback, server_log_escape,
//          server_bearer_ok, server_internal_error
// Small checks the routes' pre-routing guard uses (routes.cpp). A server bound to loopback is
// reachable from every web page the user opens: a page on evil.example can resolve its own
// name to 127.0.0.1 (DNS rebinding) and then talk to us "same-origin", so only loopback names
// are accepted in Host there.
#include <cctype>
#include <cstdio>

#include "nanochat/common/log.h"
#include "nanochat/server.h"

namespace nanochat {

namespace {

std::string lower(std::string s) {
  for (char& c : s) c = (char)std::tolower((unsigned char)c);
  return s;
}

// "" or ":" followed by 1-5 digits
bool is_port_suffix(const std::string& s) {
  if (s.empty()) return true;
  if (s[0] != ':' || s.size() < 2 || s.size() > 6) return false;
  for (size_t i = 1; i < s.size(); i++)
    if (!std::isdigit((unsigned char)s[i])) return false;
  return true;
}

}  // namespace

bool server_host_is_loopback_name(const std::string& host) {
  const std::string h = lower(host);
  for (const char* name : {"localhost", "127.0.0.1", "[::1]"}) {
    const std::string n = name;
    if (h.compare(0, n.size(), n) == 0 && is_port_suffix(h.substr(n.size()))) return true;
  }
  return false;
}

bool server_bind_is_loopback(const std::string& bind_host) {
  const std::string h = lower(bind_host);
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
  if (key.empty() || authorization.size() < 7 || lower(authorization.substr(0, 6)) != "bearer" || authorization[6] != ' ')
    return false;
  size_t start = 7;
  while (start < authorization.size() && authorization[start] == ' ') start++;
  const std::string given = authorization.substr(start);
  // constant time in the key's length: no timing hint of how much of a guess was right
  unsigned char diff = given.size() != key.size();
  for (size_t i = 0; i < given.size(); i++) diff |= (unsigned char)(given[i] ^ key[i % key.size()]);
  return diff == 0;
}

std::string server_internal_error(const char* where, const std::exception& e) {
  log_error("chat-web: %s: %s", where, e.what());
  return "internal error (the server log has the details)";
}

}  // namespace nanochat
