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
// an imported tokenizer's file_ids, kept in DIR (hf_token_ids.json) beside the tokenizer saved
// there, so that export gives transformers the ids it had; the identity removes the table
void tokenizer_save_hf_ids(const std::string& dir, const std::vector<int32_t>& file_ids);
// file_ids[i] == i for every i: the file's ids are ours
bool tokenizer_hf_ids_identity(const std::vector<int32_t>& file_ids);
// DIR's table checked to be a permutation of [0, vocab_size), or the identity when there is none
std::vector<int32_t> tokenizer_load_hf_ids(const std::string& dir, int vocab_size);
// the same format written from ours (merges recovered from the ranks), for transformers; with
// file_ids, token i gets id file_ids[i]
std::string tokenizer_hf_json(const Tokenizer& tok, const std::vector<int32_t>& file_ids = {});

}  // namespace nanochat
