// The event loop: one thread, one epoll set, every connection non-blocking. It accepts, reads
// each connection's bytes into that connection's buffer as they come, and finds where its
// request ends (request_reader.h); a whole request goes to a thread (connection.cpp), a
// refused one is answered here (one JSON line, then the socket drains for a second before it
// closes, so the client reads the answer instead of a reset). A slow client (slowloris)
// costs a buffer, never a thread, and its request has a deadline from its first byte (408).
// Connections are bounded: from one address max_per_client, in all max_connections. At a cap
// room is made by shedding the connection waiting longest among those with nothing unread in
// the kernel: one between requests (or silent since it came) first, else one whose request
// has begun (it is answered 503). A connection whose bytes wait to be read is never shed.
// With nothing to shed, kOverflow more are let in for GET /health only (so /health answers
// while every connection is busy), and past those accepting pauses: new connections wait in
// the kernel's backlog until one closes. A connection refused at a cap gets a canned 503
// with Retry-After at once, from this thread, its request never read (a client that retries
// on 503 may not retry a reset).
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/ioctl.h>
#include <unistd.h>
#include <fcntl.h>

#include <algorithm>
#include <cstring>

#include "nanochat/common/error.h"
#include "nanochat/common/log.h"
#include "server/routes.h"

namespace nanochat {

namespace {

std::string client_address(const sockaddr_storage& a, int& port) {
  char host[INET6_ADDRSTRLEN] = "?";
  port = 0;
  if (a.ss_family == AF_INET) {
    inet_ntop(AF_INET, &((const sockaddr_in&)a).sin_addr, host, sizeof host);
    port = ntohs(((const sockaddr_in&)a).sin_port);
  } else if (a.ss_family == AF_INET6) {
    inet_ntop(AF_INET6, &((const sockaddr_in6&)a).sin6_addr, host, sizeof host);
    port = ntohs(((const sockaddr_in6&)a).sin6_port);
  }
  return host;
}

// reads and drops what the socket holds now; false when the client has closed (or it failed)
bool drop_unread(int fd) {
  char sink[16384];
  for (int round = 0; round < 8; round++) {
    const ssize_t got = recv(fd, sink, sizeof sink, MSG_DONTWAIT);
    if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return true;
    if (got <= 0) return false;
  }
  return true;
}

// bytes the kernel holds for this socket that the loop has not read yet
int unread_bytes(int fd) {
  int n = 0;
  return ioctl(fd, FIONREAD, &n) == 0 ? n : 0;
}

// best effort: a refusal or a 100 is a few hundred bytes, which a socket's buffer takes whole
void send_now(int fd, const std::string& bytes) {
  size_t off = 0;
  while (off < bytes.size()) {
    const ssize_t k = send(fd, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (k <= 0) return;
    off += (size_t)k;
  }
}

const char* reason_of(int status) {
  switch (status) {
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 408: return "Request Timeout";
    case 411: return "Length Required";
    case 413: return "Payload Too Large";
    case 414: return "URI Too Long";
    case 415: return "Unsupported Media Type";
    case 431: return "Request Header Fields Too Large";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    default: return "Error";
  }
}

std::string response_bytes(int status, const httplib::Headers& headers, const std::string& body) {
  std::string out = strprintf("HTTP/1.1 %d %s\r\n", status, reason_of(status));
  for (const auto& [name, value] : headers)
    if (name != "Connection" && name != "Content-Length") out += name + ": " + value + "\r\n";
  out += strprintf("Content-Length: %zu\r\nConnection: close\r\n\r\n", body.size());
  return out + body;
}

}  // namespace

HttpServer::HttpServer() {
  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  if (epoll_fd_ < 0) fail("chat-web: epoll_create1: %s", std::strerror(errno));
}

HttpServer::~HttpServer() {
  for (auto& [fd, c] : conns_) ::close(fd);
  ::close(epoll_fd_);
}

ConnectionStats HttpServer::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

RequestContext* HttpServer::context(const httplib::Request& req) const {
  std::lock_guard<std::mutex> lock(contexts_mu_);
  auto it = contexts_.find(req.remote_addr + " " + std::to_string(req.remote_port));
  return it == contexts_.end() ? nullptr : it->second;
}

void HttpServer::stop_serving() { stop_ = true; }

void HttpServer::serve() {
  const int listener = svr_sock_;
  if (listener < 0) fail("chat-web: serve() before bind");
  fcntl(listener, F_SETFL, fcntl(listener, F_GETFL) | O_NONBLOCK);
  queue_ = std::make_unique<ConnectionQueue>((size_t)limits.max_connections + kOverflow);
  const httplib::Headers refusal = {{"Content-Type", "application/json"}, {"Retry-After", "1"}};
  refused_client_answer_ = response_bytes(
      503, refusal,
      server_error_json(503, strprintf("too many connections from this address (the limit is %d); retry later",
                                       limits.max_per_client)));
  refused_full_answer_ = response_bytes(
      503, refusal,
      server_error_json(503, strprintf("too many connections (the limit is %d); retry later", limits.max_connections)));
  set_listening(true);
  serving_ = true;
  std::vector<epoll_event> events(256);
  while (!stop_) loop_once(events);
  {
    std::lock_guard<std::mutex> lock(mu_);
    set_listening(false);
    svr_sock_ = INVALID_SOCKET;
    ::close(listener);
    std::vector<int> idle;  // a connection at a thread closes when its answer is out (after_job)
    for (auto& [fd, c] : conns_)
      if (c->phase != Conn::Phase::busy) idle.push_back(fd);
    for (int fd : idle) close_conn(fd);
    for (auto& [fd, until] : refused_) ::close(fd);
    refused_.clear();
  }
  queue_->shutdown();
  serving_ = false;
}

void HttpServer::set_listening(bool on) {
  if (on == listening_) return;
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = svr_sock_;
  epoll_ctl(epoll_fd_, on ? EPOLL_CTL_ADD : EPOLL_CTL_DEL, svr_sock_, &ev);
  listening_ = on;
}

void HttpServer::loop_once(std::vector<epoll_event>& events) {
  const int n = epoll_wait(epoll_fd_, events.data(), (int)events.size(), 50);
  std::lock_guard<std::mutex> lock(mu_);
  for (int i = 0; i < n; i++) {
    const int fd = events[i].data.fd;
    if (fd == svr_sock_) {
      accept_new();
      continue;
    }
    if (refused_.count(fd)) {
      drain_refused(fd);
      continue;
    }
    auto it = conns_.find(fd);
    if (it != conns_.end() && it->second->phase != Conn::Phase::busy) on_readable(*it->second);
  }
  expire();
  if (!listening_ && !stop_) {  // paused: resume once there is room
    const int normal = (int)conns_.size() - overflow_open_;
    if (normal < limits.max_connections || overflow_open_ < kOverflow || can_shed()) set_listening(true);
  }
}

// a new connection's place: its address under max_per_client (shedding one of that address's
// own if need be), and the total under max_connections (shedding the longest waiting, else an
// overflow place); null: admitted, else the canned answer it is refused with
const std::string* HttpServer::admit(const std::string& ip, bool& overflow) {
  overflow = false;
  auto pc = per_client_.find(ip);
  if (pc != per_client_.end() && pc->second >= limits.max_per_client && !shed_one(&ip)) {
    stats_.refused_client++;
    return &refused_client_answer_;
  }
  const int normal = (int)conns_.size() - overflow_open_;
  if (normal < limits.max_connections || shed_one(nullptr)) return nullptr;
  overflow = true;
  if (overflow_open_ < kOverflow) return nullptr;
  stats_.refused_full++;
  return &refused_full_answer_;
}

// the answer goes out before anything is read; what the client sent is then dropped until it
// closes, or for a second
void HttpServer::refuse_at_door(int fd, const std::string& answer) {
  send_now(fd, answer);
  ::shutdown(fd, SHUT_WR);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = fd;
  if (!drop_unread(fd) || refused_.size() >= kMaxRefused || epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) != 0) {
    ::close(fd);
    return;
  }
  refused_[fd] = Clock::now() + std::chrono::seconds(1);
}

void HttpServer::drain_refused(int fd) {
  if (drop_unread(fd)) return;
  epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
  ::close(fd);
  refused_.erase(fd);
}

void HttpServer::accept_new() {
  for (int k = 0; k < 64 && listening_; k++) {
    const int normal = (int)conns_.size() - overflow_open_;
    if (normal >= limits.max_connections && overflow_open_ >= kOverflow && !can_shed()) {
      stats_.paused++;
      set_listening(false);  // the kernel's backlog holds the rest
      return;
    }
    sockaddr_storage addr{};
    socklen_t len = sizeof addr;
    const int fd = accept4(svr_sock_, (sockaddr*)&addr, &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EMFILE || errno == ENFILE) {  // out of descriptors: wait for one to close
        stats_.paused++;
        set_listening(false);
      }
      return;
    }
    int port = 0;
    const std::string ip = client_address(addr, port);
    bool overflow = false;
    if (const std::string* refusal = admit(ip, overflow)) {
      refuse_at_door(fd, *refusal);
      continue;
    }
    const int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = fd;
    if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) != 0) {
      ::close(fd);
      continue;
    }
    auto c = std::make_unique<Conn>();
    c->fd = fd;
    c->ip = ip;
    c->port = port;
    c->overflow = overflow;
    c->requests_left = overflow ? 1 : keep_alive_max_count_;
    const int first_ms = overflow ? std::min(limits.first_byte_ms, 2000) : limits.first_byte_ms;
    new_request(*c, Clock::now() + std::chrono::milliseconds(first_ms));
    place(*c, &idle_);
    overflow_open_ += overflow;
    per_client_[ip]++;
    conns_[fd] = std::move(c);
    stats_.accepted++;
    stats_.open = (int64_t)conns_.size();
    stats_.peak = std::max(stats_.peak, stats_.open);
  }
}

void HttpServer::new_request(Conn& c, Clock::time_point deadline) {
  c.reader = std::make_unique<RequestReader>(limits.request);
  c.request.clear();
  c.since = Clock::now();
  c.deadline = deadline;
}

void HttpServer::place(Conn& c, std::list<int>* line) {
  if (c.line) c.line->erase(c.order);
  c.line = line;
  if (line) c.order = line->insert(line->end(), c.fd);
}

bool HttpServer::can_shed() const {
  for (const std::list<int>* line : {&idle_, &begun_})
    for (int fd : *line)
      if (!conns_.at(fd)->overflow && unread_bytes(fd) == 0) return true;
  return false;
}

// closes the longest waiting connection (of `ip`, or any) that has nothing unread: one
// draining after its answer, or silent between requests, first; else one whose request has
// begun (answered 503)
bool HttpServer::shed_one(const std::string* ip) {
  for (const bool begun : {false, true}) {
    for (int fd : begun ? begun_ : idle_) {
      const Conn& c = *conns_.at(fd);
      if (c.overflow || (ip && c.ip != *ip) || unread_bytes(fd) != 0) continue;
      if (begun) {
        send_now(fd, response_bytes(503, {{"Content-Type", "application/json"}, {"Retry-After", "1"}},
                                    server_error_json(503, "too many connections; retry later")));
        stats_.shed_partial++;
      } else {
        stats_.shed_idle += c.phase == Conn::Phase::waiting;
      }
      close_conn(fd);
      return true;
    }
  }
  return false;
}

void HttpServer::on_readable(Conn& c) {
  char buf[16384];
  for (int round = 0; round < 4; round++) {  // then the others get their turn
    const ssize_t got = recv(c.fd, buf, sizeof buf, 0);
    if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
    if (got <= 0) return close_conn(c.fd);          // the client left (mid-request: nobody to answer)
    if (c.phase == Conn::Phase::closing) continue;  // drained after our answer
    const int fd = c.fd;
    take_bytes(c, buf, (size_t)got);
    auto it = conns_.find(fd);
    if (it == conns_.end() || it->second->phase != Conn::Phase::waiting) return;
  }
}

// bytes of the connection's request: the request whole goes to a thread, a refused one is
// answered; bytes past its end wait for the next request
void HttpServer::take_bytes(Conn& c, const char* p, size_t n) {
  const bool began = c.reader->started();
  const size_t used = c.reader->feed(p, n);
  if (!began && c.reader->started()) {
    const int ms = c.overflow ? std::min(limits.deadline_ms, 2000) : limits.deadline_ms;
    c.deadline = Clock::now() + std::chrono::milliseconds(ms);
  }
  if (!began && c.reader->started()) place(c, &begun_);
  c.request.append(p, used);
  // the body's length is known: its room taken once (growing by doubling would hold up to 2x)
  if (c.reader->state() == RequestReader::State::body && !c.reader->head().chunked &&
      c.request.capacity() < c.request.size() + c.reader->head().length)
    c.request.reserve(c.request.size() + c.reader->head().length);
  c.rest.append(p + used, n - used);
  switch (c.reader->state()) {
    case RequestReader::State::whole: return dispatch(c);
    case RequestReader::State::refused: return refuse(c, c.reader->status(), c.reader->message());
    case RequestReader::State::body:
      if (c.reader->awaits_continue()) answer_continue(c);
      return;
    case RequestReader::State::head: return;
  }
}

void HttpServer::dispatch(Conn& c) {
  c.phase = Conn::Phase::busy;
  place(c, nullptr);
  epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, c.fd, nullptr);
  Job job{c.fd, c.ip, c.port, std::move(c.request), c.requests_left <= 1, c.overflow};
  c.request.clear();
  queue_->enqueue([this, job = std::move(job)] { run_job(job); });
}

// Expect: 100-continue before the body: the guard (key, Host, Origin, size) first, so a refused
// client gets the refusal, not an invitation to send its body
void HttpServer::answer_continue(Conn& c) {
  httplib::Request req;
  const std::string& line = c.reader->request_line();
  const size_t sp1 = line.find(' '), sp2 = line.rfind(' ');
  req.method = line.substr(0, sp1);
  req.target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  req.path = server_percent_decode(req.target.substr(0, req.target.find('?')));
  for (const auto& [name, value] : c.reader->fields()) req.headers.emplace(name, value);
  // as httplib adds them after the client's own (the guard wants each exactly once)
  req.headers.emplace("REMOTE_ADDR", c.ip);
  for (const char* name : {"REMOTE_PORT", "LOCAL_ADDR", "LOCAL_PORT"}) req.headers.emplace(name, "");
  httplib::Response res;
  RequestContext ctx;  // the body is not read: the connection closes after a refusal anyway
  ctx.overflow = c.overflow;
  if (continue_guard && continue_guard(req, res, ctx) == httplib::Server::HandlerResponse::Handled) {
    send_now(c.fd, response_bytes(res.status, res.headers, res.body));
    ::shutdown(c.fd, SHUT_WR);
    c.phase = Conn::Phase::closing;
    place(c, &idle_);
    c.deadline = Clock::now() + std::chrono::seconds(1);
    return;
  }
  send_now(c.fd, "HTTP/1.1 100 Continue\r\n\r\n");
}

void HttpServer::refuse(Conn& c, int status, const std::string& message) {
  send_now(c.fd, response_bytes(status, {{"Content-Type", "application/json"}}, server_error_json(status, message)));
  ::shutdown(c.fd, SHUT_WR);  // then what the client still sends is read and dropped, for a second
  c.phase = Conn::Phase::closing;
  place(c, &idle_);
  c.deadline = Clock::now() + std::chrono::seconds(1);
}

// the deadlines: a silent connection closes, a request begun and not whole is answered 408,
// a draining one closes
void HttpServer::expire() {
  const auto now = Clock::now();
  if (now - expired_at_ < std::chrono::milliseconds(10)) return;  // a busy loop need not look each time
  expired_at_ = now;
  std::vector<int> due;
  for (const std::list<int>* line : {&idle_, &begun_})
    for (int fd : *line)
      if (conns_.at(fd)->deadline <= now) due.push_back(fd);
  for (auto it = refused_.begin(); it != refused_.end();) {
    if (it->second > now) {
      ++it;
      continue;
    }
    epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, it->first, nullptr);
    ::close(it->first);
    it = refused_.erase(it);
  }
  for (int fd : due) {
    Conn& c = *conns_.at(fd);
    if (c.phase == Conn::Phase::waiting && c.reader->started()) {
      stats_.timed_out++;
      const int ms = c.overflow ? std::min(limits.deadline_ms, 2000) : limits.deadline_ms;
      refuse(c, 408, strprintf("the request did not arrive within %.1f s", ms / 1000.0));
    } else {
      close_conn(fd);
    }
  }
}

void HttpServer::close_conn(int fd) {
  auto it = conns_.find(fd);
  if (it == conns_.end()) return;
  Conn& c = *it->second;
  if (c.phase != Conn::Phase::busy) {
    place(c, nullptr);
    epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
  }
  overflow_open_ -= c.overflow;
  auto pc = per_client_.find(c.ip);
  if (--pc->second == 0) per_client_.erase(pc);
  ::close(fd);
  conns_.erase(it);
  stats_.open = (int64_t)conns_.size();
}

// a request's thread is done with the connection: it waits for its next request (the bytes
// already read past the last one first), or closes
void HttpServer::after_job(int fd, bool keep) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = conns_.find(fd);
  if (it == conns_.end()) return;
  Conn& c = *it->second;
  if (!keep || stop_ || c.requests_left <= 1) return close_conn(fd);
  c.requests_left--;
  c.phase = Conn::Phase::waiting;
  new_request(c, Clock::now() + std::chrono::seconds(keep_alive_timeout_sec_));
  place(c, &idle_);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = fd;
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev);
  if (!c.rest.empty()) {
    std::string rest = std::move(c.rest);
    c.rest.clear();
    take_bytes(c, rest.data(), rest.size());
  }
}

}  // namespace nanochat
