// A deliberately small HTTP/1.1 client on plain sockets, for server tests that must see the
// bytes: chunked framing checked strictly, SSE events parsed strictly (every event exactly
// "data: <payload>\n\n"), raw garbage sent on purpose, connections dropped mid-stream.
#pragma once
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <atomic>
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

// a connection from a loopback address of the caller's choosing (the flood tests' attackers
// use 127.0.0.2 ... 127.0.0.254, all of 127/8 being loopback on Linux); `wait`: connect
// waits at most timeout_ms (then -1), else it returns at once, the handshake under way
inline int raw_connect_from(const std::string& source, int port, bool wait = true, int timeout_ms = 1000) {
  int fd = socket(AF_INET, SOCK_STREAM | (wait ? 0 : SOCK_NONBLOCK), 0);
  if (fd < 0) return -1;
  sockaddr_in from{};
  from.sin_family = AF_INET;
  inet_pton(AF_INET, source.c_str(), &from.sin_addr);
  timeval tv{timeout_ms / 1000, (timeout_ms % 1000) * 1000};
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons((uint16_t)port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (bind(fd, (sockaddr*)&from, sizeof from) != 0 ||
      (connect(fd, (sockaddr*)&a, sizeof a) != 0 && (wait || errno != EINPROGRESS))) {
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
      if (cl != std::string::npos && cl < head_end && out.size() >= head_end + 4 + std::stoul(out.substr(cl + 16)))
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
    if (pos + n + 2 > s.size() || s.compare(pos + n, 2, "\r\n") != 0)
      throw std::runtime_error("chunked: truncated chunk");
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

// the status of GET/HEAD `path`, 0 when the connection closed before an answer came (a refused
// connection): for loops that wait for the server to take them again
inline int raw_http_status(int port, const std::string& method, const std::string& path) {
  try {
    return raw_http(port, method, path).status;
  } catch (const std::exception&) {
    return 0;
  }
}

// every event exactly "data: <payload>\n\n" (no other fields, no comments, no CR)
inline std::vector<std::string> sse_parse_strict(const std::string& body) {
  std::vector<std::string> events;
  size_t pos = 0;
  while (pos < body.size()) {
    if (body.compare(pos, 6, "data: ") != 0)
      throw std::runtime_error("SSE: event does not start with 'data: ' at " + std::to_string(pos));
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

// ---- attackers on loopback (test_server_floods.cpp, bench_server --attacks) ---------------------

// the attacker's address for its i-th connection: 127.0.0.2 ... 127.0.0.254 in turn
inline std::string attacker_address(int i) { return "127.0.0." + std::to_string(2 + i % 253); }

// `n` connections, each sending a request line and then one header byte a second, for at most
// `seconds`; one the server closes comes back at once (so n keep trying). A thread of its own.
class Slowloris {
 public:
  Slowloris(int port, int n, int seconds) {
    thread_ = std::thread([this, port, n, seconds] {
      std::vector<int> conn(n, -1);
      for (int round = 0; round < seconds && running_; round++) {
        const auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < n && running_; i++) {
          if (conn[i] >= 0 && send(conn[i], "a", 1, MSG_NOSIGNAL | MSG_DONTWAIT) == 1) continue;
          if (conn[i] >= 0) {
            close(conn[i]);
            reconnects++;
          }
          conn[i] = raw_connect_from(attacker_address(i), port, true, 200);
          if (conn[i] >= 0) raw_send(conn[i], "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ");
        }
        std::this_thread::sleep_until(t0 + std::chrono::seconds(1));
      }
      for (int fd : conn)
        if (fd >= 0) close(fd);
    });
  }
  ~Slowloris() { stop(); }
  void stop() {
    running_ = false;
    if (thread_.joinable()) thread_.join();
  }
  std::atomic<int> reconnects{0};

 private:
  std::atomic<bool> running_{true};
  std::thread thread_;
};

// `n` connections opened at once (non-blocking, silent) and held until stop() or `seconds`
class ConnectionFlood {
 public:
  ConnectionFlood(int port, int n, double seconds) {
    thread_ = std::thread([this, port, n, seconds] {
      std::vector<int> conn;
      for (int i = 0; i < n && running_; i++) {
        const int fd = raw_connect_from(attacker_address(i), port, false);
        if (fd >= 0) conn.push_back(fd);
      }
      opened = (int)conn.size();
      const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
      while (running_ && std::chrono::steady_clock::now() < until)
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      for (int fd : conn) close(fd);
    });
  }
  ~ConnectionFlood() { stop(); }
  void stop() {
    running_ = false;
    if (thread_.joinable()) thread_.join();
  }
  std::atomic<int> opened{0};

 private:
  std::atomic<bool> running_{true};
  std::thread thread_;
};

// the legitimate client on 127.0.0.1 for `seconds`: GET /health every 50 ms, timed (a failure
// counts as 10 s), and a chat after every fourth; at most 400 rounds
struct Legit {
  std::vector<double> health_ms, chat_ms;  // chat_ms: the successful chats' times
  int health_ok = 0, chats = 0, chats_ok = 0;
};
inline Legit legit_traffic(int port, double seconds, const std::string& chat_body) {
  Legit l;
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  for (int round = 0; round < 400 && std::chrono::steady_clock::now() < until; round++) {
    const auto t0 = std::chrono::steady_clock::now();
    int status = 0;
    try {
      status = raw_http(port, "GET", "/health").status;
    } catch (const std::exception&) {
    }
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    l.health_ms.push_back(status == 200 ? ms : 10000.0);
    l.health_ok += status == 200;
    if (round % 4 == 3) {
      l.chats++;
      const auto c0 = std::chrono::steady_clock::now();
      try {
        if (raw_http(port, "POST", "/v1/chat/completions", chat_body).status == 200) {
          l.chats_ok++;
          l.chat_ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - c0).count());
        }
      } catch (const std::exception&) {
      }
    }
    std::this_thread::sleep_until(t0 + std::chrono::milliseconds(50));
  }
  return l;
}
