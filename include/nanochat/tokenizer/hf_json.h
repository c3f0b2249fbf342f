// defines: HfTokenizer, tokenizer_read_hf_json, tokenizer_load_hf_json, tokenizer_hf_json
// Hugging Face's tokenizer.json (the `tokenizers` library's format) in and out
// (src/tokenizer/tokenizer_hf.cpp).
#pragma once
#include <string>
#include <vector>

#include "nanochat/tokenizer.h"

namespace nanochat {

// a byte-level BPE (a ByteLevel pre-tokenizer with its regex, or a Split regex then ByteLevel;
// special added tokens at any ids, <|bos|> or <|endoftext|> as BOS, any id layout) as our
// Tokenizer: ranks in merge order, then the specials. file_ids[our id] = the file's id (the
// identity for nanochat's own layout: bytes and merges first, specials after).
// The pre-tokenizer's regex must be a known one (pattern_is_known) unless allow_custom_regex;
// anything it cannot represent exactly is one Error naming the file and the field.
struct HfTokenizer {
  Tokenizer tok;
  std::vector<int32_t> file_ids;
  bool identity() const;
};
HfTokenizer tokenizer_read_hf_json(const std::string& path, bool allow_custom_regex = false);
// the Tokenizer alone (its ids are ours: the file's through file_ids)
Tokenizer tokenizer_load_hf_json(const std::string& path, bool allow_custom_regex = false);
// the same format written from ours (merges recovered from the ranks), for transformers
std::string tokenizer_hf_json(const Tokenizer& tok);

}  // namespace nanochat
