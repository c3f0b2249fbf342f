// defines: server_host_is_loopback_name, server_bind_is_loopback, server_log_escape
// Small checks the routes' pre-routing guard uses (routes.cpp). A server bound to loopback is
// reachable from every web page the user opens: a page on evil.example can resolve its own
// name to 127.0.0.1 (DNS rebinding) and then talk to us "same-origin", so only loopback names
// are accepted in Host there.
#include <cctype>
#include <cstdio>

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

}  // namespace nanochat
