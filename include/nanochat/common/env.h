// Reading environment variables with errors that name the variable and its bad value.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

namespace nanochat {

std::optional<std::string> env_get(const char* name);  // unset or empty -> nullopt
// parses a base-10 integer in [min_value, max_value]; Error on junk or out of range
std::optional<int64_t> env_int(const char* name, int64_t min_value, int64_t max_value);
bool env_flag(const char* name);  // "1", "true", "yes", "on" (any case) -> true; "0", "false", ... -> false

// the same integer parser, for flags and other strings: `what` names the source in errors
int64_t parse_int(const std::string& text, const std::string& what, int64_t min_value, int64_t max_value);

}  // namespace nanochat
