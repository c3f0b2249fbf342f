// defines: RawResponse, raw_connect, raw_http, raw_send, dechunk, SseEvent, sse_parse_strict,
//          wait_until_healthy
// A deliberately small HTTP/1.1 client on plain sockets, for server tests that must see the
// bytes: chunked framing checked strictly, SSE events parsed strictly (every event exactly
// "data: <payload>\n\n"), raw garbage sent on purpose, connections dropped mid-stream.
#pragma once
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <map>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

struct RawResponse {
  int status = 0;
  std::map<std::string, std::string> headers;  // lower-case names
  std::string body;                            // de-chunked
  std::string raw;
};

inline int raw_connect(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons((uint16_t)port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, (sockaddr*)&a, sizeof a) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

inline bool raw_send(int fd, const std::string& bytes) {
  size_t off = 0;
  while (off < bytes.size()) {
    ssize_t n = send(fd, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
    if (n <= 0) return false;
    off += (size_t)n;
  }
  return true;
}

// reads until EOF or `timeout_ms` of silence
inline std::string raw_read_all(int fd, int timeout_ms = 20000) {
  std::string out;
  char buf[65536];
  while (true) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, timeout_ms) <= 0) break;
    ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    out.append(buf, (size_t)n);
  }
  return out;
}

// reads one response whose length is known (Content-Length), or until EOF / timeout
inline std::string raw_read_response(int fd, int timeout_ms = 5000) {
  std::string out;
  char buf[65536];
  while (true) {
    size_t head_end = out.find("\r\n\r\n");
    if (head_end != std::string::npos) {
      size_t cl = out.find("Content-Length: ");
      if (cl != std::string::npos && cl < head_end &&
          out.size() >= head_end + 4 + std::stoul(out.substr(cl + 16)))
        return out;
    }
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, timeout_ms) <= 0) return out;
    ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n <= 0) return out;
    out.append(buf, (size_t)n);
  }
}

// strict chunked decoding: hex size line, CRLF, data, CRLF ... 0 CRLF CRLF
inline std::string dechunk(const std::string& s) {
  std::string out;
  size_t pos = 0;
  while (true) {
    size_t eol = s.find("\r\n", pos);
    if (eol == std::string::npos) throw std::runtime_error("chunked: no size line");
    std::string hex = s.substr(pos, eol - pos);
    if (hex.empty()) throw std::runtime_error("chunked: empty size line");
    for (char c : hex)
      if (!isxdigit((unsigned char)c)) throw std::runtime_error("chunked: bad size '" + hex + "'");
    size_t n = std::stoul(hex, nullptr, 16);
    pos = eol + 2;
    if (n == 0) {
      if (s.compare(pos, 2, "\r\n") != 0) throw std::runtime_error("chunked: no final CRLF");
      if (pos + 2 != s.size()) throw std::runtime_error("chunked: bytes after the last chunk");
      return out;
    }
    if (pos + n + 2 > s.size() || s.compare(pos + n, 2, "\r\n") != 0) throw std::runtime_error("chunked: truncated chunk");
    out.append(s, pos, n);
    pos += n + 2;
  }
}

inline RawResponse parse_response(const std::string& raw) {
  RawResponse r;
  r.raw = raw;
  size_t head_end = raw.find("\r\n\r\n");
  if (head_end == std::string::npos) throw std::runtime_error("no end of headers in: " + raw.substr(0, 200));
  std::string head = raw.substr(0, head_end);
  if (head.rfind("HTTP/1.1 ", 0) != 0) throw std::runtime_error("bad status line: " + head.substr(0, 80));
  r.status = std::stoi(head.substr(9, 3));
  size_t pos = head.find("\r\n");
  while (pos != std::string::npos && pos < head.size()) {
    size_t next = head.find("\r\n", pos + 2);
    std::string line = head.substr(pos + 2, (next == std::string::npos ? head.size() : next) - pos - 2);
    size_t colon = line.find(':');
    if (colon != std::string::npos) {
      std::string name = line.substr(0, colon);
      for (char& c : name) c = (char)tolower((unsigned char)c);
      size_t v = line.find_first_not_of(' ', colon + 1);
      r.headers[name] = v == std::string::npos ? "" : line.substr(v);
    }
    pos = next;
  }
  std::string body = raw.substr(head_end + 4);
  if (r.headers.count("transfer-encoding") && r.headers["transfer-encoding"] == "chunked") {
    r.body = dechunk(body);
  } else {
    if (r.headers.count("content-length") && std::stoul(r.headers["content-length"]) != body.size())
      throw std::runtime_error("content-length mismatch");
    r.body = body;
  }
  return r;
}

inline RawResponse raw_http(int port, const std::string& method, const std::string& path, const std::string& body = "",
                            const std::string& content_type = "application/json") {
  int fd = raw_connect(port);
  if (fd < 0) throw std::runtime_error("connect failed");
  std::string req = method + " " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n";
  if (!body.empty() || method == "POST")
    req += "Content-Type: " + content_type + "\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
  req += "\r\n" + body;
  raw_send(fd, req);
  std::string raw = raw_read_all(fd);
  close(fd);
  return parse_response(raw);
}

// every event exactly "data: <payload>\n\n" (no other fields, no comments, no CR)
inline std::vector<std::string> sse_parse_strict(const std::string& body) {
  std::vector<std::string> events;
  size_t pos = 0;
  while (pos < body.size()) {
    if (body.compare(pos, 6, "data: ") != 0) throw std::runtime_error("SSE: event does not start with 'data: ' at " + std::to_string(pos));
    size_t end = body.find("\n\n", pos);
    if (end == std::string::npos) throw std::runtime_error("SSE: unterminated event");
    std::string payload = body.substr(pos + 6, end - pos - 6);
    if (payload.find('\n') != std::string::npos || payload.find('\r') != std::string::npos)
      throw std::runtime_error("SSE: multi-line event");
    events.push_back(payload);
    pos = end + 2;
  }
  return events;
}

// the model loads after the port opens: up to 30 s for GET /health to say 200
inline void wait_until_healthy(int port) {
  for (int i = 0; i < 3000; i++) {
    try {
      if (raw_http(port, "GET", "/health").status == 200) return;
    } catch (...) {
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}
