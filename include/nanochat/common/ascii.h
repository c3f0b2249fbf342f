// ASCII case folding for protocol words and names (HTTP header names and values, GPU names):
// A-Z only, whatever the C locale says of the bytes above 0x7f.
#pragma once
#include <string>

namespace nanochat {

inline std::string ascii_lower(std::string s) {
  for (char& c : s)
    if (c >= 'A' && c <= 'Z') c = (char)(c - 'A' + 'a');
  return s;
}

}  // namespace nanochat
