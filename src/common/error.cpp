#include "nanochat/common/error.h"

#include <cstdarg>
#include <cstdio>

namespace nanochat {

static std::string vstrprintf(const char* fmt, va_list args) {
  va_list copy;
  va_copy(copy, args);
  int n = std::vsnprintf(nullptr, 0, fmt, copy);
  va_end(copy);
  if (n <= 0) return std::string();
  std::string out((size_t)n, '\0');
  std::vsnprintf(out.data(), out.size() + 1, fmt, args);
  return out;
}

std::string strprintf(const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  std::string s = vstrprintf(fmt, args);
  va_end(args);
  return s;
}

void fail(const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  std::string s = vstrprintf(fmt, args);
  va_end(args);
  throw Error(s);
}

}  // namespace nanochat
