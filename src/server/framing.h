// defines: HeadCheck, server_head_line, server_head_end
// A request's head judged as RFC 9112 asks of a server, line by line as it arrives
// (connection.cpp feeds it), before httplib parses it. httplib 0.11.4 is lenient where a proxy
// in front of us may not be, and each disagreement is a way to smuggle a request past that
// proxy: it takes the first of two Content-Lengths, falls back to Content-Length under an
// unknown Transfer-Encoding, skips lines ending in a bare LF, cuts a value at a NUL, and reads
// a length-less POST to EOF. Here every such head is refused (and the connection closed) instead.
// Internal to the server module.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace nanochat {

struct HeadCheck {
  int status = 0;  // 0 while the head is acceptable, else the refusal's status
  std::string message;
  size_t lines = 0;
  std::string method;
  bool http10 = false;
  int hosts = 0, lengths = 0, encodings = 0;
  bool chunked = false;
  uint64_t length = 0;
  bool body_empty = false;  // (after the end) neither Content-Length nor chunked: no body
};

// one line of the head without its LF (so ending in CR); false once the head is refused
bool server_head_line(HeadCheck& h, const char* p, size_t n);

// after the blank line that ends the head: the body's framing checked; false when refused
bool server_head_end(HeadCheck& h);

}  // namespace nanochat
