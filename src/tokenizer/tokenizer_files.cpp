// Tokenizer files: tiktoken rank files in and out, the JSON beside them, token_bytes.

#include <algorithm>
#include <climits>
#include <fstream>
#include <sstream>

#include "nanochat/common/regular_file.h"
#include "nanochat/common/atomic_file.h"
#include "nanochat/common/env.h"
#include "nanochat/common/error.h"
#include "nanochat/common/files.h"
#include "nanochat/tokenizer.h"
#include "nanochat/tokenizer/hf_json.h"

namespace nanochat {

// how far past the ranks a special-token id may be (o200k's <|endofprompt|> is 21 past them)
static const int64_t kMaxSpecialIdGap = 4096;
// a rank file of 2^20 tokens of ~16 bytes is ~32 MB of base64 (o200k's is 3.6 MB)
static const int64_t kMaxRankFileBytes = 64 << 20;

static const char kB64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

std::string base64_encode(std::string_view in) {
  std::string out;
  out.reserve((in.size() + 2) / 3 * 4);
  for (size_t i = 0; i < in.size(); i += 3) {
    uint32_t v = (uint32_t)(unsigned char)in[i] << 16;
    if (i + 1 < in.size()) v |= (uint32_t)(unsigned char)in[i + 1] << 8;
    if (i + 2 < in.size()) v |= (unsigned char)in[i + 2];
    out += kB64[(v >> 18) & 63];
    out += kB64[(v >> 12) & 63];
    out += i + 1 < in.size() ? kB64[(v >> 6) & 63] : '=';
    out += i + 2 < in.size() ? kB64[v & 63] : '=';
  }
  return out;
}

std::string base64_decode(std::string_view in) {
  if (in.size() % 4 != 0) fail("base64 text of length %zu is not a multiple of 4", in.size());
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  std::string out;
  for (size_t i = 0; i < in.size(); i += 4) {
    int pad = (in[i + 3] == '=') + (in[i + 2] == '=' && in[i + 3] == '=');
    if (pad && i + 4 != in.size()) fail("base64 padding in the middle");
    uint32_t v = 0;
    for (int k = 0; k < 4; k++) {
      int d = k >= 4 - pad ? 0 : value(in[i + k]);
      if (d < 0) fail("bad base64 character '%c'", in[i + k]);
      v = (v << 6) | (uint32_t)d;
    }
    out += (char)(v >> 16);
    if (pad < 2) out += (char)(v >> 8);
    if (pad < 1) out += (char)v;
  }
  return out;
}

std::vector<std::string> tiktoken_ranks_read(const std::string& file) {
  std::istringstream in(read_regular_file(file, kMaxRankFileBytes));
  std::vector<std::string> ranks;
  std::string line;
  for (size_t lineno = 1; std::getline(in, line); lineno++) {
    if (line.empty()) continue;
    size_t space = line.find(' ');
    if (space == std::string::npos || line.find(' ', space + 1) != std::string::npos)
      fail("%s:%zu: expected 'base64 rank'", file.c_str(), lineno);
    std::string bytes;
    int64_t rank;
    try {
      bytes = base64_decode(std::string_view(line).substr(0, space));
      rank = parse_int(line.substr(space + 1), "rank", 0, INT32_MAX);
    } catch (const Error& e) {
      fail("%s:%zu: %s", file.c_str(), lineno, e.what());
    }
    if (bytes.empty()) fail("%s:%zu: empty token", file.c_str(), lineno);
    if (rank < (int64_t)ranks.size()) fail("%s:%zu: duplicate rank %lld", file.c_str(), lineno, (long long)rank);
    if (rank > (int64_t)ranks.size())
      fail("%s:%zu: rank %lld where rank %zu belongs (ranks must be 0, 1, 2, ... without gaps)", file.c_str(), lineno,
           (long long)rank, ranks.size());
    ranks.push_back(std::move(bytes));
  }
  if (ranks.empty()) fail("%s has no ranks", file.c_str());
  return ranks;
}

void tokenizer_save(const Tokenizer& tok, const std::string& dir) {
  make_dirs(dir);
  AtomicFile ranks(dir + "/tokenizer.tiktoken");
  for (size_t i = 0; i < tok.ranks().size(); i++)
    ranks.write(base64_encode(tok.ranks()[i]) + " " + std::to_string(i) + "\n");
  ranks.commit();
  nlohmann::json meta;
  meta["pattern"] = tok.pattern();
  meta["bos_token"] = tok.decode_single_token_bytes(tok.bos_id());
  meta["vocab_size"] = tok.vocab_size();
  for (auto& [name, id] : tok.specials()) meta["special_tokens"][name] = id;
  atomic_write_file(dir + "/tokenizer.json", meta.dump(2) + "\n");
  std::vector<int32_t> counts = tok.token_byte_counts();
  atomic_write_file(dir + "/token_bytes.bin", std::string((const char*)counts.data(), counts.size() * 4));
  tokenizer_save_hf_ids(dir, {});  // a table of ids kept from an earlier import is not this tokenizer's
}

Tokenizer tokenizer_load(const std::string& dir) {
  std::string json_path = dir + "/tokenizer.json";
  if (!path_exists(json_path)) fail("no tokenizer at %s; train one with `nanochat tok-train`", dir.c_str());
  nlohmann::json meta;
  try {
    meta = nlohmann::json::parse(read_regular_file(json_path));
    std::vector<std::string> ranks = tiktoken_ranks_read(dir + "/tokenizer.tiktoken");
    // special ids come right after the ranks, maybe past a small gap (cl100k's, o200k's): the
    // Tokenizer allocates an entry per id up to the largest, so an id is checked against the
    // vocabulary first (2^31-1 would be 64 GB of empty strings)
    int64_t first = (int64_t)ranks.size(), end = first + kMaxSpecialIdGap;
    if (meta.contains("vocab_size")) {
      const nlohmann::json& v = meta["vocab_size"];
      if (!v.is_number_integer() || v.get<int64_t>() < first || v.get<int64_t>() > end)
        fail("%s: vocab_size %s is not between the %lld ranks and %lld", json_path.c_str(), v.dump().c_str(),
             (long long)first, (long long)end);
      end = v.get<int64_t>();
    }
    const nlohmann::json& table = meta.at("special_tokens");
    if (!table.is_object()) fail("%s: special_tokens is not an object {name: id}", json_path.c_str());
    std::vector<std::pair<std::string, int32_t>> specials;
    for (auto& [name, id] : table.items()) {
      if (name.empty()) fail("%s: a special token with an empty name", json_path.c_str());
      if (!id.is_number_integer() || id.get<int64_t>() < first || id.get<int64_t>() >= end)
        fail("%s: special token %.100s has id %.40s, outside the special ids [%lld, %lld) after the ranks",
             json_path.c_str(), name.c_str(), id.dump().c_str(), (long long)first, (long long)end);
      specials.emplace_back(name, (int32_t)id.get<int64_t>());
    }
    std::sort(specials.begin(), specials.end(), [](auto& a, auto& b) { return a.second < b.second; });
    return Tokenizer(std::move(ranks), meta.at("pattern").get<std::string>(), specials,
                     meta.at("bos_token").get<std::string>());
  } catch (const nlohmann::json::exception& e) {
    fail("%s is not a valid tokenizer file: %s", json_path.c_str(), e.what());
  }
}

Tokenizer tokenizer_load_tiktoken(const std::string& file, const std::string& pattern_name) {
  std::vector<std::string> ranks = tiktoken_ranks_read(file);
  int32_t n = (int32_t)ranks.size();
  std::vector<std::pair<std::string, int32_t>> specials;
  std::string bos = "<|endoftext|>";
  if (pattern_name == "nanochat") {
    for (size_t i = 0; i < kSpecialTokens.size(); i++) specials.emplace_back(kSpecialTokens[i], n + (int32_t)i);
    bos = "<|bos|>";
  } else if (pattern_name == "gpt2") {
    specials = {{"<|endoftext|>", 50256}};
  } else if (pattern_name == "cl100k") {
    specials = {{"<|endoftext|>", 100257},
                {"<|fim_prefix|>", 100258},
                {"<|fim_middle|>", 100259},
                {"<|fim_suffix|>", 100260},
                {"<|endofprompt|>", 100276}};
  } else if (pattern_name == "o200k") {
    specials = {{"<|endoftext|>", 199999}, {"<|endofprompt|>", 200018}};
  }
  // a rank file smaller than its encoding (a test table, say): specials go after the ranks
  for (auto& [name, id] : specials)
    if (id < n) id = n++;
  return Tokenizer(std::move(ranks), pattern_by_name(pattern_name), specials, bos);
}

}  // namespace nanochat
