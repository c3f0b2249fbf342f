// defines: tokenizer_load_hf_json, tokenizer_hf_json
// Hugging Face's tokenizer.json (the `tokenizers` library's format) in and out
// (src/tokenizer/tokenizer_hf.cpp).
#pragma once
#include <string>

#include "nanochat/tokenizer.h"

namespace nanochat {

// a byte-level BPE (a ByteLevel pre-tokenizer with its regex, or a Split regex then ByteLevel;
// special added tokens after the vocab, <|bos|> or <|endoftext|> as BOS) as our Tokenizer with
// the same ids; anything it cannot represent exactly is one Error naming the file and the field
Tokenizer tokenizer_load_hf_json(const std::string& path);
// the same format written from ours (merges recovered from the ranks), for transformers
std::string tokenizer_hf_json(const Tokenizer& tok);

}  // namespace nanochat
