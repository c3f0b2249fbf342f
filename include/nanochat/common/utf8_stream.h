// Streaming text out of a token stream: a token's bytes may end in the middle of a UTF-8
// character (byte-level BPE), so printing them as they come would split characters. The
// stream holds back an incomplete trailing sequence until the bytes that finish it arrive.
#pragma once
#include <cstddef>
#include <string>
#include <string_view>

namespace nanochat {

// length of the trailing bytes that form a valid but unfinished UTF-8 sequence (a lead byte
// and only continuation bytes allowed after it, fewer than it needs), else 0. At most 3.
size_t utf8_incomplete_tail(std::string_view bytes);

// push() returns the text that is safe to print now; finish() the rest. Invalid bytes come
// out as U+FFFD, and the concatenation of everything returned equals
// utf8_decode_replace(all bytes pushed): holding back only ever starts at a lead byte, where
// no ill-formed sequence can continue.
class Utf8Stream {
 public:
  std::string push(std::string_view bytes);
  std::string finish();

 private:
  std::string pending_;
};

}  // namespace nanochat
