// A whole request on its thread (the event loop read it: event_loop.cpp). httplib parses,
// routes and answers it through ConnectionStream, whose reads come from the request's bytes
// (nothing more is read from the socket) and whose writes go to the socket. The request's
// context (connections.h), which the routes find through HttpServer::context, lets a handler
// ask whether its client is still there (non-streaming generations stop when it leaves; one
// that only shut its sending side still gets its answer). Then the connection goes back to the
// event loop for its next request, or closes.
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <system_error>

#include "nanochat/common/ascii.h"
#include "nanochat/server.h"
#include "server/connections.h"

namespace nanochat {

namespace {

using StreamClock = std::chrono::steady_clock;

void local_address_of(int fd, std::string& ip, int& port) {
  sockaddr_storage a{};
  socklen_t len = sizeof a;
  if (getsockname(fd, (sockaddr*)&a, &len) != 0) return;
  char host[NI_MAXHOST], serv[NI_MAXSERV];
  if (getnameinfo((sockaddr*)&a, len, host, sizeof host, serv, sizeof serv, NI_NUMERICHOST | NI_NUMERICSERV) == 0) {
    ip = host;
    port = std::atoi(serv);
  }
}

class ConnectionStream final : public httplib::Stream {
 public:
  ConnectionStream(int fd, const std::string& ip, int port, const std::string& request, int write_timeout_ms,
                   bool overflow)
      : fd_(fd), ip_(ip), port_(port), request_(request), write_timeout_ms_(write_timeout_ms) {
    const std::string line = request.substr(0, request.find("\r\n"));
    http10_ = line.size() >= 8 && line.compare(line.size() - 8, 8, "HTTP/1.0") == 0;
    context_.overflow = overflow;
    context_.gone = [this] { return peer_gone(); };
  }

  RequestContext& context() { return context_; }
  // the response's head said "Connection: close" (see_head)
  bool said_close() const { return said_close_; }

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
    if (http10_) return true;
    if (!probed_) {
      probed_ = true;
      static const char probe[] = "HTTP/1.1 100 Continue\r\n\r\n";
      if (!send_all(probe, sizeof probe - 1)) return true;
    }
    return false;
  }

  bool is_readable() const override { return off_ < request_.size(); }

  bool is_writable() const override {
    pollfd p{fd_, POLLOUT, 0};
    if (poll(&p, 1, write_timeout_ms_) <= 0 || !(p.revents & POLLOUT)) return false;
    return !peer_gone_hard();
  }

  // the request's bytes, then the end
  ssize_t read(char* ptr, size_t size) override {
    const size_t n = std::min(size, request_.size() - off_);
    std::memcpy(ptr, request_.data() + off_, n);
    off_ += n;
    return (ssize_t)n;
  }

  ssize_t write(const char* ptr, size_t size) override {
    // httplib's "100 Continue": the event loop answered Expect before it read the body
    if (size >= 12 && std::memcmp(ptr, "HTTP/1.1 100", 12) == 0) return (ssize_t)size;
    wrote_ = true;
    see_head(ptr, size);
    return send_all(ptr, size) ? (ssize_t)size : -1;
  }

  // as the event loop saw them at accept: the key HttpServer::context finds the request's context by
  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    ip = ip_;
    port = port_;
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override { local_address_of(fd_, ip, port); }
  socket_t socket() const override { return fd_; }

  // before closing after an answer whose request asked to keep the connection: stop sending,
  // read and drop what the client still sends (up to a second), so the close is not a reset
  // that eats our answer
  void linger() {
    ::shutdown(fd_, SHUT_WR);
    const auto until = StreamClock::now() + std::chrono::seconds(1);
    char sink[16384];
    while (true) {
      const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(until - StreamClock::now()).count();
      pollfd p{fd_, POLLIN, 0};
      if (ms <= 0 || poll(&p, 1, (int)ms) <= 0) break;
      if (recv(fd_, sink, sizeof sink, 0) <= 0) break;
    }
  }

 private:
  // the response's head as it is written: whether it says "Connection: close", after which
  // the connection must close (RFC 9112 9.6) whoever set the header (a route, or httplib's
  // own refusal of a request it could not parse, which no context was found for)
  void see_head(const char* p, size_t n) {
    if (head_seen_) return;
    head_.append(p, std::min(n, kMaxHead - std::min(kMaxHead, head_.size())));
    const size_t end = head_.find("\r\n\r\n");
    if (end == std::string::npos && head_.size() < kMaxHead) return;
    head_seen_ = true;
    if (ascii_lower(head_.substr(0, end == std::string::npos ? end : end + 2)).find("\r\nconnection: close\r\n") !=
        std::string::npos)
      said_close_ = true;
    head_.clear();
  }

  // a reset or failed socket; a half-closed one (EOF to read) still takes our bytes
  bool peer_gone_hard() const {
    pollfd p{fd_, POLLIN, 0};
    if (poll(&p, 1, 0) <= 0) return false;
    return (p.revents & (POLLERR | POLLHUP | POLLNVAL)) != 0;
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
  std::string ip_;
  int port_;
  const std::string& request_;
  size_t off_ = 0;
  int write_timeout_ms_;
  bool http10_;
  bool wrote_ = false, probed_ = false;  // this response: bytes written, FIN probe sent
  static constexpr size_t kMaxHead = 16384;
  std::string head_;  // the response's head so far
  bool head_seen_ = false, said_close_ = false;
  RequestContext context_;
};

// httplib cuts every response to the request's Range, error bodies included, and answers
// many ranges of one file with that many copies (a known httplib bug): a range is honoured for one
// embedded UI file only, otherwise the whole response is sent (RFC 9110 lets a server ignore
// Range)
void keep_ranges_for_files(httplib::Request& req) {
  const bool file = (req.method == "GET" || req.method == "HEAD") && (req.path == "/" || server_web_asset(req.path));
  if (req.ranges.size() != 1 || !file) req.ranges.clear();
}

}  // namespace

// one whole request through httplib; then the connection goes back to the event loop
void HttpServer::run_job(const Job& job) {
  bool keep = false;
  {
    ConnectionStream strm(job.fd, job.ip, job.port, job.request,
                          (int)(write_timeout_sec_ * 1000 + write_timeout_usec_ / 1000), job.overflow);
    const std::string key = job.ip + " " + std::to_string(job.port);
    {
      std::lock_guard<std::mutex> lock(contexts_mu_);
      contexts_[key] = &strm.context();
    }
    bool connection_closed = false;
    const bool ret = process_request(strm, job.last, connection_closed, keep_ranges_for_files);
    {
      std::lock_guard<std::mutex> lock(contexts_mu_);
      contexts_.erase(key);
    }
    // closed after its answer at a route's word, or at the answer's (when the request did not
    // ask for the close itself: then nothing of its is left to drain)
    const bool close_after = strm.context().close_after || (strm.said_close() && !connection_closed);
    keep = ret && !connection_closed && !close_after && !job.last;
    // not kept: after_job closes it, under the event loop's lock, so its place is free before
    // its client sees the end (one that reads to the end and connects again must not find its
    // address's place, or the cap, still taken by the connection it just left)
    if (close_after) strm.linger();
  }
  after_job(job.fd, keep);
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
