// The chat-web server's connections: one event loop (event_loop.cpp) accepts them and reads
// every request whole, non-blocking, each connection with its own buffer, head cap and
// deadline; only a whole request takes a thread (connection.cpp), where httplib parses,
// routes and answers it. Open connections are bounded in all and per client address.
// httplib's own accept and socket loops are not used (they keep a thread on a connection for
// as long as its client takes to send a request); bind_to_port, process_request and the
// routes are. Internal to the server module.
#pragma once
#include <httplib.h>
#include <sys/epoll.h>
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "server/request_reader.h"

namespace nanochat {

struct ConnectionLimits {
  RequestLimits request;      // a request's head and body (request_reader.h)
  int deadline_ms = 10000;    // a request's head and body, from its first byte (408)
  int first_byte_ms = 3000;   // a new connection silent this long is closed
  int max_connections = 256;  // open connections; beyond, one without a request is shed, else
                              // a few more get /health only, else accepting pauses
  int max_per_client = 64;    // open connections from one client address
};

// what a route may ask of the connection its request came on (HttpServer::context finds it
// by the request's remote address and port, unique among the open connections)
struct RequestContext {
  bool overflow = false;       // the connection came beyond the connection cap: /health only
  bool close_after = false;    // set by a route: close once this response is out
  std::function<bool()> gone;  // the client closed its end (or the socket failed)
  bool client_gone() const { return gone && gone(); }
};

// what the event loop has seen (GET /stats, the tests and bench/server read it)
struct ConnectionStats {
  int64_t open = 0, peak = 0;  // connections open now, and at most
  int64_t accepted = 0;
  int64_t shed_idle = 0;       // closed to make room: between requests, nothing sent
  int64_t shed_partial = 0;    // closed to make room: a request begun, all its bytes read (503)
  int64_t refused_client = 0;  // answered 503 at once: its address already held max_per_client
  int64_t refused_full = 0;    // answered 503 at once: every place, overflow ones included, taken
  int64_t paused = 0;          // times accepting paused (full, nothing to shed)
  int64_t timed_out = 0;       // 408 at the request deadline
};

// the threads that run whole requests: started when needed up to max_threads; a thread idle for a
// second exits (a few are kept), and with it the per-thread buffers the math libraries grew
// for the generations it ran (kept, they grow the server's RSS with every thread that served
// a long prompt)
class ConnectionQueue {
 public:
  explicit ConnectionQueue(size_t max_threads) : max_threads_(max_threads) {}
  void enqueue(std::function<void()> fn);
  void shutdown();  // runs the queued jobs, then joins the threads

 private:
  struct Worker {
    std::thread thread;
    bool done = false;  // returned from loop(): join it
  };
  void loop(Worker* self);
  void reap();  // joins the threads that exited; mu_ held
  size_t max_threads_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  std::list<Worker> threads_;
  size_t idle_ = 0, live_ = 0;
  bool stop_ = false;
};

class HttpServer : public httplib::Server {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr int kOverflow = 16;  // connections beyond the cap while none can be shed: /health only
  ConnectionLimits limits;
  // runs for a head that waits for "100 Continue" before its body: Handled means refused, and
  // `res` is sent instead (routes.cpp sets it to the request guard)
  std::function<httplib::Server::HandlerResponse(const httplib::Request&, httplib::Response&, RequestContext&)>
      continue_guard;

  HttpServer();
  ~HttpServer() override;
  // httplib 0.11 listens with a backlog of 5; Linux lets listen() be called again to raise it
  void raise_backlog(int n) { ::listen(svr_sock_, n); }
  // after bind_to_port: the event loop on this thread until stop_serving(); then the requests
  // being answered finish and it returns
  void serve();
  void stop_serving();
  bool serving() const { return serving_; }
  ConnectionStats stats() const;
  // the connection of a request being answered (null for any other request)
  RequestContext* context(const httplib::Request& req) const;

 private:
  // one open connection, as the event loop keeps it
  struct Conn {
    enum class Phase { waiting, busy, closing };  // for its request; at a thread; answered, draining
    int fd = -1;
    std::string ip;
    int port = 0;
    Phase phase = Phase::waiting;
    std::unique_ptr<RequestReader> reader;  // the request being read
    std::string request;                    // its bytes so far
    std::string rest;                       // bytes read past its end (pipelined), for after it
    Clock::time_point since, deadline;      // waiting since (the shed order); closed or 408 at the deadline
    size_t requests_left = 0;               // keep-alive requests it may still send
    bool overflow = false;                  // came beyond the cap: one request, /health only
    std::list<int>* line = nullptr;         // idle_ or begun_ while waiting or closing (null at a thread)
    std::list<int>::iterator order;         // its place there
  };
  // a whole request, handed to a thread
  struct Job {
    int fd;
    std::string ip;
    int port;
    std::string request;
    bool last;  // the connection's last request (keep-alive count spent)
    bool overflow;
  };
  void loop_once(std::vector<epoll_event>& events);
  void accept_new();
  const std::string* admit(const std::string& ip, bool& overflow);
  bool shed_one(const std::string* ip);
  bool can_shed() const;
  void on_readable(Conn& c);
  void take_bytes(Conn& c, const char* p, size_t n);
  void dispatch(Conn& c);
  void answer_continue(Conn& c);
  void refuse(Conn& c, int status, const std::string& message);
  void refuse_at_door(int fd, const std::string& answer);
  void drain_refused(int fd);
  void expire();
  void set_listening(bool on);
  void new_request(Conn& c, Clock::time_point deadline);
  void place(Conn& c, std::list<int>* line);  // to the back of a line (null: out of both)
  void close_conn(int fd);
  void run_job(const Job& job);       // on a request thread (connection.cpp)
  void after_job(int fd, bool keep);  // back from the thread: wait for the next request, or close

  mutable std::mutex mu_;
  int epoll_fd_ = -1;
  std::unordered_map<int, std::unique_ptr<Conn>> conns_;
  // connections not at a thread, each list longest waiting first: idle_ those with no request
  // begun (new, kept alive, or draining after an answer), begun_ those in the middle of one
  std::list<int> idle_, begun_;
  Clock::time_point expired_at_;  // when expire() last ran
  std::unordered_map<std::string, int> per_client_;
  // connections refused at a cap: answered, their bytes read and dropped until the client
  // closes or the deadline (so the close is no reset that eats the answer); outside the caps,
  // bounded by kMaxRefused (past it one is closed right after its answer)
  static constexpr size_t kMaxRefused = 64;
  std::unordered_map<int, Clock::time_point> refused_;
  std::string refused_client_answer_, refused_full_answer_;
  // the connections whose request is at a thread, by "address port"
  mutable std::mutex contexts_mu_;
  std::unordered_map<std::string, RequestContext*> contexts_;
  int overflow_open_ = 0;
  bool listening_ = false;
  std::atomic<bool> stop_{false}, serving_{false};
  ConnectionStats stats_;
  std::unique_ptr<ConnectionQueue> queue_;
};

}  // namespace nanochat
