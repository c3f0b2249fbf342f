// (API in include/nanochat/common/utf8_stream.h)
#include "nanochat/common/utf8_stream.h"

#include "nanochat/common/utf8.h"

namespace nanochat {

size_t utf8_incomplete_tail(std::string_view bytes) {
  const size_t n = bytes.size();
  for (size_t back = 1; back <= 3 && back <= n; back++) {
    const unsigned char lead = (unsigned char)bytes[n - back];
    if (lead >= 0x80 && lead < 0xC0) continue;  // a continuation byte: look further back
    // the sequence length this lead byte starts, and the range its second byte must be in
    // (Unicode Table 3-7: no overlongs, no surrogates, nothing above U+10FFFF)
    size_t need;
    unsigned char lo = 0x80, hi = 0xBF;
    if (lead >= 0xC2 && lead <= 0xDF) need = 2;
    else if (lead >= 0xE0 && lead <= 0xEF) need = 3, lo = lead == 0xE0 ? 0xA0 : 0x80, hi = lead == 0xED ? 0x9F : 0xBF;
    else if (lead >= 0xF0 && lead <= 0xF4) need = 4, lo = lead == 0xF0 ? 0x90 : 0x80, hi = lead == 0xF4 ? 0x8F : 0xBF;
    else return 0;               // ASCII or a byte that never starts a sequence
    if (back >= need) return 0;  // complete (or too long): nothing to wait for
    for (size_t i = 1; i < back; i++) {
      const unsigned char c = (unsigned char)bytes[n - back + i];
      if (i == 1 ? (c < lo || c > hi) : (c < 0x80 || c > 0xBF)) return 0;  // already ill-formed
    }
    return back;
  }
  return 0;
}

std::string Utf8Stream::push(std::string_view bytes) {
  pending_.append(bytes);
  const size_t keep = utf8_incomplete_tail(pending_);
  std::string out = utf8_decode_replace(std::string_view(pending_).substr(0, pending_.size() - keep));
  pending_.erase(0, pending_.size() - keep);
  return out;
}

std::string Utf8Stream::finish() {
  std::string out = utf8_decode_replace(pending_);
  pending_.clear();
  return out;
}

}  // namespace nanochat
