// libFuzzer target for the tokenizer's files. An input with a NUL byte is a tokenizer
// directory: the bytes before the first NUL are tokenizer.tiktoken, those after it
// tokenizer.json (tokenizer_load); an input without one is a bare tiktoken rank file
// (tokenizer_load_tiktoken with gpt2's pattern and special token). A tokenizer that loads
// must then encode a fixed text, and with one of the known split patterns (which match every
// character) round-trip it (decode(encode(t)) == t, specials included): the property every
// BPE table has whatever its ranks. Every failure must be a nanochat::Error.
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "fuzz_util.h"
#include "nanochat/common/error.h"
#include "nanochat/tokenizer.h"

using namespace nanochat;

// a split pattern that skips some text drops it (as tiktoken's findall does): only the
// known patterns, which match every character, promise a round trip
static bool pattern_covers_all(const std::string& p) {
  return p == kPatternNanochat || p == kPatternGpt2 || p == kPatternCl100k || p == kPatternO200k;
}

static void round_trip(const Tokenizer& tok) {
  static const std::string text =
      "Hello, world! 12345 \xc3\xbcnic\xc3\xb8"
      "de\n\n  tabs\tand 'quotes' <|endoftext|>";
  std::vector<int32_t> ids = tok.encode(text);
  if (!pattern_covers_all(tok.pattern())) return;
  if (tok.decode_bytes(ids) != text) std::abort();  // a loaded tokenizer that loses bytes
  std::vector<std::string> allowed;
  for (auto& [name, id] : tok.specials()) allowed.push_back(name);
  ids = tok.encode_with_specials(text, allowed);
  if (tok.decode_bytes(ids) != text) std::abort();
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const uint8_t* nul = static_cast<const uint8_t*>(std::memchr(data, 0, size));
  const std::string& dir = fuzz_temp_dir();
  try {
    if (nul) {
      fuzz_write_file(dir + "/tokenizer.tiktoken", data, (size_t)(nul - data));
      fuzz_write_file(dir + "/tokenizer.json", nul + 1, size - (size_t)(nul - data) - 1);
      round_trip(tokenizer_load(dir));
    } else {
      fuzz_write_file(dir + "/ranks.tiktoken", data, size);
      round_trip(tokenizer_load_tiktoken(dir + "/ranks.tiktoken", "gpt2"));
    }
  } catch (const Error& e) {
    fuzz_note(e.what());
  }
  return 0;
}
