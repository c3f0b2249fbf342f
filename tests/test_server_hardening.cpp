// The chat-web server against hostile clients (issue 17), on the real binary with the tiny
// model of server_fixture.h, over raw sockets:
//  - JSON nested 200,000 deep -> 400 (as JSON and as a text/plain "simple" request, and right
//    after start while the model may still load);
//  - each known CVE of Debian 12's cpp-httplib 0.11.4 that reaches a server, shown closed:
//    long header lines (CVE-2025-53628), many headers (CVE-2025-52887), chunked and length-less
//    bodies (CVE-2025-46728), a negative chunk size (CVE-2026-45352), a gzip bomb
//    (CVE-2026-22776), shadowed REMOTE_ADDR (CVE-2025-66570), CR LF smuggled through percent
//    escapes into headers or logs (CVE-2026-45372), set_header's own check (CVE-2023-26130,
//    Debian's backport); memory is
//    read from /proc/<pid>/status before and after;
//  - no CORS by default, --cors-origin, the Host check against DNS rebinding, --api-key;
//  - slowloris: 100 dripping sockets do not delay /health, and get 408 at the deadline.
#include <signal.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <thread>

#include <gtest/gtest.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include "http_raw_client.h"
#include "nanochat/common/error.h"
#include "nanochat/server.h"
#include "server_fixture.h"

using namespace nanochat;
using json = nlohmann::json;

namespace {

// the tiny model's NANOCHAT_BASE_DIR, removed at exit (after the servers, built later, are gone)
struct BaseDir {
  std::string path = tiny_chat_base_dir();
  ~BaseDir() {
    if (path.rfind("/tmp/nanochat_server_", 0) == 0) std::system(("rm -rf " + path).c_str());
  }
};
const std::string& base_dir() {
  static BaseDir base;
  return base.path;
}

// a running server with extra flags, healthy before the test starts
struct Server {
  ServerProcess proc;
  explicit Server(std::vector<std::string> args) : proc(NANOCHAT_BIN, base_dir(), args) { wait_until_healthy(proc.port()); }
  int port() const { return proc.port(); }
};

// the default hardened server most tests share (short deadline for the slowloris test)
Server& shared() {
  static Server s({"--workers", "2", "-q", "--request-deadline", "3"});
  return s;
}

int64_t rss_kb(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6));
  return -1;
}

// sends `head` and then `more()` pieces from a thread (the server may refuse midway and
// close), while this thread reads the whole answer
std::string send_streaming(int port, const std::string& head, const std::function<std::string(int)>& piece, int pieces) {
  int fd = raw_connect(port);
  if (fd < 0) return "";
  std::thread sender([&] {
    if (!raw_send(fd, head)) return;
    for (int i = 0; i < pieces; i++)
      if (!raw_send(fd, piece(i))) return;
  });
  std::string resp = raw_read_all(fd, 10000);
  ::shutdown(fd, SHUT_RDWR);  // unblocks the sender if it is still at it
  sender.join();
  close(fd);
  return resp;
}

int status_of(const std::string& raw) { return raw.rfind("HTTP/1.1 ", 0) == 0 ? std::stoi(raw.substr(9, 3)) : 0; }

void expect_json_error(const RawResponse& r, int status, const std::string& needle, const std::string& what) {
  EXPECT_EQ(r.status, status) << what << ": " << r.body;
  json j = json::parse(r.body, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << what << ": " << r.body;
  ASSERT_TRUE(j.contains("error")) << what << ": " << r.body;
  EXPECT_EQ(j["error"]["code"], status) << what;
  EXPECT_NE(j["error"]["message"].get<std::string>().find(needle), std::string::npos) << what << ": " << r.body;
  EXPECT_EQ(r.body.find('\n'), std::string::npos) << "one line";
}

RawResponse request(int port, const std::string& raw) {
  int fd = raw_connect(port);
  if (fd < 0) throw std::runtime_error("connect failed");
  raw_send(fd, raw);
  std::string out = raw_read_all(fd, 10000);
  close(fd);
  return parse_response(out);
}

std::string get(const std::string& path, const std::string& extra_headers = "", const std::string& host = "127.0.0.1") {
  return "GET " + path + " HTTP/1.1\r\nHost: " + host + "\r\nConnection: close\r\n" + extra_headers + "\r\n";
}

std::string post(const std::string& path, const std::string& body, const std::string& extra_headers = "") {
  return "POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Type: application/json\r\n" +
         extra_headers + "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
}

const std::string kHello = R"({"messages":[{"role":"user","content":"hello"}],"max_tokens":2})";

}  // namespace

// ---- units -------------------------------------------------------------------------------------

TEST(HardeningUnits, JsonDepthScan) {
  EXPECT_EQ(server_json_depth("{}", 64), 1);
  EXPECT_EQ(server_json_depth(R"({"a":[1,{"b":[]}]})", 64), 4);
  EXPECT_EQ(server_json_depth(R"(["[[[{{{", "\"[[", "\\"])", 64), 1);  // brackets in strings, escaped quotes
  EXPECT_EQ(server_json_depth("\"[[[\"", 64), 0);
  EXPECT_EQ(server_json_depth(std::string(1000, '['), 5), 6);  // stops just past the limit
  // the parser: 64 levels pass the depth check (and fail as a bad stop), 65 do not
  auto nested = [](int levels) {
    return R"({"messages":[{"role":"user","content":"hi"}],"stop":)" + std::string(levels - 1, '[') +
           std::string(levels - 1, ']') + "}";
  };
  try {
    server_parse_chat_request(nested(64), true, ChatDefaults{});
    ADD_FAILURE() << "64 levels of stop are still not strings";
  } catch (const ServerError& e) {
    EXPECT_NE(std::string(e.what()).find("stop must be"), std::string::npos) << e.what();
  }
  try {
    server_parse_chat_request(nested(65), true, ChatDefaults{});
    ADD_FAILURE() << "65 levels accepted";
  } catch (const ServerError& e) {
    EXPECT_EQ(e.status, 400);
    EXPECT_NE(std::string(e.what()).find("nested deeper than 64"), std::string::npos) << e.what();
  }
}

TEST(HardeningUnits, LoopbackHostNamesAndLogEscape) {
  for (const char* ok : {"localhost", "LocalHost:8000", "127.0.0.1", "127.0.0.1:1", "[::1]", "[::1]:65535"})
    EXPECT_TRUE(server_host_is_loopback_name(ok)) << ok;
  for (const char* no : {"", "evil.example", "localhost.evil.example", "127.0.0.1.nip.io", "127.0.0.2", "[::1]:x",
                         "localhost:123456", "localhost:", "0.0.0.0", "::1"})
    EXPECT_FALSE(server_host_is_loopback_name(no)) << no;
  EXPECT_TRUE(server_bind_is_loopback("127.0.0.1"));
  EXPECT_TRUE(server_bind_is_loopback("localhost"));
  EXPECT_TRUE(server_bind_is_loopback("::1"));
  EXPECT_FALSE(server_bind_is_loopback("0.0.0.0"));
  EXPECT_EQ(server_log_escape("/a\r\nb\x1b[2J\\c\x7f"), "/a\\x0d\\x0ab\\x1b[2J\\x5cc\\x7f");
}

// ---- JSON depth over HTTP ---------------------------------------------------------------------

TEST(Hardening, DeepJsonIs400EvenWhileLoadingAndAsTextPlain) {
  const std::string deep = "{\"stop\":" + std::string(200000, '[') + std::string(200000, ']') + "}";
  // a fresh server, asked at once: loaded or not, the body is refused before any readiness check
  ServerProcess fresh(NANOCHAT_BIN, base_dir(), {"-q"});
  ASSERT_GT(fresh.port(), 0) << fresh.log();
  expect_json_error(request(fresh.port(), post("/v1/chat/completions", deep)), 400, "nested deeper than 64", "right after start");
  for (const char* path : {"/v1/chat/completions", "/chat/completions"}) {
    expect_json_error(request(shared().port(), post(path, deep)), 400, "nested deeper than 64", path);
    // text/plain is what a web page may send cross-site without a preflight
    std::string plain = "POST " + std::string(path) + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
                        "Content-Type: text/plain\r\nContent-Length: " + std::to_string(deep.size()) + "\r\n\r\n" + deep;
    expect_json_error(request(shared().port(), plain), 400, "nested deeper than 64", std::string("text/plain ") + path);
  }
  EXPECT_EQ(raw_http(shared().port(), "GET", "/health").status, 200);
  EXPECT_FALSE(fresh.exited()) << fresh.log();
  wait_until_healthy(fresh.port());
  EXPECT_EQ(raw_http(fresh.port(), "GET", "/health").status, 200);
}

// ---- the head: CVE-2025-53628 (line length), CVE-2025-52887 (header count) --------------------

TEST(Hardening, LongHeaderLineIs431BeforeItIsBuffered) {
  const pid_t pid = shared().proc.pid();
  EXPECT_EQ(raw_http(shared().port(), "GET", "/health").status, 200);
  const int64_t before = rss_kb(pid);
  const std::string mb(1 << 20, 'h');
  std::string resp = send_streaming(shared().port(), "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: ",
                                    [&](int) { return mb; }, 32);
  ASSERT_EQ(status_of(resp), 431) << resp.substr(0, 200);
  expect_json_error(parse_response(resp), 431, "header line longer than 8192 bytes", "32 MB header line");
  const int64_t after = rss_kb(pid);
  EXPECT_LT(after - before, 8 * 1024) << "RSS grew from " << before << " kB to " << after << " kB";
  // a request line is bounded the same way (414)
  resp = send_streaming(shared().port(), "GET /", [&](int) { return mb; }, 8);
  expect_json_error(parse_response(resp), 414, "request line longer than", "8 MB request line");
  // a line just under the limit is fine
  EXPECT_EQ(request(shared().port(), get("/health", "X-Ok: " + std::string(8000, 'o') + "\r\n")).status, 200);
}

TEST(Hardening, TooManyHeadersIs431) {
  std::string many;
  for (int i = 0; i < 10000; i++) many += "X-H" + std::to_string(i) + ": v\r\n";
  expect_json_error(request(shared().port(), get("/health", many)), 431, "too many header lines", "10,000 headers");
  std::string ninety;  // with Host and Connection: 92 header lines, under the 100
  for (int i = 0; i < 90; i++) ninety += "X-H" + std::to_string(i) + ": v\r\n";
  EXPECT_EQ(request(shared().port(), get("/health", ninety)).status, 200);
}

// ---- bodies: CVE-2025-46728 (chunked, no length), CVE-2026-45352 (negative chunk size),
//      CVE-2026-22776 (gzip bomb) --------------------------------------------------------------

TEST(Hardening, ChunkedAndLengthlessBodiesAre413WithoutGrowth) {
  const pid_t pid = shared().proc.pid();
  const int64_t before = rss_kb(pid);
  const std::string chunk = "10000\r\n" + std::string(0x10000, 'a') + "\r\n";  // 64 KiB chunks, no end
  const std::string head = "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n";
  std::string resp = send_streaming(shared().port(), head + "Transfer-Encoding: chunked\r\n\r\n",
                                    [&](int) { return chunk; }, 1024);  // 64 MiB offered
  expect_json_error(parse_response(resp), 413, "too large", "64 MiB chunked");
  // strtoul("-2") wraps to 2^64-2 in httplib's chunk parser: still capped
  resp = send_streaming(shared().port(), head + "Transfer-Encoding: chunked\r\n\r\n-2\r\n",
                        [&](int) { return std::string(0x10000, 'b'); }, 256);
  EXPECT_EQ(status_of(resp) / 100, 4) << resp.substr(0, 200);
  // no Content-Length and not chunked: httplib reads to EOF
  resp = send_streaming(shared().port(), head + "\r\n", [&](int) { return std::string(0x10000, 'c'); }, 256);
  expect_json_error(parse_response(resp), 413, "too large", "16 MiB without a length");
  const int64_t after = rss_kb(pid);
  EXPECT_LT(after - before, 16 * 1024) << "RSS grew from " << before << " kB to " << after << " kB";
  // a well-formed chunked request is still served
  const std::string ok = "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
                         "Transfer-Encoding: chunked\r\n\r\n" +
                         strprintf("%zx\r\n", kHello.size()) + kHello + "\r\n0\r\n\r\n";
  EXPECT_EQ(request(shared().port(), ok).status, 200);
}

std::string gzip(const std::function<bool(const httplib::detail::compressor::Callback&)>& feed) {
  httplib::detail::gzip_compressor z;
  std::string out;
  auto sink = [&](const char* d, size_t n) {
    out.append(d, n);
    return true;
  };
  feed([&](const char* d, size_t n) { return z.compress(d, n, false, sink); });
  z.compress("", 0, true, sink);
  return out;
}

TEST(Hardening, GzipBombIs413AfterDecompression) {
  // 256 MiB of zeros in ~250 KB: under the 1 MiB body cap as sent
  const std::string zeros(1 << 20, '\0');
  const std::string bomb = gzip([&](auto& put) {
    for (int i = 0; i < 256; i++) put(zeros.data(), zeros.size());
    return true;
  });
  ASSERT_LT(bomb.size(), 1u << 20);
  const pid_t pid = shared().proc.pid();
  const int64_t before = rss_kb(pid);
  for (const char* enc : {"gzip", "deflate"}) {
    RawResponse r = request(shared().port(), post("/v1/chat/completions", bomb, std::string("Content-Encoding: ") + enc + "\r\n"));
    expect_json_error(r, 413, "after decompression", enc);
  }
  const int64_t after = rss_kb(pid);
  EXPECT_LT(after - before, 16 * 1024) << "RSS grew from " << before << " kB to " << after << " kB";
  // the positive control: a small gzip body is inflated and served
  const std::string small = gzip([&](auto& put) { return put(kHello.data(), kHello.size()); });
  EXPECT_EQ(request(shared().port(), post("/v1/chat/completions", small, "Content-Encoding: gzip\r\n")).status, 200);
  // compressed bodies elsewhere are refused unread (httplib would inflate them without a cap)
  expect_json_error(request(shared().port(), "POST /health HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Encoding: gzip\r\n"
                                             "Content-Length: " + std::to_string(bomb.size()) + "\r\n\r\n" + bomb),
                    415, "compressed", "gzip to /health");
}

// ---- header tricks: CVE-2025-66570, CVE-2023-26130 / CVE-2026-21428 / CVE-2026-45372 ------------

TEST(Hardening, ClientSentAddressHeadersAreRefused) {
  for (const char* h : {"REMOTE_ADDR: 10.0.0.1", "remote_port: 1", "LOCAL_ADDR: 1.2.3.4", "LOCAL_PORT: 80"})
    expect_json_error(request(shared().port(), get("/health", std::string(h) + "\r\n")), 400, "reserved header", h);
}

TEST(Hardening, PercentEncodedCrLfNeverReachesHeadersOrLogs) {
  Server s({"--cors-origin", "http://app.example"});  // logs requests (no -q)
  RawResponse r = request(s.port(), "GET /x%0D%0ASet-Cookie:%20a=b%0D%0A HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(r.status, 404);
  EXPECT_EQ(r.headers.count("set-cookie"), 0u) << r.raw;
  // a header value with escaped CR LF: never echoed into a header (not even the allowed origin's)
  r = request(s.port(), get("/health", "Origin: http://app.example%0D%0AX-Injected:%201\r\n"));
  EXPECT_EQ(r.status, 403);
  EXPECT_EQ(r.headers.count("x-injected"), 0u) << r.raw;
  EXPECT_EQ(r.headers.count("access-control-allow-origin"), 0u) << r.raw;
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const std::string log = s.proc.log();
  EXPECT_NE(log.find("GET /x\\x0d\\x0aSet-Cookie: a=b\\x0d\\x0a 404"), std::string::npos) << log;
  EXPECT_EQ(log.find("\nSet-Cookie"), std::string::npos) << "a forged log line";
  EXPECT_EQ(log.find('\r'), std::string::npos) << "a raw CR in the log";
}

// CVE-2023-26130: httplib set its own headers (Host from the URL, ...) with CR LF unchecked;
// Debian's 0.11.4+ds-1+deb12u1 backports the fix: set_header drops such a value. The server
// builds every response header through set_header from constants or numbers.
TEST(Hardening, HttplibSetHeaderDropsCrLf) {
  httplib::Request req;
  req.set_header("Host", "a\r\nX-Injected: 1");
  EXPECT_FALSE(req.has_header("Host"));
  httplib::Response res;
  res.set_header("X-A", "a\nb");
  EXPECT_FALSE(res.has_header("X-A"));
  res.set_header("X-B", "fine");
  EXPECT_EQ(res.get_header_value("X-B"), "fine");
}

// httplib answers many ranges of a file with that many copies (its issue 1766) and cuts error
// bodies to a Range too: ranges are honoured for one UI file only, else ignored
TEST(Hardening, RangesOnlyForOneFileRange) {
  const std::string whole = request(shared().port(), get("/")).body;
  ASSERT_GT(whole.size(), 100u);
  std::string ranges = "Range: bytes=0-100";
  for (int i = 0; i < 200; i++) ranges += ",0-100";
  RawResponse many = request(shared().port(), get("/", ranges + "\r\n"));
  EXPECT_EQ(many.status, 200);
  EXPECT_EQ(many.body, whole);
  RawResponse one = request(shared().port(), get("/", "Range: bytes=0-9\r\n"));
  EXPECT_EQ(one.status, 206);
  EXPECT_EQ(one.body, whole.substr(0, 10));
  expect_json_error(request(shared().port(), get("/nope", "Range: bytes=0-9\r\n")), 404, "no such path", "404 with a Range");
}

// ---- CORS, DNS rebinding, API key --------------------------------------------------------------

TEST(Hardening, NoCorsByDefaultAndLoopbackHostsOnly) {
  const int port = shared().port();
  RawResponse r = request(port, get("/health"));
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.headers.count("access-control-allow-origin"), 0u) << "no CORS header by default";
  expect_json_error(request(port, get("/v1/models", "Origin: http://evil.example\r\n")), 403, "cross-origin", "foreign Origin");
  expect_json_error(request(port, post("/chat/completions", kHello, "Origin: http://evil.example\r\n")), 403, "cross-origin",
                    "foreign Origin POST");
  // the UI's own page: same origin
  const std::string self = "http://127.0.0.1:" + std::to_string(port);
  r = request(port, "GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1:" + std::to_string(port) + "\r\nOrigin: " + self +
                        "\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.headers.count("access-control-allow-origin"), 0u);
  // DNS rebinding: evil.example resolved to 127.0.0.1 still says Host: evil.example
  expect_json_error(request(port, get("/health", "", "evil.example:" + std::to_string(port))), 403, "not a loopback name",
                    "rebinding");
  expect_json_error(request(port, "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1.nip.io\r\nConnection: close\r\n"
                                  "Content-Length: " + std::to_string(kHello.size()) + "\r\n\r\n" + kHello),
                    403, "not a loopback name", "rebinding POST");
  for (const std::string& host : {std::string("localhost"), "localhost:" + std::to_string(port), "[::1]:" + std::to_string(port)})
    EXPECT_EQ(request(port, get("/health", "", host)).status, 200) << host;
}

TEST(Hardening, CorsOriginAllowsExactlyOne) {
  Server s({"-q", "--cors-origin", "https://app.example"});
  RawResponse r = request(s.port(), get("/v1/models", "Origin: https://app.example\r\n"));
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.headers["access-control-allow-origin"], "https://app.example");
  r = request(s.port(), "OPTIONS /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nOrigin: https://app.example\r\n"
                        "Access-Control-Request-Method: POST\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(r.status, 204);
  EXPECT_EQ(r.headers["access-control-allow-origin"], "https://app.example");
  EXPECT_EQ(r.headers["access-control-allow-methods"], "POST, OPTIONS");
  expect_json_error(request(s.port(), get("/v1/models", "Origin: https://app.example.evil\r\n")), 403, "cross-origin", "near miss");
  expect_json_error(request(s.port(), get("/v1/models", "Origin: http://app.example\r\n")), 403, "cross-origin", "other scheme");
}

TEST(Hardening, ApiKeyOnEveryApiRouteButHealth) {
  Server s({"-q", "--api-key", "s3cret"});
  const int port = s.port();
  EXPECT_EQ(request(port, get("/health")).status, 200);
  EXPECT_EQ(request(port, get("/")).status, 200);  // the UI's files
  for (const char* path : {"/v1/models", "/stats"}) {
    RawResponse r = request(port, get(path));
    expect_json_error(r, 401, "API key", path);
    EXPECT_EQ(r.headers["www-authenticate"], "Bearer");
    expect_json_error(request(port, get(path, "Authorization: Bearer s3cre\r\n")), 401, "API key", path);
    expect_json_error(request(port, get(path, "Authorization: Bearer s3cretX\r\n")), 401, "API key", path);
    EXPECT_EQ(request(port, get(path, "Authorization: Bearer s3cret\r\n")).status, 200) << path;
  }
  for (const char* path : {"/v1/chat/completions", "/chat/completions"}) {
    expect_json_error(request(port, post(path, kHello)), 401, "API key", path);
    EXPECT_EQ(request(port, post(path, kHello, "Authorization: Bearer s3cret\r\n")).status, 200) << path;
  }
}

// ---- slow clients ------------------------------------------------------------------------------

TEST(Hardening, SlowlorisDoesNotStarveHealthAndMeetsTheDeadline) {
  const int port = shared().port();  // --request-deadline 3
  std::vector<int> slow;
  for (int i = 0; i < 100; i++) {
    int fd = raw_connect(port);
    ASSERT_GE(fd, 0);
    raw_send(fd, "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n");
    slow.push_back(fd);
  }
  std::atomic<bool> dripping{true};
  std::thread drip([&] {  // a header byte per socket every 200 ms
    while (dripping) {
      for (int fd : slow) raw_send(fd, "X");
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
  });
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 5; i++) {
    const auto start = std::chrono::steady_clock::now();
    EXPECT_EQ(raw_http(port, "GET", "/health").status, 200) << "try " << i;
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_LT(s, 1.0) << "/health took " << s << " s with 100 slow sockets open (try " << i << ")";
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  // the slow ones are answered 408 at the 3 s deadline, and closed
  std::string resp = raw_read_all(slow[0], 6000);
  const double at = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  dripping = false;
  drip.join();
  EXPECT_EQ(status_of(resp), 408) << resp.substr(0, 200);
  EXPECT_LT(at, 6.0);
  for (int fd : slow) close(fd);
  EXPECT_EQ(raw_http(port, "GET", "/health").status, 200);
}
