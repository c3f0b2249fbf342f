// Request checking for both chat endpoints. Upstream's validate_chat_request (chat_web.py) in
// its order and words, plus what FastAPI/pydantic did for it (malformed JSON, wrong types),
// plus the OpenAI fields. Nothing here touches a model: a bad request costs no worker.
// The nesting depth is checked on the raw bytes first: nlohmann parses deep input fine but
// copies and destroys it recursively, so 200,000 levels would overflow a thread's stack.
// Then the values are counted by a SAX pass that builds nothing: a 1 MiB body of `[{},{},...]`
// is 350,000 objects, about 35 MB as a document, and 60 of them at once took gigabytes.
#include <cmath>
#include <string>

#include "nanochat/common/error.h"
#include "nanochat/common/utf8.h"
#include "nanochat/server.h"

namespace nanochat {

const ServerLimits kServerLimits{};

namespace {

using json = nlohmann::json;

constexpr double kGreedyTemperature = 1e-3;  // below: greedy decoding
constexpr double kMinTopP = 1e-6;

[[noreturn]] void bad(const std::string& msg) { throw ServerError(400, msg); }

// Python's len(): code points (the body is valid UTF-8 by now)
int64_t code_points(const std::string& s) {
  int64_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

// null counts as omitted, as OpenAI clients send it
const json* field(const json& obj, const char* name) {
  auto it = obj.find(name);
  return it == obj.end() || it->is_null() ? nullptr : &*it;
}

double number_field(const json& v, const char* name) {
  if (!v.is_number()) bad(strprintf("%s must be a number", name));
  double x = v.get<double>();
  if (!std::isfinite(x)) bad(strprintf("%s must be a finite number", name));
  return x;
}

// integers, or floats with an integral value (pydantic's lax mode)
int64_t int_field(const json& v, const char* name) {
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_number_float()) {
    double x = v.get<double>();
    if (std::isfinite(x) && x == std::floor(x) && std::fabs(x) < 9.0e18) return (int64_t)x;
  }
  bad(strprintf("%s must be an integer", name));
}

// OpenAI content parts [{"type":"text","text":...}] joined; python parts kept for the assistant
json message_content(const json& content, const std::string& role, size_t i) {
  if (content.is_string()) return content;
  if (!content.is_array()) bad(strprintf("Message %zu content must be a string or a list of content parts", i));
  bool tool_parts = false;
  std::string joined;
  for (const json& part : content) {
    if (!part.is_object() || !part.contains("type") || !part["type"].is_string() || !part.contains("text") ||
        !part["text"].is_string())
      bad(strprintf("Message %zu: each content part must be an object with string \"type\" and \"text\"", i));
    const std::string& type = part["type"].get_ref<const std::string&>();
    if (type == "python" || type == "python_output") {
      if (role != "assistant")
        bad(strprintf("Message %zu: %s parts are only allowed in assistant messages", i, type.c_str()));
      tool_parts = true;
    } else if (type != "text") {
      bad(strprintf("Message %zu: unsupported content part type '%s' (text, python, python_output)", i, type.c_str()));
    }
    joined += part["text"].get<std::string>();
  }
  if (tool_parts) return content;  // rendered part by part (as render_conversation)
  return joined;
}

int64_t content_chars(const json& content) {
  if (content.is_string()) return code_points(content.get<std::string>());
  int64_t n = 0;
  for (const json& part : content) n += code_points(part["text"].get<std::string>());
  return n;
}

// counts the values as the parser meets them and stops it past `limit`; builds nothing
class ValueCounter final : public nlohmann::json_sax<json> {
 public:
  explicit ValueCounter(int64_t limit) : limit_(limit) {}
  bool over() const { return count_ > limit_; }
  bool null() override { return one(); }
  bool boolean(bool) override { return one(); }
  bool number_integer(number_integer_t) override { return one(); }
  bool number_unsigned(number_unsigned_t) override { return one(); }
  bool number_float(number_float_t, const string_t&) override { return one(); }
  bool string(string_t&) override { return one(); }
  bool binary(binary_t&) override { return one(); }
  bool start_object(std::size_t) override { return one(); }
  bool key(string_t&) override { return true; }
  bool end_object() override { return true; }
  bool start_array(std::size_t) override { return one(); }
  bool end_array() override { return true; }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override { return false; }

 private:
  bool one() { return ++count_ <= limit_; }
  int64_t limit_, count_ = 0;
};

}  // namespace

int64_t server_json_depth(const std::string& body, int64_t limit) {
  int64_t depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (char c : body) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > deepest) deepest = depth;
      if (deepest > limit) return deepest;
    } else if (c == ']' || c == '}') {
      depth--;  // unbalanced input is the parser's to refuse
    }
  }
  return deepest;
}

ChatRequest server_parse_chat_request(const std::string& body, bool openai, const ChatDefaults& defaults,
                                      const ServerLimits& limits) {
  if ((int64_t)body.size() > limits.max_body_bytes)
    throw ServerError(
        413, strprintf("request body is %zu bytes; the limit is %lld", body.size(), (long long)limits.max_body_bytes));
  size_t bad_at = utf8_invalid_at(body);
  if (bad_at != std::string::npos) bad(strprintf("request body is not valid UTF-8 (byte %zu)", bad_at));
  if (server_json_depth(body, limits.max_json_depth) > limits.max_json_depth)
    bad(strprintf("request body is nested deeper than %lld levels", (long long)limits.max_json_depth));
  ValueCounter counter(limits.max_json_values);
  const bool valid = json::sax_parse(body, &counter);
  if (counter.over())
    throw ServerError(413,
                      strprintf("request body holds more than %lld JSON values", (long long)limits.max_json_values));
  if (!valid) bad("request body is not valid JSON");
  const json j = json::parse(body, nullptr, false);
  if (j.is_discarded()) bad("request body is not valid JSON");
  if (!j.is_object()) bad("request body must be a JSON object");

  ChatRequest r;
  r.temperature = defaults.temperature;
  r.top_k = defaults.top_k;
  r.max_tokens = defaults.max_tokens;

  // ---- messages: upstream's checks in upstream's order -----------------------------------
  const json* msgs = field(j, "messages");
  if (!msgs) bad("messages is required");
  if (!msgs->is_array()) bad("messages must be a list");
  if (msgs->empty()) bad("At least one message is required");
  if ((int64_t)msgs->size() > limits.max_messages)
    bad(strprintf("Too many messages. Maximum %lld messages allowed per request", (long long)limits.max_messages));
  int64_t total = 0;
  json out = json::array();
  std::string system_text;
  for (size_t i = 0; i < msgs->size(); i++) {
    const json& m = (*msgs)[i];
    if (!m.is_object()) bad(strprintf("Message %zu must be an object with role and content", i));
    const json* role_v = field(m, "role");
    const json* content_v = field(m, "content");
    if (!role_v || !role_v->is_string()) bad(strprintf("Message %zu needs a string role", i));
    if (!content_v) bad(strprintf("Message %zu has empty content", i));
    const std::string& role = role_v->get_ref<const std::string&>();
    json content = message_content(*content_v, role, i);
    int64_t chars = content_chars(content);
    if (chars == 0 || (content.is_array() && content.empty())) bad(strprintf("Message %zu has empty content", i));
    if (chars > limits.max_message_chars)
      bad(strprintf("Message %zu is too long. Maximum %lld characters allowed per message", i,
                    (long long)limits.max_message_chars));
    total += chars;
    bool system_ok = openai && i == 0 && role == "system";
    if (role != "user" && role != "assistant" && !system_ok)
      bad(strprintf("Message %zu has invalid role. Must be 'user' or 'assistant'%s", i,
                    openai ? " ('system' only as the first message)" : ""));
    if (system_ok) {
      if (!content.is_string()) bad("Message 0: a system message must be text");
      system_text = content.get<std::string>();
      continue;
    }
    out.push_back({{"role", role}, {"content", content}});
  }
  if (total > limits.max_total_chars)
    bad(strprintf("Total conversation is too long. Maximum %lld characters allowed",
                  (long long)limits.max_total_chars));
  if (out.empty()) bad("At least one user message is required");
  for (size_t i = 0; i < out.size(); i++) {
    const char* want = i % 2 == 0 ? "user" : "assistant";
    if (out[i]["role"] != want)
      bad(strprintf("Message %zu has role %s but roles must alternate user, assistant, ... starting with user",
                    i + !system_text.empty(), out[i]["role"].get<std::string>().c_str()));
  }
  if (!system_text.empty())  // as render_conversation: the system text is merged into the first user message
    out[0]["content"] = system_text + "\n\n" + out[0]["content"].get<std::string>();
  r.messages = out;

  // ---- sampling parameters --------------------------------------------------------------------
  if (const json* v = field(j, "temperature")) {
    r.temperature = number_field(*v, "temperature");
    if (r.temperature < 0.0 || r.temperature > limits.max_temperature)
      bad(strprintf("Temperature must be between 0.0 and %.1f", limits.max_temperature));
  }
  if (const json* v = field(j, "top_k")) {
    r.top_k = int_field(*v, "top_k");
    if (r.top_k < 0 || r.top_k > limits.max_top_k)
      bad(strprintf("top_k must be between 0 and %lld", (long long)limits.max_top_k));
  }
  const json* mt = field(j, "max_tokens");
  if (openai && !mt) mt = field(j, "max_completion_tokens");
  if (mt) {
    r.max_tokens = int_field(*mt, "max_tokens");
    if (r.max_tokens < 1 || r.max_tokens > limits.max_max_tokens)
      bad(strprintf("max_tokens must be between 1 and %lld", (long long)limits.max_max_tokens));
  }
  // logits / temperature overflows float32 for a tiny temperature (softmax of inf is NaN);
  // at 1e-3 the sampler is greedy in all but name
  if (r.temperature < kGreedyTemperature) r.temperature = 0.0;
  // vLLM's cache_salt, on both routes (the UI sends one per browser)
  if (const json* v = field(j, "cache_salt")) {
    if (!v->is_string() || v->get_ref<const std::string&>().empty() || v->get_ref<const std::string&>().size() > 256)
      bad("cache_salt must be a non-empty string of at most 256 bytes");
    r.cache_salt = v->get<std::string>();
  }
  if (!openai) return r;

  if (const json* v = field(j, "model"); v && !v->is_string()) bad("model must be a string");
  if (const json* v = field(j, "top_p")) {
    r.top_p = number_field(*v, "top_p");
    // the sampler compares top_p with float32 probability mass: 1e-300 would round to 0 there
    if (!(r.top_p >= kMinTopP && r.top_p <= 1.0)) bad(strprintf("top_p must be in [%g, 1]", kMinTopP));
  }
  if (const json* v = field(j, "n")) {
    r.n = int_field(*v, "n");
    if (r.n < 1 || r.n > limits.max_choices)
      bad(strprintf("n must be between 1 and %lld", (long long)limits.max_choices));
  }
  if (const json* v = field(j, "seed")) {
    r.seed = (uint64_t)int_field(*v, "seed");
    r.seed_given = true;
  }
  if (const json* v = field(j, "stop")) {
    if (!v->is_string() && !v->is_array()) bad("stop must be a string or a list of strings");
    if (v->is_array() && (int64_t)v->size() > limits.max_stop_strings)
      bad(strprintf("stop allows at most %lld strings", (long long)limits.max_stop_strings));
    const size_t count = v->is_string() ? 1 : v->size();
    for (size_t i = 0; i < count; i++) {
      const json& s = v->is_string() ? *v : (*v)[i];
      if (!s.is_string()) bad("stop must be a string or a list of strings");
      const std::string& text = s.get_ref<const std::string&>();
      if (text.empty()) bad("stop strings must not be empty");
      if (code_points(text) > limits.max_stop_chars)
        bad(strprintf("stop strings are limited to %lld characters", (long long)limits.max_stop_chars));
      r.stop.push_back(text);
    }
  }
  if (const json* v = field(j, "stream")) {
    if (!v->is_boolean()) bad("stream must be a boolean");
    r.stream = *v;
  }
  if (const json* v = field(j, "stream_options")) {
    if (!v->is_object()) bad("stream_options must be an object");
    if (const json* u = field(*v, "include_usage")) {
      if (!u->is_boolean()) bad("stream_options.include_usage must be a boolean");
      r.include_usage = *u;
    }
  }
  return r;
}

std::vector<int32_t> server_prompt_tokens(const Tokenizer& tok, const nlohmann::json& messages) {
  json conv = {{"messages", messages}};
  if (messages.back()["role"] == "user") {  // the usual case: the model answers the last user turn
    conv["messages"].push_back({{"role", "assistant"}, {"content", ""}});
    return render_for_completion(tok, conv);
  }
  // ends with an assistant turn (upstream allowed it): a new assistant turn after it
  std::vector<int32_t> ids = render_conversation(tok, conv, SIZE_MAX).ids;
  ids.push_back(tok.special_id("<|assistant_start|>"));
  return ids;
}

}  // namespace nanochat
