// SpellingBee and SimpleSpelling (upstream tasks/spellingbee.py, deleted in 950a1dc): every
// example is drawn from random.Random(index) (test: 10_000_000 + index), so examples are
// independent of each other and identical to upstream's for the same word list.
#include <fstream>
#include <map>
#include <mutex>
#include <unordered_set>

#include "nanochat/common/base_dir.h"
#include "nanochat/common/error.h"
#include "nanochat/common/files.h"
#include "nanochat/common/log.h"
#include "nanochat/common/py_random.h"
#include "nanochat/tasks.h"
#include "nanochat/tokenizer.h"

namespace nanochat {

namespace {

constexpr int64_t kTestSeedOffset = 10000000;
const char* kLetters = "abcdefghijklmnopqrstuvwxyz";

const std::vector<std::string>& user_templates() {
  static const std::vector<std::string> t = {
      "How many {letter} are in the word {word}",
      "How many {letter} are in {word}",
      "Count the number of {letter} in {word}",
      "How many times does {letter} appear in {word}",
      "What's the count of {letter} in {word}",
      "In the word {word}, how many {letter} are there",
      "How many letter {letter} are in the word {word}",
      "Count how many {letter} appear in {word}",
      "Tell me the number of {letter} in {word}",
      "How many occurrences of {letter} are in {word}",
      "Find the count of {letter} in {word}",
      "Can you count the {letter} letters in {word}",
      "What is the frequency of {letter} in {word}",
      "How many {letter}s are in {word}",
      "How many {letter}'s are in {word}",
      "Count all the {letter} in {word}",
      "How many times is {letter} in {word}",
      "Number of {letter} in {word}",
      "Total count of {letter} in {word}",
      "How many {letter} does {word} have",
      "How many {letter} does {word} contain",
      "What's the number of {letter} in {word}",
      "{word} has how many {letter}",
      "In {word}, count the {letter}",
      "How many {letter} appear in {word}",
      "Count the {letter} in {word}",
      "Give me the count of {letter} in {word}",
      "How many instances of {letter} in {word}",
      "Show me how many {letter} are in {word}",
      "Calculate the number of {letter} in {word}",
      // Spanish
      "\u00bfCu\u00e1ntas {letter} hay en {word}?",
      "\u00bfCu\u00e1ntas veces aparece {letter} en {word}?",
      "Cuenta las {letter} en {word}",
      "\u00bfCu\u00e1ntas letras {letter} tiene {word}?",
      // Chinese (Simplified)
      "{word}\u4e2d\u6709\u591a\u5c11\u4e2a{letter}",
      "{word}\u91cc\u6709\u51e0\u4e2a{letter}",
      "\u6570\u4e00\u4e0b{word}\u4e2d\u7684{letter}",
      "{word}\u8fd9\u4e2a\u8bcd\u91cc\u6709\u591a\u5c11{letter}",
      // Korean
      "{word}\uc5d0 {letter}\uac00 \uba87 \uac1c \uc788\ub098\uc694",
      "{word}\uc5d0\uc11c {letter}\uc758 \uac1c\uc218\ub294",
      "{word}\uc5d0 {letter}\uac00 \uba87 \ubc88 \ub098\uc624\ub098\uc694",
      "{word}\ub77c\ub294 \ub2e8\uc5b4\uc5d0 {letter}\uac00 \uba87 \uac1c",
      // French
      "Combien de {letter} dans {word}",
      "Combien de fois {letter} appara\u00eet dans {word}",
      "Compte les {letter} dans {word}",
      // German
      "Wie viele {letter} sind in {word}",
      "Wie oft kommt {letter} in {word} vor",
      "Z\u00e4hle die {letter} in {word}",
      // Japanese
      "{word}\u306b{letter}\u306f\u4f55\u500b\u3042\u308a\u307e\u3059\u304b",
      "{word}\u306e\u4e2d\u306b{letter}\u304c\u3044\u304f\u3064",
      "{word}\u306b{letter}\u304c\u4f55\u56de\u51fa\u3066\u304f\u308b",
  };
  return t;
}

void replace_all(std::string& s, const std::string& from, const std::string& to) {
  for (size_t p = s.find(from); p != std::string::npos; p = s.find(from, p + to.size())) s.replace(p, from.size(), to);
}

std::string spelled(const std::string& word) {  // ",".join(word)
  std::string out;
  for (size_t i = 0; i < word.size(); i++) out += (i ? "," : "") + std::string(1, word[i]);
  return out;
}

bool parse_split(const std::string& split, const char* task) {
  if (split != "train" && split != "test") fail("%s split must be train|test, got %s", task, split.c_str());
  return split == "test";
}

}  // namespace

std::string spelling_word_list_path() { return base_dir_path("words_alpha.txt"); }

std::vector<std::string> spelling_words_from_pieces(const std::vector<std::string>& pieces) {
  std::vector<std::string> words;
  std::unordered_set<std::string> seen;
  for (const std::string& p : pieces) {
    // " word": a whole lower-case word as the split pattern cuts it (a piece without the space
    // is usually the tail of a longer word)
    bool ok = p.size() >= 3 && p[0] == ' ';
    for (size_t i = 1; ok && i < p.size(); i++) ok = p[i] >= 'a' && p[i] <= 'z';
    if (ok && seen.insert(p.substr(1)).second) words.push_back(p.substr(1));
  }
  return words;
}

namespace {

std::vector<std::string> read_word_list(const std::string& path) {
  std::vector<std::string> words;
  std::ifstream f(path);
  std::string line;
  while (std::getline(f, line)) {  // line.strip()
    size_t a = line.find_first_not_of(" \t\r\n\f\v"), b = line.find_last_not_of(" \t\r\n\f\v");
    words.push_back(a == std::string::npos ? std::string() : line.substr(a, b - a + 1));
  }
  return words;
}

// Debian's wamerican lower-cased, only a-z words, de-duplicated
std::vector<std::string> read_system_dict(std::ifstream& f) {
  std::vector<std::string> words;
  std::unordered_set<std::string> seen;
  std::string line;
  while (std::getline(f, line)) {
    std::string w;
    bool ok = !line.empty();
    for (char c : line) {
      if (c >= 'A' && c <= 'Z') c = (char)(c - 'A' + 'a');
      ok &= c >= 'a' && c <= 'z';
      w += c;
    }
    if (ok && seen.insert(w).second) words.push_back(w);
  }
  return words;
}

// the words of `source`: the downloaded list `path`, else the system's `dict`, else `ranks`
std::vector<std::string> load_words(const std::string& source, const std::string& path, const char* dict,
                                    const std::string& ranks) {
  if (source == path) return read_word_list(path);
  if (source == dict) {
    log_warn("%s is missing: using %s (a different list than upstream's, so different spelling examples)", path.c_str(),
             dict);
    std::ifstream f(dict);
    std::vector<std::string> words = read_system_dict(f);
    if (words.empty()) fail("%s has no words", dict);
    return words;
  }
  // offline on a machine without wamerican: the words the trained tokenizer learned whole
  if (!path_exists(ranks))
    fail(
        "no word list: %s is missing (run `nanochat download tasks`), and so are %s (apt-get install wamerican) and %s "
        "(run `nanochat tok-train`)",
        path.c_str(), dict, ranks.c_str());
  std::vector<std::string> words = spelling_words_from_pieces(tiktoken_ranks_read(ranks));
  if (words.empty()) fail("%s has no whole lower-case words to spell", ranks.c_str());
  log_warn("%s and %s are missing: spelling the %zu whole words of the tokenizer's vocabulary (%s)", path.c_str(), dict,
           words.size(), ranks.c_str());
  return words;
}

}  // namespace

std::vector<std::string> spelling_load_words() {
  const std::string path = spelling_word_list_path(), ranks = base_dir_path("tokenizer/tokenizer.tiktoken");
  const char* dict = "/usr/share/dict/words";
  // read once per source: the tasks of a mixture share the list (and its warning, said once)
  const std::string source = path_exists(path) ? path : std::ifstream(dict).good() ? dict : ranks;
  static std::mutex mu;
  static std::map<std::string, std::vector<std::string>> loaded;
  std::lock_guard<std::mutex> lock(mu);
  auto it = loaded.find(source);
  if (it == loaded.end()) it = loaded.emplace(source, load_words(source, path, dict, ranks)).first;
  return it->second;
}

SpellingBeeTask::SpellingBeeTask(int64_t size, std::string split, TaskSlice slice, std::vector<std::string> words)
    : Task(slice), size_(size), test_(parse_split(split, "SpellingBee")), words_(std::move(words)) {
  if (words_.empty()) words_ = spelling_load_words();
}

nlohmann::json SpellingBeeTask::get_example(int64_t index) const {
  PyRandom rng(test_ ? kTestSeedOffset + index : index);
  const std::string& word = words_[(size_t)rng.randbelow(words_.size())];
  if (word.empty()) fail("SpellingBee: the word list has an empty line");
  // the letter comes from the word 90% of the time, else from the alphabet
  char letter = rng.random() < 0.9 ? word[(size_t)rng.randbelow(word.size())] : kLetters[rng.randbelow(26)];
  int count = 0;
  for (char c : word) count += c == letter;

  std::string tmpl = user_templates()[(size_t)rng.randbelow(user_templates().size())];
  if (rng.random() < 0.3)  // lower-cased (the templates' capitals are all ASCII)
    for (char& c : tmpl)
      if (c >= 'A' && c <= 'Z') c = (char)(c - 'A' + 'a');
  static const char* quotes[] = {"", "'", "\""};
  std::string lq = quotes[rng.randbelow(3)], wq = quotes[rng.randbelow(3)];
  std::string user = tmpl;
  // str.format replaces both fields in one pass: do the word last only if the letter cannot
  // contain "{word}" (it cannot: one character plus quotes)
  replace_all(user, "{letter}", lq + letter + lq);
  replace_all(user, "{word}", wq + word + wq);
  if (rng.random() < 0.5) user += "?";

  std::string l(1, letter);
  std::string manual = "We are asked to find the number '" + l + "' in the word '" + word +
                       "'. Let me try a manual approach first.\n\nFirst spell the word out:\n" + word + ":" +
                       spelled(word) + "\n\nThen count the occurrences of '" + l + "':\n";
  int running = 0;
  for (size_t i = 0; i < word.size(); i++) {
    if (word[i] == letter) {
      running++;
      manual += std::to_string(i + 1) + ":" + word[i] + " hit! count=" + std::to_string(running) + "\n";
    } else {
      manual += std::to_string(i + 1) + ":" + word[i] + "\n";
    }
  }
  manual += "\nThis gives us " + std::to_string(running) + ".";
  nlohmann::json parts = nlohmann::json::array();
  parts.push_back({{"type", "text"}, {"text", manual}});
  parts.push_back({{"type", "text"}, {"text", "\n\nLet me double check this using Python:\n\n"}});
  parts.push_back({{"type", "python"}, {"text", "'" + word + "'.count('" + l + "')"}});
  parts.push_back({{"type", "python_output"}, {"text", std::to_string(count)}});
  parts.push_back({{"type", "text"},
                   {"text", "\n\nPython gives us " + std::to_string(count) + ".\n\nMy final answer is:\n\n#### " +
                                std::to_string(count)}});
  return {{"messages", {{{"role", "user"}, {"content", user}}, {{"role", "assistant"}, {"content", parts}}}}};
}

int SpellingBeeTask::evaluate(const nlohmann::json& conversation, const std::string& completion) const {
  return gsm8k_style_evaluate(conversation, completion);
}

SimpleSpellingTask::SimpleSpellingTask(int64_t size, std::string split, TaskSlice slice, std::vector<std::string> words)
    : Task(slice), size_(size), test_(parse_split(split, "SimpleSpelling")), words_(std::move(words)) {
  if (words_.empty()) words_ = spelling_load_words();
  PyRandom rng(42);  // a different word order than SpellingBee's
  rng.shuffle(words_);
}

nlohmann::json SimpleSpellingTask::get_example(int64_t index) const {
  PyRandom rng(test_ ? kTestSeedOffset + index : index);
  const std::string& word = words_[(size_t)rng.randbelow(words_.size())];
  return {{"messages",
           {{{"role", "user"}, {"content", "Spell the word: " + word}},
            {{"role", "assistant"}, {"content", word + ":" + spelled(word)}}}}};
}

}  // namespace nanochat
