// What makes 0.11.4 the oldest cpp-httplib nanochat builds with: the server's socket stream
// (src/server/connection.cpp, which needs LibTorch to compile) overrides every one of
// httplib::Stream's pure virtuals, get_local_ip_and_port among them (new in 0.11.4).
#include <httplib.h>

namespace {
struct ProbeStream final : httplib::Stream {
  bool is_readable() const override { return false; }
  bool is_writable() const override { return false; }
  ssize_t read(char*, size_t) override { return -1; }
  ssize_t write(const char*, size_t) override { return -1; }
  void get_remote_ip_and_port(std::string&, int&) const override {}
  void get_local_ip_and_port(std::string&, int&) const override {}
  socket_t socket() const override { return -1; }
};
}  // namespace

bool probe_stream_is_readable() { return ProbeStream{}.is_readable(); }
