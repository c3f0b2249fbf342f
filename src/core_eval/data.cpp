// One task's JSONL records (the eval bundle's formats), the seeded shuffle and subset, and the
// few-shot draw (as upstream's evaluate_core and evaluate_example), with CPython's random module (PyRandom).
#include <nlohmann/json.hpp>

#include "nanochat/common/error.h"
#include "nanochat/common/jsonl.h"
#include "nanochat/common/py_random.h"
#include "nanochat/core_eval.h"

namespace nanochat {

// Jinja2 prints a value with Python's str(): strings as they are, ints, True/False
static std::string field_text(const nlohmann::json& j, const char* key, const std::string& where) {
  if (!j.contains(key)) fail("%s: no \"%s\" field", where.c_str(), key);
  const auto& v = j[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number_integer()) return v.dump();
  if (v.is_boolean()) return v.get<bool>() ? "True" : "False";
  fail("%s: \"%s\" must be a string", where.c_str(), key);
}

static std::vector<std::string> field_list(const nlohmann::json& j, const char* key, const std::string& where) {
  if (!j.contains(key) || !j[key].is_array() || j[key].empty())
    fail("%s: \"%s\" must be a non-empty list of strings", where.c_str(), key);
  std::vector<std::string> out;
  for (size_t i = 0; i < j[key].size(); i++) {
    nlohmann::json one = {{"v", j[key][i]}};
    out.push_back(field_text(one, "v", where + ": " + key + "[" + std::to_string(i) + "]"));
  }
  return out;
}

static int64_t field_gold(const nlohmann::json& j, size_t num_options, const std::string& where) {
  if (!j.contains("gold") || !j["gold"].is_number_integer()) fail("%s: \"gold\" must be an integer", where.c_str());
  int64_t g = j["gold"].get<int64_t>();
  if (g < 0 || g >= (int64_t)num_options)
    fail("%s: gold %lld is not an index of the %zu options", where.c_str(), (long long)g, num_options);
  return g;
}

std::vector<CoreItem> core_load_task_data(const std::string& path, const std::string& type) {
  std::vector<CoreItem> out;
  jsonl_for_each(path, "CORE task file", [&](const nlohmann::json& j, int64_t lineno, const std::string& where) {
    if (!j.is_object()) fail("%s: not a JSON object", where.c_str());
    CoreItem it;
    it.line = lineno;
    if (type == "multiple_choice") {
      it.text = field_text(j, "query", where);
      it.options = field_list(j, "choices", where);
      it.gold = field_gold(j, it.options.size(), where);
    } else if (type == "schema") {
      it.options = field_list(j, "context_options", where);
      it.continuation = field_text(j, "continuation", where);
      it.gold = field_gold(j, it.options.size(), where);
    } else if (type == "language_modeling") {
      it.text = field_text(j, "context", where);
      it.continuation = field_text(j, "continuation", where);
    } else {
      fail("%s: unknown task type '%s' (known: multiple_choice, schema, language_modeling)", path.c_str(),
           type.c_str());
    }
    out.push_back(std::move(it));
  });
  if (out.empty()) fail("%s: no examples", path.c_str());
  return out;
}

void core_shuffle_truncate(std::vector<CoreItem>& data, int64_t max_per_task) {
  PyRandom(1337).shuffle(data);
  if (max_per_task > 0 && (int64_t)data.size() > max_per_task) data.resize((size_t)max_per_task);
}

std::vector<int64_t> core_fewshot_indices(int64_t idx, int64_t n, int64_t k) {
  if (k == 0) return {};  // upstream draws nothing (and makes no generator) for 0 shots
  if (k > n - 1)
    fail("%lld few-shot examples asked but the task has only %lld other examples", (long long)k, (long long)(n - 1));
  // available = [i for i in range(n) if i != idx]; sample() picks positions in it
  std::vector<int64_t> pos = PyRandom(1234 + idx).sample_indices(n - 1, k);
  for (auto& p : pos) p = p < idx ? p : p + 1;
  return pos;
}

}  // namespace nanochat
