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

// A chunked body's framing (RFC 9112 7.1) judged as its bytes pass, before httplib reads it:
// chunk-size is 1*HEXDIG (httplib 0.11.4 reads it with strtoul, so "0x4a", "+4a", " 4a" and
// "4azz" would all be 74 bytes there, and a line may end in a bare LF), then optional
// extensions (BWS ";" ...), CRLF; the data and CRLF; after the last chunk (size 0) the
// trailer's field lines and a blank line, each ending in CRLF.
struct ChunkScan {
  enum class State { size, ext, size_lf, data, data_cr, data_lf, trailer, trailer_lf, done };
  State state = State::size;
  uint64_t left = 0;      // the chunk-size read so far, then the data bytes still to come
  int digits = 0;         // hex digits of this chunk-size
  bool ext_open = false;  // an extension began (its ";" seen)
  size_t line = 0;        // bytes of the current size or trailer line
  int status = 0;         // 0 while acceptable, else 400
  std::string message;
};
// n more bytes of the body; false once its framing is refused (status and message set)
bool server_chunk_scan(ChunkScan& c, const char* p, size_t n);

// a request path's %XX escapes decoded (RFC 3986 2.1, either case of hex digit); a "%" not
// followed by two hex digits stays as it is, and "+" stays a "+" (it means a space only in a
// form's query)
std::string server_percent_decode(const std::string& s);

}  // namespace nanochat
