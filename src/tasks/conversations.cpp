// SmolTalk and CustomJSON (upstream tasks/smoltalk.py, tasks/customjson.py): conversations
// used as they are, after checking their shape.
#include "nanochat/common/error.h"
#include "nanochat/common/files.h"
#include "nanochat/common/jsonl.h"
#include "nanochat/tasks.h"

namespace nanochat {

// roles alternate user, assistant, ... from `first`, with string content
static void check_alternation(const nlohmann::json& messages, size_t first, const std::string& where) {
  for (size_t i = first; i < messages.size(); i++) {
    const auto& m = messages[i];
    const char* want = (i - first) % 2 == 0 ? "user" : "assistant";
    if (!m.is_object() || !m.contains("role") || !m.contains("content"))
      fail("%s: message %zu needs \"role\" and \"content\"", where.c_str(), i);
    if (m["role"] != want)
      fail("%s: message %zu has role %s but should be %s", where.c_str(), i, m["role"].dump().c_str(), want);
    if (!m["content"].is_string()) fail("%s: message %zu content must be a string", where.c_str(), i);
  }
}

SmolTalkTask::SmolTalkTask(std::string split, TaskSlice slice) : Task(slice) {
  if (split != "train" && split != "test") fail("SmolTalk split must be train|test, got %s", split.c_str());
  ds_ = HubDataset::load({"HuggingFaceTB/smol-smoltalk", "default", split});
  ds_.shuffle(42);
}

nlohmann::json SmolTalkTask::get_example(int64_t index) const {
  nlohmann::json row = ds_.row(index);
  const nlohmann::json& messages = row.at("messages");
  std::string where = strprintf("SmolTalk row %lld", (long long)index);
  if (!messages.is_array() || messages.empty()) fail("%s: no messages", where.c_str());
  size_t first = messages[0].value("role", "") == "system" ? 1 : 0;  // an optional system message
  if (messages.size() - first < 2) fail("%s: needs at least 2 messages besides the system message", where.c_str());
  check_alternation(messages, first, where);
  return {{"messages", messages}};
}

CustomJsonTask::CustomJsonTask(std::string path, TaskSlice slice) : Task(slice) {
  if (!path_exists(path))
    fail(
        "CustomJSON: %s does not exist (the project ships data/identity_conversations.jsonl; upstream's file is at "
        "https://karpathy-public.s3.us-west-2.amazonaws.com/identity_conversations.jsonl)",
        path.c_str());
  jsonl_for_each(path, "CustomJSON file", [&](const nlohmann::json& messages, int64_t, const std::string& where) {
    if (!messages.is_array()) fail("%s: expected a JSON list of messages", where.c_str());
    if (messages.size() < 2)
      fail("%s: a conversation needs at least 2 messages, got %zu", where.c_str(), messages.size());
    check_alternation(messages, 0, where);
    conversations_.push_back(messages);
  });
}

nlohmann::json CustomJsonTask::get_example(int64_t index) const {
  if (index < 0 || index >= num_examples()) fail("CustomJSON: index %lld out of range", (long long)index);
  return {{"messages", conversations_[(size_t)index]}};
}

}  // namespace nanochat
