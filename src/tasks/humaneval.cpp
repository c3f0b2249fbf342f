// HumanEval (upstream tasks/humaneval.py): the completion's first fenced code block (or the
// whole completion), the prompt's imports in front, the tests and check(entry_point) after,
// run in the execution sandbox.
#include "nanochat/common/error.h"
#include "nanochat/execution.h"
#include "nanochat/tasks.h"

namespace nanochat {

static bool py_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

static std::string py_strip(const std::string& s) {
  size_t a = 0, b = s.size();
  while (a < b && py_space(s[a])) a++;
  while (b > a && py_space(s[b - 1])) b--;
  return s.substr(a, b - a);
}

std::string humaneval_extract_imports(const std::string& prompt) {
  std::string out;
  size_t from = 0;
  while (from <= prompt.size()) {  // prompt.split('\n')
    size_t to = prompt.find('\n', from);
    if (to == std::string::npos) to = prompt.size();
    std::string line = py_strip(prompt.substr(from, to - from));
    if (line.rfind("import ", 0) == 0 || line.rfind("from ", 0) == 0) {
      out += (out.empty() ? "" : "\n") + line;
    } else if (!line.empty() && line[0] != '#') {
      break;  // the first line that is neither an import, a comment nor empty
    }
    from = to + 1;
  }
  return out;
}

std::string humaneval_extract_program(const std::string& completion) {
  // re.findall(r'```(?:python)?\s*\n(.*?)\n```', DOTALL)[0] with the regex's backtracking:
  // at each ``` try "python" then nothing; \s* gives back down to the last '\n' that still
  // lets a "\n```" follow
  const std::string& s = completion;
  for (size_t p = s.find("```"); p != std::string::npos; p = s.find("```", p + 1)) {
    for (int with_python = 1; with_python >= 0; with_python--) {
      size_t a = p + 3;
      if (with_python) {
        if (s.compare(a, 6, "python") != 0) continue;
        a += 6;
      }
      size_t b = a;
      while (b < s.size() && py_space(s[b])) b++;
      for (size_t c = b; c-- > a;) {
        if (s[c] != '\n') continue;
        size_t e = s.find("\n```", c + 1);
        if (e != std::string::npos) return py_strip(s.substr(c + 1, e - (c + 1)));
      }
    }
  }
  return py_strip(completion);
}

std::string humaneval_program(const nlohmann::json& conversation, const std::string& completion) {
  std::string imports = humaneval_extract_imports(conversation.at("messages").at(0).at("content").get<std::string>());
  return imports + "\n\n" + humaneval_extract_program(completion) + "\n\n" +
         conversation.at("test").get<std::string>() + "\n" + "check(" +
         conversation.at("entry_point").get<std::string>() + ")";
}

HumanEvalTask::HumanEvalTask(TaskSlice slice) : Task(slice) {
  ds_ = HubDataset::load({"openai/openai_humaneval", "openai_humaneval", "test"});
  ds_.shuffle(42);
}

nlohmann::json HumanEvalTask::get_example(int64_t index) const {
  nlohmann::json row = ds_.row(index);
  std::string prompt = row.at("prompt").get<std::string>();
  return {{"messages",
           {{{"role", "user"}, {"content", prompt}},
            {{"role", "assistant"}, {"content", prompt + "\n" + row.at("canonical_solution").get<std::string>()}}}},
          {"entry_point", row.at("entry_point")},
          {"test", row.at("test")}};
}

// a pass is the tests having run to their end, not an exit status: a completion that calls
// sys.exit(0) before check() exits 0 too
int humaneval_grade(const nlohmann::json& conversation, const std::string& completion) {
  return execute_code_to_the_end(humaneval_program(conversation, completion)).success ? 1 : 0;
}

int HumanEvalTask::evaluate(const nlohmann::json& conversation, const std::string& completion) const {
  return humaneval_grade(conversation, completion);
}

}  // namespace nanochat
