// nanochat's chat format (upstream's render_conversation): special tokens around each turn, no separators, and a
// mask that trains only on what the assistant writes itself.
#include "nanochat/common/error.h"
#include "nanochat/tokenizer.h"

namespace nanochat {

namespace {

struct Renderer {
  const Tokenizer& tok;
  RenderedConversation out;
  void add(const std::vector<int32_t>& ids, uint8_t mask) {
    out.ids.insert(out.ids.end(), ids.begin(), ids.end());
    out.mask.insert(out.mask.end(), ids.size(), mask);
  }
  void add_special(const char* name, uint8_t mask) { add({tok.special_id(name)}, mask); }
};

const std::string& text_of(const nlohmann::json& v, const char* what, size_t index) {
  if (!v.is_string()) fail("conversation message %zu: %s must be a string", index, what);
  return v.get_ref<const std::string&>();
}

}  // namespace

RenderedConversation render_conversation(const Tokenizer& tok, const nlohmann::json& conversation, size_t max_tokens) {
  if (!conversation.is_object() || !conversation.contains("messages") || !conversation["messages"].is_array())
    fail("a conversation must be an object with a \"messages\" array");
  nlohmann::json messages = conversation["messages"];
  if (messages.empty()) fail("a conversation needs at least one message");
  for (size_t i = 0; i < messages.size(); i++)
    if (!messages[i].is_object() || !messages[i].contains("role") || !messages[i].contains("content"))
      fail("conversation message %zu needs \"role\" and \"content\"", i);
  // a leading system message is merged into the first user message
  if (messages[0]["role"] == "system") {
    if (messages.size() < 2 || messages[1]["role"] != "user")
      fail("conversation message 1: a system message must be followed by a user message");
    messages[1]["content"] = text_of(messages[0]["content"], "system content", 0) + "\n\n" +
                             text_of(messages[1]["content"], "user content", 1);
    messages.erase(messages.begin());
  }
  Renderer r{tok, {}};
  r.add_special("<|bos|>", 0);
  for (size_t i = 0; i < messages.size(); i++) {
    const auto& m = messages[i];
    std::string want = i % 2 == 0 ? "user" : "assistant";
    if (m["role"] != want)
      fail("conversation message %zu has role %s but roles must alternate user, assistant, ... starting with user", i,
           m["role"].dump().c_str());
    if (want == "user") {
      r.add_special("<|user_start|>", 0);
      r.add(tok.encode(text_of(m["content"], "user content", i)), 0);
      r.add_special("<|user_end|>", 0);
      continue;
    }
    r.add_special("<|assistant_start|>", 0);
    const auto& content = m["content"];
    if (content.is_string()) {
      r.add(tok.encode(content.get_ref<const std::string&>()), 1);
    } else if (content.is_array()) {
      for (const auto& part : content) {
        if (!part.is_object()) fail("conversation message %zu: each part must be an object with type and text", i);
        std::string type = part.value("type", "");
        const nlohmann::json& text_value = part.contains("text") ? part["text"] : nlohmann::json::object();
        const std::string& text = text_of(text_value, "a part's text", i);
        if (type == "text") {
          r.add(tok.encode(text), 1);
        } else if (type == "python") {
          r.add_special("<|python_start|>", 1);
          r.add(tok.encode(text), 1);
          r.add_special("<|python_end|>", 1);
        } else if (type == "python_output") {  // the tool's output is given, not learned
          r.add_special("<|output_start|>", 0);
          r.add(tok.encode(text), 0);
          r.add_special("<|output_end|>", 0);
        } else {
          fail("conversation message %zu: unknown part type '%s' (text, python, python_output)", i, type.c_str());
        }
      }
    } else {
      fail("conversation message %zu: assistant content must be a string or a list of parts", i);
    }
    r.add_special("<|assistant_end|>", 1);
  }
  if (r.out.ids.size() > max_tokens) {
    r.out.ids.resize(max_tokens);
    r.out.mask.resize(max_tokens);
  }
  return r.out;
}

std::vector<int32_t> render_for_completion(const Tokenizer& tok, const nlohmann::json& conversation) {
  if (!conversation.contains("messages") || !conversation["messages"].is_array() || conversation["messages"].empty() ||
      conversation["messages"].back().value("role", "") != "assistant")
    fail("render_for_completion: the last message must be the assistant's");
  nlohmann::json copy = conversation;
  copy["messages"].erase(copy["messages"].size() - 1);
  std::vector<int32_t> ids = render_conversation(tok, copy, SIZE_MAX).ids;
  ids.push_back(tok.special_id("<|assistant_start|>"));
  return ids;
}

}  // namespace nanochat
