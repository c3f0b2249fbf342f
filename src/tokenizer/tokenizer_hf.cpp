// Hugging Face's tokenizer.json (the `tokenizers` library) in and out, for a byte-level BPE only.
// Its vocab spells bytes with GPT-2's byte-to-character table. tiktoken merges by the rank of
// the merged bytes, HF by the rank of the merge rule: so our ranks follow the merges (the bytes,
// then each token in the order of the first merge making it), whatever ids the file gives them,
// and the specials come after, in the file's order. The file's id of each of ours is kept
// (HfTokenizer::file_ids): the import permutes the model's vocab rows with it and keeps it beside
// the tokenizer (hf_token_ids.json), and export writes those ids again. Then an imported
// tokenizer gives the library's ids through that table (tests/test_tokenizer_hf.cpp checks it on
// a few MB of text, also for BpeTrainer's layout with the specials at ids 0..8).
#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <unordered_map>

#include "nanochat/common/regular_file.h"
#include "nanochat/common/atomic_file.h"
#include "nanochat/common/error.h"
#include "nanochat/common/files.h"
#include "nanochat/tokenizer/hf_json.h"

namespace nanochat {
namespace {

// GPT-2's bytes_to_unicode: printable bytes stand for themselves, the others for U+0100 onwards
const std::vector<uint32_t>& byte_to_codepoint() {
  static const std::vector<uint32_t> table = [] {
    std::vector<uint32_t> t(256, 0);
    std::vector<bool> direct(256, false);
    for (int b = '!'; b <= '~'; b++) direct[b] = true;
    for (int b = 0xA1; b <= 0xAC; b++) direct[b] = true;
    for (int b = 0xAE; b <= 0xFF; b++) direct[b] = true;
    uint32_t next = 256;
    for (int b = 0; b < 256; b++) t[b] = direct[b] ? (uint32_t)b : next++;
    return t;
  }();
  return table;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += (char)cp;
  } else if (cp < 0x800) {
    out += (char)(0xC0 | (cp >> 6));
    out += (char)(0x80 | (cp & 0x3F));
  } else {
    out += (char)(0xE0 | (cp >> 12));
    out += (char)(0x80 | ((cp >> 6) & 0x3F));
    out += (char)(0x80 | (cp & 0x3F));
  }
}

std::string bytes_to_hf(const std::string& bytes) {
  std::string out;
  for (unsigned char b : bytes) append_utf8(out, byte_to_codepoint()[b]);
  return out;
}

// the inverse; false when a character is not one of the 256 (not a byte-level vocab)
bool hf_to_bytes(const std::string& s, std::string& out) {
  static const std::unordered_map<uint32_t, char> inverse = [] {
    std::unordered_map<uint32_t, char> m;
    for (int b = 0; b < 256; b++) m[byte_to_codepoint()[b]] = (char)b;
    return m;
  }();
  out.clear();
  for (size_t i = 0; i < s.size();) {
    unsigned char c = (unsigned char)s[i];
    uint32_t cp;
    size_t n;
    if (c < 0x80) cp = c, n = 1;
    else if ((c & 0xE0) == 0xC0) cp = c & 0x1F, n = 2;
    else if ((c & 0xF0) == 0xE0) cp = c & 0x0F, n = 3;
    else return false;
    if (i + n > s.size()) return false;
    for (size_t k = 1; k < n; k++) cp = (cp << 6) | ((unsigned char)s[i + k] & 0x3F);
    auto it = inverse.find(cp);
    if (it == inverse.end()) return false;
    out += it->second;
    i += n;
  }
  return true;
}

const nlohmann::json& field(const nlohmann::json& j, const char* key) {
  static const nlohmann::json null_value;
  return j.is_object() && j.contains(key) ? j.at(key) : null_value;
}

bool is_false_or_null(const nlohmann::json& j) { return j.is_null() || (j.is_boolean() && !j.get<bool>()); }
bool is_empty_or_null(const nlohmann::json& j) {
  return j.is_null() || (j.is_string() && j.get<std::string>().empty());
}

// the split pattern of a byte-level pre-tokenizer; Error naming what else it is
std::string split_pattern(const nlohmann::json& pre, const std::string& path) {
  auto byte_level = [&](const nlohmann::json& b, bool want_regex) {
    if (field(b, "type") != "ByteLevel") return false;
    if (!is_false_or_null(field(b, "add_prefix_space")))
      fail("%s: pre_tokenizer ByteLevel with add_prefix_space is not supported", path.c_str());
    const nlohmann::json& r = field(b, "use_regex");
    bool regex = r.is_null() || r.get<bool>();  // the library's default is true
    return regex == want_regex;
  };
  if (byte_level(pre, true)) return kPatternGpt2ByteLevel;
  if (field(pre, "type") == "Sequence") {
    const nlohmann::json& parts = field(pre, "pretokenizers");
    if (parts.is_array() && parts.size() == 2 && field(parts[0], "type") == "Split" && byte_level(parts[1], false)) {
      const nlohmann::json& split = parts[0];
      const nlohmann::json& regex = field(field(split, "pattern"), "Regex");
      if (!regex.is_string()) fail("%s: pre_tokenizer Split needs a {\"Regex\": ...} pattern", path.c_str());
      if (field(split, "behavior") != "Isolated" || !is_false_or_null(field(split, "invert")))
        fail("%s: pre_tokenizer Split with behavior %s (invert %s) is not supported: only Isolated", path.c_str(),
             field(split, "behavior").dump().c_str(), field(split, "invert").dump().c_str());
      return regex.get<std::string>();
    }
    if (parts.is_array() && parts.size() == 1 && byte_level(parts[0], true)) return kPatternGpt2ByteLevel;
  }
  fail("%s: pre_tokenizer %.200s is not supported (a ByteLevel with its regex, or a Split regex then ByteLevel)",
       path.c_str(), pre.dump().c_str());
}

// tiktoken's merge of `bytes` using only ranks below `limit`: the parts left (as a token is
// built from two earlier ones, a token of rank `limit` ends as exactly two parts)
std::vector<std::string> merge_below(const std::string& bytes, const std::unordered_map<std::string, int32_t>& rank,
                                     int32_t limit) {
  std::vector<std::string> parts;
  for (char c : bytes) parts.emplace_back(1, c);
  for (;;) {
    int32_t best = INT32_MAX;
    size_t at = 0;
    for (size_t i = 0; i + 1 < parts.size(); i++) {
      auto it = rank.find(parts[i] + parts[i + 1]);
      if (it != rank.end() && it->second < limit && it->second < best) best = it->second, at = i;
    }
    if (best == INT32_MAX) return parts;
    parts[at] += parts[at + 1];
    parts.erase(parts.begin() + (long)at + 1);
  }
}

}  // namespace

namespace {

nlohmann::json read_tokenizer_json(const std::string& path) {
  const std::string text = read_regular_file(path);  // Error for a FIFO, device, directory or > 16 MB
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    fail("%s is not valid JSON: %s", path.c_str(), e.what());
  }
  if (!j.is_object()) fail("%s: expected a JSON object (a tokenizers library tokenizer.json)", path.c_str());
  if (!field(j, "normalizer").is_null())
    fail("%s: normalizer %.100s is not supported (a byte-level BPE has none)", path.c_str(),
         field(j, "normalizer").dump().c_str());
  const nlohmann::json& model = field(j, "model");
  if (field(model, "type") != "BPE")
    fail("%s: model type %s is not supported: only a byte-level BPE", path.c_str(),
         field(model, "type").dump().c_str());
  if (!field(model, "dropout").is_null()) fail("%s: model.dropout is not supported", path.c_str());
  if (!is_false_or_null(field(model, "byte_fallback"))) fail("%s: model.byte_fallback is not supported", path.c_str());
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (!is_empty_or_null(field(model, key))) fail("%s: model.%s is not supported", path.c_str(), key);
  return j;
}

// the added tokens (all special), by the file's id
std::map<int64_t, std::string> read_added_tokens(const nlohmann::json& j, const std::string& path) {
  std::map<int64_t, std::string> added;
  const nlohmann::json& list = field(j, "added_tokens");
  if (!list.is_null() && !list.is_array()) fail("%s: added_tokens is not a list", path.c_str());
  for (const auto& a : list.is_array() ? list : nlohmann::json::array()) {
    const nlohmann::json &content = field(a, "content"), &id = field(a, "id");
    if (!content.is_string() || !id.is_number_integer() || id.get<int64_t>() < 0)
      fail("%s: an added token without a string content and an integer id: %.100s", path.c_str(), a.dump().c_str());
    if (field(a, "special") != true)
      fail("%s: added token %s is not special; only special added tokens are supported", path.c_str(),
           content.dump().c_str());
    if (!added.emplace(id.get<int64_t>(), content.get<std::string>()).second)
      fail("%s: two added tokens have id %lld", path.c_str(), (long long)id.get<int64_t>());
  }
  return added;
}

// the vocab's bytes by the file's id ("" for an added token's id); every id from 0 to the
// last is a vocab or an added token, so that the model's rows and the ids agree one to one
std::vector<std::string> read_vocab(const nlohmann::json& vocab, const std::map<int64_t, std::string>& added,
                                    const std::string& path) {
  if (!vocab.is_object()) fail("%s: model.vocab is not an object {token: id}", path.c_str());
  const int64_t n = (int64_t)vocab.size() + (int64_t)added.size();
  std::vector<std::string> bytes_of((size_t)n);
  std::vector<bool> have((size_t)n, false);
  for (auto& [id, name] : added) {
    if (id >= n)
      fail("%s: added token %s has id %lld, outside the %lld tokens", path.c_str(), name.c_str(), (long long)id,
           (long long)n);
    have[id] = true;
  }
  for (auto& [token, id_json] : vocab.items()) {
    if (!id_json.is_number_integer() || id_json.get<int64_t>() < 0 || id_json.get<int64_t>() >= n)
      fail("%s: vocab token %s has id %s, outside the vocabulary", path.c_str(), nlohmann::json(token).dump().c_str(),
           id_json.dump().c_str());
    const int64_t id = id_json.get<int64_t>();
    auto a = added.find(id);
    if (a != added.end()) {
      if (a->second != token)
        fail("%s: id %lld is vocab token %s and added token %s", path.c_str(), (long long)id,
             nlohmann::json(token).dump().c_str(), nlohmann::json(a->second).dump().c_str());
      continue;
    }
    std::string bytes;
    if (!hf_to_bytes(token, bytes) || bytes.empty())
      fail("%s: vocab token %s is not byte-level (a character outside GPT-2's byte table)", path.c_str(),
           nlohmann::json(token).dump().c_str());
    if (have[id]) fail("%s: two vocab tokens have id %lld", path.c_str(), (long long)id);
    bytes_of[id] = bytes;
    have[id] = true;
  }
  size_t last = have.size();
  while (last > 0 && !have[last - 1]) last--;  // the ids an added token listed in the vocab too left free
  for (size_t i = 0; i < last; i++)
    if (!have[i]) fail("%s: no vocab or added token has id %zu (the ids must have no gaps)", path.c_str(), i);
  bytes_of.resize(last);
  return bytes_of;
}

constexpr size_t kMaxUnmergedTokenBytes = 256;

// the file's ids of the vocab in our rank order: the single bytes, then each token in the
// order of the first merge that makes it (the merge priority tiktoken's rule then follows),
// then any token no merge makes, by id
std::vector<int64_t> rank_order(const nlohmann::json& merges, const std::vector<std::string>& bytes_of,
                                const std::map<int64_t, std::string>& added, const std::string& path) {
  std::unordered_map<std::string, int64_t> id_of;
  for (size_t i = 0; i < bytes_of.size(); i++)
    if (!added.count((int64_t)i) && !id_of.emplace(bytes_of[i], (int64_t)i).second)
      fail("%s: two vocab tokens spell the same bytes (id %zu)", path.c_str(), i);
  for (int b = 0; b < 256; b++)
    if (!id_of.count(std::string(1, (char)b)))
      fail("%s: the vocab has no token for byte 0x%02x (every byte needs one)", path.c_str(), b);
  std::vector<int64_t> order;
  std::vector<bool> ranked(bytes_of.size(), false);
  for (size_t i = 0; i < bytes_of.size(); i++)
    if (!added.count((int64_t)i) && bytes_of[i].size() == 1) order.push_back((int64_t)i), ranked[i] = true;
  if (!merges.is_array()) fail("%s: model.merges is not a list", path.c_str());
  for (size_t i = 0; i < merges.size(); i++) {
    const nlohmann::json& m = merges[i];
    std::string left, right;
    if (m.is_string()) {
      const std::string s = m.get<std::string>();
      size_t space = s.find(' ');
      if (space == std::string::npos) fail("%s: merge %zu \"%s\" is not two tokens", path.c_str(), i, s.c_str());
      left = s.substr(0, space), right = s.substr(space + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      left = m[0].get<std::string>(), right = m[1].get<std::string>();
    } else {
      fail("%s: merge %zu is not a pair of tokens", path.c_str(), i);
    }
    std::string lb, rb;
    if (!hf_to_bytes(left, lb) || !hf_to_bytes(right, rb) || !id_of.count(lb) || !id_of.count(rb))
      fail("%s: merge %zu (%s %s) names a token not in the vocab", path.c_str(), i, left.c_str(), right.c_str());
    auto merged = id_of.find(lb + rb);
    if (merged == id_of.end())
      fail("%s: merge %zu (%s %s) makes a token not in the vocab", path.c_str(), i, left.c_str(), right.c_str());
    if (!ranked[merged->second]) order.push_back(merged->second), ranked[merged->second] = true;
  }
  for (size_t i = 0; i < bytes_of.size(); i++) {
    if (added.count((int64_t)i) || ranked[i]) continue;
    // a token no merge makes can be any length, and splitting it into merges (export) is
    // quadratic in it: 40 KB took 10 s
    if (bytes_of[i].size() > kMaxUnmergedTokenBytes)
      fail("%s: vocab token %.60s... (id %zu, %zu bytes) is made by no merge and is longer than %zu bytes",
           path.c_str(),
           nlohmann::json(bytes_of[i].substr(0, 40))
               .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)
               .c_str(),
           i, bytes_of[i].size(), kMaxUnmergedTokenBytes);
    order.push_back((int64_t)i);
  }
  return order;
}

}  // namespace

HfTokenizer tokenizer_read_hf_json(const std::string& path, bool allow_custom_regex) {
  const nlohmann::json j = read_tokenizer_json(path);
  const std::string pattern = split_pattern(field(j, "pre_tokenizer"), path);
  if (!pattern_is_known(pattern) && !allow_custom_regex)
    fail(
        "%s: the pre-tokenizer's regex %.200s is not one of the known ones (GPT-2's, cl100k's, o200k's, "
        "nanochat's); pass --allow-custom-regex to run it under PCRE2 match limits and a per-text time budget",
        path.c_str(), nlohmann::json(pattern).dump().c_str());
  const std::map<int64_t, std::string> added = read_added_tokens(j, path);
  const std::vector<std::string> bytes_of = read_vocab(field(field(j, "model"), "vocab"), added, path);
  const std::vector<int64_t> order = rank_order(field(field(j, "model"), "merges"), bytes_of, added, path);

  // ours: the ranks, then the specials in the file's id order
  std::vector<std::string> ranks;
  std::vector<int32_t> file_ids;
  for (int64_t id : order) ranks.push_back(bytes_of[id]), file_ids.push_back((int32_t)id);
  std::vector<std::pair<std::string, int32_t>> specials;
  for (auto& [id, name] : added) {
    if (id >= (int64_t)bytes_of.size()) continue;  // cannot happen: read_vocab kept every added id
    specials.emplace_back(name, (int32_t)file_ids.size());
    file_ids.push_back((int32_t)id);
  }
  std::string bos;
  for (const char* name : {"<|bos|>", "<|endoftext|>"})
    for (auto& [n, id] : specials)
      if (bos.empty() && n == name) bos = n;
  if (bos.empty()) fail("%s: no <|bos|> or <|endoftext|> special token to begin documents with", path.c_str());
  try {
    return HfTokenizer{Tokenizer(std::move(ranks), pattern, std::move(specials), bos), std::move(file_ids)};
  } catch (const Error& e) {
    fail("%s: %s", path.c_str(), e.what());
  }
}

bool tokenizer_hf_ids_identity(const std::vector<int32_t>& file_ids) {
  for (size_t i = 0; i < file_ids.size(); i++)
    if (file_ids[i] != (int32_t)i) return false;
  return true;
}

bool HfTokenizer::identity() const { return tokenizer_hf_ids_identity(file_ids); }

Tokenizer tokenizer_load_hf_json(const std::string& path, bool allow_custom_regex) {
  return tokenizer_read_hf_json(path, allow_custom_regex).tok;
}

static const char* const kHfIdsFile = "/hf_token_ids.json";

void tokenizer_save_hf_ids(const std::string& dir, const std::vector<int32_t>& file_ids) {
  if (tokenizer_hf_ids_identity(file_ids)) {  // ours are the file's: nothing to keep, and an older table would be wrong
    if (std::remove((dir + kHfIdsFile).c_str()) != 0 && errno != ENOENT)
      fail("cannot remove %s%s: %s", dir.c_str(), kHfIdsFile, std::strerror(errno));
    return;
  }
  atomic_write_file(dir + kHfIdsFile, nlohmann::json{{"file_ids", file_ids}}.dump() + "\n");
}

std::vector<int32_t> tokenizer_load_hf_ids(const std::string& dir, int vocab_size) {
  const std::string path = dir + kHfIdsFile;
  std::vector<int32_t> ids(vocab_size);
  for (int i = 0; i < vocab_size; i++) ids[i] = i;
  if (!path_exists(path)) return ids;
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(read_regular_file(path));
  } catch (const nlohmann::json::exception& e) {
    fail("%s: not JSON (%s)", path.c_str(), e.what());
  }
  const nlohmann::json* list = j.is_object() && j.contains("file_ids") ? &j["file_ids"] : nullptr;
  if (!list || !list->is_array() || (int64_t)list->size() != vocab_size)
    fail("%s: file_ids must be a list of %d ids, one per token of the tokenizer beside it", path.c_str(), vocab_size);
  std::vector<bool> seen(vocab_size, false);
  for (int i = 0; i < vocab_size; i++) {
    const nlohmann::json& v = (*list)[i];
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= vocab_size || seen[v.get<int64_t>()])
      fail("%s: entry %d (%s) is not an unused id below %d", path.c_str(), i, v.dump().c_str(), vocab_size);
    ids[i] = v.get<int32_t>();
    seen[ids[i]] = true;
  }
  return ids;
}

std::string tokenizer_hf_json(const Tokenizer& tok, const std::vector<int32_t>& file_ids) {
  const std::vector<std::string>& ranks = tok.ranks();
  auto id_of = [&](size_t ours) { return file_ids.empty() ? (int32_t)ours : file_ids.at(ours); };
  std::unordered_map<std::string, int32_t> rank_of;
  for (size_t i = 0; i < ranks.size(); i++) rank_of.emplace(ranks[i], (int32_t)i);
  nlohmann::ordered_json vocab = nlohmann::ordered_json::object();
  nlohmann::ordered_json merges = nlohmann::ordered_json::array();
  for (size_t i = 0; i < ranks.size(); i++) {
    vocab[bytes_to_hf(ranks[i])] = id_of(i);
    if (ranks[i].size() < 2) continue;
    std::vector<std::string> parts = merge_below(ranks[i], rank_of, (int32_t)i);
    if (parts.size() != 2)
      fail("token %zu cannot be written as a merge of two earlier tokens (%zu parts)", i, parts.size());
    merges.push_back({bytes_to_hf(parts[0]), bytes_to_hf(parts[1])});
  }
  nlohmann::ordered_json added = nlohmann::ordered_json::array();
  for (auto& [name, id] : tok.specials())
    added.push_back({{"id", id_of(id)},
                     {"content", name},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", true}});
  nlohmann::ordered_json j;
  j["version"] = "1.0";
  j["truncation"] = nullptr;
  j["padding"] = nullptr;
  j["added_tokens"] = added;
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers",
       {{{"type", "Split"}, {"pattern", {{"Regex", tok.pattern()}}}, {"behavior", "Isolated"}, {"invert", false}},
        {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}}}}};
  j["post_processor"] = nullptr;
  j["decoder"] = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}};
  // ignore_merges: a piece that is a token is that token, as tiktoken does
  j["model"] = {{"type", "BPE"},
                {"dropout", nullptr},
                {"unk_token", nullptr},
                {"continuing_subword_prefix", nullptr},
                {"end_of_word_suffix", nullptr},
                {"fuse_unk", false},
                {"byte_fallback", false},
                {"ignore_merges", true},
                {"vocab", vocab},
                {"merges", merges}};
  return j.dump(1) + "\n";
}

}  // namespace nanochat
