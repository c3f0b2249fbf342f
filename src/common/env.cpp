#include "nanochat/common/env.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>

#include "nanochat/common/error.h"

namespace nanochat {

std::optional<std::string> env_get(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) return std::nullopt;
  return std::string(v);
}

int64_t parse_int(const std::string& text, const std::string& what, int64_t min_value, int64_t max_value) {
  const char* s = text.c_str();
  char* end = nullptr;
  errno = 0;
  long long v = std::strtoll(s, &end, 10);
  bool junk = end == s || *end != '\0' || std::isspace((unsigned char)s[0]);
  if (junk || errno == ERANGE) fail("%s='%s' is not an integer", what.c_str(), text.c_str());
  if (v < min_value || v > max_value)
    fail("%s=%lld is out of range [%lld, %lld]", what.c_str(), v, (long long)min_value, (long long)max_value);
  return v;
}

std::optional<int64_t> env_int(const char* name, int64_t min_value, int64_t max_value) {
  auto v = env_get(name);
  if (!v) return std::nullopt;
  return parse_int(*v, std::string("environment variable ") + name, min_value, max_value);
}

bool env_flag(const char* name) {
  auto v = env_get(name);
  if (!v) return false;
  std::string s = *v;
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  if (s == "1" || s == "true" || s == "yes" || s == "on") return true;
  if (s == "0" || s == "false" || s == "no" || s == "off") return false;
  fail("environment variable %s='%s' is not a boolean (use 1 or 0)", name, v->c_str());
}

}  // namespace nanochat
