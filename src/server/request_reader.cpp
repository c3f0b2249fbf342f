// The request's edges found as its bytes arrive (see request_reader.h).
#include "server/request_reader.h"

#include <algorithm>

#include "nanochat/common/ascii.h"
#include "nanochat/common/error.h"

namespace nanochat {

namespace {

std::string trim_blanks(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && (s[b] == ' ' || s[b] == '\t')) b++;
  while (e > b && (s[e - 1] == ' ' || s[e - 1] == '\t')) e--;
  return s.substr(b, e - b);
}

}  // namespace

void RequestReader::refuse(int status, const std::string& message) {
  state_ = State::refused;
  status_ = status;
  message_ = message;
}

bool RequestReader::awaits_continue() const { return expect_continue_ && state_ == State::body && body_bytes_ == 0; }

size_t RequestReader::feed(const char* p, size_t n) {
  if (n > 0) started_ = true;
  size_t used = 0;
  if (state_ == State::head) used += feed_head(p, n);
  if (state_ == State::body) used += feed_body(p + used, n - used);
  return used;
}

// a line of the head ended (its LF seen; line_ holds it without the LF): judged and kept
bool RequestReader::line_done() {
  if (!server_head_line(head_, line_.data(), line_.size())) {
    refuse(head_.status, head_.message);
    return false;
  }
  const std::string text = line_.substr(0, line_.size() - 1);  // without its CR
  if (lines_ == 0) {
    request_line_ = text;
  } else {
    const size_t colon = text.find(':');  // server_head_line checked there is one
    std::string name = text.substr(0, colon), value = trim_blanks(text.substr(colon + 1));
    if (ascii_lower(name) == "expect" && ascii_lower(value) == "100-continue") expect_continue_ = true;
    fields_.emplace_back(std::move(name), std::move(value));
  }
  line_.clear();
  if (++lines_ > limits_.max_headers + 1) {
    refuse(431, strprintf("too many header lines (the limit is %zu)", limits_.max_headers));
    return false;
  }
  return true;
}

// the blank line: the framing judged, the body's length known
void RequestReader::head_done() {
  if (!server_head_end(head_)) return refuse(head_.status, head_.message);
  if (!head_.chunked && head_.length > limits_.max_body)
    return refuse(413, strprintf("request body too large (%llu bytes; the limit is %llu)",
                                 (unsigned long long)head_.length, (unsigned long long)limits_.max_body));
  if (head_.body_empty || (!head_.chunked && head_.length == 0)) {
    state_ = State::whole;
    return;
  }
  state_ = State::body;
  body_left_ = head_.length;
}

size_t RequestReader::feed_head(const char* p, size_t n) {
  for (size_t i = 0; i < n; i++) {
    const char c = p[i];
    if (c == '\n') {
      if (lines_ > 0 && line_ == "\r") {
        head_done();
        return i + 1;
      }
      if (!line_done()) return i + 1;
      continue;
    }
    if (line_.size() >= limits_.max_line) {
      if (lines_ == 0) refuse(414, strprintf("request line longer than %zu bytes", limits_.max_line));
      else refuse(431, strprintf("header line longer than %zu bytes", limits_.max_line));
      return i + 1;
    }
    line_ += c;
  }
  return n;
}

size_t RequestReader::feed_body(const char* p, size_t n) {
  size_t i = 0;
  while (i < n && state_ == State::body) {
    size_t take = 1;  // a chunk line: one byte at a time, so its end is found exactly
    if (!head_.chunked) take = (size_t)std::min<uint64_t>(body_left_, n - i);
    else if (chunks_.state == ChunkScan::State::data) take = (size_t)std::min<uint64_t>(chunks_.left, n - i);
    body_bytes_ += take;
    if (body_bytes_ > limits_.max_raw_body) {
      refuse(413, strprintf("request body too large (more than %zu bytes on the wire)", limits_.max_raw_body));
      return i + take;
    }
    if (head_.chunked) {
      if (!server_chunk_scan(chunks_, p + i, take)) {
        refuse(chunks_.status, chunks_.message);
        return i + take;
      }
      if (chunks_.state == ChunkScan::State::done) state_ = State::whole;
    } else {
      body_left_ -= take;
      if (body_left_ == 0) state_ = State::whole;
    }
    i += take;
  }
  return i;
}

}  // namespace nanochat
