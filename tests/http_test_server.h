// A cpp-httplib server on 127.0.0.1 (a free port) in a thread, for download tests: serves
// files from memory with Range support (httplib's own), and misbehaves on request: drop the
// connection at a byte offset, answer 500, redirect to another server, go slowly, or hold
// every body until the test lets go (to make downloads overlap for certain). Every
// request is logged with its Range start and If-Range. Files carry an ETag and/or a
// Last-Modified date; a Range whose If-Range no longer matches gets the whole file (200).
#pragma once
#include <httplib.h>

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

class TestServer {
 public:
  struct Request {
    std::string path;
    long long range_from;  // -1 without a Range header
    int status;
    std::string if_range;  // "" without an If-Range header
  };

  // with cert and key (PEM files): HTTPS
  explicit TestServer(const std::string& cert = "", const std::string& key = "")
      : scheme_(cert.empty() ? "http" : "https"),
        server_(cert.empty() ? new httplib::Server : new httplib::SSLServer(cert.c_str(), key.c_str())) {
    server_->Get(".*", [this](const httplib::Request& req, httplib::Response& res) { handle(req, res); });
    port_ = server_->bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_->listen_after_bind(); });
    for (int i = 0; i < 500 && !server_->is_running(); i++) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  ~TestServer() {
    server_->stop();
    thread_.join();
  }

  int port() const { return port_; }
  std::string url(const std::string& path = "") const {
    return scheme_ + "://127.0.0.1:" + std::to_string(port_) + path;
  }

  // what the server does, set before requests arrive
  std::map<std::string, std::string> files;  // path -> body
  std::atomic<int> fail_500{0};              // answer 500 this many times
  std::atomic<int> drops{0};                 // this many times, close the connection at drop_at
  long long drop_at = 0;
  std::atomic<int> redirects{0};  // this many times, 302 to redirect_base + path
  std::string redirect_base;
  int chunk_sleep_ms = 0;         // pause per 16 KiB chunk (slow server)
  std::atomic<bool> hold{false};  // bodies wait while set (at most 20 s)
  bool ignore_range = false;      // answer every request 200 with the whole file
  std::string etag = "\"v1\"";    // the files' validators ("": header not sent);
  std::string last_modified;      // change them (with the files) between downloads
  bool chunked = false;           // bodies without Content-Length (chunked encoding)

  std::vector<Request> requests() {
    std::lock_guard<std::mutex> g(mutex_);
    return log_;
  }
  int count(const std::string& path, int status) {
    int n = 0;
    for (auto& r : requests()) n += r.path == path && r.status == status;
    return n;
  }

 private:
  void record(const httplib::Request& req, int status) {
    long long from = -1;
    if (req.has_header("Range")) std::sscanf(req.get_header_value("Range").c_str(), "bytes=%lld-", &from);
    std::lock_guard<std::mutex> g(mutex_);
    log_.push_back({req.path, from, status, req.get_header_value("If-Range")});
  }

  void handle(const httplib::Request& req, httplib::Response& res) {
    if (redirects > 0) {
      redirects--;
      record(req, 302);
      res.status = 302;
      res.set_header("Location", redirect_base + req.path);
      return;
    }
    auto it = files.find(req.path);
    if (it == files.end()) {
      record(req, 404);
      res.status = 404;
      return;
    }
    if (fail_500 > 0) {
      fail_500--;
      record(req, 500);
      res.status = 500;
      return;
    }
    // RFC 9110 If-Range: an ETag (quoted) or a date; the range only while it still matches
    const std::string if_range = req.get_header_value("If-Range");
    const bool stale = !if_range.empty() && if_range != (if_range[0] == '"' ? etag : last_modified);
    if (stale) const_cast<httplib::Request&>(req).ranges.clear();
    record(req, req.has_header("Range") && !stale && !ignore_range ? 206 : 200);
    if (!etag.empty()) res.set_header("ETag", etag);
    if (!last_modified.empty()) res.set_header("Last-Modified", last_modified);
    const std::string* body = &it->second;
    bool drop = drops > 0;
    if (drop) drops--;
    long long drop_at = drop_at_value(drop);
    int sleep_ms = chunk_sleep_ms;
    std::atomic<bool>* hold_p = &hold;
    // status left unset: httplib answers 206 with Content-Range for a Range request
    if (ignore_range) {
      // httplib would still cut the body to the requested range (under a 200!); a server
      // without range support sends the whole file
      const_cast<httplib::Request&>(req).ranges.clear();
      res.status = 200;
    }
    if (chunked) {  // the whole file, its size unsaid
      res.set_chunked_content_provider("application/octet-stream", [body](size_t offset, httplib::DataSink& sink) {
        if (offset >= body->size()) return sink.done(), true;
        return sink.write(body->data() + offset, std::min<size_t>(body->size() - offset, 16384));
      });
      return;
    }
    res.set_content_provider(body->size(), "application/octet-stream",
                             [body, drop_at, sleep_ms, hold_p](size_t offset, size_t length, httplib::DataSink& sink) {
                               for (int i = 0; i < 4000 && *hold_p; i++)
                                 std::this_thread::sleep_for(std::chrono::milliseconds(5));
                               size_t n = std::min<size_t>(length, 16384);
                               if (drop_at >= 0 && (long long)(offset + n) >= drop_at) {
                                 if ((long long)offset < drop_at) sink.write(body->data() + offset, drop_at - offset);
                                 return false;  // closes the connection mid-body
                               }
                               if (sleep_ms) std::this_thread::sleep_for(std::chrono::milliseconds(sleep_ms));
                               sink.write(body->data() + offset, n);
                               return true;
                             });
  }
  long long drop_at_value(bool drop) const { return drop ? drop_at : -1; }

  std::string scheme_;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  int port_ = 0;
  std::mutex mutex_;
  std::vector<Request> log_;
};
