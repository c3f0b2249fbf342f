// One exception type for everything a user can cause (bad file, flag, environment).
// main() prints it as a single "error: ..." line and exits 1.
#pragma once
#include <stdexcept>
#include <string>

namespace nanochat {

struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// printf-style formatting into a std::string
std::string strprintf(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

// throw Error(strprintf(...)): the message should say what, where and what to do
[[noreturn]] void fail(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

}  // namespace nanochat
