// UTF-8 validation, and decoding with Python's errors="replace" semantics: each maximal
// subpart of an ill-formed sequence (the Unicode Standard's "best practice" U+FFFD substitution)
// becomes one U+FFFD.
#include "nanochat/common/utf8.h"

namespace nanochat {

// length of the valid sequence at s[i], or 0 with `bad` = bytes to replace (at least 1)
static size_t utf8_valid_length(std::string_view s, size_t i, size_t& bad) {
  auto b = [&](size_t k) { return (unsigned char)s[k]; };
  unsigned char c = b(i);
  bad = 1;
  if (c < 0x80) return 1;
  size_t need;
  unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (c >= 0xC2 && c <= 0xDF) need = 2;
  else if (c == 0xE0) need = 3, lo = 0xA0;
  else if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF) need = 3;
  else if (c == 0xED) need = 3, hi = 0x9F;  // no surrogates
  else if (c == 0xF0) need = 4, lo = 0x90;
  else if (c >= 0xF1 && c <= 0xF3) need = 4;
  else if (c == 0xF4) need = 4, hi = 0x8F;  // nothing above U+10FFFF
  else return 0;                            // 0x80-0xC1, 0xF5-0xFF: never a lead byte
  for (size_t k = 1; k < need; k++) {
    if (i + k >= s.size()) {
      bad = k;
      return 0;
    }
    unsigned char d = b(i + k);
    bool ok = k == 1 ? (d >= lo && d <= hi) : (d >= 0x80 && d <= 0xBF);
    if (!ok) {
      bad = k;
      return 0;
    }
  }
  return need;
}

size_t utf8_invalid_at(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    if ((unsigned char)s[i] < 0x80) {  // ASCII fast path
      i++;
      continue;
    }
    size_t bad, n = utf8_valid_length(s, i, bad);
    if (!n) return i;
    i += n;
  }
  return std::string::npos;
}

bool utf8_is_valid(std::string_view s) { return utf8_invalid_at(s) == std::string::npos; }

std::string utf8_decode_replace(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    size_t bad;
    size_t n = utf8_valid_length(s, i, bad);
    if (n) {
      out.append(s.data() + i, n);
      i += n;
    } else {
      out += "\xEF\xBF\xBD";  // U+FFFD
      i += bad;
    }
  }
  return out;
}

}  // namespace nanochat
