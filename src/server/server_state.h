// defines: ServerWorker, ServerState, ConnectionLimits, ConnectionQueue, HttpServer,
//          server_connection_gone, server_connection_overflow, server_connection_close_after,
//          server_connection_refused, server_error_json, server_send_error, server_close_after,
//          server_guard, server_workers_setup, server_routes_install
// What the chat-web server's routes (routes.cpp), its connections (connection.cpp) and its
// lifecycle (http_server.cpp) share: the workers, the request counters and the stop level.
// Internal to the server module.
#pragma once
#include <httplib.h>
#include <sys/socket.h>

#include <atomic>
#include <condition_variable>
#include <ctime>
#include <deque>
#include <functional>
#include <chrono>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "nanochat/engine.h"
#include "nanochat/engine/scheduler.h"
#include "nanochat/server.h"

namespace nanochat {

struct ServerWorker {
  int gpu_id;  // the device index (upstream's "gpu" field); on CPU the worker's index
  std::string device;
  std::shared_ptr<const Engine> engine;  // CPU workers share one model copy
  std::shared_ptr<Scheduler> scheduler;  // its decode batch
};

struct ServerState {
  ServerOptions opt;
  std::atomic<bool> ready{false};
  std::atomic<int> stop_level{0};  // 0 serving, 1 draining, 2 cancelling in-flight streams
  std::atomic<int> in_flight{0};   // requests admitted and not yet answered
  std::atomic<int64_t> served{0}, tokens_out{0};
  std::vector<ServerWorker> workers;  // written once by the loader before `ready`
  std::string model_id;
  int64_t created = (int64_t)std::time(nullptr);
  std::string load_error;
};

// What a connection may send before httplib sees it (connection.cpp enforces these)
struct ConnectionLimits {
  size_t max_line = 8192;          // request line (414) and each header line (431), bytes
  size_t max_headers = 100;        // header lines (431)
  size_t max_raw_body = 3 << 20;   // bytes on the wire after the head, framing included (413)
  int deadline_ms = 10000;         // the head and body of one request (408)
  int first_byte_ms = 3000;        // a new connection silent this long is closed
  int max_connections = 256;       // open connections; beyond, the oldest idle one is closed, and
                                   // with none idle only GET /health is served (the others 503)
};

// httplib's task queue: one thread per connection, started when needed up to max_threads
// (then connections wait their turn). A thread idle for a second exits (a few are kept), and
// with it the per-thread buffers the math libraries grew for the generations it ran: kept,
// those grow the server's RSS with every thread that has served a long prompt.
class ConnectionQueue : public httplib::TaskQueue {
 public:
  // before_shutdown: called once the listener has stopped, before the threads are joined
  ConnectionQueue(size_t max_threads, std::function<void()> before_shutdown)
      : max_threads_(max_threads), before_shutdown_(std::move(before_shutdown)) {}
  void enqueue(std::function<void()> fn) override;
  void shutdown() override;

 private:
  struct Worker {
    std::thread thread;
    bool done = false;  // returned from loop(): join it
  };
  void loop(Worker* self);
  void reap();  // joins the threads that exited; mu_ held
  size_t max_threads_;
  std::function<void()> before_shutdown_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  std::list<Worker> threads_;
  size_t idle_ = 0, live_ = 0;
  bool stop_ = false;
};

// httplib 0.11.4 (Debian 12) reads a header line whole before checking its length, has no
// deadline for a request and no cap on connections, and keeps a thread on every connection
// while it waits for the next request. Its socket loop is a private virtual, so it is
// replaced here (connection.cpp): a socket between requests (new, or kept alive after an
// answer) waits in one epoll set watched by one thread, and only a socket with bytes to read
// takes a connection thread, for as long as its request lasts; its bytes pass through a
// bounded stream. httplib's accept loop, request parsing, routing and response writing are
// used as they are.
class HttpServer : public httplib::Server {
 public:
  using Clock = std::chrono::steady_clock;
  ConnectionLimits limits;
  std::atomic<int> open_connections{0};

  HttpServer();
  ~HttpServer() override;
  // httplib 0.11 listens with a backlog of 5: a burst of connections beyond it has its SYNs
  // dropped and retried a second later. Linux lets listen() be called again to raise it.
  void raise_backlog(int n) { ::listen(svr_sock_, n); }
  size_t idle_count() const;  // sockets waiting between requests

 private:
  struct Idle {
    Clock::time_point deadline;  // closed then if still silent
    size_t requests_left;        // keep-alive requests it may still send
    bool overflow;               // came beyond the cap: one request, /health only
    std::list<int>::iterator order;
  };
  bool process_and_close_socket(socket_t sock) override;  // a new socket: parked until it speaks
  void park(int fd, Clock::time_point deadline, size_t requests_left, bool overflow);
  void serve(int fd, size_t requests_left, bool overflow);  // on a connection thread
  void idle_loop();
  void close_all_idle();               // the listener stopped: no more requests
  bool close_oldest_idle();            // idle_mu_ held; false when none is idle
  void forget_idle(int fd);            // idle_mu_ held: out of the set (still open)
  void close_connection(int fd);

  ConnectionQueue* queue_ = nullptr;   // this listen's task queue (httplib owns it); null once stopping
  int epoll_fd_ = -1;
  mutable std::mutex idle_mu_;
  std::unordered_map<int, Idle> idle_;
  std::list<int> idle_order_;          // parked first at the front: the oldest idle
  bool idle_stop_ = false;
  std::thread idle_thread_;
};

// On a connection's thread, during a request (false/0 elsewhere):
bool server_connection_gone();        // the client closed its end (or the socket failed)
bool server_connection_overflow();    // this connection came beyond the connection cap
void server_connection_close_after(); // close once this response is out (a body left unread)
int server_connection_refused();      // status the connection answered itself (408/413/414/431), else 0

// the one-line JSON error every refusal carries: {"error":{message,type,code},"detail":message}
std::string server_error_json(int status, const std::string& message);
// that error as the response
void server_send_error(httplib::Response& res, int status, const std::string& message);
// the connection closes once this response is out (its body is left unread); said in the
// response too (httplib adds the header itself when the request asked for the close)
void server_close_after(const httplib::Request& req, httplib::Response& res);

// Every request before routing and before its body is read (guards.cpp); a refusal is Handled
httplib::Server::HandlerResponse server_guard(const ServerState& st, const httplib::Request& req, httplib::Response& res);

// the workers (one per GPU, or --workers on the CPU), each a scheduler of max_batch rows over
// its engine with its own queue (workers.cpp)
void server_workers_setup(ServerState& st, const std::vector<std::shared_ptr<const Engine>>& engines);

// the server's threads, limits, headers, and every route with its error handling (routes.cpp)
void server_routes_install(HttpServer& svr, ServerState& st);

}  // namespace nanochat
