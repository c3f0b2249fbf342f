// UTF-8 validation and repair, shared by the corpus readers (which reject bad text with its
// position) and the tokenizer (which repairs it like Python's errors="replace").
#pragma once
#include <cstddef>
#include <string>
#include <string_view>

namespace nanochat {

// offset of the first byte that starts an ill-formed sequence (overlong forms, surrogates
// and code points above U+10FFFF included), or std::string::npos when valid
size_t utf8_invalid_at(std::string_view bytes);
bool utf8_is_valid(std::string_view bytes);
// Python's bytes.decode("utf-8", errors="replace"): every maximal ill-formed subsequence
// becomes one U+FFFD
std::string utf8_decode_replace(std::string_view bytes);

}  // namespace nanochat
