#include "nanochat/common/jsonl.h"

#include <cerrno>
#include <cstring>
#include <fstream>

#include "nanochat/common/error.h"

namespace nanochat {

void jsonl_for_each(
    const std::string& path, const std::string& what,
    const std::function<void(const nlohmann::json& value, int64_t line, const std::string& where)>& fn) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail("cannot read the %s %s: %s", what.c_str(), path.c_str(), std::strerror(errno));
  std::string text;
  for (int64_t line = 1; std::getline(f, text); line++) {
    if (text.find_first_not_of(" \t\r\n") == std::string::npos) continue;  // blank
    const std::string where = path + ":" + std::to_string(line);
    nlohmann::json value;
    try {
      value = nlohmann::json::parse(text);
    } catch (const nlohmann::json::exception& e) {
      fail("%s: not valid JSON (%s)", where.c_str(), e.what());
    }
    fn(value, line, where);
  }
}

}  // namespace nanochat
