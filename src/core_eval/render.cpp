// The three Jinja2 templates of upstream's core_eval.py written out by hand
// (render_prompts_mc/schema/lm). With the template string .strip()ed, "{%- for -%}" eats the newline after it,
// the body keeps its trailing "\n\n", and "{% endfor -%}" eats the newline before the final
// line: so a prompt is the few-shot blocks, each followed by a blank line, then the item.
// `| trim` is Python's str.strip(). Then BOS + tokens and the scored span (batch_sequences_*).
#include "nanochat/common/error.h"
#include "nanochat/core_eval.h"
#include "nanochat/tokenizer.h"

namespace nanochat {

// str.isspace() for one code point: bidi classes WS, B, S and category Zs
static bool py_is_space(uint32_t c) {
  return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f || c == 0x3000;
}

// the code point at s[i] and its byte length; a bad byte reads as itself, length 1
static uint32_t utf8_at(const std::string& s, size_t i, size_t& len) {
  auto b = [&](size_t k) { return (uint32_t)(unsigned char)s[k]; };
  uint32_t c = b(i);
  len = 1;
  if (c < 0x80) return c;
  size_t n = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc0 ? 2 : 0;
  if (!n || i + n > s.size()) return 0xFFFFFFFF;
  uint32_t cp = c & (0x7f >> n);
  for (size_t k = 1; k < n; k++) {
    if ((b(i + k) & 0xc0) != 0x80) return 0xFFFFFFFF;
    cp = (cp << 6) | (b(i + k) & 0x3f);
  }
  len = n;
  return cp;
}

std::string core_py_strip(const std::string& s) {
  size_t begin = s.size(), end = 0, i = 0;
  while (i < s.size()) {
    size_t len;
    uint32_t c = utf8_at(s, i, len);
    if (!py_is_space(c)) {
      if (begin == s.size()) begin = i;
      end = i + len;
    }
    i += len;
  }
  return begin >= end ? std::string() : s.substr(begin, end - begin);
}

std::vector<std::string> core_render_prompts(const CoreTaskSpec& task, const CoreItem& item,
                                             const std::vector<const CoreItem*>& fewshot) {
  const std::string& delim = task.continuation_delimiter;
  std::string shots;
  std::vector<std::string> prompts;
  if (task.type == "multiple_choice") {
    // {{ example.query }}{{ continuation_delimiter }}{{ example.choices[example.gold] }}\n\n
    for (const CoreItem* ex : fewshot) shots += ex->text + delim + ex->options[(size_t)ex->gold] + "\n\n";
    // {{ item.query }}{{ continuation_delimiter }}{{ choice }}, one per choice
    for (const auto& choice : item.options) prompts.push_back(shots + item.text + delim + choice);
  } else if (task.type == "schema") {
    // {{ example.context_options[example.gold] }}{{ continuation_delimiter }}{{ example.continuation }}\n\n
    for (const CoreItem* ex : fewshot) shots += ex->options[(size_t)ex->gold] + delim + ex->continuation + "\n\n";
    // {{ context }}{{ continuation_delimiter }}{{ item.continuation }}, one per context option
    for (const auto& context : item.options) prompts.push_back(shots + context + delim + item.continuation);
  } else if (task.type == "language_modeling") {
    // {{ example.context | trim }}{{ continuation_delimiter }}{{ example.continuation }}\n\n
    for (const CoreItem* ex : fewshot) shots += core_py_strip(ex->text) + delim + ex->continuation + "\n\n";
    // {{ item.context | trim }}{{ continuation_delimiter }}{% if include_continuation %}...{% endif %}
    std::string head = shots + core_py_strip(item.text) + delim;
    prompts.push_back(core_py_strip(head));  // prompt_without is stripped once more
    prompts.push_back(head + item.continuation);
  } else {
    fail("CORE task %s: unknown task type '%s' (known: multiple_choice, schema, language_modeling)", task.label.c_str(),
         task.type.c_str());
  }
  return prompts;
}

// find_common_length: the shared prefix (left) or suffix (right) length of all rows
static int64_t common_length(const std::vector<std::vector<int32_t>>& rows, bool left) {
  size_t min_len = rows[0].size();
  for (const auto& r : rows) min_len = std::min(min_len, r.size());
  for (size_t i = 0; i < min_len; i++) {
    int32_t t = left ? rows[0][i] : rows[0][rows[0].size() - 1 - i];
    for (const auto& r : rows)
      if ((left ? r[i] : r[r.size() - 1 - i]) != t) return (int64_t)i;
  }
  return (int64_t)min_len;
}

CoreSequences core_prepare_example(const CoreTaskSpec& task, const std::vector<CoreItem>& data, int64_t idx,
                                   const Tokenizer& tok, int64_t max_seq_len) {
  std::vector<const CoreItem*> fewshot;
  for (int64_t i : core_fewshot_indices(idx, (int64_t)data.size(), task.num_fewshot))
    fewshot.push_back(&data[(size_t)i]);
  std::vector<std::string> prompts = core_render_prompts(task, data[(size_t)idx], fewshot);

  CoreSequences s;
  for (const auto& p : prompts) {  // tokenizer(prompts, prepend=bos)
    std::vector<int32_t> ids = tok.encode(p);
    ids.insert(ids.begin(), tok.bos_id());
    s.tokens.push_back(std::move(ids));
  }
  if (task.type == "multiple_choice") {  // the choices differ after a common prefix
    int64_t start = common_length(s.tokens, true);
    for (const auto& t : s.tokens) s.start.push_back(start), s.end.push_back((int64_t)t.size());
  } else if (task.type == "schema") {  // the contexts differ before a common suffix
    int64_t suffix = common_length(s.tokens, false);
    for (const auto& t : s.tokens) s.start.push_back((int64_t)t.size() - suffix), s.end.push_back((int64_t)t.size());
  } else {  // language modelling: only the row with the continuation is scored
    const auto &without = s.tokens[0], &with = s.tokens[1];
    bool prefix = without.size() < with.size() && std::equal(without.begin(), without.end(), with.begin());
    if (!prefix)
      fail(
          "CORE task %s, line %lld of its file: the prompt without the continuation does not tokenize to a "
          "prefix of the prompt with it",
          task.label.c_str(), (long long)data[(size_t)idx].line);
    s.start = {(int64_t)without.size()};
    s.end = {(int64_t)with.size()};
    s.tokens.erase(s.tokens.begin());
  }
  if (max_seq_len > 0) {  // keep the last max_seq_len tokens, shift the indices down
    for (size_t r = 0; r < s.tokens.size(); r++) {
      int64_t crop = (int64_t)s.tokens[r].size() - max_seq_len;
      if (crop <= 0) continue;
      s.tokens[r].erase(s.tokens[r].begin(), s.tokens[r].begin() + crop);
      s.start[r] -= crop, s.end[r] -= crop;
      if (s.start[r] < 0)
        fail("CORE task %s, line %lld: the scored span is longer than max_seq_len %lld", task.label.c_str(),
             (long long)data[(size_t)idx].line, (long long)max_seq_len);
    }
  }
  return s;
}

}  // namespace nanochat
