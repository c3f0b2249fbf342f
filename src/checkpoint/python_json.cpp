// JSON as Python's json.dump writes it: standard JSON plus the bare words NaN, Infinity and
// -Infinity for non-finite floats (upstream's meta_<step>.json holds "min_val_bpb": Infinity
// when a run stopped before its first evaluation). nlohmann's parser refuses them, so each such
// word outside a string becomes a placeholder string ("\u0000" + the word), and a parse callback
// turns every placeholder value back into the double. A placeholder cannot meet a string of the
// file: JSON writes a NUL only as the escape \u0000, and a file holding that escape and a
// non-finite word is refused rather than guessed at.
// The document is built by our own SAX handler: nlohmann's parser inserts each key of an
// ordered_json object with a linear search for it, so an object of 100,000 keys (a config or
// an index from anyone) took 15 s; here a hash of each open object's keys finds a repeated one
// (the last value wins, as in Python).
#include <cctype>
#include <cmath>
#include <limits>
#include <string>
#include <unordered_map>
#include <vector>

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

using Json = nlohmann::ordered_json;

class OrderedBuilder final : public nlohmann::json_sax<Json> {
 public:
  explicit OrderedBuilder(bool placeholders) : placeholders_(placeholders) {}
  Json root;
  std::string error;

  bool null() override { return put(nullptr); }
  bool boolean(bool v) override { return put(v); }
  bool number_integer(number_integer_t v) override { return put(v); }
  bool number_unsigned(number_unsigned_t v) override { return put(v); }
  bool number_float(number_float_t v, const string_t&) override { return put(v); }
  bool string(string_t& v) override {
    if (!placeholders_ || v.empty() || v[0] != '\0') return put(std::move(v));
    const double inf = std::numeric_limits<double>::infinity();  // a placeholder of a non-finite word
    return put(v == std::string("\0NaN", 4) ? std::nan("") : v == std::string("\0Infinity", 9) ? inf : -inf);
  }
  bool binary(binary_t&) override { return false; }
  bool start_object(std::size_t) override { return open(Json::object()); }
  bool key(string_t& k) override {
    key_ = std::move(k);
    return true;
  }
  bool end_object() override { return close(); }
  bool start_array(std::size_t) override { return open(Json::array()); }
  bool end_array() override { return close(); }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) override {
    error = e.what();
    return false;
  }

 private:
  struct Open {
    Json* value;
    std::unordered_map<std::string, size_t> keys;  // an object's keys, to their place
  };

  // the value's place: the root, the end of the open array, or the open object's key
  Json* place(Json v) {
    if (stack_.empty()) {
      root = std::move(v);
      return &root;
    }
    Open& top = stack_.back();
    if (top.value->is_array()) {
      top.value->push_back(std::move(v));
      return &top.value->back();
    }
    auto& entries = static_cast<Json::object_t::Container&>(*top.value->get_ptr<Json::object_t*>());
    auto [at, fresh] = top.keys.emplace(key_, entries.size());
    if (!fresh) return &(entries[at->second].second = std::move(v));
    entries.emplace_back(std::move(key_), std::move(v));
    return &entries.back().second;
  }
  bool put(Json v) {
    place(std::move(v));
    return true;
  }
  bool open(Json v) {
    stack_.push_back({place(std::move(v)), {}});
    return true;
  }
  bool close() {
    stack_.pop_back();
    return true;
  }

  bool placeholders_;
  std::vector<Open> stack_;
  std::string key_;
};

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
  if (replaced && text.find("\\u0000") != std::string::npos)
    fail("%s: holds both a non-finite number (NaN, Infinity) and a \\u0000 escape, which cannot be read together",
         where.c_str());
  OrderedBuilder builder(replaced);
  if (!Json::sax_parse(replaced ? out : text, &builder))
    fail("%s: not valid JSON (%s)", where.c_str(), builder.error.c_str());
  return std::move(builder.root);
}

}  // namespace nanochat
