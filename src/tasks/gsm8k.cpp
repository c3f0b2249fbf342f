// GSM8K (upstream tasks/gsm8k.py): the solution's <<expr=result>> calculator calls become
// python / python_output parts, and the answer is the number after "#### ".
#include "nanochat/common/error.h"
#include "nanochat/tasks.h"

namespace nanochat {

bool gsm8k_extract_answer(const std::string& text, std::string* answer) {
  // re.search(r"#### (\-?[0-9\.\,]+)"): the first position where the whole pattern matches
  auto in_set = [](char c) { return (c >= '0' && c <= '9') || c == '.' || c == ','; };
  for (size_t p = text.find("#### "); p != std::string::npos; p = text.find("#### ", p + 1)) {
    size_t q = p + 5;
    if (q < text.size() && text[q] == '-' && q + 1 < text.size() && in_set(text[q + 1])) q++;
    size_t e = q;
    while (e < text.size() && in_set(text[e])) e++;
    if (e == q) continue;
    std::string m = text.substr(p + 5, e - (p + 5)), out;  // .strip() is a no-op on this set
    for (char c : m)
      if (c != ',') out += c;
    if (answer) *answer = out;
    return true;
  }
  return false;
}

nlohmann::json gsm8k_answer_parts(const std::string& answer) {
  // re.split(r'(<<[^>]+>>)') keeps the separators: "<<", a run without '>', then ">>"
  std::vector<std::string> segments;
  size_t from = 0, p = 0;
  while ((p = answer.find("<<", p)) != std::string::npos) {
    size_t q = answer.find('>', p + 2);
    if (q == std::string::npos) break;
    if (q > p + 2 && q + 1 < answer.size() && answer[q + 1] == '>') {
      segments.push_back(answer.substr(from, p - from));
      segments.push_back(answer.substr(p, q + 2 - p));
      from = p = q + 2;
    } else {
      p++;
    }
  }
  segments.push_back(answer.substr(from));
  nlohmann::json parts = nlohmann::json::array();
  for (auto& seg : segments) {
    // upstream tests every piece by its ends, separators or not
    if (seg.size() >= 4 && seg.compare(0, 2, "<<") == 0 && seg.compare(seg.size() - 2, 2, ">>") == 0) {
      std::string inner = seg.substr(2, seg.size() - 4), expr = inner, result;
      size_t eq = inner.rfind('=');
      if (eq != std::string::npos) expr = inner.substr(0, eq), result = inner.substr(eq + 1);
      parts.push_back({{"type", "python"}, {"text", expr}});
      parts.push_back({{"type", "python_output"}, {"text", result}});
    } else {
      parts.push_back({{"type", "text"}, {"text", seg}});
    }
  }
  return parts;
}

int gsm8k_style_evaluate(const nlohmann::json& conversation, const std::string& completion) {
  const auto& last = conversation.at("messages").back();
  if (last.at("role") != "assistant") fail("GSM8K evaluate: the last message must be from the assistant");
  if (!last.at("content").is_array()) fail("GSM8K evaluate: the assistant content must be a list of parts");
  std::string ref, pred;
  bool has_ref = gsm8k_extract_answer(last["content"].back().at("text").get<std::string>(), &ref);
  bool has_pred = gsm8k_extract_answer(completion, &pred);
  // None == None counts as equal upstream
  return has_ref == has_pred && ref == pred ? 1 : 0;
}

Gsm8kTask::Gsm8kTask(std::string subset, std::string split, TaskSlice slice) : Task(slice) {
  if (subset != "main" && subset != "socratic") fail("GSM8K subset must be main|socratic, got %s", subset.c_str());
  if (split != "train" && split != "test") fail("GSM8K split must be train|test, got %s", split.c_str());
  ds_ = HubDataset::load({"openai/gsm8k", subset, split});
  ds_.shuffle(42);
}

nlohmann::json Gsm8kTask::get_example(int64_t index) const {
  nlohmann::json row = ds_.row(index);
  return {{"messages",
           {{{"role", "user"}, {"content", row.at("question").get<std::string>()}},
            {{"role", "assistant"}, {"content", gsm8k_answer_parts(row.at("answer").get<std::string>())}}}}};
}

int Gsm8kTask::evaluate(const nlohmann::json& conversation, const std::string& completion) const {
  return gsm8k_style_evaluate(conversation, completion);
}

}  // namespace nanochat
