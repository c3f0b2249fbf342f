// defines: HttpServer, ConnectionQueue, server_connection_gone, server_connection_overflow,
//          server_connection_close_after, server_connection_refused
// A connection's life, in place of httplib 0.11.4's own socket loop. httplib reads a request's
// head one byte at a time through a Stream and keeps a header line whole until its newline
// (32 MB of header is 32 MB of RSS), waits for each byte up to the read timeout however slowly
// they come (slowloris), and reads a chunked or length-less body to its end. So every byte
// httplib reads comes through ConnectionStream, which
//   - counts the head's lines and their lengths as they pass: 414 (request line) / 431
//     (header line, header count) the moment a limit is crossed, nothing buffered beyond it;
//   - gives the head and body of each request one deadline (408);
//   - caps the body's bytes on the wire (413) whatever its framing;
//   - judges the head's framing as RFC 9112 asks (framing.cpp: 400/411/501), and a chunked
//     body's chunk lines (400), so that no proxy in front of us reads a different request
//     boundary than we do, and ends a body with neither Content-Length nor chunked where its
//     head ends;
// and answers those refusals itself (one JSON line, Connection: close), then drains what the
// client is still sending for a moment before closing, so the client reads the answer instead
// of a reset.
// Between requests no thread waits on a socket: a new connection, and one kept alive after
// its answer, is parked in one epoll set (HttpServer::idle_loop); the first to have bytes to
// read is served on a connection thread. A new connection silent past first_byte_ms, or a
// kept-alive one past the keep-alive timeout, is closed there. Beyond the connection cap the
// oldest parked connection is closed to make room, so silent sockets cannot crowd out a
// client that speaks; when every connection is busy with a request, the new one gets one
// request and a short deadline, and only GET /health is served on it (routes.cpp), so
// /health answers while every worker and handler thread is busy. The thread-local stream also lets a handler ask whether its
// client is still there (non-streaming generations stop when it leaves; one that only shut its
// sending side still gets its answer).
#include <netdb.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <system_error>

#include "nanochat/common/error.h"
#include "server/framing.h"
#include "server/server_state.h"

namespace nanochat {

namespace {

using Clock = std::chrono::steady_clock;

int ms_until(Clock::time_point t) {
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(t - Clock::now()).count();
  return (int)std::max<int64_t>(0, std::min<int64_t>(ms, 1 << 30));
}

const char* status_text(int status) {
  switch (status) {
    case 400: return "Bad Request";
    case 408: return "Request Timeout";
    case 411: return "Length Required";
    case 413: return "Payload Too Large";
    case 414: return "URI Too Long";
    case 431: return "Request Header Fields Too Large";
    case 501: return "Not Implemented";
    default: return "Error";
  }
}

void address_of(int fd, bool peer, std::string& ip, int& port) {
  sockaddr_storage a{};
  socklen_t len = sizeof a;
  if ((peer ? getpeername(fd, (sockaddr*)&a, &len) : getsockname(fd, (sockaddr*)&a, &len)) != 0) return;
  char host[NI_MAXHOST], serv[NI_MAXSERV];
  if (getnameinfo((sockaddr*)&a, len, host, sizeof host, serv, sizeof serv, NI_NUMERICHOST | NI_NUMERICSERV) == 0) {
    ip = host;
    port = std::atoi(serv);
  }
}

class ConnectionStream final : public httplib::Stream {
 public:
  ConnectionStream(int fd, const ConnectionLimits& limits, int read_timeout_ms, int write_timeout_ms, bool overflow)
      : fd_(fd), limits_(limits), read_timeout_ms_(read_timeout_ms), write_timeout_ms_(write_timeout_ms), overflow_(overflow) {}

  // bytes of the next request already read (pipelined): it is served without parking
  bool buffered() const { return off_ < len_; }

  void begin_request() {
    phase_ = Phase::head;
    line_len_ = 0;
    lines_ = 0;
    body_bytes_ = 0;
    head_ = HeadCheck{};
    chunks_ = ChunkScan{};
    line_.clear();
    wrote_ = probed_ = false;
    const int deadline_ms = overflow_ ? std::min(limits_.deadline_ms, 2000) : limits_.deadline_ms;
    deadline_ = Clock::now() + std::chrono::milliseconds(deadline_ms);
  }
  void end_request() { phase_ = Phase::idle; }

  bool overflow() const { return overflow_; }
  int refused() const { return refused_; }
  bool close_after() const { return close_after_ || refused_ != 0; }
  void set_close_after() { close_after_ = true; }

  // The client closed its socket, or the socket failed. A FIN alone (POLLRDHUP) does not tell
  // a client that closed from one that only shut its sending side and still reads: the first
  // has the kernel answer our next bytes with a reset. So before any of the response is out,
  // a FIN is answered with an interim "100 Continue" (which HTTP/1.1 clients must skip); a
  // closed client resets, seen here on the next call, a half-closed one reads on. Once the
  // response is being written, its own writes fail when the client is gone. HTTP/1.0 has no
  // interim responses: there a FIN counts as gone.
  bool peer_gone() {
    pollfd p{fd_, POLLIN | POLLRDHUP, 0};
    if (poll(&p, 1, 0) <= 0) return false;
    if (p.revents & (POLLHUP | POLLERR | POLLNVAL)) return true;
    if (!(p.revents & POLLRDHUP) || wrote_) return false;
    if (head_.http10) return true;
    if (!probed_) {
      probed_ = true;
      static const char probe[] = "HTTP/1.1 100 Continue\r\n\r\n";
      if (!send_all(probe, sizeof probe - 1)) return true;
    }
    return false;
  }

  bool is_readable() const override {
    if (off_ < len_) return true;
    pollfd p{fd_, POLLIN, 0};
    return poll(&p, 1, read_timeout_ms_) > 0;
  }

  bool is_writable() const override {
    if (refused_) return false;
    pollfd p{fd_, POLLOUT, 0};
    if (poll(&p, 1, write_timeout_ms_) <= 0 || !(p.revents & POLLOUT)) return false;
    return !peer_gone_hard();
  }

  ssize_t read(char* ptr, size_t size) override {
    if (refused_) return -1;
    if (phase_ == Phase::body && head_.body_empty) return 0;  // no framing: no body
    if (off_ == len_ && !fill()) return (refused_ || errno_) ? -1 : 0;
    size_t n = std::min(size, len_ - off_);
    if (phase_ == Phase::head) {
      n = scan_head(n);
      if (refused_) return -1;
    } else if (phase_ == Phase::body) {
      body_bytes_ += n;
      if (body_bytes_ > limits_.max_raw_body) {
        refuse(413, strprintf("request body too large (more than %zu bytes on the wire)", limits_.max_raw_body));
        return -1;
      }
      if (head_.chunked && !server_chunk_scan(chunks_, buf_ + off_, n)) {
        refuse(chunks_.status, chunks_.message);
        return -1;
      }
    }
    std::memcpy(ptr, buf_ + off_, n);
    off_ += n;
    return (ssize_t)n;
  }

  ssize_t write(const char* ptr, size_t size) override {
    if (refused_) return -1;  // our own answer is out; httplib's second one is not sent
    if (size < 12 || std::memcmp(ptr, "HTTP/1.1 100", 12) != 0) wrote_ = true;  // httplib's own 100 Continue is not the response
    return send_all(ptr, size) ? (ssize_t)size : -1;
  }

  void get_remote_ip_and_port(std::string& ip, int& port) const override { address_of(fd_, true, ip, port); }
  void get_local_ip_and_port(std::string& ip, int& port) const override { address_of(fd_, false, ip, port); }
  socket_t socket() const override { return fd_; }

  // after a refusal or an unread body: stop sending, read and drop what the client still
  // sends (up to a second), so the close is not a reset that eats our answer
  void linger() {
    ::shutdown(fd_, SHUT_WR);
    const auto until = Clock::now() + std::chrono::seconds(1);
    char sink[16384];
    while (true) {
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, ms_until(until)) <= 0) break;
      if (recv(fd_, sink, sizeof sink, 0) <= 0) break;
    }
  }

 private:
  enum class Phase { idle, head, body };

  // a reset or failed socket; a half-closed one (EOF to read) still takes our bytes
  bool peer_gone_hard() const {
    pollfd p{fd_, POLLIN, 0};
    if (poll(&p, 1, 0) <= 0) return false;
    return (p.revents & (POLLERR | POLLHUP | POLLNVAL)) != 0;
  }

  bool fill() {
    errno_ = 0;
    while (true) {
      int wait = read_timeout_ms_;
      if (phase_ != Phase::idle) {
        if (Clock::now() >= deadline_) return deadline_passed();
        wait = std::min(wait, ms_until(deadline_) + 1);
      }
      pollfd p{fd_, POLLIN, 0};
      int r = poll(&p, 1, wait);
      if (r < 0 && errno == EINTR) continue;
      if (r == 0) {
        if (phase_ != Phase::idle && Clock::now() >= deadline_) return deadline_passed();
        errno_ = ETIMEDOUT;
        return false;
      }
      if (r < 0) {
        errno_ = errno;
        return false;
      }
      ssize_t got = recv(fd_, buf_, sizeof buf_, 0);
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) {
        errno_ = got < 0 ? errno : 0;
        return false;
      }
      off_ = 0;
      len_ = (size_t)got;
      return true;
    }
  }

  bool deadline_passed() {
    const int ms = overflow_ ? std::min(limits_.deadline_ms, 2000) : limits_.deadline_ms;
    refuse(408, strprintf("the request did not arrive within %.1f s", ms / 1000.0));
    return false;
  }

  // counts the head's lines as httplib takes them and has each judged (framing.cpp); returns
  // how many of the n bytes to hand out (the head's end stops the count there, so the body
  // is counted as body)
  size_t scan_head(size_t n) {
    for (size_t i = 0; i < n; i++) {
      const char c = buf_[off_ + i];
      if (c == '\n') {
        const bool blank = line_len_ == 1 && last_ == '\r';
        if (blank && lines_ > 0) {
          if (!server_head_end(head_)) {
            refuse(head_.status, head_.message);
            return 0;
          }
          phase_ = Phase::body;
          return i + 1;
        }
        if (!server_head_line(head_, line_.data(), line_.size())) {
          refuse(head_.status, head_.message);
          return 0;
        }
        line_.clear();
        lines_++;
        line_len_ = 0;
        if (lines_ > limits_.max_headers + 1) {
          refuse(431, strprintf("too many header lines (the limit is %zu)", limits_.max_headers));
          return 0;
        }
      } else if (++line_len_ > limits_.max_line) {
        if (lines_ == 0) refuse(414, strprintf("request line longer than %zu bytes", limits_.max_line));
        else refuse(431, strprintf("header line longer than %zu bytes", limits_.max_line));
        return 0;
      }
      if (c != '\n') line_ += c;
      last_ = c;
    }
    return n;
  }

  void refuse(int status, const std::string& message) {
    const std::string body = server_error_json(status, message);
    const std::string head = strprintf(
        "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n", status,
        status_text(status), body.size());
    send_all(head.data(), head.size()) && send_all(body.data(), body.size());
    refused_ = status;
  }

  bool send_all(const char* p, size_t n) {
    while (n > 0) {
      pollfd q{fd_, POLLOUT, 0};
      int r = poll(&q, 1, write_timeout_ms_);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0 || !(q.revents & POLLOUT)) return false;
      ssize_t k = send(fd_, p, n, MSG_NOSIGNAL);
      if (k < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (k <= 0) return false;
      p += k;
      n -= (size_t)k;
    }
    return true;
  }

  int fd_;
  const ConnectionLimits& limits_;
  int read_timeout_ms_, write_timeout_ms_;
  bool overflow_;
  char buf_[4096];
  size_t off_ = 0, len_ = 0;
  Phase phase_ = Phase::idle;
  size_t line_len_ = 0, lines_ = 0, body_bytes_ = 0;
  char last_ = 0;
  HeadCheck head_;
  ChunkScan chunks_;  // a chunked body's framing, judged as httplib reads it
  std::string line_;  // the head's line being read (at most max_line bytes)
  bool wrote_ = false, probed_ = false;  // this response: bytes written, FIN probe sent
  Clock::time_point deadline_;
  int refused_ = 0;
  int errno_ = 0;
  bool close_after_ = false;
};

thread_local ConnectionStream* tl_stream = nullptr;

// httplib cuts every response to the request's Range, error bodies included, and answers
// many ranges of one file with that many copies (a known httplib bug): a range is honoured for one
// embedded UI file only, otherwise the whole response is sent (RFC 9110 lets a server ignore
// Range)
void keep_ranges_for_files(httplib::Request& req) {
  const bool file = (req.method == "GET" || req.method == "HEAD") && (req.path == "/" || server_web_asset(req.path));
  if (req.ranges.size() != 1 || !file) req.ranges.clear();
}

}  // namespace

bool server_connection_gone() { return tl_stream && tl_stream->peer_gone(); }
bool server_connection_overflow() { return tl_stream && tl_stream->overflow(); }
void server_connection_close_after() {
  if (tl_stream) tl_stream->set_close_after();
}
int server_connection_refused() { return tl_stream ? tl_stream->refused() : 0; }

HttpServer::HttpServer() {
  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  if (epoll_fd_ < 0) fail("chat-web: epoll_create1: %s", std::strerror(errno));
  // a thread per busy connection up to the cap, and a few for connections beyond it (they get
  // one request, 2 s to send it, and only /health); idle ones hold none
  new_task_queue = [this] {
    std::lock_guard<std::mutex> lock(idle_mu_);
    queue_ = new ConnectionQueue((size_t)limits.max_connections + 16, [this] { close_all_idle(); });
    return queue_;
  };
  idle_thread_ = std::thread([this] { idle_loop(); });
}

HttpServer::~HttpServer() {
  {
    std::lock_guard<std::mutex> lock(idle_mu_);
    idle_stop_ = true;
  }
  idle_thread_.join();
  for (auto& [fd, idle] : idle_) ::close(fd);
  ::close(epoll_fd_);
}

size_t HttpServer::idle_count() const {
  std::lock_guard<std::mutex> lock(idle_mu_);
  return idle_.size();
}

void HttpServer::close_all_idle() {
  std::lock_guard<std::mutex> lock(idle_mu_);
  queue_ = nullptr;
  while (close_oldest_idle()) {
  }
}

void HttpServer::close_connection(int fd) {
  ::shutdown(fd, SHUT_RDWR);
  ::close(fd);
  open_connections.fetch_sub(1);
}

void HttpServer::forget_idle(int fd) {
  auto it = idle_.find(fd);
  epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
  idle_order_.erase(it->second.order);
  idle_.erase(it);
}

bool HttpServer::close_oldest_idle() {
  if (idle_order_.empty()) return false;
  const int fd = idle_order_.front();
  forget_idle(fd);
  close_connection(fd);
  return true;
}

// httplib's accept loop hands each new socket here (on a connection thread, for a moment)
bool HttpServer::process_and_close_socket(socket_t sock) {
  bool overflow = false;
  if (open_connections.fetch_add(1) + 1 > limits.max_connections) {
    std::lock_guard<std::mutex> lock(idle_mu_);
    overflow = !close_oldest_idle();  // every other connection is busy: this one gets /health only
  }
  const int ms = overflow ? std::min(limits.first_byte_ms, 2000) : limits.first_byte_ms;
  park(sock, Clock::now() + std::chrono::milliseconds(ms), overflow ? 1 : keep_alive_max_count_, overflow);
  return true;
}

void HttpServer::park(int fd, Clock::time_point deadline, size_t requests_left, bool overflow) {
  std::lock_guard<std::mutex> lock(idle_mu_);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = fd;
  if (idle_stop_ || !queue_ || epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) != 0) {
    close_connection(fd);  // the server is stopping (or epoll failed)
    return;
  }
  idle_order_.push_back(fd);
  idle_[fd] = Idle{deadline, requests_left, overflow, std::prev(idle_order_.end())};
}

// one request after another while the client has them ready; then back to the idle set
void HttpServer::serve(int fd, size_t requests_left, bool overflow) {
  bool keep = false;
  {
    ConnectionStream strm(fd, limits, (int)(read_timeout_sec_ * 1000 + read_timeout_usec_ / 1000),
                          (int)(write_timeout_sec_ * 1000 + write_timeout_usec_ / 1000), overflow);
    tl_stream = &strm;
    while (requests_left > 0) {
      bool connection_closed = false;
      strm.begin_request();
      const bool ret = process_request(strm, requests_left == 1, connection_closed, keep_ranges_for_files);
      strm.end_request();
      requests_left--;
      if (!ret || connection_closed || strm.close_after() || requests_left == 0) break;
      if (!strm.buffered()) {
        keep = true;
        break;
      }
    }
    if (strm.close_after()) strm.linger();
    tl_stream = nullptr;
  }
  if (keep) park(fd, Clock::now() + std::chrono::seconds(keep_alive_timeout_sec_), requests_left, overflow);
  else close_connection(fd);
}

// the idle set: a readable socket goes to a connection thread, a silent one past its
// deadline is closed
void HttpServer::idle_loop() {
  std::vector<epoll_event> events(256);
  while (true) {
    const int n = epoll_wait(epoll_fd_, events.data(), (int)events.size(), 50);
    std::lock_guard<std::mutex> lock(idle_mu_);
    if (idle_stop_) return;
    for (int i = 0; i < n; i++) {
      const int fd = events[i].data.fd;
      auto it = idle_.find(fd);
      if (it == idle_.end()) continue;
      const Idle idle = it->second;
      forget_idle(fd);
      if (!queue_) {
        close_connection(fd);
        continue;
      }
      // a closed peer is served too: its read sees the end and the socket closes
      queue_->enqueue([this, fd, idle] { serve(fd, idle.requests_left, idle.overflow); });
    }
    const auto now = Clock::now();
    for (auto it = idle_order_.begin(); it != idle_order_.end();) {
      const int fd = *it++;
      if (idle_.at(fd).deadline <= now) {
        forget_idle(fd);
        close_connection(fd);
      }
    }
  }
}

// threads kept however long they idle, and how long the others may
constexpr size_t kKeptThreads = 4;
constexpr auto kIdleExit = std::chrono::seconds(1);

void ConnectionQueue::enqueue(std::function<void()> fn) {
  std::lock_guard<std::mutex> lock(mu_);
  reap();
  jobs_.push_back(std::move(fn));
  if (jobs_.size() > idle_ && live_ < max_threads_) {
    threads_.emplace_back();
    Worker* w = &threads_.back();
    try {
      w->thread = std::thread([this, w] { loop(w); });
      live_++;
    } catch (const std::system_error&) {
      threads_.pop_back();  // out of threads (RLIMIT_NPROC, memory): the job waits for a running one
    }
  }
  cv_.notify_one();
}

void ConnectionQueue::reap() {
  for (auto it = threads_.begin(); it != threads_.end();) {
    if (!it->done) {
      ++it;
      continue;
    }
    it->thread.join();  // it has left loop(): only its return is left
    it = threads_.erase(it);
  }
}

void ConnectionQueue::shutdown() {
  if (before_shutdown_) before_shutdown_();
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& w : threads_) w.thread.join();  // enqueue is no longer called: the listener has stopped
}

void ConnectionQueue::loop(Worker* self) {
  while (true) {
    std::function<void()> job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      idle_++;
      const bool woken = cv_.wait_for(lock, kIdleExit, [&] { return stop_ || !jobs_.empty(); });
      idle_--;
      if (jobs_.empty()) {
        if (stop_ || (!woken && live_ > kKeptThreads)) {  // stopping, or idle long enough
          live_--;
          self->done = true;
          return;
        }
        continue;
      }
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    job();
  }
}

}  // namespace nanochat
