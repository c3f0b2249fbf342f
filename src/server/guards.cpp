// defines: server_host_is_loopback_name, server_bind_is_loopback, server_log_escape,
//          server_bearer_ok, server_bearer_key, server_api_keys_resolve, server_cache_scope,
//          server_internal_error
// Small checks the routes' pre-routing guard uses (routes.cpp), the API keys and the
// prefix-cache scope they give. A server bound to loopback is
// reachable from every web page the user opens: a page on evil.example can resolve its own
// name to 127.0.0.1 (DNS rebinding) and then talk to us "same-origin", so only loopback names
// are accepted in Host there.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <cstdlib>

#include "nanochat/common/error.h"
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

int server_bearer_key(const std::string& authorization, const std::vector<std::string>& keys) {
  int found = -1;
  for (size_t i = 0; i < keys.size(); i++)  // no early exit: the time does not tell which key
    if (server_bearer_ok(authorization, keys[i]) && found < 0) found = (int)i;
  return found;
}

namespace {

// a key as it came from `from`: refused empty, or holding a space or control character
void check_key(const std::string& key, const std::string& from) {
  if (key.empty()) fail("%s: the API key is empty (an unset variable?); give a key or leave the option out", from.c_str());
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
    fail("%s: mode %04o lets other users read or write the keys; chmod 600 it", from.c_str(), (unsigned)(sb.st_mode & 07777));
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

std::string server_cache_scope(int key_index, const std::string& cache_salt) {
  // the key's index never holds a newline: "k<index>\n" and any salt split one way only
  return strprintf("k%d\n", key_index) + cache_salt;
}

std::string server_internal_error(const char* where, const std::exception& e) {
  log_error("chat-web: %s: %s", where, e.what());
  return "internal error (the server log has the details)";
}

}  // namespace nanochat
