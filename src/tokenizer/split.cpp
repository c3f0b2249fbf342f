// The split patterns and the PCRE2 splitter. PCRE2_UCP makes \s and (?i) Unicode-aware like
// Rust's fancy-regex (tiktoken, rustbpe); \p{L} and \p{N} come from tiktoken's own tables.
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <chrono>

#include "nanochat/common/error.h"
#include "nanochat/tokenizer.h"

namespace nanochat {

namespace {
#include "unicode_classes.inc"

template <size_t N>
std::string class_text(const uint32_t (&ranges)[N][2]) {
  std::string s;
  for (auto& r : ranges) s += r[0] == r[1] ? strprintf("\\x{%X}", r[0]) : strprintf("\\x{%X}-\\x{%X}", r[0], r[1]);
  return s;
}

// \p{L} and \p{N} spelled out with tiktoken's tables (unicode_classes.py says why); inside a
// [...] class the ranges join it, outside they become a class of their own
std::string pattern_with_unicode_tables(const std::string& pattern) {
  static const std::string letters = class_text(kLetterRanges), numbers = class_text(kNumberRanges);
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < pattern.size(); i++) {
    char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const std::string* ranges = pattern.compare(i, 5, "\\p{L}") == 0   ? &letters
                                  : pattern.compare(i, 5, "\\p{N}") == 0 ? &numbers
                                                                         : nullptr;
      if (ranges) {
        out += in_class ? *ranges : "[" + *ranges + "]";
        i += 4;
      } else {
        out += pattern.substr(i, 2);  // any other escape, kept as is
        i++;
      }
      continue;
    }
    if (c == '[' && !in_class) in_class = true;
    else if (c == ']' && in_class) in_class = false;
    out += c;
  }
  return out;
}
}  // namespace

const char* const kPatternNanochat =
    R"('(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}{1,2}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+)";
const char* const kPatternGpt2 = R"('(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s)";
const char* const kPatternCl100k =
    R"('(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s)";
const char* const kPatternO200k =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

const char* const kPatternGpt2ByteLevel =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

bool pattern_is_known(const std::string& pattern) {
  for (const char* known : {kPatternNanochat, kPatternGpt2, kPatternCl100k, kPatternO200k, kPatternGpt2ByteLevel})
    if (pattern == known) return true;
  return false;
}

std::string pattern_by_name(const std::string& name) {
  if (name == "nanochat") return kPatternNanochat;
  if (name == "gpt2") return kPatternGpt2;
  if (name == "cl100k") return kPatternCl100k;
  if (name == "o200k") return kPatternO200k;
  fail("unknown pattern '%s' (use nanochat, gpt2, cl100k or o200k)", name.c_str());
}

static pcre2_code* compile_or_fail(const std::string& pattern) {
  int err = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile((PCRE2_SPTR)pattern.data(), pattern.size(), PCRE2_UTF | PCRE2_UCP, &err, &offset,
                                   nullptr);
  if (!code) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof msg);
    fail("bad split pattern at offset %zu: %s", (size_t)offset, (const char*)msg);
  }
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // falls back to the interpreter if JIT is unavailable
  return code;
}

static uint32_t decode_code_point(const unsigned char* p, size_t& len) {
  if (p[0] < 0x80) return len = 1, p[0];
  if (p[0] < 0xE0) return len = 2, ((p[0] & 0x1Fu) << 6) | (p[1] & 0x3Fu);
  if (p[0] < 0xF0) return len = 3, ((p[0] & 0x0Fu) << 12) | ((p[1] & 0x3Fu) << 6) | (p[2] & 0x3Fu);
  return len = 4, ((p[0] & 0x07u) << 18) | ((p[1] & 0x3Fu) << 12) | ((p[2] & 0x3Fu) << 6) | (p[3] & 0x3Fu);
}

// One bit per code point: 1 where PCRE2's own \p{L} or \p{N} disagrees with tiktoken's. Found
// by letting PCRE2 match \p{L} and \p{N} over a string of every code point (~20 ms, once).
static const std::vector<bool>& table_disagreements() {
  static const std::vector<bool> bits = [] {
    std::vector<bool> pcre_l(0x110000), pcre_n(0x110000), ours_l(0x110000), ours_n(0x110000);
    std::string all;
    for (uint32_t cp = 1; cp < 0x110000; cp++) {
      if (cp >= 0xD800 && cp <= 0xDFFF) continue;
      char buf[4];
      int n = cp < 0x80      ? (buf[0] = (char)cp, 1)
              : cp < 0x800   ? (buf[0] = (char)(0xC0 | cp >> 6), buf[1] = (char)(0x80 | (cp & 0x3F)), 2)
              : cp < 0x10000 ? (buf[0] = (char)(0xE0 | cp >> 12), buf[1] = (char)(0x80 | ((cp >> 6) & 0x3F)),
                                buf[2] = (char)(0x80 | (cp & 0x3F)), 3)
                             : (buf[0] = (char)(0xF0 | cp >> 18), buf[1] = (char)(0x80 | ((cp >> 12) & 0x3F)),
                                buf[2] = (char)(0x80 | ((cp >> 6) & 0x3F)), buf[3] = (char)(0x80 | (cp & 0x3F)), 4);
      all.append(buf, n);
    }
    for (auto [pattern, bits] : {std::make_pair("\\p{L}", &pcre_l), std::make_pair("\\p{N}", &pcre_n)}) {
      pcre2_code* code = compile_or_fail(pattern);
      pcre2_match_data* md = pcre2_match_data_create(1, nullptr);
      for (size_t off = 0;
           pcre2_match(code, (PCRE2_SPTR)all.data(), all.size(), off, PCRE2_NO_UTF_CHECK, md, nullptr) > 0;) {
        size_t start = pcre2_get_ovector_pointer(md)[0], len;
        (*bits)[decode_code_point((const unsigned char*)all.data() + start, len)] = true;
        off = start + len;
      }
      pcre2_match_data_free(md);
      pcre2_code_free(code);
    }
    for (auto& r : kLetterRanges)
      for (uint32_t cp = r[0]; cp <= r[1]; cp++) ours_l[cp] = true;
    for (auto& r : kNumberRanges)
      for (uint32_t cp = r[0]; cp <= r[1]; cp++) ours_n[cp] = true;
    std::vector<bool> differ(0x110000);
    for (uint32_t cp = 0; cp < 0x110000; cp++) differ[cp] = pcre_l[cp] != ours_l[cp] || pcre_n[cp] != ours_n[cp];
    return differ;
  }();
  return bits;
}

// does the (valid UTF-8) text hold a code point the two tables disagree on?
static bool needs_exact_tables(std::string_view text) {
  const auto& differ = table_disagreements();
  for (size_t i = 0; i < text.size();) {
    if ((unsigned char)text[i] < 0x80) {
      i++;
      continue;
    }
    size_t len;
    uint32_t cp = decode_code_point((const unsigned char*)text.data() + i, len);
    if (differ[cp]) return true;
    i += len;
  }
  return false;
}

Splitter::Splitter(const std::string& pattern) : pattern_(pattern), limited_(!pattern_is_known(pattern)) {
  // PCRE2's tables with JIT are fast; the spelled-out classes are exact but ~5x slower, so
  // they only split the rare texts with a code point where the two disagree
  code_ = compile_or_fail(pattern);
  exact_code_ = compile_or_fail(pattern_with_unicode_tables(pattern));
  table_disagreements();
}

Splitter::~Splitter() {
  pcre2_code_free((pcre2_code*)code_);
  pcre2_code_free((pcre2_code*)exact_code_);
}

namespace {
// per-thread match state: match data sized for any pattern, and a JIT stack large enough
// for long runs of whitespace (the default 32 KiB is not)
struct MatchState {
  pcre2_match_data* data = pcre2_match_data_create(32, nullptr);
  pcre2_jit_stack* stack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, nullptr);
  pcre2_match_context* context = pcre2_match_context_create(nullptr);
  MatchState() { pcre2_jit_stack_assign(context, nullptr, stack); }
  ~MatchState() {
    pcre2_match_context_free(context);
    pcre2_jit_stack_free(stack);
    pcre2_match_data_free(data);
  }
};
}  // namespace

// A pattern that is not one of the known ones may backtrack exponentially ((?:a?){18}a{18}b
// costs 34 s on 8,000 characters): each match is held to a PCRE2 match limit (the
// interpreter's depth too; JIT has a fixed stack), and a text to a time budget of 50 ms plus
// 2 us a byte (the known patterns split ~50 MB/s). Spent: an Error (chat-web
// answers 400 for an Error thrown while tokenizing a prompt).
constexpr uint32_t kCustomMatchLimit = 100000, kCustomDepthLimit = 1000;
constexpr double kCustomBudgetSeconds = 0.05, kCustomBudgetPerByte = 2e-6;

[[noreturn]] static void custom_pattern_spent(size_t offset, const char* what) {
  fail(
      "the tokenizer's custom split pattern (accepted with --allow-custom-regex) spent its %s at byte %zu of "
      "this text",
      what, offset);
}

void Splitter::split(std::string_view text, std::vector<std::string_view>& pieces) const {
  thread_local MatchState state;
  auto* code = (const pcre2_code*)(needs_exact_tables(text) ? exact_code_ : code_);
  pcre2_set_match_limit(state.context, limited_ ? kCustomMatchLimit : 10000000);  // PCRE2's default
  pcre2_set_depth_limit(state.context, limited_ ? kCustomDepthLimit : 10000000);
  const auto start = std::chrono::steady_clock::now();
  const double budget = kCustomBudgetSeconds + kCustomBudgetPerByte * (double)text.size();
  size_t offset = 0;
  for (uint64_t n = 1; offset < text.size(); n++) {
    // NO_UTF_CHECK: callers pass valid UTF-8; otherwise PCRE2 re-validates the rest of the
    // text on every call, which is quadratic
    int rc = pcre2_match(code, (PCRE2_SPTR)text.data(), text.size(), offset, PCRE2_NO_UTF_CHECK, state.data,
                         state.context);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (limited_ && (rc == PCRE2_ERROR_MATCHLIMIT || rc == PCRE2_ERROR_DEPTHLIMIT || rc == PCRE2_ERROR_JIT_STACKLIMIT))
      custom_pattern_spent(offset, "match limit");
    if (rc < 0) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(rc, msg, sizeof msg);
      fail("splitting text failed at byte %zu: %s", offset, (const char*)msg);
    }
    if (limited_ && n % 64 == 0 &&
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() > budget)
      custom_pattern_spent(offset, "time budget");
    PCRE2_SIZE* ov = pcre2_get_ovector_pointer(state.data);
    if (ov[1] == ov[0]) {  // an empty match cannot happen with these patterns; never loop on one
      offset = ov[1] + 1;
      continue;
    }
    pieces.emplace_back(text.data() + ov[0], ov[1] - ov[0]);
    offset = ov[1];
  }
}

}  // namespace nanochat
