// A JSONL file value by value: blank lines are skipped, every other line must be one JSON
// value; errors name "path:line".
#pragma once
#include <cstdint>
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

namespace nanochat {

// fn(value, line number, "path:line") for each non-blank line; `what` names the file in the
// error when it cannot be opened ("cannot read the <what> <path>: <reason>")
void jsonl_for_each(const std::string& path, const std::string& what,
                    const std::function<void(const nlohmann::json& value, int64_t line, const std::string& where)>& fn);

}  // namespace nanochat
