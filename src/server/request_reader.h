// Whether the bytes a connection has sent so far hold one whole request, judged as they
// arrive (the event loop feeds it, event_loop.cpp): the head's lines counted and capped
// (414 request line, 431 header line or count), each judged as RFC 9112 asks (framing.h:
// 400/411/501), a declared Content-Length past the body cap refused unread (413), then the
// body's bytes on the wire capped (413) and a chunked body's chunk lines judged (400) up to
// the last chunk. Nothing is buffered here: the caller keeps the bytes.
// Internal to the server module.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "server/framing.h"

namespace nanochat {

struct RequestLimits {
  size_t max_line = 8192;         // request line (414) and each header line (431), bytes
  size_t max_headers = 100;       // header lines (431)
  uint64_t max_body = 1 << 20;    // a Content-Length above: 413 before any body byte
  size_t max_raw_body = 3 << 20;  // body bytes on the wire, chunk framing included (413)
};

class RequestReader {
 public:
  enum class State { head, body, whole, refused };
  explicit RequestReader(const RequestLimits& limits) : limits_(limits) {}

  // takes the next bytes of the request; returns how many belong to it (fewer than n once it
  // is whole: the rest is the next request's, pipelined)
  size_t feed(const char* p, size_t n);

  State state() const { return state_; }
  bool started() const { return started_; }
  int status() const { return status_; }  // when refused: 400/411/413/414/431/501
  const std::string& message() const { return message_; }
  const HeadCheck& head() const { return head_; }
  // the head's request line and field lines (name, value without surrounding blanks), once
  // the head has ended
  const std::string& request_line() const { return request_line_; }
  const std::vector<std::pair<std::string, std::string>>& fields() const { return fields_; }
  // the head asked for "100 Continue" (RFC 9110 10.1.1) and no body byte has come yet
  bool awaits_continue() const;

 private:
  size_t feed_head(const char* p, size_t n);
  size_t feed_body(const char* p, size_t n);
  bool line_done();
  void head_done();
  void refuse(int status, const std::string& message);

  const RequestLimits& limits_;
  State state_ = State::head;
  bool started_ = false;
  int status_ = 0;
  std::string message_;
  HeadCheck head_;
  std::string line_;  // the head's line being read (at most max_line bytes)
  size_t lines_ = 0;
  std::string request_line_;
  std::vector<std::pair<std::string, std::string>> fields_;
  bool expect_continue_ = false;
  uint64_t body_left_ = 0;  // Content-Length bytes still to come
  size_t body_bytes_ = 0;   // body bytes on the wire so far
  ChunkScan chunks_;
};

}  // namespace nanochat
