// The head's checks (see framing.h), in RFC 9112's terms: request-line, field-line, framing;
// and a chunked body's chunk lines.
#include "server/framing.h"

#include <algorithm>
#include <cctype>
#include <cstring>

#include "nanochat/common/ascii.h"
#include "nanochat/common/error.h"

namespace nanochat {

namespace {

bool refuse(HeadCheck& h, int status, const std::string& message) {
  h.status = status;
  h.message = message;
  return false;
}

// RFC 9110's tchar: the characters of a method or a field name
bool is_tchar(unsigned char c) { return std::isalnum(c) || (c != 0 && std::strchr("!#$%&'*+-.^_`|~", c) != nullptr); }

bool is_token(const std::string& s) {
  if (s.empty()) return false;
  for (unsigned char c : s)
    if (!is_tchar(c)) return false;
  return true;
}

// a control character other than TAB (NUL, CR, LF, ESC, DEL ...)
bool is_ctl(unsigned char c) { return (c < 0x20 && c != '\t') || c == 0x7f; }

std::string trim_ows(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && (s[b] == ' ' || s[b] == '\t')) b++;
  while (e > b && (s[e - 1] == ' ' || s[e - 1] == '\t')) e--;
  return s.substr(b, e - b);
}

bool request_line(HeadCheck& h, const std::string& line) {
  const size_t sp1 = line.find(' ');
  const size_t sp2 = sp1 == std::string::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp2 == std::string::npos || line.find(' ', sp2 + 1) != std::string::npos)
    return refuse(h, 400, "malformed request line (want METHOD SP target SP HTTP/1.1)");
  h.method = line.substr(0, sp1);
  const std::string target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  const std::string version = line.substr(sp2 + 1);
  if (!is_token(h.method)) return refuse(h, 400, "malformed request line: bad method");
  if (target.empty()) return refuse(h, 400, "malformed request line: empty target");
  for (unsigned char c : target)
    if (is_ctl(c) || c == '\t') return refuse(h, 400, "malformed request line: control character in the target");
  if (version == "HTTP/1.0") h.http10 = true;
  else if (version != "HTTP/1.1")
    return refuse(h, 400, "malformed request line: the version must be HTTP/1.0 or HTTP/1.1");
  return true;
}

bool field_line(HeadCheck& h, const std::string& line) {
  if (line[0] == ' ' || line[0] == '\t')
    return refuse(h, 400, "folded header line (obsolete line folding is not accepted)");
  const size_t colon = line.find(':');
  if (colon == std::string::npos) return refuse(h, 400, "header line without a colon");
  const std::string name = line.substr(0, colon);
  if (!is_token(name)) {
    if (!name.empty() && (name.back() == ' ' || name.back() == '\t'))
      return refuse(h, 400, "whitespace between a header name and its colon");
    return refuse(h, 400, "bad header name");
  }
  const std::string value = trim_ows(line.substr(colon + 1));
  for (unsigned char c : value)
    if (is_ctl(c)) return refuse(h, 400, strprintf("control character (0x%02x) in header %s", c, name.c_str()));
  const std::string key = ascii_lower(name);
  if (key == "host") {
    if (++h.hosts > 1) return refuse(h, 400, "more than one Host header");
  } else if (key == "content-length") {
    if (++h.lengths > 1) return refuse(h, 400, "more than one Content-Length header");
    if (value.empty() || value.size() > 18 || value.find_first_not_of("0123456789") != std::string::npos)
      return refuse(h, 400, "bad Content-Length (want one decimal number)");
    h.length = std::stoull(value);
  } else if (key == "transfer-encoding") {
    if (++h.encodings > 1)
      return refuse(h, 501, "more than one Transfer-Encoding header (only a single chunked is supported)");
    if (ascii_lower(value) != "chunked")
      return refuse(h, 501, "Transfer-Encoding '" + value + "' is not supported (only chunked)");
    h.chunked = true;
  }
  return true;
}

}  // namespace

bool server_head_line(HeadCheck& h, const char* p, size_t n) {
  if (h.status) return false;
  if (n == 0 || p[n - 1] != '\r')
    return refuse(h, 400, "a line of the request head ends in a bare LF (CRLF is required)");
  const std::string line(p, n - 1);
  if (line.find('\r') != std::string::npos) return refuse(h, 400, "bare CR in the request head");
  const bool first = h.lines++ == 0;
  if (line.empty()) return refuse(h, 400, "empty request line");
  return first ? request_line(h, line) : field_line(h, line);
}

bool server_head_end(HeadCheck& h) {
  if (h.status) return false;
  if (h.lines == 0) return refuse(h, 400, "empty request head");
  if (h.hosts == 0 && !h.http10) return refuse(h, 400, "no Host header (required in HTTP/1.1)");
  if (h.lengths && h.encodings) return refuse(h, 400, "both Content-Length and Transfer-Encoding (one framing only)");
  if (h.encodings && h.http10) return refuse(h, 400, "Transfer-Encoding in an HTTP/1.0 request");
  // httplib reads a body for these methods only; for any other the body's bytes would be
  // taken as the next request
  const bool body_method = h.method == "POST" || h.method == "PUT" || h.method == "PATCH" || h.method == "DELETE" ||
                           h.method == "PRI";
  const bool body = h.chunked || h.length > 0;
  if (body && !body_method) return refuse(h, 400, "a " + h.method + " request cannot carry a body");
  if (!h.chunked && !h.lengths) {
    if (h.method == "POST" || h.method == "PUT" || h.method == "PATCH")
      return refuse(h, 411, "a " + h.method + " request needs a Content-Length (or Transfer-Encoding: chunked)");
    h.body_empty = true;
  }
  return true;
}

bool server_chunk_scan(ChunkScan& c, const char* p, size_t n) {
  using S = ChunkScan::State;
  constexpr size_t kMaxLine = 8192;  // a size line with its extensions, or a trailer line
  auto bad = [&](const char* why) {
    c.status = 400;
    c.message = std::string("bad chunked body: ") + why;
    return false;
  };
  if (c.status) return false;
  for (size_t i = 0; i < n; i++) {
    const unsigned char ch = (unsigned char)p[i];
    switch (c.state) {
      case S::size:
        if (std::isxdigit(ch)) {
          if (++c.digits > 15) return bad("chunk size too large");
          c.left = c.left * 16 + (uint64_t)(std::isdigit(ch) ? ch - '0' : std::tolower(ch) - 'a' + 10);
          c.line++;
          break;
        }
        if (c.digits == 0) return bad("a chunk size must begin with a hex digit");
        c.state = S::ext;
        [[fallthrough]];
      case S::ext:
        if (++c.line > kMaxLine) return bad("chunk size line too long");
        if (ch == '\r') {
          c.state = S::size_lf;
        } else if (ch == ';') {
          c.ext_open = true;
        } else if (ch == '\n') {
          return bad("a chunk size line ends in a bare LF (CRLF is required)");
        } else if (is_ctl(ch)) {
          return bad("control character in a chunk extension");
        } else if (!c.ext_open && ch != ' ' && ch != '\t') {
          return bad("a chunk size must be hex digits only");  // 0x4a, 4azz
        }
        break;
      case S::size_lf:
        if (ch != '\n') return bad("bare CR in a chunk size line");
        c.state = c.left == 0 ? S::trailer : S::data;
        c.digits = 0;
        c.ext_open = false;
        c.line = 0;
        break;
      case S::data: {
        const uint64_t take = std::min<uint64_t>(c.left, n - i);
        c.left -= take;
        i += take - 1;
        if (c.left == 0) c.state = S::data_cr;
        break;
      }
      case S::data_cr:
        if (ch != '\r') return bad("chunk data not followed by CRLF");
        c.state = S::data_lf;
        break;
      case S::data_lf:
        if (ch != '\n') return bad("chunk data not followed by CRLF");
        c.state = S::size;
        break;
      case S::trailer:
        if (ch == '\r') {
          c.state = S::trailer_lf;
        } else if (ch == '\n') {
          return bad("a trailer line ends in a bare LF (CRLF is required)");
        } else if (is_ctl(ch)) {
          return bad("control character in a trailer line");
        } else if (++c.line > kMaxLine) {
          return bad("trailer line too long");
        }
        break;
      case S::trailer_lf:
        if (ch != '\n') return bad("bare CR in a trailer line");
        c.state = c.line == 0 ? S::done : S::trailer;
        c.line = 0;
        break;
      case S::done: return bad("bytes after the last chunk");
    }
  }
  return true;
}

namespace {

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

std::string server_percent_decode(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); i++) {
    const int hi = s[i] == '%' && i + 2 < s.size() ? hex_value(s[i + 1]) : -1;
    const int lo = hi >= 0 ? hex_value(s[i + 2]) : -1;
    if (lo < 0) {
      out += s[i];
      continue;
    }
    out += (char)(hi * 16 + lo);
    i += 2;
  }
  return out;
}

}  // namespace nanochat
