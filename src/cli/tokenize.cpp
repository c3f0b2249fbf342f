// `nanochat tokenize`: text on stdin to ids on stdout, or ids back to text with --decode.
#include <CLI/CLI.hpp>
#include <iostream>
#include <iterator>

#include "cli/commands.h"
#include "nanochat/common.h"
#include "nanochat/tokenizer.h"

namespace nanochat {

static std::string ids_json(const std::vector<int32_t>& ids) {
  std::string s = "[";
  for (size_t i = 0; i < ids.size(); i++) s += (i ? "," : "") + std::to_string(ids[i]);
  return s + "]";
}

static std::vector<int32_t> parse_ids(const std::string& text, size_t lineno) {
  std::vector<int32_t> ids;
  try {
    auto j = nlohmann::json::parse(text);
    if (!j.is_array()) throw std::runtime_error("not an array");
    for (auto& v : j) ids.push_back(v.get<int32_t>());
  } catch (const std::exception&) {
    fail("stdin line %zu: expected a JSON array of token ids like [1,2,3]", lineno);
  }
  return ids;
}

static int tokenize_run(const std::string& dir, const std::string& tiktoken_file, const std::string& pattern,
                        bool decode, bool lines) {
  Tokenizer tok = tiktoken_file.empty() ? tokenizer_load(dir.empty() ? base_dir_path("tokenizer") : dir)
                                        : tokenizer_load_tiktoken(tiktoken_file, pattern);
  if (lines) {
    std::string line;
    for (size_t lineno = 1; std::getline(std::cin, line); lineno++) {
      if (decode) {
        nlohmann::json out = tok.decode(parse_ids(line, lineno));
        std::cout << out.dump() << "\n";  // one JSON string per line keeps newlines intact
      } else {
        std::cout << ids_json(tok.encode(line)) << "\n";
      }
    }
    return 0;
  }
  std::string input((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
  if (decode) std::cout << tok.decode(parse_ids(input, 1));
  else std::cout << ids_json(tok.encode(input)) << "\n";
  return 0;
}

void cli_register_tokenize(CLI::App& app, int& exit_code) {
  auto* sub = app.add_subcommand("tokenize", "Encode text from stdin to token ids (or decode ids back to text)");
  static std::string dir, tiktoken_file, pattern = "nanochat";
  static bool decode = false, lines = false;
  sub->add_option("--tokenizer", dir, "tokenizer directory (default: $NANOCHAT_BASE_DIR/tokenizer)");
  sub->add_option("--tiktoken", tiktoken_file, "use any tiktoken rank file instead (e.g. cl100k_base.tiktoken)")
      ->excludes("--tokenizer");
  sub->add_option("--pattern", pattern, "split pattern for --tiktoken: nanochat, gpt2, cl100k, o200k")
      ->check(CLI::IsMember({"nanochat", "gpt2", "cl100k", "o200k"}))
      ->capture_default_str();
  sub->add_flag("--decode", decode, "read a JSON array of ids and print the text");
  sub->add_flag("--lines", lines, "one input line at a time: a JSON array (or JSON string with --decode) per line");
  sub->callback([&exit_code] { exit_code = tokenize_run(dir, tiktoken_file, pattern, decode, lines); });
}

}  // namespace nanochat
