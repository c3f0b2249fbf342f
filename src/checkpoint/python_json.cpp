// JSON as Python's json.dump writes it: standard JSON plus the bare words NaN, Infinity and
// -Infinity for non-finite floats (upstream's meta_<step>.json holds "min_val_bpb": Infinity
// when a run stopped before its first evaluation). nlohmann's parser refuses them, so each such
// word outside a string becomes a placeholder string ("\u0000" + the word), and a parse callback
// turns every placeholder value back into the double. A placeholder cannot meet a string of the
// file: JSON writes a NUL only as the escape \u0000, and a file holding that escape and a
// non-finite word is refused rather than guessed at.
#include <cctype>
#include <cmath>
#include <limits>

#include "nanochat/checkpoint.h"
#include "nanochat/common/error.h"

namespace nanochat {

namespace {

bool word_at(const std::string& text, size_t i, const char* word) {
  size_t n = std::char_traits<char>::length(word);
  if (text.compare(i, n, word) != 0) return false;
  // the word must end there: "NaNx" stays as it is, for nlohmann to report
  return i + n == text.size() || !std::isalnum((unsigned char)text[i + n]);
}

}  // namespace

nlohmann::ordered_json checkpoint_parse_json(const std::string& text, const std::string& where) {
  std::string out;
  bool in_string = false, escaped = false, replaced = false;
  for (size_t i = 0; i < text.size();) {
    char c = text[i];
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
      out += c, i++;
      continue;
    }
    const char* word = nullptr;
    for (const char* w : {"NaN", "Infinity", "-Infinity"})
      if (word_at(text, i, w)) word = w;
    if (word) {
      out += std::string("\"\\u0000") + word + "\"";
      i += std::char_traits<char>::length(word);
      replaced = true;
      continue;
    }
    if (c == '"') in_string = true;
    out += c, i++;
  }
  using Json = nlohmann::ordered_json;
  if (replaced && text.find("\\u0000") != std::string::npos)
    fail("%s: holds both a non-finite number (NaN, Infinity) and a \\u0000 escape, which cannot be read together",
         where.c_str());
  auto back_to_double = [](int, Json::parse_event_t event, Json& parsed) {
    if (event != Json::parse_event_t::value || !parsed.is_string()) return true;
    const std::string& s = parsed.get_ref<const std::string&>();
    if (s.empty() || s[0] != '\0') return true;
    const double inf = std::numeric_limits<double>::infinity();
    parsed = s == std::string("\0NaN", 4) ? std::nan("") : s == std::string("\0Infinity", 9) ? inf : -inf;
    return true;
  };
  try {
    return replaced ? Json::parse(out, back_to_double) : Json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    fail("%s: not valid JSON (%s)", where.c_str(), e.what());
  }
}

}  // namespace nanochat
